"""OPID's oracle analyzer (`methods.opid.oracle` over each env's `EnvSpec.hindsight`): per built-in env, the
expert's own episode gets a workflow and no step skill, an injected wrong step gets a step skill at exactly its index
naming the expert's action, a failure gets an avoidance rule; K and the candidate set cap step skills; malformed and
unavailable actions; determinism; broken tasks and replays that disagree with the rollout are counted failures."""
import importlib.util

import ml_collections
import pytest

from agentopd_jax.envs import registry
from agentopd_jax.envs.alfworld.text import AlfworldText
from agentopd_jax.methods.opid.analysis import Analysis, AnalysisFailure
from agentopd_jax.methods.opid.oracle import OracleAnalyzer, OracleEpisode

pytest.importorskip("bm25s")
pytest.importorskip("rapidfuzz")
if importlib.util.find_spec("alfworld") is None:
  pytest.skip("alfworld is not installed: games are generated from its alfred.pddl/.twl2", allow_module_level=True)

ENVS = ("alfworld", "webshop", "search")
WEBSHOP_CFG = dict(num_products=100, catalog_seed=0, data_dir="", human_goals=False, thefuzz="0.19", nouns="auto")
SEARCH_CFG = dict(search_url="", corpus="", world_seed=0, topk=3, obs_format="verl-agent", max_turns=4,
                  search_timeout_s=60.0, search_retries=6)


class Case:
  """One env's fixtures: its analyzer, tasks with the expert's episodes, and env-specific wrong steps."""

  def __init__(self, name, env_cfg, tasks, plans, detour, avoid):
    self.name, self.env_cfg, self.tasks, self.plans = name, env_cfg, tasks, plans
    self.detour = detour  # (index, actions to insert there, what the step skill must name)
    self.avoid = avoid  # (a failed episode's actions, what its avoidance rule must name)

  def analyzer(self, k=5):
    return OracleAnalyzer(self.name, self.env_cfg, max_step_skills=k)


@pytest.fixture(scope="module")
def cases(tmp_path_factory):
  from agentopd_jax.envs.alfworld import data, generator
  from agentopd_jax.envs.alfworld.engine_fast import FastEngine
  from agentopd_jax.envs.alfworld.expert import solve
  from agentopd_jax.envs.search import SearchEnv, bundled_tasks, play
  from agentopd_jax.envs.webshop.env import WebshopEnv
  from agentopd_jax.envs.webshop.expert import plan

  root = str(tmp_path_factory.mktemp("alfworld"))
  generator.generate(root, {"train": 3}, seed=0, task_types=("pick_and_place_simple",))
  games = data.game_files("train", root)
  plans = []
  for game in games:
    engine = FastEngine(game)
    engine.reset()
    plans.append(solve(engine))
  out = {"alfworld": Case("alfworld", None, games, plans, (1, ["look"], plans[0][1]),
                          ([plans[0][0]] + ["look"] * 3, plans[0][1]))}

  shop_cfg = ml_collections.ConfigDict(WEBSHOP_CFG)
  env = WebshopEnv(num_products=100)
  goals = [g for g in range(12) if plan(env.shop, g) and len(plan(env.shop, g)) >= 4][:3]
  plans = [plan(env.shop, g) for g in goals]
  first = plans[0]
  at_item = first.index(f"click[{env.shop.goals[goals[0]]['asin'].lower()}]") + 1
  env.reset(goals[0])
  env.step(first[0])
  wrong = None
  for name, click in env.page.clickables.items():
    if click.kind == "product" and click.target != env.shop.goals[goals[0]]["asin"]:
      trial = env.copy()
      trial.step(f"click[{name}]")
      if trial.step("click[buy now]")[1] < 1.0:
        wrong = name
        break
  assert wrong is not None
  out["webshop"] = Case("webshop", shop_cfg, goals, plans,
                        (at_item, ["click[description]", "click[< prev]"], first[at_item]),
                        ([first[0], f"click[{wrong}]", "click[buy now]"], first[at_item - 1]))

  search_cfg = ml_collections.ConfigDict(SEARCH_CFG)
  questions = [t for t in bundled_tasks("train")[:40] if t.plan.kind == "single"][:3]
  env = SearchEnv(max_turns=4)
  plans = [play(env, q)[0] for q in questions]
  query = plans[0][0][len("<search>"):-len("</search>")]
  out["search"] = Case("search", search_cfg, questions, plans, (0, ["<search>zzz qqq</search>"], query),
                       (["<answer>nobody knows</answer>"], query))
  return out


def _episodes(case, success=True):
  return [OracleEpisode(task, actions, success=success) for task, actions in zip(case.tasks, case.plans)]


def test_every_built_in_env_has_an_oracle():
  for name in ENVS:
    assert registry.get(name).hindsight is not None


@pytest.mark.parametrize("env", ENVS)
def test_the_experts_own_episode_gets_a_workflow_and_no_step_skill(cases, env):
  case = cases[env]
  analyzer = case.analyzer()
  results = analyzer.analyze(_episodes(case))
  assert all(isinstance(r, Analysis) for r in results), results
  for r, actions in zip(results, case.plans):
    assert r.step_skills == {}
    assert r.episode_skill.startswith("Workflow that completed the task: ") and "detour" not in r.episode_skill
    assert r.episode_summary.startswith(f"Succeeded after {len(actions)} step(s)")
    assert "every step kept to the expert's plan" in r.episode_summary
  stats = analyzer.stats
  assert {k: stats[k] for k in ("episodes", "analysed", "parse_failures", "api_failures", "api_calls", "api_errors",
                                "repairs")} == dict(episodes=3, analysed=3, parse_failures=0, api_failures=0,
                                                    api_calls=3, api_errors=0, repairs=0)
  assert stats["latency_s"] > 0


def test_workflows_list_the_milestones_in_order(cases):
  results = cases["alfworld"].analyzer().analyze(_episodes(cases["alfworld"]))
  for r, actions in zip(results, cases["alfworld"].plans):
    milestones = [a for a in actions if a.split()[0] in ("take", "put", "move")]
    assert r.episode_skill == f"Workflow that completed the task: {' -> '.join(milestones)}."
  r = cases["webshop"].analyzer().analyze(_episodes(cases["webshop"]))[0]
  assert r.episode_skill.endswith(" -> click[buy now].") and cases["webshop"].plans[0][0] in r.episode_skill


@pytest.mark.parametrize("env", ENVS)
def test_an_injected_wrong_step_gets_a_step_skill_at_exactly_its_index(cases, env):
  case = cases[env]
  index, inserted, expert = case.detour
  actions = case.plans[0][:index] + inserted + case.plans[0][index:]
  [r] = case.analyzer().analyze([OracleEpisode(case.tasks[0], actions, success=True)])
  assert isinstance(r, Analysis), r
  assert list(r.step_skills) == [index], r.step_skills
  skill = r.step_skills[index]
  assert expert.lower() in skill.lower() and f'"{inserted[0]}" does not move toward the goal.' in skill
  assert skill.endswith(".") and skill[0].isupper()
  assert r.episode_skill.endswith(f"1 of {len(actions)} steps was a detour; skip it.")  # it still won
  assert f"(first at step {index})" in r.episode_summary


def test_step_skill_sentences(cases):
  case = cases["alfworld"]
  first = case.plans[0]
  [r] = case.analyzer().analyze([OracleEpisode(case.tasks[0], first[:1] + ["look"] + first[1:], success=True)])
  assert r.step_skills == {1: f'{first[1][0].upper() + first[1][1:]} next: "look" does not move toward the goal.'}


@pytest.mark.parametrize("env", ENVS)
def test_a_failed_episode_gets_an_avoidance_rule(cases, env):
  case = cases[env]
  actions, instead = case.avoid
  [r] = case.analyzer().analyze([OracleEpisode(case.tasks[0], actions, success=False)])
  assert isinstance(r, Analysis), r
  assert r.episode_skill.startswith("Avoid ") and r.episode_skill.endswith(".")
  assert "; instead, " in r.episode_skill and instead.lower() in r.episode_skill.split("; instead, ")[1].lower()
  assert r.episode_summary.startswith(f"Failed after {len(actions)} step(s)")
  assert min(r.step_skills) == (1 if env == "alfworld" or env == "webshop" else 0)


def test_the_most_repeated_mistake_is_the_one_to_avoid(cases):
  case = cases["alfworld"]
  first = case.plans[0]
  [r] = case.analyzer().analyze([OracleEpisode(case.tasks[0], [first[0], "inventory"] + ["look"] * 3)])
  advice = first[1]
  assert r.episode_skill == (f'Avoid repeating "look": it was tried 3 times and never moved toward the goal; '
                             f"instead, {advice}.")
  assert r.step_skills[1] == f'{advice[0].upper() + advice[1:]} next: "inventory" does not move toward the goal.'
  assert r.step_skills[3] == (f'{advice[0].upper() + advice[1:]} next: "look" was tried before and again made no '
                              f"progress.")


def test_stopping_short_on_plan_is_its_own_avoidance_rule(cases):
  case = cases["alfworld"]
  [r] = case.analyzer().analyze([OracleEpisode(case.tasks[0], case.plans[0][:-1], success=False)])
  assert r.step_skills == {} and r.episode_skill.startswith("Avoid running out of steps: after ")


def test_k_and_the_candidates_cap_step_skills(cases):
  case = cases["alfworld"]
  actions = case.plans[0][:1] + ["look"] * 6
  episode = OracleEpisode(case.tasks[0], actions)
  assert list(case.analyzer(k=5).analyze([episode])[0].step_skills) == [1, 2, 3, 4, 5]
  assert list(case.analyzer(k=2).analyze([episode])[0].step_skills) == [1, 2]
  [r] = case.analyzer(k=0).analyze([episode])
  assert r.step_skills == {} and r.episode_skill.startswith("Avoid repeating")
  restricted = OracleEpisode(case.tasks[0], actions, candidates=(0, 4, 5, 6))
  assert list(case.analyzer(k=2).analyze([restricted])[0].step_skills) == [4, 5]


def test_malformed_and_unavailable_actions(cases):
  case = cases["alfworld"]
  first = case.plans[0]
  # a malformed reply the env still acted on is a mistake (it costs the invalid-action penalty)
  valid = (True, False) + (True,) * (len(first) - 1)
  [r] = case.analyzer().analyze([OracleEpisode(case.tasks[0], first[:1] + ["take moon 1 from sky 1"] + first[1:],
                                               valid=valid, success=True)])
  assert list(r.step_skills) == [1] and r.step_skills[1].endswith('"take moon 1 from sky 1" was not a well-formed '
                                                                   'action.')
  assert "1 malformed and 0 unavailable" in r.episode_summary
  [r] = case.analyzer().analyze([OracleEpisode(case.tasks[0], first[:1] + ["take moon 1 from sky 1"] + first[1:])])
  assert r.step_skills[1].endswith('"take moon 1 from sky 1" is not an available action here.')
  assert "0 malformed and 1 unavailable" in r.episode_summary
  valid = (True,) * (len(first) - 1) + (False,)
  [r] = case.analyzer().analyze([OracleEpisode(case.tasks[0], first, valid=valid, success=True)])
  assert list(r.step_skills) == [len(first) - 1] and "was not a well-formed action" in r.step_skills[len(first) - 1]
  # replies projected as the rollout projects them: no <action> tags -> the reply's tail, invalid
  text = AlfworldText()
  replies = [f"<think>go</think><action>{first[0]}</action>", "I am not sure what to do here at all",
             *(f"<think>ok</think><action>{a}</action>" for a in first[1:])]
  episode = OracleEpisode.from_responses(case.tasks[0], replies, text.project, success=True)
  assert episode.actions == (first[0], replies[1].lower()[-30:], *first[1:])
  assert episode.valid == (True, False) + (True,) * (len(first) - 1)
  [r] = case.analyzer().analyze([episode])
  assert list(r.step_skills) == [1] and "was not a well-formed action" in r.step_skills[1]
  # search: an empty projection
  case = cases["search"]
  actions = ["", *case.plans[0]]
  [r] = case.analyzer().analyze([OracleEpisode(case.tasks[0], actions, valid=(False, True, True), success=True)])
  assert r.step_skills[0].endswith("next: the reply held no action.")


@pytest.mark.parametrize("env", ENVS)
def test_deterministic(cases, env):
  case = cases[env]
  index, inserted, _ = case.detour
  batch = _episodes(case) + [OracleEpisode(case.tasks[0], case.avoid[0]),
                             OracleEpisode(case.tasks[0], case.plans[0][:index] + inserted + case.plans[0][index:])]
  first, second = case.analyzer(k=2).analyze(batch), case.analyzer(k=2).analyze(batch)
  assert first == second and all(isinstance(r, Analysis) for r in first)


def test_broken_tasks_and_replays_that_disagree_are_counted_failures(cases, tmp_path):
  case = cases["alfworld"]
  analyzer = case.analyzer()
  good = OracleEpisode(case.tasks[0], case.plans[0], success=True)
  missing = OracleEpisode(str(tmp_path / "no_game" / "game.tw-pddl"), ["look"])
  past_the_end = OracleEpisode(case.tasks[0], case.plans[0] + ["look"])  # the env ended the episode before "look"
  wrong_outcome = OracleEpisode(case.tasks[0], case.plans[0], success=False)
  results = analyzer.analyze([missing, good, past_the_end, wrong_outcome])
  assert isinstance(results[1], Analysis)
  for r in (results[0], results[2], results[3]):
    assert isinstance(r, AnalysisFailure) and r.kind == "oracle"
  assert results[0].error.startswith("FileNotFoundError")
  assert results[2].error.startswith("ReplayError: the replay ended after") and "did not" in results[3].error
  assert {k: analyzer.stats[k] for k in ("episodes", "analysed", "api_failures", "api_calls", "api_errors")} == dict(
      episodes=4, analysed=1, api_failures=3, api_calls=4, api_errors=2)
  assert analyzer.analyze([]) == [] and analyzer.stats["episodes"] == 0
  [r] = cases["webshop"].analyzer().analyze([OracleEpisode(10**6, ["search[x]"])])  # no such goal
  assert isinstance(r, AnalysisFailure) and r.error.startswith("IndexError")


def test_bad_arguments_name_the_field():
  with pytest.raises(ValueError, match="opid.max_step_skills must be an integer >= 0"):
    OracleAnalyzer("alfworld", None, -1)
  name = "oracle_test_no_hindsight"
  if name not in registry.names():
    registry.register(registry.EnvSpec(name=name, tasks=None, worker=None, text_env=None, experts=(), expert=None))
  with pytest.raises(ValueError, match=f"env '{name}' has no oracle"):
    OracleAnalyzer(name, None, 1)
  with pytest.raises(ValueError, match="OracleEpisode.actions"):
    OracleEpisode("game", [])
  with pytest.raises(ValueError, match="OracleEpisode.valid: 1 flags for 2 actions"):
    OracleEpisode("game", ["look", "look"], valid=(True,))
  with pytest.raises(TypeError, match="episode 0 is a str"):
    OracleAnalyzer("alfworld", None, 1).analyze(["look"])
