"""The single training entry point: `python experiments/train.py --config=configs/alfworld.py[:variant]`.

Overrides: `--config.grpo.iterations=5 --config.workdir=/tmp/run`. Unknown fields are rejected by name.
Running the same command again resumes from the run's newest checkpoint.
"""
import json
import logging

from absl import app
from absl import logging as absl_logging
from ml_collections import config_flags

from agentopd_jax.training.trainer import train

_CONFIG = config_flags.DEFINE_config_file("config", "configs/alfworld.py", "Training config.", lock_config=True)


def main(argv):
  del argv
  # Our progress at INFO; libraries (orbax logs every save and restore at INFO through absl) at WARNING.
  absl_logging.set_verbosity(absl_logging.WARNING)
  logging.getLogger("agentopd_jax").setLevel(logging.INFO)
  summary = train(_CONFIG.value)
  print(json.dumps(summary))


if __name__ == "__main__":
  app.run(main)
