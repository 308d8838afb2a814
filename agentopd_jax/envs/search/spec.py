"""Search-QA's run spec (`envs.registry`): questions as tasks, `SearchEnv` workers, `SearchText`, the oracle searcher,
SDAR's skill bank (typed by data source), OPID's oracle review (`hindsight.py`), data sources as groups and the
papers' per-dataset report columns.

Questions come from the bundled encyclopedia's train/test splits (`env.world_seed`) or Search-R1's files
(`env.train_file`, `env.test_file`); the built-in tokenizer learns the corpus and the training questions.
"""
from __future__ import annotations

import dataclasses
import functools
import os
from typing import List, Optional, Tuple

import numpy as np

from agentopd_jax.envs.registry import EnvCommon, EnvSpec, ReportSpec, SkillSpec, register, shipped_skill_bank
from agentopd_jax.envs.search.text import SearchText

TOKENIZER_MAX_DOCS = 50_000  # a real wiki-18 corpus has 21 M passages; its first ones are plenty for a small BPE
# The papers' per-dataset columns, in their order; the headline averages them.
REPORT = ReportSpec(columns=(
    ("NQ", "nq"), ("Triv", "triviaqa"), ("Pop", "popqa"), ("Hotp", "hotpotqa"), ("2Wk", "2wikimultihopqa"),
    ("MuS", "musique"), ("Bam", "bamboogle"),
), headline="Avg")


def questions(env_cfg) -> Tuple[list, list]:
  """(training questions, validation questions). The test split keeps the data sources in `env.valid_sources` (all
  when empty) and is shuffled once (fixed seed) so a panel of the first N mixes them instead of taking N questions of
  the first one."""
  from agentopd_jax.envs.search import bundled_tasks, load_tasks

  train = load_tasks(env_cfg.train_file) if env_cfg.train_file else bundled_tasks("train", seed=env_cfg.world_seed)
  test = load_tasks(env_cfg.test_file) if env_cfg.test_file else bundled_tasks("test", seed=env_cfg.world_seed)
  sources = tuple(env_cfg.valid_sources)
  if sources:
    unknown = set(sources) - {t.data_source for t in test}
    if unknown:
      raise ValueError(f"env.valid_sources: no test questions of {sorted(unknown)}")
    test = [t for t in test if t.data_source in sources]
  test = [test[i] for i in np.random.default_rng(0).permutation(len(test))]
  return list(train), test


def env_kwargs(env_cfg) -> dict:
  """SearchEnv's arguments. The server's key comes from $AGENTOPD_SEARCH_API_KEY, never from the config (which is
  saved in config.json and every checkpoint), read here in the trainer so remote (Ray) workers get it too."""
  from agentopd_jax.envs.search.client import API_KEY_ENV

  if type(env_cfg.search_retries) is not int or env_cfg.search_retries < 0:
    raise ValueError(f"env.search_retries must be an integer >= 0, got {env_cfg.search_retries!r}")
  if not env_cfg.search_timeout_s > 0:
    raise ValueError(f"env.search_timeout_s must be > 0 seconds, got {env_cfg.search_timeout_s!r}")
  return dict(search_url=env_cfg.search_url or None, corpus=env_cfg.corpus or None, seed=env_cfg.world_seed,
              topk=env_cfg.topk, obs_format=env_cfg.obs_format, max_turns=env_cfg.max_turns,
              timeout_s=env_cfg.search_timeout_s, retries=env_cfg.search_retries,
              search_api_key=os.environ.get(API_KEY_ENV) or None)


def worker(env_cfg, max_steps: Optional[int] = None):
  """Its horizon is `env.max_turns` whatever `max_steps` says (Search-R1's turn budget is part of the task)."""
  from agentopd_jax.envs.search import SearchEnv

  return functools.partial(SearchEnv, **env_kwargs(env_cfg))


# sft.expert names: the oracle searcher, which does what the shipped skills say, and the question searcher, which
# searches the question itself (`oracle.Oracle`'s styles).
EXPERTS = {"oracle": "oracle", "question_searcher": "question"}


def _expert(kwargs: dict, style: str, task) -> List[str]:
  from agentopd_jax.envs.search import SearchEnv, play

  actions, _, _ = play(SearchEnv(**kwargs), task, style=style)
  return actions


def hindsight(env_cfg):
  """OPID's oracle analyzer: (question, actions) -> the episode replayed beside the oracle (`hindsight.py`)."""
  from agentopd_jax.envs.search.hindsight import reviewer

  return reviewer(env_kwargs(env_cfg))


def tokenizer_corpus(env_cfg) -> Tuple[List[str], List[str]]:
  """The retrieval corpus (the bundled encyclopedia, or the first passages of `env.corpus`) and the training
  questions; nothing of the validation split."""
  from agentopd_jax.envs.search import generate_world
  from agentopd_jax.envs.search.retriever import read_corpus

  if env_cfg.corpus:
    docs = read_corpus(env_cfg.corpus)[:TOKENIZER_MAX_DOCS]
  else:
    docs = generate_world(env_cfg.world_seed).passages
  return [d["contents"] for d in docs] + [t.question for t in questions(env_cfg)[0]], []


def skill_query(task) -> dict:
  """SDAR types a question by its data source first (and by its prompt's words where that does not decide)."""
  return {"data_source": task.data_source}


def data_source(task) -> str:
  """A question's group: its data source (`val/<source>_success_rate`)."""
  return task.data_source


@dataclasses.dataclass(frozen=True)
class SearchConfig(EnvCommon):
  """The run config's `env` section for search-QA."""
  name: str = "search"
  history_length: int = 4
  invalid_penalty: float = 0.01
  search_url: str = ""                 # "" -> an in-process BM25 index per env worker
  corpus: str = ""                     # wiki-18 style JSONL; "" -> the bundled encyclopedia of world_seed
  world_seed: int = 0                  # the encyclopedia and questions are fixed across run seeds, like a dataset
  train_file: str = ""                 # Search-R1 parquet/JSONL rows; "" -> the bundled train split
  test_file: str = ""
  # The test sources of the validation panel (() = all seven): on CPU the two Search-R1 trains on, since the tiny
  # model learns no other style.
  valid_sources: Tuple[str, ...] = ("nq", "hotpotqa")
  topk: int = 3
  search_timeout_s: float = 60.0       # search_url: each request's timeout, and
  search_retries: int = 6              # its retries (exponential back-off 0.5 s ... 8 s: 23.5 s of waits in all)
  obs_format: str = "verl-agent"       # or "search-r1" (its loop and <information> text)
  max_turns: int = 4


SPEC = register(EnvSpec(
    name="search", config=SearchConfig, tasks=questions, worker=worker, text_env=SearchText, experts=tuple(EXPERTS),
    expert=lambda env_cfg, name: functools.partial(_expert, env_kwargs(env_cfg), EXPERTS[name]), tokenizer_corpus=tokenizer_corpus,
    skills=SkillSpec(bank=shipped_skill_bank("search"), rule="search", query=skill_query), hindsight=hindsight,
    task_group=data_source, report=REPORT))
