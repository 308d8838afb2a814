"""GRPO on search-QA: `python experiments/train.py --config=configs/searchqa.py[:VARIANT]`.

Variants: cpu (default): tiny model + built-in tokenizer + the bundled encyclopedia and questions with in-process
BM25, SFT on the oracle searcher's episodes, then GRPO; qwen2p5_3b / qwen2p5_7b / qwen3_1p7b: the verl-agent setting
(4 turns, history 4, invalid penalty 0.01, top-3 passages), weights from `--config.model.path`; pool: a longer GRPO
run (24 iterations, a validated checkpoint every 4) whose checkpoints are an Agentic-OPD teacher pool
(configs/sweeps/searchqa_opd.py).
A retrieval server (ours: `python -m agentopd_jax.envs.search.server`, or Search-R1's e5 one):
`--config.env.search_url=http://127.0.0.1:8000/retrieve`, and for a server started with --api_key, export the key as
$AGENTOPD_SEARCH_API_KEY (no config field: a run's config is written into config.json and every checkpoint).
Search-R1's data files: `--config.env.train_file=...`.
"""
from agentopd_jax.training import presets

def _cpu():
  c = presets.cpu_base("search")
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
  c = presets.paper_overrides(_cpu(), variant)
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


def _pool():
  c = _cpu()
  c.workdir = "runs/searchqa_pool"
  c.grpo.iterations = 24               # three times the 8 iterations of the runs that distil from it
  return c


def get_config(arg: str = "cpu"):
  return presets.select_variant(arg, "configs/searchqa.py", _cpu, _paper, extra={"pool": _pool})
