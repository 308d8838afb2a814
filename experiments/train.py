"""The single training entry point: `python experiments/train.py --config=configs/alfworld.py[:variant]` (or
configs/webshop.py, configs/searchqa.py, configs/countdown.py). Every variant runs the one training loop
(`training.trainer`); the config names the methods it plugs in (GRPO, SDAR and its baselines, Skill-GRPO, OPID,
Agentic-OPD: `training.assembly`).

Overrides: `--config.grpo.iterations=5 --config.workdir=/tmp/run --config.method=sdar+opid`. A flag of the
single-section layout is one error naming its key in the method groups (`--config.loss.sdar_coef: loss.sdar_coef is
now sdar.coef`, `training.config.stale_flags`), unknown fields and values of the wrong type are rejected by name
(ml_collections), out-of-range values and unknown registry names by `training.config.from_config_dict` (the first
thing a run does), before anything is loaded.
Running the same command again resumes from the run's newest checkpoint. On several hosts every host runs the
same command (`--config.distributed.*`, or found from SLURM / Open MPI / a TPU slice: docs/scale_out.md).
"""
import json
import sys

from absl import app
from ml_collections import config_flags

from agentopd_jax import host_memory
from agentopd_jax.parallel import distributed
from agentopd_jax.storage.logs import configure_cli_logging
from agentopd_jax.training.config import stale_flags
from agentopd_jax.training.trainer import train

_CONFIG = config_flags.DEFINE_config_file("config", "configs/alfworld.py", "Training config.", lock_config=True)


def main(argv):
  del argv
  host_memory.tune()  # before JAX starts its backend
  configure_cli_logging()
  c = _CONFIG.value
  distributed.initialize(c.distributed)
  summary = train(c)
  if distributed.is_primary():
    print(json.dumps(summary))


if __name__ == "__main__":
  stale = stale_flags(sys.argv)  # before ml_collections' own unknown-field error
  if stale:
    sys.exit("\n".join(stale))
  app.run(main)
