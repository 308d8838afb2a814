"""What a run plays, per env (`env.name`): the training pool and validation tasks, the env-worker factory, the expert
whose demonstrations warm-start the policy, and each iteration's task draw.

  alfworld  game files; with no `env.data_root` generated (deterministically from `env.generate_seed`) into the cache
  webshop   goal indices of a shop (generated catalogue, or WebShop's files in `env.data_dir`): validation draws from
            goals [0, 500), training from the rest, as verl-agent
  search    SearchTask questions: the bundled encyclopedia's train/test splits, or Search-R1 files
            (`env.train_file`, `env.test_file`)
So the default runs need no download; `tokenizer_corpus` gives each env's own text to the built-in tokenizer. The
tasks are fixed across run seeds, as a benchmark's are, so seed-to-seed spread measures training randomness (init,
data order, sampling), not a different task set per seed. The draw for iteration i is a pure function of (seed, i): a
resumed run replays the same tasks as an uninterrupted one without storing any data-loader state.
"""
from __future__ import annotations

import functools
import hashlib
import json
import os
import zlib
from pathlib import Path
from typing import Callable, List, Optional, Sequence, Tuple

import numpy as np

from agentopd_jax.envs.alfworld import data as alfworld_data
from agentopd_jax.envs.alfworld import generator
from agentopd_jax.envs.alfworld.engine_fast import FastEngine
from agentopd_jax.envs.alfworld.expert import explore_then_solve, solve


def cache_dir() -> Path:
  return Path(os.environ.get("AGENTOPD_CACHE", "~/.cache/agentopd_jax")).expanduser()


def alfworld_games(env_cfg) -> Tuple[List[str], List[str]]:
  """(training games, validation games) of the configured splits and task types."""
  root = env_cfg.data_root
  if not root:
    scene_numbers = tuple(env_cfg.generate_scenes) or None
    distractors = tuple(env_cfg.generate_distractors)
    seed, home_prob = env_cfg.generate_seed, env_cfg.generate_home_prob
    # Fields added after the first release join the spec only when set, so existing caches keep their names.
    spec = json.dumps([seed, env_cfg.train_split, env_cfg.generate_train, env_cfg.valid_split, env_cfg.generate_valid,
                       sorted(env_cfg.task_types), scene_numbers]
                      + ([list(distractors)] if distractors != generator.DISTRACTOR_TYPES else [])
                      + ([home_prob] if home_prob else []))
    root = str(cache_dir() / "alfworld_generated" / hashlib.sha1(spec.encode()).hexdigest()[:12])
    done = Path(root) / "COMPLETE"
    if not done.exists():  # the marker is written last, so an interrupted generation is redone, not half-used
      generator.generate(root, {env_cfg.train_split: env_cfg.generate_train,
                                env_cfg.valid_split: env_cfg.generate_valid}, seed=seed,
                         task_types=tuple(env_cfg.task_types), scene_numbers=scene_numbers,
                         distractor_types=distractors, home_prob=home_prob)
      done.write_text(spec + "\n")
  elif not os.path.isdir(root):
    raise FileNotFoundError(f"env.data_root: no such folder {root}")
  train = alfworld_data.game_files(env_cfg.train_split, root, env_cfg.task_types)
  valid = alfworld_data.game_files(env_cfg.valid_split, root, env_cfg.task_types)
  for split, games in ((env_cfg.train_split, train), (env_cfg.valid_split, valid)):
    if not games:
      raise ValueError(f"env: no {split} games of task types {tuple(env_cfg.task_types)} under {root}")
  return train, valid


EXPERTS = ("explorer", "planner")


def expert_actions(gamefile: str, expert: str = "planner") -> List[str]:
  """Demonstration actions for a game.

  "explorer" (`explore_then_solve`): searches until the object is in view, so a text-only policy can imitate it.
  "planner": the stored walkthrough (the privileged planner's plan: it walks straight to the hidden object).
  """
  if expert not in EXPERTS:
    raise ValueError(f"sft.expert must be one of {EXPERTS}, got {expert!r}")
  with open(gamefile) as f:
    walkthrough = json.load(f).get("walkthrough")
  if expert == "planner" and walkthrough:
    return list(walkthrough)
  engine = FastEngine(gamefile)
  engine.reset()
  if expert == "planner":
    return solve(engine)
  return explore_then_solve(engine, seed=zlib.crc32(gamefile.encode()))


# --------------------------------------------------------------------------------------------------- WebShop
def _webshop_shop_args(env_cfg) -> dict:
  return dict(num_products=env_cfg.num_products, catalog_seed=env_cfg.catalog_seed,
              data_dir=env_cfg.data_dir or None, human_goals=env_cfg.human_goals)


def webshop_goals(env_cfg) -> Tuple[List[int], List[int]]:
  """(training goal indices, validation goal indices): verl-agent trains on goals [500, N) and validates on [0, 500)."""
  from agentopd_jax.envs.webshop.env import build_shop
  from agentopd_jax.envs.webshop.goals import split_indices

  n = len(build_shop(**_webshop_shop_args(env_cfg)).goals)
  return list(split_indices(n, "train")), list(split_indices(n, "test"))


WEBSHOP_EXPERTS = ("oracle", "top_result")


def _webshop_expert(shop_args: dict, expert: str, goal: int) -> List[str]:
  """"oracle" (`expert.plan`: knows the goal's product) or "top_result" (`expert.top_result_plan`: buys the top
  search result, acting only on what the pages show, so a text-only policy can imitate it)."""
  from agentopd_jax.envs.webshop import expert as shoppers
  from agentopd_jax.envs.webshop.env import build_shop

  planner = shoppers.plan if expert == "oracle" else shoppers.top_result_plan
  return planner(build_shop(**shop_args), goal) or []  # [] (no plan found): the demonstration is skipped


# --------------------------------------------------------------------------------------------------- Search-QA
def search_questions(env_cfg) -> Tuple[list, list]:
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


def _search_env_kwargs(env_cfg) -> dict:
  return dict(search_url=env_cfg.search_url or None, corpus=env_cfg.corpus or None, seed=env_cfg.world_seed,
              topk=env_cfg.topk, obs_format=env_cfg.obs_format, max_turns=env_cfg.max_turns)


def _search_expert(env_kwargs: dict, task) -> List[str]:
  from agentopd_jax.envs.search import SearchEnv, play

  actions, _, _ = play(SearchEnv(**env_kwargs), task)
  return actions


# --------------------------------------------------------------------------------------------------- tokenizer
TOKENIZER_MAX_DOCS = 50_000  # a real wiki-18 corpus has 21 M passages; its first ones are plenty for a small BPE


def _webshop_corpus(env_cfg) -> Tuple[List[str], List[str]]:
  """The catalogue as the site shows it (titles, prices, descriptions, bullet points, option names and values,
  product instructions); every ASIN is a whole word in both the page's case and the click action's lower case."""
  from agentopd_jax.envs.webshop.env import build_shop

  texts, asins = [], []
  for asin, p in build_shop(**_webshop_shop_args(env_cfg)).products.items():
    texts += [p["Title"], p["Price"], p["Description"], *p["BulletPoints"], p.get("instruction_text") or ""]
    texts += [f"{name} {' '.join(values)}" for name, values in p["options"].items()]
    asins += [asin, asin.lower()]
  return texts, asins


def _search_corpus(env_cfg) -> Tuple[List[str], List[str]]:
  """The retrieval corpus (the bundled encyclopedia, or the first passages of `env.corpus`) and the training
  questions; nothing of the validation split."""
  from agentopd_jax.envs.search import generate_world
  from agentopd_jax.envs.search.retriever import read_corpus

  if env_cfg.corpus:
    docs = read_corpus(env_cfg.corpus)[:TOKENIZER_MAX_DOCS]
  else:
    docs = generate_world(env_cfg.world_seed).passages
  return [d["contents"] for d in docs] + [t.question for t in search_questions(env_cfg)[0]], []


def tokenizer_corpus(env_cfg) -> Tuple[List[str], List[str]]:
  """(texts, whole words) of the configured env for the built-in tokenizer (`builtin_tokenizer.env_corpus`): what the
  env's pages and passages are written in, so its words become single tokens. ALFWorld's names and commands are in the
  default corpus already, so it adds nothing."""
  _check_env(env_cfg.name)
  if env_cfg.name == "webshop":
    return _webshop_corpus(env_cfg)
  if env_cfg.name == "search":
    return _search_corpus(env_cfg)
  return [], []


# --------------------------------------------------------------------------------------------------- dispatch
ENVS = ("alfworld", "webshop", "search")


def _check_env(name: str):
  if name not in ENVS:
    raise ValueError(f"env.name must be one of {ENVS}, got {name!r}")


def env_tasks(env_cfg) -> Tuple[list, list]:
  """(training tasks, validation tasks) of the configured env; the panel is the first `validation.num_tasks`."""
  _check_env(env_cfg.name)
  if env_cfg.name == "alfworld":
    return alfworld_games(env_cfg)
  if env_cfg.name == "webshop":
    return webshop_goals(env_cfg)
  return search_questions(env_cfg)


def env_factory(env_cfg, max_steps: Optional[int] = None) -> Callable[[], object]:
  """A picklable zero-arg env constructor, for the vector-env workers and for expert demonstrations; episodes are cut
  at `max_steps` (None: the env's own horizon)."""
  _check_env(env_cfg.name)
  horizon = {} if max_steps is None else {"max_steps": max_steps}
  if env_cfg.name == "alfworld":
    from agentopd_jax.envs.alfworld.env import AlfworldEnv
    return functools.partial(AlfworldEnv, env_cfg.engine, **horizon)
  if env_cfg.name == "webshop":
    from agentopd_jax.envs.webshop.env import WebshopEnv
    return functools.partial(WebshopEnv, **_webshop_shop_args(env_cfg), **horizon)
  from agentopd_jax.envs.search import SearchEnv
  return functools.partial(SearchEnv, **_search_env_kwargs(env_cfg))  # its horizon is env.max_turns


def expert_policy(env_cfg, expert: str) -> Callable[[object], List[str]]:
  """task -> the expert's actions, for the SFT warm start. ALFWorld: `expert` in EXPERTS ("explorer" or "planner");
  WebShop: in WEBSHOP_EXPERTS ("oracle" or "top_result"); Search has one expert (the oracle searcher), so `expert` is
  not read there."""
  _check_env(env_cfg.name)
  if env_cfg.name == "alfworld":
    return functools.partial(expert_actions, expert=expert)
  if env_cfg.name == "webshop":
    if expert not in WEBSHOP_EXPERTS:
      raise ValueError(f"sft.expert must be one of {WEBSHOP_EXPERTS} for WebShop, got {expert!r}")
    return functools.partial(_webshop_expert, _webshop_shop_args(env_cfg), expert)
  return functools.partial(_search_expert, _search_env_kwargs(env_cfg))


def iteration_tasks(pool: Sequence[str], n: int, seed: int, iteration: int) -> List[str]:
  """n distinct tasks for one iteration (with replacement across iterations), a pure function of (seed, i)."""
  if n > len(pool):
    raise ValueError(f"grpo.tasks_per_iteration={n} exceeds the {len(pool)} training games")
  rng = np.random.default_rng([seed, iteration])
  return [pool[i] for i in rng.choice(len(pool), n, replace=False)]
