"""Which decisions has a checkpoint learnt? Teacher-forced accuracy on expert demonstrations, per command verb.

  python experiments/probe_demos.py --config=configs/alfworld.py --step=0 --games=40

Replays the config's expert (`sft.expert`) on the first `games` validation-panel tasks through the policy's own
step-wise prompts and prints, per kind of the expert's decision (an ALFWorld verb; WebShop's search / click[product] /
click[option] / click[buy now]; search-QA's search / answer), how often the checkpoint's argmax is the first token
and the whole reply, and their mean probabilities (JSON). Episodes the expert loses are not probed.
See `agentopd_jax/eval/probe.py`.
"""
import json
import sys

from absl import app, flags
from ml_collections import config_flags

from agentopd_jax.eval.probe import demo_accuracy
from agentopd_jax.parallel.sharding import make_mesh
from agentopd_jax.rollout.demonstrations import demonstration_samples
from agentopd_jax.envs import registry
from agentopd_jax.storage.logs import configure_cli_logging
from agentopd_jax.training.assembly import chat_format, checkpoint_policy, demonstration_env, text_env_factory
from agentopd_jax.training.config import stale_flags

_CONFIG = config_flags.DEFINE_config_file("config", "configs/alfworld.py", "Run config.", lock_config=True)
_STEP = flags.DEFINE_string("step", "0", "checkpoint step of config.workdir: an integer, 'best' or 'latest'")
_GAMES = flags.DEFINE_integer("games", 40, "validation-panel games whose expert episodes are probed")


def main(argv):
  del argv
  configure_cli_logging()
  c = _CONFIG.value
  mesh = make_mesh(tuple(c.mesh_shape))
  config, params, tokenizer, step = checkpoint_policy(c, _STEP.value, mesh)
  _, valid_games = registry.get(c.env.name).tasks(c.env)
  demos = demonstration_samples(demonstration_env(c), text_env_factory(c),
                                chat_format(c, tokenizer), valid_games[:_GAMES.value],
                                registry.get(c.env.name).expert_policy(c.env, c.sft.expert), layout="step")
  print(json.dumps({"workdir": c.workdir, "step": step, "expert": c.sft.expert,
                    "decisions": demo_accuracy(config, params, demos, tokenizer)}, indent=2))


if __name__ == "__main__":
  stale = stale_flags(sys.argv)  # a flag of the single-section layout: its key in the method groups
  if stale:
    sys.exit("\n".join(stale))
  app.run(main)
