"""thefuzz's token_set_ratio in WebShop's pinned 0.19 behaviour (the default) and in thefuzz >= 0.20's, on pairs where
they differ, and the purchase score under each.

Expected scores are hand-checked values from the real libraries, not from this code: thefuzz 0.19.0, 0.20.0 and
0.22.1 wheels from PyPI, each imported on its own on Python 3.11 with rapidfuzz 3.14.6 and without python-Levenshtein
(so 0.19.0 used difflib's SequenceMatcher, as in verl-agent's WebShop environment, whose requirements resolve to
thefuzz 0.19.0 and no Levenshtein package); 0.20.0 and 0.22.1 agreed on every pair.
"""
import pytest

pytest.importorskip("rapidfuzz")

from agentopd_jax.envs.webshop import fuzzy, reward  # noqa: E402
from agentopd_jax.envs.webshop.env import WebshopEnv  # noqa: E402


@pytest.mark.parametrize("a,b,v019,v019_swapped,v020", [
    ("easy_carry", "easy carry", 50, 50, 100),  # 0.19 keeps "_" inside a word: one token against two
    ("long_lasting", "long lasting hair", 48, 48, 100),
    ("non_slip", "non slip", 88, 88, 100),
    ("easy_carry", ("style", "easy carry"), 38, 38, 100),  # a synthetic goal's option tuple
    ("\u0130stanbul", "istanbul", 94, 94, 100),  # Python lower-cases the dotted capital I to "i" + a combining dot
    # difflib's matching blocks against rapidfuzz's Indel ratio; difflib also depends on the argument order, so
    # WebShop's (purchased, goal) order counts
    ("resistant", "resisat", 75, 88, 88),
    ("high non", "ih non", 71, 86, 86),
    ("x-large", ("size", "large"), 83, 83, 83),  # where they agree
])
def test_thefuzz_versions_on_pairs_near_the_threshold(a, b, v019, v019_swapped, v020):
  assert fuzzy.token_set_ratio(a, b) == fuzzy.token_set_ratio(a, b, "0.19") == v019
  assert fuzzy.token_set_ratio(b, a, "0.19") == v019_swapped
  assert fuzzy.token_set_ratio(a, b, "0.20") == fuzzy.token_set_ratio(b, a, "0.20") == v020


def test_unknown_version_is_one_clear_error():
  with pytest.raises(ValueError, match="env.thefuzz .*must be one of"):
    fuzzy.token_set_ratio("a", "b", "0.21")
  with pytest.raises(ValueError, match="thefuzz version"):
    WebshopEnv(thefuzz="0.21")


PRODUCT = {"Title": "Foo Travel Bag", "name": "Foo Travel Bag", "BulletPoints": ["holds 20 l"],
           "Description": "A bag.", "Attributes": ["easy_carry", "resistant"], "query": "travel bags",
           "product_category": "Luggage › Travel Bags"}
GOAL = {"name": "Foo Travel Bag", "query": "travel bags", "product_category": "Luggage › Travel Bags",
        "attributes": ["easy carry", "resisat"], "goal_options": {"style": "easy carry"}, "price_upper": 40.0}


def test_purchase_score_under_each_version():
  """Attributes: "easy carry" and "resisat" match the product's only at thefuzz >= 0.20 (WebShop compares the
  purchased side first); so does the option."""
  old = reward.get_reward(PRODUCT, GOAL, 10.0, {"style": "easy_carry"}, thefuzz="0.19", nouns="stand-in")
  new = reward.get_reward(PRODUCT, GOAL, 10.0, {"style": "easy_carry"}, thefuzz="0.20", nouns="stand-in")
  assert (old.attribute_matches, old.option_matches, old.total) == (0, 0, pytest.approx(1 / 4))
  assert (new.attribute_matches, new.option_matches, new.total) == (2, 1, 1.0)
  assert reward.get_reward(PRODUCT, GOAL, 10.0, {"style": "easy_carry"}, nouns="stand-in") == old  # the default


def test_env_scores_with_its_version():
  env = WebshopEnv(thefuzz="0.20")
  assert (env.thefuzz, WebshopEnv().thefuzz) == ("0.20", "0.19")
