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
  c.env.reward = "score"               # 10 x WebShop's graded score ("success": verl-agent's 10 iff the score is 1.0):
                                       # the warm start rarely buys perfectly, but its purchases score 0.3-0.8
  c.env.thefuzz = "0.19"               # the reward's fuzzy matching: thefuzz 0.19 (WebShop's and verl-agent's pin) or
                                       # "0.20" (thefuzz >= 0.20 on rapidfuzz); they differ near the 85 threshold
  c.env.nouns = "auto"                 # r_type's nouns: spaCy en_core_web_sm when installed ("auto"), "spacy"
                                       # (required) or "stand-in" (docs/webshop.md)
  c.env.history_length = 4             # the compact history lists actions only, so 4 of them cost ~60 tokens
  c.builtin_tokenizer.vocab_size = 4096  # trained on the catalogue too: its words one token each, ASINs whole tokens
  c.builtin_tokenizer.env_corpus = True
  c.rollout.max_steps = 15             # verl-agent's env.max_steps for WebShop
  c.rollout.max_prompt_tokens = 1536
  c.rollout.max_response_tokens = 32
  c.sft.expert = "top_result"          # imitable: buys the top search result (the oracle's pick follows the hidden ASIN)
  c.sft.demos = 4000                   # training goals replayed; the top result wins ~1/4 of them, the wins are imitated
  return c


def _paper(variant: str):
  c = defaults.paper_overrides(_cpu(), variant)
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
  return defaults.select_variant(arg, "configs/webshop.py", _cpu, _paper)
