"""WebShop's purchase score (`engine/goal.py::get_reward`, research notes §3.5), rule for rule, quirks included.

  r_total = r_type * (attribute matches + option matches + [price <= price_upper]) / (#attributes + #options + 1)

Why the quirks are kept: they decide which purchases score 1.0 (the only ones verl-agent rewards), so a policy
trained here meets the same target as on the real site.
  * Fuzzy matching is thefuzz's `token_set_ratio` of WebShop's pinned thefuzz 0.19 by default (`fuzzy.py`; 0.20+ on
    request): a match needs > 85.
  * A synthetic goal's options are `(name, value)` tuples. `normalize_color` tests `color in value`, which for a
    tuple means "an element equals a colour", and fuzz stringifies the tuple, so its name joins the tokens:
    purchased "large" vs goal ("size", "x-large") scores 100, "x-large" vs ("size", "large") only 83.
  * `normalize_color` returns the first COLOR_SET entry that is a *substring*: "dark wash" -> "ash", "blueberry"
    -> "blue", which then no longer matches the goal's tokens; a correct purchase can score below 1.0.
  * r_type compares nouns of the two product names: spaCy `en_core_web_sm`'s NOUN/PROPN tokens, as WebShop, when
    spaCy and that pipeline are installed; otherwise a deterministic stand-in (`title_nouns`).
"""
from __future__ import annotations

import functools
import importlib.util
import re
from dataclasses import dataclass
from typing import List, Mapping, Sequence

from agentopd_jax.envs.webshop import fuzzy

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


def normalize_color(value):
  """The first COLOR_SET colour `in` value, else value unchanged (substring test for strings, element test for the
  `(name, value)` tuples of synthetic goals)."""
  for color in COLOR_SET:
    if color in value:
      return color
  return value


def attribute_matches(product: Mapping, goal_attributes: Sequence[str], thefuzz: str = "0.19") -> int:
  """Goal attributes found among the product's attributes (fuzzy, `fuzzy.token_set_ratio` of thefuzz version
  `thefuzz`) or, failing that, as substrings of its lower-cased title, joined bullet points or description."""
  texts = (product["Title"].lower(), " ".join(product["BulletPoints"]).lower(), product["Description"].lower())
  count = 0
  for g_attr in goal_attributes:
    if any(fuzzy.token_set_ratio(p_attr, g_attr, thefuzz) > MATCH_THRESHOLD for p_attr in product["Attributes"]):
      count += 1
    elif any(g_attr in text for text in texts):
      count += 1
  return count


def goal_option_list(goal_options) -> List:
  """What the option reward compares against: `(name, value)` tuples for a synthetic goal's dict, the values
  themselves for a human goal's list."""
  return list(goal_options.items()) if isinstance(goal_options, Mapping) else list(goal_options)


def option_matches(purchased_options: Mapping[str, str], goal_options, thefuzz: str = "0.19") -> int:
  """Goal options matched (> 85) by any chosen option value, both sides through `normalize_color`."""
  chosen = [normalize_color(v) for v in purchased_options.values()]
  wanted = [normalize_color(g) for g in goal_option_list(goal_options)]
  return sum(any(fuzzy.token_set_ratio(p, g, thefuzz) > MATCH_THRESHOLD for p in chosen) for g in wanted)


NOUN_TAGGERS = ("auto", "spacy", "stand-in")
SPACY_PIPELINE = "en_core_web_sm"  # what WebShop's goal.py loads
_NOUN_TAGS = ("NOUN", "PROPN")  # goal.py also lists "PNOUN", a tag no spaCy pipeline assigns


def check_nouns(nouns: str) -> str:
  if nouns not in NOUN_TAGGERS:
    raise ValueError(f"env.nouns must be one of {NOUN_TAGGERS} (auto: spaCy {SPACY_PIPELINE} when installed, else the "
                     f"stand-in), got {nouns!r}")
  return nouns


@functools.lru_cache(maxsize=None)
def english_pipeline():
  """`spacy.load("en_core_web_sm")`, once per process, or None when that pipeline package is not installed (spaCy
  itself is then not imported)."""
  if importlib.util.find_spec(SPACY_PIPELINE) is None:
    return None
  import spacy

  return spacy.load(SPACY_PIPELINE)


def spacy_nouns(nlp, name: str) -> List[str]:
  """goal.py's filter: the lower-cased text of the NOUN/PROPN tokens of `nlp(name)`."""
  return [t.text.lower() for t in nlp(name) if t.pos_ in _NOUN_TAGS]


# The stand-in for spaCy's NOUN/PROPN filter. Product titles are mostly nouns and brand names (which spaCy tags
# NOUN/PROPN); what it drops are function words, numbers and descriptive adjectives. So: keep alphabetic tokens of 2+
# letters (spaCy splits "clip-in" and "men's" the same way) that are neither function words nor common product
# adjectives. It cannot see what spaCy sees in a title-cased name: a capitalised adjective ("Classic", "Natural") is
# often tagged PROPN and then counts; here it never does. Agreement with spaCy: docs/webshop.md.
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


def standin_nouns(name: str) -> List[str]:
  """Lower-cased 'noun' tokens of a product name by the stand-in's rule (above)."""
  return [t for t in _WORD.findall(name.lower())
          if len(t) > 1 and t not in _FUNCTION_WORDS and t not in _ADJECTIVES]


def title_nouns(name: str, nouns: str = "auto") -> List[str]:
  """The nouns r_type compares: spaCy's (`spacy_nouns` of `english_pipeline()`) for `nouns="spacy"`, which needs the
  pipeline, and for "auto" when it is installed; the stand-in's for "stand-in", and for "auto" without it."""
  nlp = None if check_nouns(nouns) == "stand-in" else english_pipeline()
  if nlp is not None:
    return spacy_nouns(nlp, name)
  if nouns == "spacy":
    raise ValueError(f"nouns='spacy' needs spaCy and its {SPACY_PIPELINE} pipeline installed "
                     f"(python -m spacy download {SPACY_PIPELINE}); nouns='auto' falls back to the stand-in")
  return standin_nouns(name)


@dataclass(frozen=True)
class TypeMatch:
  r_type: float
  query_match: bool
  category_match: bool
  title_score: float


def type_reward(product: Mapping, goal: Mapping, nouns: str = "auto") -> TypeMatch:
  """Whether the purchase is the right kind of product: same scrape query, >= 2 shared category levels, or shared
  title nouns (`title_nouns(..., nouns)`). 1.0 if any holds; 0.5 if none; then 0.1 if under 10% of the goal's nouns
  are shared, 0.0 if none."""
  query_match = product["query"] == goal["query"]
  levels = [{x.strip() for x in p["product_category"].split("›")} for p in (product, goal)]
  category_match = len(levels[0] & levels[1]) >= 2
  bought, wanted = title_nouns(product["name"], nouns), title_nouns(goal["name"], nouns)
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


def get_reward(product: Mapping, goal: Mapping, price: float, options: Mapping[str, str], thefuzz: str = "0.19",
               nouns: str = "auto") -> Reward:
  """Score of buying `product` at `price` with `options` chosen, for `goal`; fuzzy matching as thefuzz version
  `thefuzz` (`fuzzy.VERSIONS`), r_type's nouns by `nouns` (`NOUN_TAGGERS`)."""
  kind = type_reward(product, goal, nouns)
  price_ok = price <= goal["price_upper"]
  n_attr = attribute_matches(product, goal["attributes"], thefuzz)
  n_opt = option_matches(options, goal["goal_options"], thefuzz)
  total = (n_attr + n_opt + price_ok) / (len(goal["attributes"]) + len(goal["goal_options"]) + 1)
  return Reward(total * kind.r_type, kind, n_attr, n_opt, price_ok)
