"""Differential test: the fast engine must print what the real engine (TextWorld PddlEnv + alfworld wrappers) prints.

On generated games of all six task types, all three splits, both text versions and every room layout the generator
knows (game i is in layout i, in the text versions by turns; games past the last layout, with more games asked for,
revisit them in the other text version), both engines are
driven in lockstep by random admissible actions, the expert, and adversarial strings (inadmissible, miscased, empty,
padded, the other version's put command); observation, admissible list, score, done and won must be equal after every
step. In layouts where several receptacles share a spot, the episode opens with a shuffler that takes objects out of
them, moves them among them and `look`s there (what `look` says depends on that history). Two games, one per text
version, fetch a knife and slice something (which random play rarely brings together) and run into the 50-step limit,
and every episode that ends, won or out of steps, is played on for a few steps, which must repeat its
last one. The real engine needs ~0.1 s a step, so games run in two processes and episodes are short;
`ALFWORLD_DIFF_GAMES` changes the number of games (default 120: every layout once; 240 plays each in both versions).
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

from agentopd_jax.envs.alfworld import generator, scenes, vocab  # noqa: E402
from agentopd_jax.envs.alfworld.engine_fast import FastEngine  # noqa: E402
from agentopd_jax.envs.alfworld.expert import Expert  # noqa: E402
from agentopd_jax.envs.alfworld.world import KNIFE_TYPES  # noqa: E402

N_GAMES = int(os.environ.get("ALFWORLD_DIFF_GAMES", 120))
STEPS = 14  # per game, except the two games that run into the limit
SHUFFLE_STEPS = 10  # first, in layouts with a shared spot
LIMIT_GAMES = (4, 5)  # games with a knife and a sliceable object, one per text version: they also slice
LAYOUTS = sorted(scene for numbers in vocab.ROOM_SCENES.values() for scene in numbers)
SEEN_SPLITS = ("train", "valid_seen")
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


class _Shuffler:
  """Adversary for a spot several receptacles share: takes objects out of those receptacles (or brings them in from
  elsewhere), moves them among them, and `look`s after every move. It leaves the task's objects alone, so that no move
  of its ends the episode before the look."""

  def __init__(self, fast: FastEngine, rng: random.Random, task_object_type: str):
    w = fast.world
    self.spot = rng.choice([rs for rs in w.receps_at.values() if len(rs) > 1])
    self.movable = sorted(o for o in w.pickupable if w.otype[o] != task_object_type
                          and all((w.rtype[r], w.otype[o]) in w.can_contain for r in self.spot))
    self.obj = None
    self.moved = False

  def next_action(self, fast: FastEngine, rng: random.Random) -> str:
    w, n = fast.world, fast.world.names
    here = w.receps_at.get(fast.location, [])
    if self.moved:
      self.moved = False
      return "look"
    if fast.held or not self.movable:  # to the spot, open it all, then put the object into any of its receptacles
      closed = [r for r in self.spot if r in w.openable and not fast.is_open(r)]
      if here != self.spot:
        return f"go to {n[rng.choice(self.spot)]}"
      if closed:
        return f"open {n[closed[0]]}"
      if not fast.held:
        return "look"
      self.moved = True
      self.obj = self.obj if rng.random() < 0.7 else None
      put = "put {} in/on {}" if w.version == "2.1.1" else "move {} to {}"
      return put.format(n[fast.held[0]], n[rng.choice(self.spot)])
    if self.obj is None:  # fetch an object that fits the spot, mostly one already there
      at_spot = [o for o, r in sorted(fast.facts["inreceptacle"]) if r in self.spot and o in self.movable]
      self.obj = rng.choice(at_spot if at_spot and rng.random() < 0.7 else self.movable)
    r = min(r for o, r in fast.facts["inreceptacle"] if o == self.obj)
    if r not in here:
      return f"go to {n[r]}"
    if r in w.openable and not fast.is_open(r):
      return f"open {n[r]}"
    return f"take {n[self.obj]} from {n[r]}"


class _Slicer:
  """Fetches a knife and slices an object with it: slicing takes a knife and a sliceable object at one spot, which
  random play rarely brings together. Neither move can end an episode (no task is about slicing)."""

  def next_action(self, fast: FastEngine, admissible) -> str:
    w, n = fast.world, fast.world.names
    slices = sorted(a for a in admissible if a.startswith("slice "))
    if slices:
      return slices[0]
    knives = sorted(o for o in w.otype if w.otype[o] in KNIFE_TYPES)
    if fast.held and not set(fast.held) & set(knives):  # hands full (the shuffler's last object): put it down
      puts = sorted(a for a in admissible if a.startswith(("put ", "move ")))
      here = w.receps_at.get(fast.location, [])
      return puts[0] if puts else f"go to {n[next(r for r in sorted(w.rtype) if r not in here)]}"
    wanted = sorted(w.sliceable) if set(fast.held) & set(knives) else knives
    where = sorted((r, o) for o, r in fast.facts["inreceptacle"] if o in wanted)
    if not where:
      return "look"
    r, o = where[0]
    if r not in w.receps_at.get(fast.location, []):
      return f"go to {n[r]}"
    if r in w.openable and not fast.is_open(r):
      return f"open {n[r]}"
    return f"take {n[o]} from {n[r]}" if o in knives else "look"


def _game(index: int):
  """Game `index`: layout index mod the number of layouts, a split that layout belongs to, and one of the task types
  it supports in turn."""
  scene = LAYOUTS[index % len(LAYOUTS)]
  version = VERSIONS[(index + index // len(LAYOUTS)) % 2]
  unseen = scenes.is_unseen(scene)
  split = "valid_unseen" if unseen else SEEN_SPLITS[index % 2]
  layout = scenes.layout(scene)
  supported = [t for t in vocab.TASK_TYPES.values()
               if any(generator.held_out(task) == unseen for task in generator.tasks(t, layout))]
  task_type = supported[index % len(supported)]
  return split, version, generator.sample_game(split, task_type, random.Random(f"diff/{index}"), [scene])


def _compare(args):
  """Play one game on both engines in lockstep; the summary says where they first differed, if anywhere."""
  from agentopd_jax.envs.alfworld.engine_textworld import TextWorldEngine

  index, root = args
  split, version, game = _game(index)
  path = generator.write_game(root, split, game, version, None)
  fast, real = FastEngine(path), TextWorldEngine(path)
  summary = dict(index=index, version=version, task_type=game.task.task_type, scene=game.scene, steps=0, done=False,
                 won=False, mismatch=None, kinds=set(), shared_looks=0, next_to=0, after_done=[])
  fast_out, real_out = fast.reset(), real.reset()
  if fast_out != real_out:
    return {**summary, "mismatch": ("reset", fast_out, real_out)}
  rng, expert = random.Random(index), Expert(fast)
  shared = any(len(rs) > 1 for rs in fast.world.receps_at.values())
  shuffler = _Shuffler(fast, rng, expert.goal.obj_type) if shared else None
  limit = index in LIMIT_GAMES
  admissible = fast_out[1]["admissible_commands"]

  def play(action):
    out = fast.step(action), real.step(action)
    same = out[0] == out[1] and [type(x) for x in out[0][:3]] == [type(x) for x in out[1][:3]]
    return out[0], None if same else (action, *out)

  for step in range(50 if limit else STEPS + (SHUFFLE_STEPS if shuffler else 0)):
    u = rng.random()
    if shuffler and step < SHUFFLE_STEPS:
      action = shuffler.next_action(fast, rng)
    elif limit and "slice" not in summary["kinds"] and step < 40:
      action = _Slicer().next_action(fast, admissible)
    elif limit:
      action = rng.choice(["look", "inventory", _adversarial(rng, admissible, fast)])
    elif u < (0.8 if index % 4 == 0 else 0.35):
      action = expert.next_action(fast)
    elif u < (0.85 if index % 4 == 0 else 0.7):
      action = _random_action(rng, admissible)
    else:
      action = _adversarial(rng, admissible, fast)
    summary["kinds"].add(fast._commands.get(action.strip(), ("nothing",))[0])  # which action schema ran
    fast_out, mismatch = play(action)
    if mismatch:
      return {**summary, "mismatch": mismatch}
    if action == "look" and shuffler and fast.world.receps_at.get(fast.location) == shuffler.spot:
      summary.update(shared_looks=summary["shared_looks"] + 1, next_to=summary["next_to"] + ("see a " in fast_out[0]))
    summary.update(steps=step + 1, done=fast_out[2], won=fast_out[3]["won"])
    admissible = fast_out[3]["admissible_commands"]
    if fast_out[2]:
      break
  final = fast_out
  for action in [rng.choice(admissible), "look", _adversarial(rng, admissible, fast)] if summary["done"] else []:
    fast_out, mismatch = play(action)
    if mismatch:
      return {**summary, "mismatch": mismatch}
    summary["after_done"].append(fast_out == final)
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
  assert {r["scene"] for r in results} == set(LAYOUTS[:N_GAMES])
  kinds = {(r["version"], r["task_type"]) for r in results}
  assert kinds == {(v, t) for v in VERSIONS for t in generator.REAL_COUNTS["train"]}
  assert sum(r["steps"] for r in results) >= 8 * N_GAMES
  assert sum(r["won"] for r in results) >= N_GAMES // 5  # winning steps are compared too
  assert set().union(*(r["kinds"] for r in results)) == {
      "goto", "open", "close", "take", "put", "heat", "cool", "clean", "toggle", "slice", "look", "inventory", "help",
      "examine_receptacle", "examine_object", "nothing"}


def test_shared_spots_are_shuffled_in_every_layout_that_has_one(results):
  shared = {s for s in LAYOUTS[:N_GAMES] if len({r.location for r in scenes.layout(s).receptacles})
            < len(scenes.layout(s).receptacles)}
  assert {r["scene"] for r in results if r["shared_looks"]} == shared
  for version in VERSIONS:  # looks that list objects moved between the receptacles of the spot
    assert sum(r["next_to"] for r in results if r["version"] == version) >= N_GAMES // 10


def test_finished_episodes_are_frozen(results):
  done = [r for r in results if r["done"]]
  assert {(r["version"], r["won"]) for r in done} == {(v, w) for v in VERSIONS for w in (False, True)}
  for r in done:
    assert r["after_done"] == [True, True, True], r["index"]


def test_step_limit(results):
  for r in results:
    if r["index"] in LIMIT_GAMES:
      assert (r["steps"], r["done"], r["won"]) == (50, True, False)
