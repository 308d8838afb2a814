"""WebShop goals (research notes §3.2), verl-agent's splits and goal draws (§2.5, §3.1), and the synthetic catalogue
in WebShop's file schemas, including the round trip through the real-data loader."""
import random
import re
import time

import numpy as np
import pytest

from agentopd_jax.envs.webshop import catalog, goals, vocab


def _product(asin="B000000001", price=(23.5,), options=None, attrs=("natural looking",), instruction="i need x"):
  return {"asin": asin, "category": "beauty", "query": "q", "name": f"N {asin}", "Title": f"N {asin}",
          "product_category": "A › B", "pricing": list(price), "options": options or {},
          "instruction_text": instruction, "instruction_attributes": list(attrs)}


def test_price_limit_rule():
  for price in (0.5, 23.5, 30.0, 955.0):
    above = [p for p in goals.PRICE_RANGE if p > price][:4]
    for seed in range(20):
      upper, text = goals.price_limit(price, random.Random(seed))
      assert upper in above[1:] and text == f", and price lower than {upper:.2f} dollars"
  assert goals.price_limit(975.0, random.Random(0))[0] == 990.0  # two candidates: always the larger
  assert goals.price_limit(985.0, random.Random(0)) == (1000000, "")
  assert goals.price_limit(990.0, random.Random(0)) == (1000000, "")


def test_synthetic_goal_text_options_and_weights():
  a = _product("B000000001", options={"size": ["small", "large"], "color": ["black | white"]},
               attrs=("natural looking", "gluten free"), instruction="i need a shirt that is natural looking")
  b = _product("B000000002", attrs=("natural looking",), instruction="i want a cup")
  c = _product("B000000003", instruction=None)
  got = goals.synthetic_goals([a, b, c], {"B000000001": 23.5, "B000000002": 995.0, "B000000003": 1.0},
                              random.Random(0))
  assert [g["asin"] for g in got] == ["B000000001"] * 2 + ["B000000002"]
  first = got[0]
  assert re.fullmatch(r"i need a shirt that is natural looking with color: black \| white, and size: small, "
                      r"and price lower than (40|50|60)\.00 dollars", first["instruction_text"])
  assert first["goal_options"] == {"color": "black | white", "size": "small"}  # options sorted by name
  assert got[1]["goal_options"]["size"] == "large" and got[1]["price_upper"] == first["price_upper"]  # per product
  assert got[2]["instruction_text"] == "i want a cup" and got[2]["price_upper"] == 1000000
  assert got[2]["goal_options"] == {} and got[2]["attributes"] == ["natural looking"]
  # weight: mean over the goal's attributes of 1 / (goals carrying that attribute): natural looking 3, gluten free 2
  assert first["weight"] == pytest.approx((1 / 3 + 1 / 2) / 2) and got[2]["weight"] == pytest.approx(1 / 3)
  assert set(first) == {"asin", "category", "query", "name", "product_category", "instruction_text", "attributes",
                        "price_upper", "goal_options", "weight"}


def test_human_goals():
  p = dict(_product(), instructions=[
      {"instruction": "i want a red mug.", "instruction_attributes": ["red"], "instruction_options": ["large"]},
      {"instruction": "skip me", "instruction_attributes": [], "instruction_options": []}])
  (g,) = goals.human_goals([p], {"B000000001": 985.0}, random.Random(0))
  assert (g["instruction_text"], g["goal_options"], g["weight"], g["price_upper"]) == ("i want a red mug", ["large"],
                                                                                       1, 1000000)


def test_build_goals_follows_verl_agents_random_stream():
  """Same result as WebShop's code on the global `random` after `random.seed(seed)`: prices, then goals, then a
  re-seeded shuffle."""
  items, attrs = catalog.generate(200, seed=3)
  products = catalog.process(items, attrs)
  got, prices = goals.build_goals(products, seed=7)
  random.seed(7)
  want_prices = {p["asin"]: p["pricing"][0] if len(p["pricing"]) == 1 else random.uniform(*p["pricing"][:2])
                 for p in products}
  want = goals.synthetic_goals(products, want_prices, random)
  random.seed(7)
  random.shuffle(want)
  assert prices == want_prices and got == want
  assert goals.build_goals(products, seed=8)[0] != got
  assert goals.build_goals(products, seed=7, shuffle_seed=233)[0] != got


def test_splits_and_goal_sampler():
  assert goals.split_indices(6910, "test") == range(500) and goals.split_indices(6910, "train") == range(500, 6910)
  with pytest.raises(ValueError):
    goals.split_indices(10, "eval")
  val = goals.GoalSampler(6910, "test", seed=1000, env_num=128)
  rng = np.random.RandomState(1000)
  for _ in range(2):  # the state advances: every pass draws a new 128
    draw = val()
    assert draw == rng.choice(range(500), size=128, replace=False).tolist() and len(set(draw)) == 128
  train = goals.GoalSampler(6910, "train", seed=0, env_num=16, group_n=8)()
  assert len(train) == 128 and all(500 <= i < 6910 for i in train)
  assert all(len(set(train[k:k + 8])) == 1 for k in range(0, 128, 8))
  with pytest.raises(ValueError):
    goals.GoalSampler(600, "train", seed=0, env_num=128)


def test_generated_catalogue_schema_and_determinism():
  items, attrs = catalog.generate(300, seed=0)
  assert (items, attrs) == catalog.generate(300, seed=0) and items != catalog.generate(300, seed=1)[0]
  assert catalog.generate(100, seed=0)[0] == items[:100]
  keys = {"asin", "name", "full_description", "small_description", "pricing", "customization_options", "category",
          "query", "product_category", "images"}
  assert all(set(i) == keys for i in items) and len({i["asin"] for i in items}) == 300
  assert all(re.fullmatch(r"B0[A-Z0-9]{8}", i["asin"]) for i in items)
  assert {i["category"] for i in items} == {"beauty", "fashion", "food", "furniture", "electronics"}
  assert all(" › " in i["product_category"] for i in items)
  for item in items:
    a = attrs[item["asin"]]
    assert set(a) == {"attributes", "instruction", "instruction_attributes"}
    assert 1 <= len(a["instruction_attributes"]) <= 3 and set(a["instruction_attributes"]) <= set(a["attributes"])
    for values in item["customization_options"].values():
      assert all(set(v) == {"value", "image"} for v in values)
  products = catalog.process(items, attrs)
  for p in products:  # option values never collide with each other or with the item page's buttons
    values = [v for vs in p["options"].values() for v in vs]
    assert len(values) == len(set(values)) and not set(values) & {"back to search", "< prev", "description",
                                                                   "features", "reviews", "buy now"}
  assert {len(p["pricing"]) for p in products} == {1, 2}


def test_generation_is_fast_and_goal_counts_are_webshop_like():
  t0 = time.perf_counter()
  items, attrs = catalog.generate(3000, seed=0)
  products = catalog.process(items, attrs)
  goal_list, _ = goals.build_goals(products)
  assert time.perf_counter() - t0 < 2.0
  assert 3 * len(products) < len(goal_list) < 10 * len(products)  # WebShop small: 6910 goals for 1000 products
  types = {t.query for t in vocab.TYPES}
  assert {p["query"] for p in products} == types


def test_real_file_round_trip(tmp_path):
  """A catalogue written as WebShop's data files loads back into the same products, goals and shop."""
  items, attrs = catalog.generate(150, seed=5)
  catalog.write_files(str(tmp_path), items, attrs)
  read_items, read_attrs, human = catalog.read_files(str(tmp_path))
  assert (read_items, read_attrs, human) == (items, attrs, None)
  assert catalog.process(read_items, read_attrs, num_products=100) == catalog.process(items, attrs)[:100]
  from agentopd_jax.envs.webshop.env import build_shop
  pytest.importorskip("bm25s")
  real, generated = build_shop(data_dir=str(tmp_path)), build_shop(num_products=150, catalog_seed=5)
  assert real.goals == generated.goals and real.products == generated.products


def test_human_goal_files(tmp_path):
  items, attrs = catalog.generate(20, seed=2)
  catalog.write_files(str(tmp_path), items, attrs)
  asin = items[3]["asin"]
  with open(tmp_path / catalog.HUMAN_FILE, "w") as f:
    f.write('{"%s": [{"instruction": "i want this.", "instruction_attributes": ["a"], "instruction_options": []}]}'
            % asin)
  pytest.importorskip("bm25s")
  from agentopd_jax.envs.webshop.env import build_shop
  shop = build_shop(data_dir=str(tmp_path), human_goals=True)
  assert [g["asin"] for g in shop.goals] == [asin] and shop.goals[0]["instruction_text"].startswith("i want this")
