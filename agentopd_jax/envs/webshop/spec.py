"""WebShop's run spec (`envs.registry`): goal indices as tasks, `WebshopEnv` workers, `WebshopText`, two shoppers,
SDAR's skill bank (typed by prompt keywords), OPID's oracle review (`hindsight.py`).

The shop is a generated catalogue (`env.num_products`, `env.catalog_seed`) or WebShop's own files (`env.data_dir`);
verl-agent validates on goals [0, 500) and trains on the rest. The built-in tokenizer learns the catalogue, with every
ASIN a whole word, so a tiny policy can copy product ids. bm25s and rapidfuzz are imported only when a shop is built.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import List, Optional, Tuple

from agentopd_jax.envs.registry import (EnvCommon, EnvSpec, ReportSpec, SkillSpec, no_skill_query, register,
                                       shipped_skill_bank)
from agentopd_jax.envs.webshop.text import WebshopText


def shop_args(env_cfg) -> dict:
  return dict(num_products=env_cfg.num_products, catalog_seed=env_cfg.catalog_seed,
              data_dir=env_cfg.data_dir or None, human_goals=env_cfg.human_goals)


def goals(env_cfg) -> Tuple[List[int], List[int]]:
  """(training goal indices, validation goal indices): verl-agent trains on goals [500, N) and validates on [0, 500)."""
  from agentopd_jax.envs.webshop.env import build_shop
  from agentopd_jax.envs.webshop.goals import split_indices

  n = len(build_shop(**shop_args(env_cfg)).goals)
  return list(split_indices(n, "train")), list(split_indices(n, "test"))


def shop_kwargs(env_cfg) -> dict:
  """WebshopEnv's arguments: the shop's, plus the reward's matcher (`env.thefuzz`) and noun tagger (`env.nouns`),
  checked here so a bad value is one error in the driver, not one per env worker."""
  from agentopd_jax.envs.webshop import fuzzy, reward

  return dict(shop_args(env_cfg), thefuzz=fuzzy.check_version(env_cfg.thefuzz), nouns=reward.check_nouns(env_cfg.nouns))


def worker(env_cfg, max_steps: Optional[int] = None):
  """WebshopEnv on the checked `shop_kwargs`."""
  from agentopd_jax.envs.webshop.env import WebshopEnv

  return functools.partial(WebshopEnv, **shop_kwargs(env_cfg),
                           **({} if max_steps is None else {"max_steps": max_steps}))


EXPERTS = ("oracle", "top_result")


def _shopper(args: dict, expert: str, goal: int) -> List[str]:
  """"oracle" (`expert.plan`: knows the goal's product) or "top_result" (`expert.top_result_plan`: buys the top
  search result, acting only on what the pages show, so a text-only policy can imitate it)."""
  from agentopd_jax.envs.webshop import expert as shoppers
  from agentopd_jax.envs.webshop.env import build_shop

  planner = shoppers.plan if expert == "oracle" else shoppers.top_result_plan
  return planner(build_shop(**args), goal) or []  # [] (no plan found): the demonstration is skipped


def hindsight(env_cfg):
  """OPID's oracle analyzer: (goal, actions) -> the episode replayed beside the oracle shopper (`hindsight.py`)."""
  from agentopd_jax.envs.webshop.hindsight import reviewer

  return reviewer(shop_kwargs(env_cfg))


def tokenizer_corpus(env_cfg) -> Tuple[List[str], List[str]]:
  """The catalogue as the site shows it (titles, prices, descriptions, bullet points, option names and values,
  product instructions); every ASIN is a whole word in both the page's case and the click action's lower case."""
  from agentopd_jax.envs.webshop.env import build_shop

  texts, asins = [], []
  for asin, p in build_shop(**shop_args(env_cfg)).products.items():
    texts += [p["Title"], p["Price"], p["Description"], *p["BulletPoints"], p.get("instruction_text") or ""]
    texts += [f"{name} {' '.join(values)}" for name, values in p["options"].items()]
    asins += [asin, asin.lower()]
  return texts, asins


@dataclasses.dataclass(frozen=True)
class WebshopConfig(EnvCommon):
  """The run config's `env` section for WebShop."""
  name: str = "webshop"
  history_length: int = 4              # the compact history lists actions only, so 4 of them cost ~60 tokens
  num_products: int = 1000             # generated catalogue size (WebShop's small setting has 1000 products)
  catalog_seed: int = 0                # the catalogue and goals are fixed across run seeds, like the real site
  data_dir: str = ""                   # WebShop's items_*.json folder; "" -> the generated catalogue
  human_goals: bool = False            # human instructions (needs data_dir with items_human_ins.json)
  reward: str = "score"                # 10 x WebShop's graded score ("success": verl-agent's 10 iff the score is 1.0):
                                       # the warm start rarely buys perfectly, but its purchases score 0.3-0.8
  thefuzz: str = "0.19"                # the reward's fuzzy matching: thefuzz 0.19 (WebShop's and verl-agent's pin) or
                                       # "0.20" (thefuzz >= 0.20 on rapidfuzz); they differ near the 85 threshold
  nouns: str = "auto"                  # r_type's nouns: spaCy en_core_web_sm when installed ("auto"), "spacy"
                                       # (required) or "stand-in" (docs/webshop.md)


SPEC = register(EnvSpec(
    name="webshop", config=WebshopConfig, tasks=goals, worker=worker, text_env=WebshopText, experts=EXPERTS,
    expert=lambda env_cfg, name: functools.partial(_shopper, shop_args(env_cfg), name),
    text_options=lambda env_cfg: {"reward": env_cfg.reward}, tokenizer_corpus=tokenizer_corpus,
    # SDAR types a WebShop task by keywords of its prompt alone (goal indices carry nothing it reads).
    skills=SkillSpec(bank=shipped_skill_bank("webshop"), rule="keywords", query=no_skill_query),
    hindsight=hindsight,
    report=ReportSpec(headline="Score")))  # no task groups; the papers report the task score, then success
