"""The single training entry point: `python experiments/train.py --config=configs/alfworld.py[:variant]` (or
configs/webshop.py, configs/searchqa.py).

Overrides: `--config.grpo.iterations=5 --config.workdir=/tmp/run`. Unknown fields are rejected by name.
Running the same command again resumes from the run's newest checkpoint.
"""
import json

from absl import app
from ml_collections import config_flags

from agentopd_jax.training.logging import configure_cli_logging
from agentopd_jax.training.trainer import train

_CONFIG = config_flags.DEFINE_config_file("config", "configs/alfworld.py", "Training config.", lock_config=True)


def main(argv):
  del argv
  configure_cli_logging()
  summary = train(_CONFIG.value)
  print(json.dumps(summary))


if __name__ == "__main__":
  app.run(main)
