"""GRPO on WebShop: `python experiments/train.py --config=configs/webshop.py[:VARIANT]`.

Variants: cpu (default): tiny model + built-in tokenizer + the generated shop (catalogue, goals, BM25 search), SFT on
the oracle shopper's episodes, then GRPO; qwen2p5_3b / qwen2p5_7b / qwen3_1p7b: the verl-agent paper setting
(15 env steps, history 2, invalid penalty 0.1, 16 goals x 8 group, lr 1e-6, KL 0.01), weights from
`--config.model.path`. WebShop's own data files: `--config.env.data_dir=/path/to/webshop/data`.
"""
from agentopd_jax.training import defaults

def _cpu():
  c = defaults.cpu_base("webshop")
  c.env.num_products = 1000            # generated catalogue size (WebShop's small setting has 1000 products)
  c.env.catalog_seed = 0               # the catalogue and goals are fixed across run seeds, like the real site
  c.env.data_dir = ""                  # WebShop's items_*.json folder; "" -> the generated catalogue
  c.env.human_goals = False            # human instructions (needs data_dir with items_human_ins.json)
  c.env.history_length = 1             # results pages are long; one step of history keeps prompts tiny-model sized
  c.rollout.max_steps = 15             # verl-agent's env.max_steps for WebShop
  c.rollout.max_prompt_tokens = 1536
  c.rollout.max_response_tokens = 32
  c.sft.demos = 800
  return c


def _paper(variant: str):
  c = defaults.paper_overrides(_cpu(), variant)
  c.env.history_length = 2
  c.rollout.max_prompt_tokens = 4096
  return c


def get_config(arg: str = "cpu"):
  return defaults.select_variant(arg, "configs/webshop.py", _cpu, _paper)
