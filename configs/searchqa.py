"""GRPO on search-QA: `python experiments/train.py --config=configs/searchqa.py[:VARIANT]`.

Variants: cpu (default): tiny model + built-in tokenizer + the bundled encyclopedia and questions with in-process
BM25, SFT on the oracle searcher's episodes, then GRPO; qwen2p5_3b / qwen2p5_7b / qwen3_1p7b: the verl-agent setting
(4 turns, history 4, invalid penalty 0.01, top-3 passages), weights from `--config.model.path`.
A retrieval server (ours: `python -m agentopd_jax.envs.search.server`, or Search-R1's e5 one):
`--config.env.search_url=http://127.0.0.1:8000/retrieve`, and for a server started with --api_key, export the key as
$AGENTOPD_SEARCH_API_KEY (no config field: a run's config is written into config.json and every checkpoint).
Search-R1's data files: `--config.env.train_file=...`.
"""
from agentopd_jax.training import defaults

def _cpu():
  c = defaults.cpu_base("search")
  c.env.search_url = ""                # "" -> an in-process BM25 index per env worker
  c.env.corpus = ""                    # wiki-18 style JSONL; "" -> the bundled encyclopedia of world_seed
  c.env.world_seed = 0                 # the encyclopedia and questions are fixed across run seeds, like a dataset
  c.env.train_file = ""                # Search-R1 parquet/JSONL rows; "" -> the bundled train split
  c.env.test_file = ""
  c.env.valid_sources = ("nq", "hotpotqa")  # test sources of the validation panel (() = all seven): on CPU the two
                                             # Search-R1 trains on, since the tiny model learns no other style
  c.env.topk = 3
  c.env.search_timeout_s = 60.0        # search_url: each request's timeout, and
  c.env.search_retries = 6             # its retries (exponential back-off 0.5 s ... 8 s: 23.5 s of waits in all)
  c.env.obs_format = "verl-agent"      # or "search-r1" (its loop and <information> text)
  c.env.max_turns = 4
  c.env.history_length = 4
  c.env.invalid_penalty = 0.01
  c.builtin_tokenizer.vocab_size = 4096  # trained on the encyclopedia too: names are 1-2 tokens, not 5
  c.builtin_tokenizer.env_corpus = True
  c.rollout.max_steps = 4
  c.rollout.max_prompt_tokens = 1536
  c.rollout.max_response_tokens = 32
  c.sft.steps = 1000                   # 330 steps leave the warm start at ~2 % (docs/results.md)
  c.sft.demos = 2000                   # every training question once
  c.sft.expert = "oracle"              # the oracle searcher (search-QA's one expert)
  c.validation.num_tasks = 128         # 256 episodes, ~1 min: at ~14 % success, 48 x 2 cannot tell a lift from noise
  c.opid.max_step_skills = 2           # OPID's search scripts: K = 2 (4-turn episodes)
  return c


def _paper(variant: str):
  c = defaults.paper_overrides(_cpu(), variant)
  c.builtin_tokenizer.env_corpus = False  # the pretrained model's own tokenizer
  c.env.valid_sources = ()                # all seven sources, as the papers' tables
  c.rollout.max_prompt_tokens = 4096
  c.rollout.max_response_tokens = 500
  # SDAR's search scripts (methods.md §4.3): 128 tasks x 8, mini 256 / micro 16, KL 0.001, 10 % warmup; greedy
  # validation on the whole test set, at the last step only.
  c.grpo.tasks_per_iteration = 128
  c.grpo.micro_batch_size = 16
  c.loss.kl_coef = 0.001
  c.optim.warmup_steps = 15
  c.validation.temperature = 0.0
  c.validation.num_tasks = 1_000_000   # more than the test set: all of it
  c.validation.attempts = 1
  c.validation.every = 150
  return c


def get_config(arg: str = "cpu"):
  return defaults.select_variant(arg, "configs/searchqa.py", _cpu, _paper)
