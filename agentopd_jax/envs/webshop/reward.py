"""WebShop's purchase score (`engine/goal.py::get_reward`, research notes §3.5), rule for rule, quirks included.

  r_total = r_type * (attribute matches + option matches + [price <= price_upper]) / (#attributes + #options + 1)

Why the quirks are kept: they decide which purchases score 1.0 (the only ones verl-agent rewards), so a policy
trained here meets the same target as on the real site.
  * Fuzzy matching is thefuzz's `token_set_ratio` (rapidfuzz underneath): both sides `str()`-ed, code points
    128-255 deleted, non-alphanumerics turned into spaces, lower-cased, then the score rounded to an int; a match
    needs > 85. WebShop pins thefuzz 0.19, whose pure-Python ratio can differ from rapidfuzz by a point on a few
    pairs; the token-set logic, and so every example in the notes, is the same.
  * A synthetic goal's options are `(name, value)` tuples. `normalize_color` tests `color in value`, which for a
    tuple means "an element equals a colour", and fuzz stringifies the tuple, so its name joins the tokens:
    purchased "large" vs goal ("size", "x-large") scores 100, "x-large" vs ("size", "large") only 83.
  * `normalize_color` returns the first COLOR_SET entry that is a *substring*: "dark wash" -> "ash", "blueberry"
    -> "blue", which then no longer matches the goal's tokens; a correct purchase can score below 1.0.
  * r_type compares nouns of the two product names. WebShop uses spaCy `en_core_web_sm` (NOUN/PROPN tokens), not
    installable offline; `title_nouns` is our deterministic stand-in (see its docstring).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import List, Mapping, Sequence

from rapidfuzz import fuzz
from rapidfuzz.utils import default_process

MATCH_THRESHOLD = 85  # a fuzzy match needs a score strictly above this

# web_agent_site/engine/normalize.py, in its order: the first entry found in a value wins.
COLOR_SET = (
    "alabaster", "apricot", "aqua", "ash", "asphalt", "azure", "banana", "beige", "black", "blue", "blush", "bordeaux",
    "bronze", "brown", "burgundy", "camel", "camo", "caramel", "champagne", "charcoal", "cheetah", "chestnut",
    "chocolate", "christmas", "coffee", "cognac", "copper", "coral", "cranberry", "cream", "crystal", "dark", "denim",
    "eggplant", "elephant", "espresso", "fuchsia", "gold", "granite", "grape", "graphite", "grass", "gray", "green",
    "grey", "heather", "indigo", "ivory", "ivy", "khaki", "lavender", "lemon", "leopard", "light", "lilac", "lime",
    "magenta", "maroon", "mauve", "merlot", "midnight", "mint", "mocha", "multicolor", "mushroom", "mustard",
    "natural", "navy", "nude", "olive", "orange", "peach", "pewter", "pink", "plum", "purple", "rainbow", "red", "rose",
    "royal", "rust", "sand", "sapphire", "seashell", "silver", "skull", "slate", "steel", "stone", "stonewash",
    "sunflower", "tan", "taupe", "teal", "tiger", "turquoise", "violet", "walnut", "wheat", "white", "wine", "yellow",
)

_LATIN1 = {i: None for i in range(128, 256)}


def normalize_color(value):
  """The first COLOR_SET colour `in` value, else value unchanged (substring test for strings, element test for the
  `(name, value)` tuples of synthetic goals)."""
  for color in COLOR_SET:
    if color in value:
      return color
  return value


def token_set_ratio(a, b) -> int:
  """thefuzz `fuzz.token_set_ratio(a, b)` (force_ascii and full_process on), as an int in [0, 100]."""
  pa, pb = (default_process(str(s).translate(_LATIN1)) for s in (a, b))
  return int(round(fuzz.token_set_ratio(pa, pb)))


def attribute_matches(product: Mapping, goal_attributes: Sequence[str]) -> int:
  """Goal attributes found among the product's attributes (fuzzy) or, failing that, as substrings of its
  lower-cased title, joined bullet points or description."""
  texts = (product["Title"].lower(), " ".join(product["BulletPoints"]).lower(), product["Description"].lower())
  count = 0
  for g_attr in goal_attributes:
    if any(token_set_ratio(p_attr, g_attr) > MATCH_THRESHOLD for p_attr in product["Attributes"]):
      count += 1
    elif any(g_attr in text for text in texts):
      count += 1
  return count


def goal_option_list(goal_options) -> List:
  """What the option reward compares against: `(name, value)` tuples for a synthetic goal's dict, the values
  themselves for a human goal's list."""
  return list(goal_options.items()) if isinstance(goal_options, Mapping) else list(goal_options)


def option_matches(purchased_options: Mapping[str, str], goal_options) -> int:
  """Goal options matched (> 85) by any chosen option value, both sides through `normalize_color`."""
  chosen = [normalize_color(v) for v in purchased_options.values()]
  wanted = [normalize_color(g) for g in goal_option_list(goal_options)]
  return sum(any(token_set_ratio(p, g) > MATCH_THRESHOLD for p in chosen) for g in wanted)


# Stand-in for spaCy's NOUN/PROPN filter on product names. Product titles are mostly nouns and brand names
# (which spaCy tags NOUN/PROPN); what it drops are function words, numbers and descriptive adjectives. So: keep
# alphabetic tokens of 2+ letters (spaCy splits "clip-in" and "men's" the same way) that are neither function words
# nor common product adjectives. Deterministic and dependency-free; it over-counts rare adjectives as nouns.
_FUNCTION_WORDS = frozenset("""
a about above after all also an and any are as at be because been but by can could did do does each for from had has
have he her his how i if in into is it its just may me more most my no nor not of off on once only or other our out
over own per same she should so some such than that the their them then there these they this those through to too
under up very was we were what when where which while who whom why will with within without would you your s
""".split())
_ADJECTIVES = frozenset("""
adjustable ultra anti assorted athletic authentic basic best big black blue bold breathable bright brown casual
cheap classic clean clear colorful comfortable compact cozy crispy cute dainty dark daily decorative deep delicate
durable easy elegant extra fast fine flexible fresh full gentle genuine gold golden great green grey gray heavy
high hot large latest light lightweight little long loose low luxury matte medium mini modern natural new non
nude official old organic original perfect pink plain portable premium professional pure purple quick red
reusable rich round rustic safe seamless sheer short silver simple slim small smart smooth soft solid stable
stylish super sweet tall thick thin tiny universal vintage warm waterproof white wide wireless yellow
""".split())
_WORD = re.compile(r"[a-z]+")


def title_nouns(name: str) -> List[str]:
  """Lower-cased 'noun' tokens of a product name (stand-in for spaCy `en_core_web_sm`, see above)."""
  return [t for t in _WORD.findall(name.lower())
          if len(t) > 1 and t not in _FUNCTION_WORDS and t not in _ADJECTIVES]


@dataclass(frozen=True)
class TypeMatch:
  r_type: float
  query_match: bool
  category_match: bool
  title_score: float


def type_reward(product: Mapping, goal: Mapping) -> TypeMatch:
  """Whether the purchase is the right kind of product: same scrape query, >= 2 shared category levels, or shared
  title nouns. 1.0 if any holds; 0.5 if none; then 0.1 if under 10% of the goal's nouns are shared, 0.0 if none."""
  query_match = product["query"] == goal["query"]
  levels = [{x.strip() for x in p["product_category"].split("›")} for p in (product, goal)]
  category_match = len(levels[0] & levels[1]) >= 2
  bought, wanted = title_nouns(product["name"]), title_nouns(goal["name"])
  title_score = len(set(bought) & set(wanted)) / len(wanted) if wanted else 0.2
  r_type = 1.0
  if not (query_match or category_match or title_score > 0.2):
    r_type = 0.5
  if title_score < 0.1:
    r_type = 0.1
  if title_score == 0.0:
    r_type = 0.0
  return TypeMatch(r_type, query_match, category_match, title_score)


@dataclass(frozen=True)
class Reward:
  """The score and its parts (WebShop's `verbose` info)."""
  total: float
  type: TypeMatch
  attribute_matches: int
  option_matches: int
  price_ok: bool


def get_reward(product: Mapping, goal: Mapping, price: float, options: Mapping[str, str]) -> Reward:
  """Score of buying `product` at `price` with `options` chosen, for `goal`."""
  kind = type_reward(product, goal)
  price_ok = price <= goal["price_upper"]
  n_attr = attribute_matches(product, goal["attributes"])
  n_opt = option_matches(options, goal["goal_options"])
  total = (n_attr + n_opt + price_ok) / (len(goal["attributes"]) + len(goal["goal_options"]) + 1)
  return Reward(total * kind.r_type, kind, n_attr, n_opt, price_ok)
