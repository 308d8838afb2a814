"""WebShop's purchase score (research notes §3.5) on worked examples, one rule at a time, quirks included."""
import pytest

pytest.importorskip("rapidfuzz")

from agentopd_jax.envs.webshop.fuzzy import VERSIONS, token_set_ratio  # noqa: E402
from agentopd_jax.envs.webshop.reward import (  # noqa: E402
    attribute_matches,
    get_reward,
    normalize_color,
    option_matches,
    standin_nouns,
    type_reward,
)

CATEGORY = "Beauty & Personal Care › Hair Care › Hair Extensions, Wigs & Accessories › Hair Extensions"


def _product(**kw):
  p = {"Title": "Foo Bar Hair Extension 20 inch", "name": "Foo Bar Hair Extension 20 inch",
       "BulletPoints": ["Easy to apply", "Heat friendly fibre"], "Description": "Soft, tangle free and long lasting.",
       "Attributes": ["natural looking", "high quality"], "query": "hair extensions", "product_category": CATEGORY}
  p.update(kw)
  return p


def _goal(**kw):
  g = {"name": "Foo Bar Hair Extension 20 inch", "query": "hair extensions", "product_category": CATEGORY,
       "attributes": ["natural looking"], "goal_options": {"color": "natural black"}, "price_upper": 40.0}
  g.update(kw)
  return g


@pytest.mark.parametrize("value,expected", [
    # WebShop's own normalize tests
    ("", ""), ("black forest", "black"), ("violet lavender", "lavender"), ("steelivy fuchsia", "fuchsia"),
    ("123alabaster", "alabaster"), ("webshop", "webshop"),
    # first COLOR_SET entry that is a substring wins, even inside another word
    ("natural black", "black"), ("dark wash", "ash"), ("blueberry", "blue"), ("standard", "tan"),
    # tuples (synthetic goal options): an element must *equal* a colour
    (("color", "black"), "black"), (("color", "natural black"), ("color", "natural black")),
    (("flavor name", "mocha"), "mocha"),
])
def test_normalize_color(value, expected):
  assert normalize_color(value) == expected


@pytest.mark.parametrize("a,b,score", [
    ("large", ("size", "x-large"), 100),  # the tuple's name joins the tokens: a subset scores 100
    ("x-large", ("size", "large"), 83),  # ... but a superset does not
    ("black", ("color", "black"), 100),
    ("natural looking", "natural looking hair", 100),
    ("Natural-Looking!", "natural looking", 100),  # punctuation and case are processed away
    ("caf\u00e9", "caf", 100),  # code points 128-255 are deleted (force_ascii)
    ("grey", "gray", 75),
    ("", "x", 0),
])
@pytest.mark.parametrize("version", VERSIONS)
def test_token_set_ratio_is_thefuzz(a, b, score, version):
  """Pairs both thefuzz versions score alike (test_webshop_fuzzy.py has those they do not)."""
  assert token_set_ratio(a, b, version) == score == token_set_ratio(b, a, version)


def test_option_matches_webshop_examples():
  """WebShop's test_get_option_reward (value lists, as human goals have)."""
  goal = ["grey", "XL", "pack of 12"]
  assert option_matches(dict(enumerate(["pack of 12", "grey", "XL"])), goal) == 3
  assert option_matches(dict(enumerate(["pack of 12", "blue", "XL"])), goal) == 2
  assert option_matches({}, goal) == 0


def test_option_matches_synthetic_goal_quirks():
  assert option_matches({"color": "natural black", "size": "18 inch"},
                        {"color": "natural black", "size": "18 inch"}) == 2
  assert option_matches({"size": "large"}, {"size": "x-large"}) == 1  # wrong size still matches
  assert option_matches({"size": "x-large"}, {"size": "large"}) == 0  # 83 is not > 85
  assert option_matches({"color": "jet black"}, {"color": "black"}) == 1  # both normalise to "black"
  assert option_matches({"flavor name": "spearmint"}, {"flavor name": "spearmint"}) == 0  # "mint" vs spearmint
  assert option_matches({"a": "black", "b": "black"}, {"color": "black"}) == 1  # a goal option counts once


def test_attribute_matches_fuzzy_then_text():
  product = _product()
  assert attribute_matches(product, ["natural looking"]) == 1  # in Attributes
  assert attribute_matches(product, ["natural looking hair"]) == 1  # token set of an attribute: 100
  assert attribute_matches(product, ["long lasting"]) == 1  # substring of the description
  assert attribute_matches(product, ["easy to apply"]) == 1  # substring of the joined bullet points
  assert attribute_matches(product, ["hair extension 20"]) == 1  # substring of the title
  assert attribute_matches(product, ["Long Lasting"]) == 0  # the goal side is not lower-cased
  assert attribute_matches(product, ["gluten free", "high quality"]) == 1


def test_title_nouns_stand_in():
  assert standin_nouns("Foo Bar Hair Extension 20 inch") == ["foo", "bar", "hair", "extension", "inch"]
  assert standin_nouns("Soft Natural Clip-In Hair Extensions for Women's Long") == [
      "clip", "hair", "extensions", "women"]
  assert standin_nouns("The Best 100% Soft") == []


@pytest.mark.parametrize("product,goal,r_type,score", [
    (_product(), _goal(), 1.0, 1.0),  # same product
    (_product(name="Bar Baz Hair Extension"), _goal(), 1.0, 0.6),  # query matches; 3 of 5 nouns
    # neither query nor category: 1.0 needs title_score > 0.2
    (_product(name="Bar Baz Hair Extension", query="q", product_category="A › B"), _goal(), 1.0, 0.6),
    (_product(name="Foo", query="q", product_category="A › B"), _goal(), 0.5, 0.2),
    (_product(name="Foo", query="q", product_category="Beauty & Personal Care › Hair Care"), _goal(), 1.0, 0.2),
    # under 10% of the goal's nouns: 0.1 whatever else matches; none: 0.0
    (_product(name="Foo"), _goal(name="foo ab ac ad ae af ag ah aj ak al am"), 0.1, 1 / 12),
    (_product(name="Qux"), _goal(), 0.0, 0.0),
    # a goal name without nouns scores 0.2 (then only a query or category match gives 1.0)
    (_product(), _goal(name="The Best"), 1.0, 0.2),
    (_product(query="q", product_category="A › B"), _goal(name="The Best"), 0.5, 0.2),
])
def test_type_reward_rules(product, goal, r_type, score):
  kind = type_reward(product, goal, nouns="stand-in")
  assert (kind.r_type, kind.title_score) == (r_type, pytest.approx(score))


def test_category_match_needs_two_shared_levels_in_any_order():
  assert type_reward(_product(product_category="Hair Care›Beauty & Personal Care"), _goal()).category_match
  assert not type_reward(_product(product_category="Beauty & Personal Care › Other"), _goal()).category_match


def test_total_reward_formula():
  goal = _goal(attributes=["natural looking", "gluten free"],
               goal_options={"color": "natural black", "size": "20 inch"})
  # 1 of 2 attributes, 1 of 2 options, price ok: (1 + 1 + 1) / (2 + 2 + 1)
  r = get_reward(_product(), goal, 30.0, {"color": "natural black", "size": "18 inch"})
  assert (r.attribute_matches, r.option_matches, r.price_ok, r.total) == (1, 1, True, pytest.approx(0.6))
  assert get_reward(_product(), goal, 40.01, {"color": "natural black"}).total == pytest.approx(0.4)
  assert get_reward(_product(), _goal(), 40.0, {"color": "natural black"}).total == 1.0  # price <= upper
  halved = get_reward(_product(name="Foo", query="q", product_category="A › B"), _goal(), 1.0,
                      {"color": "natural black"})
  assert (halved.type.r_type, halved.total) == (0.5, 0.5)


def test_human_goal_options_are_plain_values():
  goal = _goal(goal_options=["natural black", "20 inch"])
  assert get_reward(_product(), goal, 10.0, {"color": "natural black", "size": "20 inch"}).total == 1.0
  assert get_reward(_product(), goal, 10.0, {"color": "natural black"}).total == pytest.approx(0.75)
