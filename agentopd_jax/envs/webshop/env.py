"""WebShop behind the repo's vector-env interface: `env = WebshopEnv(...)`, `obs, infos = env.reset(goal)`,
`obs, score, done, infos = env.step(action)`.

The site logic is `WebAgentTextEnv.step` + `SimServer.receive` (research notes §3.4) without Flask or HTML:
  * `search[kw]` with non-empty kw searches from any page (the search bar is not required); keywords are the
    lower-cased argument split on ' '.
  * `click[x]` needs x among the current page's clickables and x != 'search'. Buy Now ends the episode with the
    score; Back to Search returns to the start page; Next/Prev move through the 50 results, 10 a page (Next is
    offered even past the last page); < Prev goes from a sub-page to the item page and from the item page back to
    the results; an ASIN opens the item page; an option value records `options[name] = value`. The clicked text
    is matched against those button names first, so a button wins over an option value of the same text.
  * anything else (no `name[arg]` shape, unknown name, not clickable) changes nothing and scores 0.
The score is WebShop's raw reward in [0, 1], on the Buy Now step only; `infos` carry verl-agent's keys:
`available_actions` ({'has_search_bar', 'clickables'}), `won` (done with score 1.0) and `task_score` (the score).
After Buy Now the observation is the done page, but `available_actions` are a search page's: verl-agent's
`WebAgentTextEnv.step` resets to a new session when done, and its worker reads the actions after that reset.
verl-agent's 0/10 training reward is the text side's job (`WebshopText.reward`). An episode is also cut (done,
`truncated` in infos) after `max_steps` steps, verl-agent's `env.max_steps` for WebShop.

The shop (products, goals, purchase prices, search index) is built once per process and shared by its envs.
"""
from __future__ import annotations

import copy
import functools
import random
from dataclasses import dataclass
from typing import Dict, List, Mapping, Optional, Tuple, Union

from agentopd_jax.envs.webshop import catalog, fuzzy, goals, pages, reward, search
from agentopd_jax.envs.webshop.prompts import MAX_STEPS

PRODUCT_WINDOW = 10
_BUY_NOW, _BACK_TO_SEARCH, _NEXT_PAGE, _PREV_PAGE = (
    label.lower() for label in (pages.BUY_NOW, pages.BACK_TO_SEARCH, pages.NEXT_PAGE, pages.PREV_PAGE))
_SUB_PAGES = {label.lower(): label for label in (*pages.SUB_PAGES, pages.ATTRIBUTES)}  # ACTION_TO_TEMPLATE's keys


@dataclass(frozen=True)
class Shop:
  """Everything episodes share: product records by ASIN, shuffled goals, purchase prices and the search engine."""
  products: Dict[str, dict]
  goals: List[dict]
  prices: Dict[str, float]
  engine: search.SearchEngine


@functools.lru_cache(maxsize=4)
def build_shop(num_products: int = 1000, catalog_seed: int = 0, goal_seed: Optional[int] = goals.VERL_AGENT_SEED,
               data_dir: Optional[str] = None, small: bool = True, human_goals: bool = False) -> Shop:
  """The shop for a generated catalogue (`num_products`, `catalog_seed`) or, with `data_dir`, for WebShop's own
  data files there (`small`: the 1000-product files; `num_products` then caps how many are loaded, as WebShop's
  `num_products`). Goals are synthetic, or human with `human_goals` (real data only); see `goals.build_goals`."""
  if data_dir is None:
    if human_goals:
      raise ValueError("human goals need WebShop's items_human_ins.json: pass data_dir")
    items, attributes = catalog.generate(num_products, catalog_seed)
    products = catalog.process(items, attributes)
  else:
    items, attributes, human = catalog.read_files(data_dir, small, human_goals)
    products = catalog.process(items, attributes, human, num_products)
  goal_list, prices = goals.build_goals(products, goal_seed, human=human_goals)
  return Shop({p["asin"]: p for p in products}, goal_list, prices, search.SearchEngine(products))


def parse_action(action: str) -> Tuple[str, Optional[str]]:
  r"""WebShop's `parse_action`, `re.match(r"(.+)\[(.+)\]", action)` -> (name, arg), else (action, None).

  Scanned instead of matched: the regex backtracks quadratically in the number of '[' (a reply of 20,000 took 2 s).
  The match lies on the first line ('.' stops at '\n'); the greedy groups end `arg` at the line's last ']' and
  `name` at the last '[' before it that leaves both at least one character.
  """
  line = action.partition("\n")[0]
  close = line.rfind("]")
  start = line.rfind("[", 1, close - 1) if close >= 2 else -1
  return (action, None) if start < 1 else (line[:start], line[start + 1:close])


class WebshopEnv:
  """One WebShop session at a time. Shop arguments as in `build_shop`; `max_steps=None` never cuts an episode.
  The purchase score matches fuzzily as thefuzz version `thefuzz` does ("0.19": WebShop's pin, verl-agent's env;
  "0.20": thefuzz >= 0.20) and takes r_type's nouns from `nouns` ("auto", "spacy" or "stand-in"); see `reward`.

  `reset(goal)` takes a goal index into `shop.goals` (verl-agent's session index) or a goal dict of the same shape.
  """

  def __init__(self, num_products: int = 1000, catalog_seed: int = 0,
               goal_seed: Optional[int] = goals.VERL_AGENT_SEED, data_dir: Optional[str] = None, small: bool = True,
               human_goals: bool = False, max_steps: Optional[int] = MAX_STEPS, thefuzz: str = "0.19",
               nouns: str = "auto"):
    self.thefuzz, self.nouns = fuzzy.check_version(thefuzz), reward.check_nouns(nouns)
    self.shop = build_shop(num_products, catalog_seed, goal_seed, data_dir, small, human_goals)
    self.max_steps = max_steps
    self.goal: Optional[dict] = None
    self.page: Optional[pages.Page] = None
    self.steps, self.done = 0, False

  # ------------------------------------------------------------------------------------------ interface
  def reset(self, goal: Union[int, Mapping]) -> Tuple[str, Dict]:
    self.goal = dict(goal if isinstance(goal, Mapping) else self.shop.goals[int(goal)])
    self.steps, self.done = 0, False
    self._rng = random.Random(self.goal["instruction_text"])  # only `<r>` searches draw from it
    self._start()
    return self.page.text, self._infos(0.0)

  def step(self, action: str) -> Tuple[str, float, bool, Dict]:
    if self.page is None:
      raise RuntimeError("WebshopEnv.step called before reset")
    score = self._act(action)
    self.steps += 1
    infos = self._infos(score)
    if not self.done and self.max_steps is not None and self.steps >= self.max_steps:
      self.done = infos["truncated"] = True
    return self.page.text, score, self.done, infos

  def available_actions(self) -> dict:
    """`get_available_actions()`: the current page's, or after a purchase the new session's search page's."""
    page = pages.search_page(self.goal["instruction_text"]) if self.page.kind == "done" else self.page
    return page.available_actions()

  def copy(self) -> "WebshopEnv":
    """An independent env in the same state (the shop is shared): for looking ahead (OPID's oracle review)."""
    other = copy.copy(self)
    if self.goal is not None:
      other.options = dict(self.options)
      other._rng = random.Random()
      other._rng.setstate(self._rng.getstate())
    return other

  # ------------------------------------------------------------------------------------------ site logic
  def _act(self, action: str) -> float:
    name, arg = parse_action(action)
    arg = arg.lower() if arg is not None else None
    if name == "search" and arg:
      self._search(arg.split(" "), 1)
    elif name == "click" and arg in self.page.clickables and arg != "search":
      return self._click(arg)
    return 0.0

  def _click(self, name: str) -> float:
    """`SimServer.receive`: the clicked text picks the action before the clickable it maps to does, so a button
    wins over an option value of the same text (an option `buy now` buys, `description` opens the description)."""
    kind = self.page.kind
    if name == _BUY_NOW:
      return self._buy()
    if name == _BACK_TO_SEARCH:
      self._start()
    elif name in (_NEXT_PAGE, _PREV_PAGE) and kind == "results":
      self._search(self.keywords, self.page_number + (1 if name == _NEXT_PAGE else -1))
    elif name == _PREV_PAGE and kind in _SUB_PAGES:
      self._item()
    elif name == _PREV_PAGE and kind == "item":
      self._search(self.keywords, self.page_number)
    elif name in _SUB_PAGES:
      self.page = pages.sub_page(self.goal["instruction_text"], self._product(), _SUB_PAGES[name])
    else:  # a product link opens its item page; an option value is recorded under its option's name
      click = self.page.clickables[name]
      if click.kind == "product":
        self.asin = click.target
      else:
        self.options[click.option] = click.target
      self._item()
    return 0.0

  def _start(self):
    self.keywords, self.page_number, self.asin, self.options = None, None, None, {}
    self.page = pages.search_page(self.goal["instruction_text"])

  def _search(self, keywords: List[str], page_number: int):
    self.keywords, self.page_number, self.asin, self.options = keywords, page_number, None, {}
    hits = self.shop.engine.search(keywords, self._rng)
    shown = hits[(page_number - 1) * PRODUCT_WINDOW:page_number * PRODUCT_WINDOW]
    self.page = pages.results_page(self.goal["instruction_text"], shown, page_number, len(hits))

  def _product(self) -> dict:
    return self.shop.products[self.asin]

  def _item(self):
    self.page = pages.item_page(self.goal["instruction_text"], self._product())

  def _buy(self) -> float:
    score = reward.get_reward(self._product(), self.goal, self.shop.prices[self.asin], self.options, self.thefuzz,
                              self.nouns).total
    self.page = pages.done_page(self.asin, self.options, score)
    self.done = True
    return score

  def _infos(self, score: float) -> Dict:
    return {"available_actions": self.available_actions(), "won": self.done and score == 1.0,
            "task_score": score}
