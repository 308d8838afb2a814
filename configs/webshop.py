"""GRPO on WebShop: `python experiments/train.py --config=configs/webshop.py[:VARIANT]`.

Variants: cpu (default): tiny model + built-in tokenizer + the generated shop (catalogue, goals, BM25 search), SFT on
the oracle shopper's episodes, then GRPO; qwen2p5_3b / qwen2p5_7b / qwen3_1p7b: the verl-agent paper setting
(15 env steps, history 2, invalid penalty 0.1, 16 goals x 8 group, lr 1e-6, KL 0.01), weights from
`--config.model.path`. WebShop's own data files: `--config.env.data_dir=/path/to/webshop/data`.
"""
from agentopd_jax.training import presets

def _cpu():
  c = presets.cpu_base("webshop")
  c.builtin_tokenizer.vocab_size = 4096  # trained on the catalogue too: its words one token each, ASINs whole tokens
  c.builtin_tokenizer.env_corpus = True
  c.rollout.max_steps = 15             # verl-agent's env.max_steps for WebShop
  c.rollout.max_prompt_tokens = 1536
  c.rollout.max_response_tokens = 32
  c.sft.expert = "top_result"          # imitable: buys the top search result (the oracle's pick follows the hidden ASIN)
  c.sft.demos = 4000                   # training goals replayed; the top result wins ~1/4 of them, the wins are imitated
  return c


def _paper(variant: str):
  c = presets.paper_overrides(_cpu(), variant)
  c.env.history_length = 2
  c.env.reward = "success"
  c.builtin_tokenizer.env_corpus = False  # the pretrained model's own tokenizer
  c.sft.expert = "oracle"
  c.rollout.max_prompt_tokens = 4096
  c.opid.paper_mode = "mean_norm"      # OPID's WebShop scripts (methods.md §3.3)
  c.grpo.mini_batch_size = 64          # SDAR's WebShop scripts (methods.md §4.3): mini 64, micro 8
  c.grpo.micro_batch_size = 8
  return c


def get_config(arg: str = "cpu"):
  return presets.select_variant(arg, "configs/webshop.py", _cpu, _paper)
