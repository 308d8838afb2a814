"""Two shoppers: an oracle that knows the goal's product, and a reader that acts only on what the pages show.

`plan` (the oracle): search -> (next pages) -> the goal's product -> options -> Buy Now.

Why an oracle and not a text-reading agent: demonstrations for the SFT warm start and an upper bound for the env
need purchases that score 1.0, quickly and deterministically. The plan still looks like a good agent's: it first
searches with the product's instruction (the goal text without options and price), which finds the product in the
top 50 for almost every goal, and only falls back to the product's title when it does not; it pages with `next >`
and picks the goal's option values. A correct purchase can still score below 1.0 where WebShop's own option matching
fails (see `reward.py`); no plan can win those goals.

`top_result_plan` (the reader): the same first search, then the top result, the instruction's option values that
product offers, Buy Now. Its episodes are the ones a text-only policy can imitate: the oracle's choice of product and
of how many `next >` pages to turn follows from the goal's hidden ASIN, which no page shows, so a policy cloned from
it learns to click a product at random (docs/results.md, WebShop). The reader wins about a quarter of the goals
(its top result is often a different product than the goal's, and some of those still score 1.0); the wins are its
demonstrations.

`next_action` is the oracle from any state an episode reached (`plan_target` fixes what it buys), for OPID's oracle
review of a policy's episode (`hindsight.py`).
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import List, Mapping, Optional, Tuple, Union

from agentopd_jax.envs.webshop import fuzzy, reward
from agentopd_jax.envs.webshop.env import MAX_STEPS, PRODUCT_WINDOW, Shop


def _queries(shop: Shop, goal: Mapping) -> List[str]:
  product = shop.products[goal["asin"]]
  base = product.get("instruction_text") or goal["instruction_text"].split(", and price lower than")[0]
  return [q for q in (base.lower(), product["Title"].lower()) if "[" not in q and "]" not in q and q.strip()]


def _option_clicks(product: Mapping, goal_options) -> List[str]:
  """The product's option values to click: those a synthetic goal names that the product offers (all of them for the
  goal's own product); for a human goal's free-text values, per option the value matching one best (if above
  WebShop's threshold)."""
  if isinstance(goal_options, Mapping):
    offered = {v for values in product["options"].values() for v in values}
    return [f"click[{v}]" for v in goal_options.values() if v in offered]
  clicks = []
  for values in product["options"].values():
    scored = [(max((fuzzy.token_set_ratio(reward.normalize_color(v), reward.normalize_color(g))
                    for g in goal_options), default=0), v) for v in values]
    best = max(scored, default=(0, None), key=lambda s: s[0])
    if best[0] > reward.MATCH_THRESHOLD:
      clicks.append(f"click[{best[1]}]")
  return clicks


def plan(shop: Shop, goal: Union[int, Mapping], max_steps: Optional[int] = MAX_STEPS) -> Optional[List[str]]:
  """Actions that buy the goal's product with its options, within `max_steps`; None if no query finds it."""
  goal = goal if isinstance(goal, Mapping) else shop.goals[int(goal)]
  product = shop.products[goal["asin"]]
  tail = [f"click[{goal['asin'].lower()}]", *_option_clicks(product, goal["goal_options"]), "click[buy now]"]
  for query in _queries(shop, goal):
    asins = [p["asin"] for p in shop.engine.search(query.split(" "), random.Random(0))]
    if goal["asin"] in asins:
      actions = [f"search[{query}]"] + ["click[next >]"] * (asins.index(goal["asin"]) // PRODUCT_WINDOW) + tail
      if max_steps is None or len(actions) <= max_steps:
        return actions
  return None


def top_result_plan(shop: Shop, goal: Union[int, Mapping], max_steps: Optional[int] = MAX_STEPS) -> Optional[List[str]]:
  """Actions that buy the top result of the instruction's search with the instruction's option values it offers;
  None if the search finds nothing."""
  goal = goal if isinstance(goal, Mapping) else shop.goals[int(goal)]
  query = _queries(shop, goal)[0]
  hits = shop.engine.search(query.split(" "), random.Random(0))
  if not hits:
    return None
  product = hits[0]
  actions = [f"search[{query}]", f"click[{product['asin'].lower()}]", *_option_clicks(product, goal["goal_options"]),
             "click[buy now]"]
  return actions if max_steps is None or len(actions) <= max_steps else None


@dataclass(frozen=True)
class Target:
  """What `plan` buys for a goal: the product, the query that finds it, and the option values it clicks."""
  asin: str
  query: str
  options: Tuple[str, ...]


def plan_target(shop: Shop, goal: Union[int, Mapping], max_steps: Optional[int] = MAX_STEPS) -> Optional[Target]:
  """`plan`'s target for a goal; None when `plan` finds none."""
  actions = plan(shop, goal, max_steps)
  if actions is None:
    return None
  asin = (goal if isinstance(goal, Mapping) else shop.goals[int(goal)])["asin"]
  chosen = actions[actions.index(f"click[{asin.lower()}]") + 1:-1]  # between the product and Buy Now
  return Target(asin, actions[0][len("search["):-1], tuple(a[len("click["):-1] for a in chosen))


def next_action(env, target: Target) -> Optional[str]:
  """`plan`'s next action from any state of `env` (a `WebshopEnv` on the target's goal), so that a policy's step can
  be set beside it (OPID's oracle review): on the product's item page, choose a missing option, else buy; leave its
  sub-pages; on results that list it, open it; page towards it in its results; anywhere else search the plan's
  query (a search works from every page). None once the episode is over."""
  page, asin = env.page, target.asin.lower()
  if env.done or page.kind == "done":
    return None
  on_product = env.asin is not None and env.asin.lower() == asin
  if on_product and page.kind != "item":  # a sub-page: `< prev` leads back to the item page
    return "click[< prev]"
  if on_product and page.kind == "item":
    named = {v: name for name, values in env.shop.products[env.asin]["options"].items() for v in values}
    missing = [v for v in target.options if env.options.get(named.get(v)) != v]
    return f"click[{missing[0]}]" if missing else "click[buy now]"
  if page.kind == "results" and env.keywords is not None:
    if asin in page.clickables:
      return f"click[{asin}]"
    hits = [p["asin"].lower() for p in env.shop.engine.search(env.keywords, random.Random(0))]
    if asin in hits:
      return "click[next >]" if hits.index(asin) // PRODUCT_WINDOW + 1 > env.page_number else "click[< prev]"
  return f"search[{target.query}]"
