"""The expert solves every generated game: from the reset state and from states random play reached (as DAgger needs),
on the fast engine; and its plans, stored as each game's walkthrough, win on the real engine too.

500 games (250 per text version, all splits). The real-engine replay costs about a second a game, run in two
processes, so it replays an even spread of 60 (both versions, every split and task type: the assert checks);
`ALFWORLD_EXPERT_REAL_GAMES=500` replays them all.
"""
import importlib.util
import json
import os
import random
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context

import pytest

if importlib.util.find_spec("alfworld") is None:
  pytest.skip("alfworld is not installed: games are built from its alfred.pddl/.twl2", allow_module_level=True)

from agentopd_jax.envs.alfworld import data, generator  # noqa: E402
from agentopd_jax.envs.alfworld.engine_fast import MAX_STEPS, FastEngine  # noqa: E402
from agentopd_jax.envs.alfworld.expert import Expert, solve  # noqa: E402

SIZES = {"train": 150, "valid_seen": 50, "valid_unseen": 50}  # per text version
REAL_GAMES = int(os.environ.get("ALFWORLD_EXPERT_REAL_GAMES", 60))


@pytest.fixture(scope="module")
def gamefiles(tmp_path_factory):
  out = []
  for version in ("2.1.3", "2.1.1"):
    root = str(tmp_path_factory.mktemp(f"alfworld_{version}"))
    generator.generate(root, SIZES, seed=3, version=version)
    out += [path for split in data.SPLITS for path in data.game_files(split, root)]
  return out


def test_five_hundred_games(gamefiles):
  assert len(gamefiles) == 500
  assert set(data.by_task_type(gamefiles)) == set(generator.REAL_COUNTS["train"])


def test_expert_wins_every_game_fast_engine(gamefiles):
  lengths = []
  for path in gamefiles:
    env = FastEngine(path)
    env.reset()
    plan = solve(env)
    for action in plan:
      _, score, done, infos = env.step(action)
    assert (score, done, infos["won"]) == (1.0, True, True), path
    with open(path) as f:
      assert json.load(f)["walkthrough"] == plan
    lengths.append(len(plan))
  assert max(lengths) < MAX_STEPS


def test_expert_recovers_from_random_states(gamefiles):
  """DAgger-style use: after random play the expert, asked for one action at a time, still wins."""
  rng = random.Random(0)
  for path in gamefiles[::2]:
    env = FastEngine(path, max_steps=200)
    _, infos = env.reset()
    for _ in range(rng.randrange(25)):
      _, _, done, infos = env.step(rng.choice(infos["admissible_commands"]))
      if done:
        break
    expert = Expert(env)
    for _ in range(60):
      if infos["won"]:
        break
      action = expert.next_action(env)
      assert action in infos["admissible_commands"], (path, action)
      _, _, _, infos = env.step(action)
    assert infos["won"], path


def _replay(path):
  from agentopd_jax.envs.alfworld.engine_textworld import TextWorldEngine

  with open(path) as f:
    plan = json.load(f)["walkthrough"]
  env = TextWorldEngine(path)
  env.reset()
  for action in plan:
    _, score, done, infos = env.step(action)
  return path, (score, done, infos["won"])


@pytest.mark.skipif(importlib.util.find_spec("textworld") is None,
                    reason="textworld is not importable: the real engine is `pip install textworld[pddl]==1.7.0`")
def test_expert_plans_win_on_the_real_engine(gamefiles):
  with ProcessPoolExecutor(max_workers=2, mp_context=get_context("spawn")) as pool:
    chosen = gamefiles[::max(1, len(gamefiles) // REAL_GAMES)][:REAL_GAMES]  # spread over versions and splits
    outcomes = list(pool.map(_replay, chosen, chunksize=8))
  assert len(outcomes) == min(REAL_GAMES, 500)
  if REAL_GAMES >= 40:  # the spread covers both versions' roots, every split and every task type
    def cover(paths):
      return {(p.split(os.sep + "json_")[0], p.split(os.sep)[-4]) for p in paths}, set(data.by_task_type(paths))
    assert cover(chosen) == cover(gamefiles)


def test_explorer_wins_and_takes_only_what_it_has_seen(gamefiles):
  """`explore_then_solve` wins every game of every type, and its first `take` comes right after an observation
  showing that object (it searched instead of walking to where it could not know the object was)."""
  from agentopd_jax.envs.alfworld.expert import explore_then_solve
  for i, path in enumerate(gamefiles[::5]):
    engine = FastEngine(path)
    engine.reset()
    plan = explore_then_solve(engine, seed=i)
    assert plan == explore_then_solve(engine, seed=i)  # deterministic in the seed, engine left untouched
    obs, won, first_take = None, False, True
    for action in plan:
      if action.startswith("take ") and first_take:
        first_take = False
        name = action[len("take "):action.index(" from ")]
        assert name in obs, (path, plan, action, obs)
      obs, _, _, infos = engine.step(action)
      won = won or infos["won"]
    assert won, (path, plan)


def test_explorer_uses_a_lamp_seen_where_it_took_the_object():
  """In a look task whose lamp stands beside the object, the explorer uses it right after the take, not after
  walking the whole room: the remembered sighting is where it already stands (`go to` there is not admissible)."""
  from agentopd_jax.envs.alfworld import grammar
  from agentopd_jax.envs.alfworld.expert import explore_then_solve
  beside = 0
  for i in range(40):
    game = generator.make_game("train", 40, i, 0, ("look_at_obj_in_light",), (225,), (1, 2), home_prob=1.0)
    engine = FastEngine(generator.game_file(game, grammar.DEFAULT_VERSION, None))
    engine.reset()
    plan = explore_then_solve(engine, seed=i)
    obs = engine.reset()[0]
    for k, action in enumerate(plan):
      if action.startswith("take ") and game.task.target.lower() in obs:  # the task's kind of lamp is in view
        beside += 1
        assert plan[k + 1].startswith("use "), plan
        break
      obs = engine.step(action)[0]
  assert beside >= 5  # the object always starts on the main table, and a lamp often stands there
