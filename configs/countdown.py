"""GRPO on Countdown, the smallest env: `python experiments/train.py --config=configs/countdown.py[:VARIANT]`.

Variants: cpu (default): tiny model + built-in tokenizer, SFT on the shortest-moves expert's episodes, then GRPO,
validated on held-out games with one column per number of moves the target needs; qwen2p5_3b / qwen2p5_7b /
qwen3_1p7b: the verl-agent setting on pretrained weights from `--config.model.path`. The game has no skill bank and
no oracle analyzer, so SDAR's variants and `:opid` on CPU stop with an error that names the missing piece. The `env`
fields are `CountdownConfig` (`agentopd_jax/envs/countdown/spec.py`).
"""
from agentopd_jax.training import presets

def _cpu():
  c = presets.cpu_base("countdown")
  c.rollout.max_steps = 8              # the game's own horizon; every target is at most 5 moves away
  c.sft.expert = "shortest"            # the fewest moves to the target (Countdown's one expert)
  c.sft.demos = 1000                   # every training seed once
  c.validation.num_tasks = 64          # held-out games, every group (1-5 moves) among them
  return c


def _paper(variant: str):
  return presets.paper_overrides(_cpu(), variant)


def get_config(arg: str = "cpu"):
  return presets.select_variant(arg, "configs/countdown.py", _cpu, _paper)
