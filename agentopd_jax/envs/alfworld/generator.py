"""Deterministic generator of ALFWorld games, written in the layout of the real `$ALFWORLD_DATA` download.

Each game is a scene layout (`scenes.py`) with small objects placed where they fit (canContain), one of the six
tasks, and its goal sentence; it is written as `json_2.1.1/<split>/<task>-<Obj>-None-<Recep>-<scene>/trial_<id>/`
with `game.tw-pddl` (domain, grammar with the goal substituted, problem, `solvable`, `walkthrough`), the same problem
as `initial_state.pddl` (older alfworld loaders require it) and `traj_data.json`. The real engine, the fast engine and
alfworld's own `AlfredTWEnv` all load these directories.

Splits follow ALFWorld: `valid_seen` reuses training scenes, `valid_unseen` uses the held-out test scenes (1-6 of each
room type) *and* held-out (task, object, receptacle/lamp) combinations that never occur in `train`/`valid_seen`.
Game `i` of a split depends only on (seed, split, i), so any prefix of a split is stable as sizes grow.
"""
from __future__ import annotations

import functools
import json
import os
import random
import zlib
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from agentopd_jax.envs.alfworld import grammar as tw_grammar
from agentopd_jax.envs.alfworld import scenes, vocab
from agentopd_jax.envs.alfworld.engine_fast import FastEngine
from agentopd_jax.envs.alfworld.expert import solve
from agentopd_jax.envs.alfworld.pddl import mangle, problem_text

REAL_SIZES = {"train": 3553, "valid_seen": 140, "valid_unseen": 134}
# Per-task game counts of the real splits (ALFWorld paper, Table 1); smaller splits keep these proportions.
REAL_COUNTS = {
    "train": {"pick_and_place_simple": 790, "look_at_obj_in_light": 308, "pick_clean_then_place_in_recep": 650,
              "pick_heat_then_place_in_recep": 459, "pick_cool_then_place_in_recep": 533,
              "pick_two_obj_and_place": 813},
    "valid_seen": {"pick_and_place_simple": 35, "look_at_obj_in_light": 13, "pick_clean_then_place_in_recep": 27,
                   "pick_heat_then_place_in_recep": 16, "pick_cool_then_place_in_recep": 25,
                   "pick_two_obj_and_place": 24},
    "valid_unseen": {"pick_and_place_simple": 24, "look_at_obj_in_light": 18, "pick_clean_then_place_in_recep": 31,
                     "pick_heat_then_place_in_recep": 23, "pick_cool_then_place_in_recep": 21,
                     "pick_two_obj_and_place": 17},
}
HELD_OUT_ONE_IN = 5  # about a fifth of all (task, object, target) combinations are reserved for valid_unseen
DISTRACTOR_TYPES = (6, 12)  # (min, max) distractor object types per game; each placed 1-2 times
_GOALS = {
    "pick_and_place_simple": "",
    "pick_clean_then_place_in_recep": "(cleanable ?o) (isClean ?o) ",
    "pick_heat_then_place_in_recep": "(heatable ?o) (isHot ?o) ",
    "pick_cool_then_place_in_recep": "(coolable ?o) (isCool ?o) ",
}


@dataclass(frozen=True)
class Task:
  task_type: str
  obj: str  # object_target
  target: str  # parent_target, or toggle_target for look_at_obj_in_light

  @property
  def is_look(self) -> bool:
    return self.task_type == "look_at_obj_in_light"


@dataclass
class Game:
  task: Task
  scene: int
  trial: str
  goal: str
  problem: str

  @property
  def dirname(self) -> str:
    return f"{self.task.task_type}-{self.task.obj}-None-{self.task.target}-{self.scene}"


def held_out(task: Task) -> bool:
  """Fixed (seed-independent) choice of the combinations only `valid_unseen` uses."""
  return zlib.crc32(f"{task.task_type}|{task.obj}|{task.target}".encode()) % HELD_OUT_ONE_IN == 0


def _placeable(obj: str, layout: scenes.Layout, exclude: str = "") -> List[scenes.Receptacle]:
  return [r for r in layout.receptacles if obj in vocab.CAN_CONTAIN[r.kind] and r.kind != exclude]


def tasks(task_type: str, layout: scenes.Layout) -> List[Task]:
  """Every task of this type the layout supports (objects of the room that can start outside the destination)."""
  kinds = layout.kinds()
  if layout.room not in vocab.TASK_ROOMS[task_type]:
    return []
  objs = [o for o in vocab.ROOM_OBJECTS[layout.room] if o in vocab.TASK_AFFORDANCE.get(task_type, (o,))]
  if task_type == "look_at_obj_in_light":
    if not any(k in kinds for k in vocab.LAMP_SUPPORTS):
      return []
    return [Task(task_type, o, lamp) for o in objs if _placeable(o, layout) for lamp in vocab.ROOM_LAMPS[layout.room]]
  appliance = vocab.TASK_APPLIANCE.get(task_type)
  if appliance and appliance not in kinds:
    return []
  excluded = vocab.TASK_EXCLUDED_DESTINATIONS.get(task_type, frozenset())
  return [Task(task_type, o, r) for o in objs for r in sorted(kinds)
          if r not in excluded and o in vocab.CAN_CONTAIN[r] and _placeable(o, layout, exclude=r)]


def split_counts(split: str, n: int, task_types: Optional[Sequence[str]] = None) -> Dict[str, int]:
  """n games split over the task types (default: all six) in the real split's proportions (largest remainder)."""
  real = {t: c for t, c in REAL_COUNTS[split].items() if task_types is None or t in task_types}
  if not real:
    raise ValueError(f"no known task type among {task_types}; expected some of {sorted(REAL_COUNTS[split])}")
  total = sum(real.values())
  exact = {t: n * c / total for t, c in real.items()}
  counts = {t: int(x) for t, x in exact.items()}
  for t in sorted(exact, key=lambda t: counts[t] - exact[t])[:n - sum(counts.values())]:
    counts[t] += 1
  return counts


@functools.lru_cache(maxsize=8)
def _type_order(split: str, n: int, task_types: Optional[Tuple[str, ...]] = None) -> Tuple[str, ...]:
  counts = split_counts(split, n, task_types)
  return tuple(t for _, t in sorted(((k + 0.5) / c, t) for t, c in counts.items() for k in range(c)))


def task_type_of(split: str, n: int, index: int, task_types: Optional[Sequence[str]] = None) -> str:
  """Task type of game `index` in a split of n games: the types interleaved so every prefix is balanced."""
  return _type_order(split, n, None if task_types is None else tuple(task_types))[index]


def sample_game(split: str, task_type: str, rng: random.Random, scene_numbers: Optional[Sequence[int]] = None,
                distractor_types: Tuple[int, int] = DISTRACTOR_TYPES, home_prob: float = 0.0) -> Game:
  """A game of `task_type` in a random scene of the split (restricted to `scene_numbers` when given)."""
  unseen = split == "valid_unseen"
  rooms = list(vocab.TASK_ROOMS[task_type])
  candidates = [s for room in rooms for s in scenes.scenes(room, unseen)
                if scene_numbers is None or s in scene_numbers]
  rng.shuffle(candidates)
  for scene in candidates:
    layout = scenes.layout(scene)
    options = [t for t in tasks(task_type, layout) if held_out(t) == unseen]
    if options:
      return _populate(rng.choice(options), layout, rng, distractor_types, home_prob)
  raise ValueError(f"no {split} scene{'' if scene_numbers is None else f' among {list(scene_numbers)}'} "
                   f"supports {task_type}")


def home(where: Sequence[scenes.Receptacle]) -> scenes.Receptacle:
  """An object's home among the receptacles it may start in: the most general one (the kind that can hold the most
  object types; the first in the layout on a tie), as a room's main table gathers most of its small objects."""
  return max(where, key=lambda r: len(vocab.CAN_CONTAIN[r.kind]))


def _populate(task: Task, layout: scenes.Layout, rng: random.Random, distractor_types: Tuple[int, int],
              home_prob: float = 0.0) -> Game:
  """Place the target objects (never already in a destination), distractors and lamps; write the problem.

  Each instance of the task's object lies at its `home` with probability `home_prob`, else on any receptacle that can
  hold it, like every other object; 0 keeps the uniform placement and draws exactly the random numbers it always drew.
  """
  placed: List[Tuple[str, str, scenes.Receptacle]] = []  # (type, alfred id, receptacle)
  ids = {r.alfred_id for r in layout.receptacles}

  def put(kind: str, where: Sequence[scenes.Receptacle], p_home: float = 0.0) -> None:
    oid = scenes.alfred_id(kind, rng)
    while oid in ids:
      oid = scenes.alfred_id(kind, rng)
    ids.add(oid)
    at_home = p_home > 0 and rng.random() < p_home
    placed.append((kind, oid, home(where) if at_home else rng.choice(list(where))))

  n_targets = rng.randint(2, 4) if task.task_type == "pick_two_obj_and_place" else rng.randint(1, 3)
  for _ in range(n_targets):
    put(task.obj, _placeable(task.obj, layout, exclude="" if task.is_look else task.target), home_prob)
  room_objects = [o for o in vocab.ROOM_OBJECTS[layout.room] if o != task.obj and _placeable(o, layout)]
  for kind in rng.sample(room_objects, min(len(room_objects), rng.randint(*distractor_types))):
    for _ in range(rng.randint(1, 2)):
      put(kind, _placeable(kind, layout))
  supports = [r for r in layout.receptacles if r.kind in vocab.LAMP_SUPPORTS]
  lamps = vocab.ROOM_LAMPS.get(layout.room, ())
  for lamp in lamps:
    if (task.is_look and lamp == task.target) or rng.random() < 0.3:
      put(lamp, supports)
  trial = "trial_T2019{:02d}{:02d}_{:02d}{:02d}{:02d}_{:06d}".format(
      rng.randint(5, 9), rng.randint(1, 28), rng.randrange(24), rng.randrange(60), rng.randrange(60),
      rng.randrange(10 ** 6))
  return compose(task, layout, placed, rng.choice(vocab.GOAL_TEMPLATES[task.task_type]), trial)


def compose(task: Task, layout: scenes.Layout, placed: Sequence[Tuple[str, str, scenes.Receptacle]], template: str,
            trial: str) -> Game:
  """A game from a layout and explicit placements (object type, ALFRED id, receptacle) and a goal template."""
  goal = template.format(obj=task.obj.lower(), recep=task.target.lower(), toggle=task.target.lower())
  return Game(task, layout.scene, trial, goal, _problem(task, layout, placed, trial))


def _problem(task: Task, layout: scenes.Layout, placed, trial: str) -> str:
  objs = [(mangle(oid), kind, r) for kind, oid, r in placed]
  receps = [(mangle(r.alfred_id), r) for r in layout.receptacles]
  locations = sorted({mangle(r.location) for r in layout.receptacles} | {mangle(layout.start)})
  otypes = sorted({kind for _, kind, _ in objs})
  rtypes = sorted({r.kind for _, r in receps})
  objects = ([("agent1", "agent")] + [(f"{t}Type", "otype") for t in otypes] + [(f"{t}Type", "rtype") for t in rtypes]
             + [(name, "object") for name, _, _ in objs] + [(name, "receptacle") for name, _ in receps]
             + [(loc, "location") for loc in locations])
  init = [("atLocation", "agent1", mangle(layout.start))]
  for name, r in receps:
    init += [("receptacleType", name, f"{r.kind}Type"), ("receptacleAtLocation", name, mangle(r.location))]
    if r.kind in vocab.OPENABLE:
      init.append(("openable", name))
  for name, kind, r in objs:
    init += [("objectType", name, f"{kind}Type"), ("inReceptacle", name, mangle(r.alfred_id)),
             ("objectAtLocation", name, mangle(r.location))]
    init += [(pred, name) for pred, members in _AFFORDANCES if kind in members]
    if kind not in vocab.TOGGLEABLE:
      init.append(("pickupable", name))
    if kind == task.obj and r.kind == "Fridge":  # alfworld marks target objects that start in a fridge as cool
      init.append(("isCool", name))
  init += [("canContain", f"{rt}Type", f"{ot}Type") for rt in rtypes for ot in otypes if ot in vocab.CAN_CONTAIN[rt]]
  return problem_text(trial, objects, init, goal_pddl(task))


_AFFORDANCES = (("cleanable", vocab.CLEANABLE), ("heatable", vocab.HEATABLE), ("coolable", vocab.COOLABLE),
                ("toggleable", vocab.TOGGLEABLE), ("sliceable", vocab.SLICEABLE),
                ("isReceptacleObject", vocab.MOVABLE_RECEPTACLES))


def goal_pddl(task: Task) -> str:
  """The task's goal, with the structure of alfworld's goal library."""
  o, t = task.obj, task.target
  if task.is_look:
    return ("    (:goal (and\n"
            f"        (exists (?ot - object ?r - receptacle ?a - agent ?l - location) (and (objectType ?ot {t}Type)"
            " (toggleable ?ot) (isToggled ?ot) (receptacleAtLocation ?r ?l) (atLocation ?a ?l)"
            " (inReceptacle ?ot ?r)))\n"
            f"        (exists (?o - object ?a - agent) (and (objectType ?o {o}Type) (holds ?a ?o)))))")
  if task.task_type == "pick_two_obj_and_place":
    return ("    (:goal (and (exists (?r - receptacle) (exists (?o1 - object) (and\n"
            f"        (objectType ?o1 {o}Type) (receptacleType ?r {t}Type) (inReceptacle ?o1 ?r)\n"
            f"        (exists (?o2 - object) (and (not (= ?o1 ?o2)) (objectType ?o2 {o}Type)"
            f" (receptacleType ?r {t}Type) (inReceptacle ?o2 ?r))))))))")
  return ("    (:goal (and (exists (?r - receptacle) (exists (?o - object) (and\n"
          f"        {_GOALS[task.task_type]}(objectType ?o {o}Type) (receptacleType ?r {t}Type)"
          " (inReceptacle ?o ?r))))))")


def game_file(game: Game, version: str, walkthrough: Optional[List[str]]) -> dict:
  domain, grammar = tw_grammar.game_logic(version)
  return dict(pddl_domain=domain, grammar=tw_grammar.with_goal(grammar, game.goal), pddl_problem=game.problem,
              solvable=True, walkthrough=walkthrough)


def traj_data(game: Game) -> dict:
  look = game.task.is_look
  return {
      "task_id": game.trial,
      "task_type": game.task.task_type,
      "pddl_params": {"object_target": game.task.obj, "parent_target": "" if look else game.task.target,
                      "toggle_target": game.task.target if look else "", "mrecep_target": "", "object_sliced": False},
      "scene": {"floor_plan": f"FloorPlan{game.scene}", "scene_num": game.scene},
      "turk_annotations": {"anns": [{"task_desc": game.goal}]},
  }


def make_game(split: str, n: int, index: int, seed: int = 0, task_types: Optional[Sequence[str]] = None,
              scene_numbers: Optional[Sequence[int]] = None, distractor_types: Tuple[int, int] = DISTRACTOR_TYPES,
              home_prob: float = 0.0) -> Game:
  """Game `index` of a split of n games (deterministic in (seed, split, n, index) and the filters)."""
  rng = random.Random(f"alfworld/{seed}/{split}/{index}")
  return sample_game(split, task_type_of(split, n, index, task_types), rng, scene_numbers, distractor_types, home_prob)


def write_game(root: str, split: str, game: Game, version: str, walkthrough: Optional[List[str]]) -> str:
  """Write one game directory under `root/json_2.1.1/<split>/`; returns its `game.tw-pddl` path."""
  folder = os.path.join(root, "json_2.1.1", split, game.dirname, game.trial)
  os.makedirs(folder, exist_ok=True)
  with open(os.path.join(folder, "initial_state.pddl"), "w") as f:
    f.write(game.problem)
  with open(os.path.join(folder, "traj_data.json"), "w") as f:
    json.dump(traj_data(game), f, indent=2)
  path = os.path.join(folder, "game.tw-pddl")
  with open(path, "w") as f:
    json.dump(game_file(game, version, walkthrough), f)
  return path


def generate(root: str, sizes: Optional[Dict[str, int]] = None, seed: int = 0, version: str = tw_grammar.DEFAULT_VERSION,
             task_types: Optional[Sequence[str]] = None, scene_numbers: Optional[Sequence[int]] = None,
             distractor_types: Tuple[int, int] = DISTRACTOR_TYPES, home_prob: float = 0.0) -> Dict[str, List[str]]:
  """Write the splits (default: the real sizes 3553/140/134) under `root`; each game's walkthrough is the expert's
  plan, which also proves it solvable. Returns the game-file paths per split.

  task_types / scene_numbers restrict the games (e.g. one small room for a CPU-sized run) and distractor_types
  (min, max) sets how many other object types share the room; the defaults (all types, every scene of the split,
  6-12 distractor types, uniform placement) give the real benchmark's mix. home_prob > 0 puts each task object at its
  `home` receptacle with that probability: a regularity of where things are that a policy can learn and a
  random-order searcher (the `explorer` demonstrations) does not use.
  """
  lo, hi = distractor_types
  if not 0 <= lo <= hi:
    raise ValueError(f"distractor_types must be (min, max) with 0 <= min <= max, got {tuple(distractor_types)}")
  if not 0 <= home_prob <= 1:
    raise ValueError(f"home_prob must be in [0, 1], got {home_prob}")
  out = {}
  for split, n in (sizes or REAL_SIZES).items():
    out[split] = []
    for i in range(n):
      game = make_game(split, n, i, seed, task_types, scene_numbers, (lo, hi), home_prob)
      engine = FastEngine(game_file(game, version, None))
      engine.reset()
      out[split].append(write_game(root, split, game, version, solve(engine)))
  return out


def main(argv: Optional[Sequence[str]] = None) -> None:
  import argparse
  parser = argparse.ArgumentParser(description="Generate ALFWorld games in the $ALFWORLD_DATA layout.")
  parser.add_argument("root", help="output folder (use it as $ALFWORLD_DATA)")
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--version", choices=tw_grammar.VERSIONS, default=tw_grammar.DEFAULT_VERSION)
  for split, n in REAL_SIZES.items():
    parser.add_argument(f"--{split}", type=int, default=n, help=f"number of games (default {n}, the real size)")
  args = parser.parse_args(argv)
  paths = generate(args.root, {s: getattr(args, s) for s in REAL_SIZES}, args.seed, args.version)
  print(json.dumps({split: len(p) for split, p in paths.items()}))


if __name__ == "__main__":
  main()
