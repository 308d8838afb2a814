"""Differential test: the fast engine must print what the real engine (TextWorld PddlEnv + alfworld wrappers) prints.

On generated games of all six task types, all three splits and both text versions, both engines are driven in lockstep
by random admissible actions, the expert, and adversarial strings (inadmissible, miscased, empty, padded, the other
version's put command); observation, admissible list, score, done and won must be equal after every step. Two games
run into the 50-step limit. The real engine needs ~0.1 s a step, so games run in two processes and episodes are
short; `ALFWORLD_DIFF_GAMES` changes the number of games (default 200).
"""
import importlib.util
import os
import random
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context

import pytest

if importlib.util.find_spec("alfworld") is None:
  pytest.skip("alfworld is not installed: games are built from its alfred.pddl/.twl2", allow_module_level=True)
if importlib.util.find_spec("textworld") is None:
  pytest.skip("textworld is not importable: the real engine is `pip install textworld[pddl]==1.7.0`",
              allow_module_level=True)

from agentopd_jax.envs.alfworld import generator  # noqa: E402
from agentopd_jax.envs.alfworld.engine_fast import FastEngine  # noqa: E402
from agentopd_jax.envs.alfworld.expert import Expert  # noqa: E402

N_GAMES = int(os.environ.get("ALFWORLD_DIFF_GAMES", 200))
STEPS = 14  # per game, except the two games that run into the limit
LIMIT_GAMES = (0, 1)
SPLITS = ("train", "valid_seen", "valid_unseen")
VERSIONS = ("2.1.3", "2.1.1")


def _adversarial(rng: random.Random, admissible, env: FastEngine) -> str:
  a = rng.choice(admissible)
  other_put = "put {} in/on {}" if env.world.version == "2.1.3" else "move {} to {}"
  names = sorted(env.world.names.values())
  return rng.choice([
      a.upper(), a.capitalize(), f"  {a}  ", "", "   ", a.replace(" ", "  ", 1), a + ".", a[:-1],
      f"examine {rng.choice(names)}", f"go to {rng.choice(names)}",
      f"take {rng.choice(names)} from {rng.choice(names)}",
      other_put.format(rng.choice(names), rng.choice(names)), "help", "go to", "xyzzy", "use " + rng.choice(names),
  ])


def _random_action(rng: random.Random, admissible) -> str:
  """A random admissible action, biased away from `go to` (most of the list) and towards knives and slicing, so every
  action kind gets played."""
  rare = [a for a in admissible if a.startswith("slice ") or (a.startswith("take ") and "knife" in a)]
  if rare and rng.random() < 0.5:
    return rng.choice(rare)
  others = [a for a in admissible if not a.startswith("go to ")]
  return rng.choice(others if others and rng.random() < 0.6 else admissible)


def _compare(args):
  """Play one game on both engines in lockstep; the summary says where they first differed, if anywhere."""
  from agentopd_jax.envs.alfworld.engine_textworld import TextWorldEngine

  index, root = args
  split, version = SPLITS[index % 3], VERSIONS[(index // 3) % 2]
  game = generator.make_game(split, max(N_GAMES, 6), index, seed=7)
  path = generator.write_game(root, split, game, version, None)
  fast, real = FastEngine(path), TextWorldEngine(path)
  summary = dict(index=index, version=version, task_type=game.task.task_type, steps=0, done=False, won=False,
                 mismatch=None, kinds=set())
  fast_out, real_out = fast.reset(), real.reset()
  if fast_out != real_out:
    return {**summary, "mismatch": ("reset", fast_out, real_out)}
  rng, expert = random.Random(index), Expert(fast)
  limit = index in LIMIT_GAMES
  admissible = fast_out[1]["admissible_commands"]
  for step in range(50 if limit else STEPS):
    u = rng.random()
    if limit:
      action = rng.choice(["look", "inventory", _adversarial(rng, admissible, fast)])
    elif u < (0.8 if index % 4 == 0 else 0.35):
      action = expert.next_action(fast)
    elif u < (0.85 if index % 4 == 0 else 0.7):
      action = _random_action(rng, admissible)
    else:
      action = _adversarial(rng, admissible, fast)
    summary["kinds"].add(fast._commands.get(action.strip(), ("nothing",))[0])  # which action schema ran
    fast_out, real_out = fast.step(action), real.step(action)
    summary.update(steps=step + 1, done=fast_out[2], won=fast_out[3]["won"])
    if fast_out != real_out or [type(x) for x in fast_out[:3]] != [type(x) for x in real_out[:3]]:
      return {**summary, "mismatch": (action, fast_out, real_out)}
    admissible = fast_out[3]["admissible_commands"]
    if fast_out[2]:
      break
  return summary


@pytest.fixture(scope="module")
def results(tmp_path_factory):
  root = str(tmp_path_factory.mktemp("alfworld_diff"))
  with ProcessPoolExecutor(max_workers=2, mp_context=get_context("spawn")) as pool:
    return list(pool.map(_compare, [(i, root) for i in range(N_GAMES)], chunksize=4))


def test_engines_agree_at_every_step(results):
  mismatches = [r for r in results if r["mismatch"] is not None]
  assert not mismatches, mismatches[:3]


def test_coverage(results):
  assert len(results) == N_GAMES
  kinds = {(r["version"], r["task_type"]) for r in results}
  assert kinds == {(v, t) for v in VERSIONS for t in generator.REAL_COUNTS["train"]}
  assert sum(r["steps"] for r in results) >= 8 * N_GAMES
  assert sum(r["won"] for r in results) >= N_GAMES // 5  # winning steps are compared too
  assert set().union(*(r["kinds"] for r in results)) == {
      "goto", "open", "close", "take", "put", "heat", "cool", "clean", "toggle", "slice", "look", "inventory", "help",
      "examine_receptacle", "examine_object", "nothing"}


def test_step_limit(results):
  for r in results:
    if r["index"] in LIMIT_GAMES:
      assert (r["steps"], r["done"], r["won"]) == (50, True, False)
