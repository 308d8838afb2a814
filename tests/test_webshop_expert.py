"""The BM25 search (research notes §3.6) and the oracle shopper, which must win >= 95% of generated goals."""
import random

import pytest

pytest.importorskip("bm25s")
pytest.importorskip("rapidfuzz")

from agentopd_jax.envs.webshop import goals, search  # noqa: E402
from agentopd_jax.envs.webshop.env import MAX_STEPS, WebshopEnv, build_shop  # noqa: E402
from agentopd_jax.envs.webshop.expert import plan, top_result_plan  # noqa: E402
from agentopd_jax.envs.webshop.text import WebshopText  # noqa: E402


def test_document_text_is_what_webshop_indexes():
  product = {"Title": "Foo Bar", "Description": "Desc.", "BulletPoints": ["BP1", "BP2"],
             "options": {"color": ["natural black", "dark brown"], "size": ["18 inch"]}}
  assert search.document_text(product) == "foo bar desc. bp1 color: natural black, dark brown, and size: 18 inch"


def test_analyzer():
  assert search.analyze("The Men's Clip-In Hair Extensions, 12.99 and 4K!") == [
      "men", "clip", "hair", "extension", "12.99", "4k"]
  assert [search.stem(w) for w in ("berries", "shoes", "glass", "bus", "toes", "cups")] == [
      "berry", "shoe", "glass", "bus", "toe", "cup"]


def test_bm25_search():
  shop = build_shop()
  engine, rng = shop.engine, random.Random(0)
  target = next(iter(shop.products.values()))
  hits = engine.search(target["Title"].lower().split(" "), rng)
  assert hits[0] is target and len(hits) == search.SEARCH_RETURN_N
  assert engine.search(["zzzz", "qqqq"], rng) == [] and engine.search(["the", "of"], rng) == []
  scores = engine.scores("hair extensions black")
  ranked = engine.search("hair extensions black".split(" "), rng)
  assert [scores[engine.products.index(p)] for p in ranked] == sorted(
      (scores[engine.products.index(p)] for p in ranked), reverse=True)
  # WebShop's debugging searches
  assert len(engine.search(["<r>"], rng)) == 50
  assert {p["category"] for p in engine.search(["<c>", "food"], rng)} == {"food"}
  assert {p["query"] for p in engine.search(["<q>", "herbal", "tea"], rng)} == {"herbal tea"}
  assert all("gluten free" in p["Attributes"] for p in engine.search(["<a>", "gluten", "free"], rng))


@pytest.mark.parametrize("split", ["test", "train"])
def test_expert_wins_at_least_95_percent(split):
  env = WebshopEnv()
  indices = goals.split_indices(len(env.shop.goals), split)
  chosen = list(indices[:200]) if split == "test" else random.Random(0).sample(list(indices), 200)
  won, instruction_queries = 0, 0
  for i in chosen:
    actions = plan(env.shop, i)
    assert actions is not None and len(actions) <= MAX_STEPS
    goal = env.shop.goals[i]
    instruction_queries += actions[0] == f"search[{env.shop.products[goal['asin']]['instruction_text'].lower()}]"
    env.reset(i)
    for action in actions:
      obs, score, done, infos = env.step(action)
    assert done and infos["task_score"] == score
    won += infos["won"]
  assert won >= 0.95 * len(chosen)
  assert instruction_queries >= 0.9 * len(chosen)  # the title fallback is rare


def test_top_result_shopper_acts_only_on_what_the_pages_show():
  """It buys the first product of the results page its search opens, with the instruction's option values that the
  item page offers, in the instruction's order; it wins some goals (those are its demonstrations), not all."""
  env = WebshopEnv()
  chosen = random.Random(1).sample(list(goals.split_indices(len(env.shop.goals), "train")), 120)
  won = 0
  for i in chosen:
    actions, goal = top_result_plan(env.shop, i), env.shop.goals[i]
    env.reset(i)
    obs, _, _, infos = env.step(actions[0])
    assert actions[0] == f"search[{env.shop.products[goal['asin']]['instruction_text'].lower()}]"
    assert goal["instruction_text"].lower().startswith(actions[0][len("search["):-1])  # the task's own words
    shown = [c for c in infos["available_actions"]["clickables"] if c.startswith("b0")]
    assert actions[1] == f"click[{shown[0]}]"
    obs, _, _, infos = env.step(actions[1])
    offered = infos["available_actions"]["clickables"]
    assert actions[2:-1] == [f"click[{v}]" for v in goal["goal_options"].values() if v in offered]
    assert actions[-1] == "click[buy now]"
    for action in actions[2:]:
      obs, score, done, infos = env.step(action)
    assert done
    won += infos["won"]
  assert 0.1 * len(chosen) <= won < 0.6 * len(chosen)


def test_expert_demonstration_through_the_text_env():
  env, view = WebshopEnv(), WebshopText()
  obs, infos = env.reset(1)
  view.begin(obs, infos)
  total, won = 0.0, False
  for action in plan(env.shop, 1):
    reply = view.demo_reply(action)
    assert view.project(reply) == (action, 1)
    assert f"'{action.split('[')[0]}[" in view.step_prompt() or action.startswith("search[")
    obs, score, done, infos = env.step(action)
    reward, w = view.reward(score, done, infos)
    total, won = total + reward, won or w
    view.observe(action, obs, infos)
  assert done and won and total == 10.0


def test_expert_handles_human_goal_options():
  shop = build_shop()
  goal = dict(shop.goals[0])
  product = shop.products[goal["asin"]]
  goal["goal_options"] = [values[-1] for values in product["options"].values()]
  env = WebshopEnv()
  env.reset(goal)
  for action in plan(shop, goal):
    obs, score, done, infos = env.step(action)
  assert done and env.options == dict(zip(product["options"], goal["goal_options"]))


def test_runs_in_vector_env_workers():
  """The env is a picklable zero-arg factory for `VectorEnv`; a GRPO group of 2 plays one goal in worker processes."""
  import functools

  from agentopd_jax.envs.vector import VectorEnv, group_tasks

  tasks, _ = group_tasks([3], 2)
  with VectorEnv(functools.partial(WebshopEnv, num_products=300), num_workers=1, num_envs=2) as venv:
    obs, infos = venv.reset(tasks)
    assert obs[0] == obs[1] and infos[0]["available_actions"]["clickables"] == ["search"]
    actions = plan(build_shop(num_products=300), 3)
    for action in actions:
      obs, scores, dones, infos = venv.step([action, "click[search]"])
    assert dones == [True, False] and infos[0]["won"] and scores == [1.0, 0.0]
