"""Goals as WebShop builds them (`engine/goal.py`, research notes §3.2) and as verl-agent splits and samples them
(§2.5, §3.1).

One random stream, in WebShop's order, so that real data files give verl-agent's exact goal list: verl-agent seeds
`random` with the env seed before loading, draws each ranged product's price (`uniform`), then each product's
`price_upper` (`sample`), then re-seeds and shuffles the goals. Upstream WebShop instead leaves the first two
unseeded and shuffles with seed 233.
"""
from __future__ import annotations

import itertools
import random
from collections import defaultdict
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

PRICE_RANGE = [10.0 * i for i in range(1, 100)]
NO_PRICE_LIMIT = 1000000
TEST_GOALS = 500  # verl-agent validates on goals [0, 500) and trains on [500, N); WebShop's test split
VERL_AGENT_SEED = 42  # WebAgentTextEnv's default seed, which verl-agent's workers keep


def product_prices(products: Sequence[dict], rng: random.Random) -> Dict[str, float]:
  """The price a purchase is judged at: the single price, or uniform in a price range (drawn once)."""
  prices = {}
  for p in products:
    pricing = p["pricing"]
    prices[p["asin"]] = pricing[0] if len(pricing) == 1 else rng.uniform(*pricing[:2])
  return prices


def price_limit(price: float, rng: random.Random) -> Tuple[float, str]:
  """(price_upper, price text): the larger of two of the four round prices above `price`, or no limit."""
  above = [p for p in PRICE_RANGE if p > price][:4]
  if len(above) < 2:
    return NO_PRICE_LIMIT, ""
  _, upper = sorted(rng.sample(above, 2))
  return upper, f", and price lower than {upper:.2f} dollars"


def synthetic_goals(products: Sequence[dict], prices: Dict[str, float], rng: random.Random) -> List[dict]:
  """One goal per option combination of each product with an instruction; weight = mean 1/count of its attributes.

  The instruction reads `{instruction} with {name}: {value}, and {name}: {value}{price text}` (options by name).
  """
  goals, counts = [], defaultdict(int)
  for p in products:
    if p.get("instruction_text") is None:
      continue
    upper, price_text = price_limit(prices[p["asin"]], rng)
    names = sorted(p["options"])
    for combination in itertools.product(*(p["options"][n] for n in names)):
      goal_options = dict(zip(names, combination))
      option_text = ", and ".join(f"{k}: {v}" for k, v in goal_options.items())
      option_text = " with " + option_text if option_text else ""
      goals.append({
          "asin": p["asin"], "category": p["category"], "query": p["query"], "name": p["Title"],
          "product_category": p["product_category"],
          "instruction_text": f"{p['instruction_text']}{option_text}{price_text}",
          "attributes": p["instruction_attributes"], "price_upper": upper, "goal_options": goal_options,
      })
      for a in p["instruction_attributes"]:
        counts[a] += 1
  for g in goals:
    g["weight"] = sum(1.0 / counts[a] for a in g["attributes"]) / len(g["attributes"])
  return goals


def human_goals(products: Sequence[dict], prices: Dict[str, float], rng: random.Random) -> List[dict]:
  """One goal per crowd-sourced instruction with attributes; options are a list of values; weight 1."""
  goals = []
  for p in products:
    for ins in p.get("instructions", ()):
      if not ins["instruction_attributes"]:
        continue
      upper, price_text = price_limit(prices[p["asin"]], rng)
      goals.append({
          "asin": p["asin"], "category": p["category"], "query": p["query"], "name": p["name"],
          "product_category": p["product_category"], "instruction_text": ins["instruction"].strip(".") + price_text,
          "attributes": ins["instruction_attributes"], "price_upper": upper,
          "goal_options": ins["instruction_options"], "weight": 1,
      })
  return goals


def build_goals(products: Sequence[dict], seed: Optional[int] = VERL_AGENT_SEED, human: bool = False,
                shuffle_seed: Optional[int] = None) -> Tuple[List[dict], Dict[str, float]]:
  """(shuffled goals, purchase prices). `seed` drives prices and price limits (None: unseeded, as upstream);
  the shuffle uses `shuffle_seed`, default `seed` (verl-agent); upstream WebShop is seed=None, shuffle_seed=233."""
  rng = random.Random(seed)
  prices = product_prices(products, rng)
  goals = (human_goals if human else synthetic_goals)(products, prices, rng)
  random.Random(seed if shuffle_seed is None else shuffle_seed).shuffle(goals)
  return goals, prices


def split_indices(num_goals: int, split: str) -> range:
  """verl-agent's split of the shuffled goals: "test" (validation) = first 500, "train" = the rest."""
  if split == "test":
    return range(min(TEST_GOALS, num_goals))
  if split == "train":
    return range(TEST_GOALS, num_goals)
  raise ValueError(f"unknown WebShop split {split!r}; expected 'test' or 'train'")


class GoalSampler:
  """verl-agent's goal draws: each call picks `env_num` distinct goals of the split with a RandomState that keeps
  advancing, and repeats each `group_n` times (a GRPO group plays one goal).

  Validation is `GoalSampler(n, "test", seed + 1000, env_num=128)`: each pass scores 128 different goals out of the
  first 500, a different 128 every pass. Training is `GoalSampler(n, "train", seed, env_num=16, group_n=8)`.
  """

  def __init__(self, num_goals: int, split: str, seed: int, env_num: int, group_n: int = 1):
    self.indices = split_indices(num_goals, split)
    if env_num > len(self.indices):
      raise ValueError(f"cannot draw {env_num} distinct goals from a split of {len(self.indices)}")
    self.env_num, self.group_n = env_num, group_n
    self._rng = np.random.RandomState(seed)

  def __call__(self) -> List[int]:
    chosen = self._rng.choice(self.indices, size=self.env_num, replace=False)
    return np.repeat(chosen, self.group_n).tolist()
