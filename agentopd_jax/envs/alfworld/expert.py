"""An expert for ALFWorld games that reads the fast engine's state instead of re-planning with Fast Downward.

alfworld's `planner` expert calls Fast Downward on every step (seconds to minutes, and it can hang); its `handcoded`
expert parses the text. Here the policy is a function of the full state: it knows where every object is, so it walks
to the nearest useful receptacle, opens it if needed, takes a target, heats/cools/cleans it, and puts it in the
destination (or carries it to a switched-on lamp). `next_action(engine)` works from any state an agent reached, which
is what DAgger-style relabelling and oracles need; `plan(engine)` rolls the policy forward on a copy of the engine.
"""
from __future__ import annotations

import random
import re
from dataclasses import dataclass
from typing import Iterator, List, Optional, Sequence

from agentopd_jax.envs.alfworld.engine_fast import FastEngine

_APPLIANCE = {"isclean": ("clean", "sinkbasintype"), "ishot": ("heat", "microwavetype"),
              "iscool": ("cool", "fridgetype")}


@dataclass(frozen=True)
class Goal:
  """What a game asks, read off its PDDL goal: object type, destination (or lamp) type, property, how many."""
  obj_type: str  # e.g. "mugtype"
  target_type: str  # receptacle type, or the lamp's object type for look_at_obj_in_light
  look: bool
  prop: Optional[str]  # "isclean" / "ishot" / "iscool"
  count: int


def _atoms(f) -> Iterator[list]:
  if f[0] in ("and", "or", "not"):
    for g in f[1:]:
      yield from _atoms(g)
  elif f[0] == "exists":
    yield from _atoms(f[2])
  elif f[0] != "=":
    yield f


def goal_of(goal_formula) -> Goal:
  atoms = list(_atoms(goal_formula))
  otype = {a[1]: a[2] for a in atoms if a[0] == "objecttype"}
  rtype = {a[1]: a[2] for a in atoms if a[0] == "receptacletype"}
  toggled = [a[1] for a in atoms if a[0] == "istoggled"]
  if toggled:
    held = next(a[2] for a in atoms if a[0] == "holds")
    return Goal(otype[held], otype[toggled[0]], True, None, 1)
  placed = [a for a in atoms if a[0] == "inreceptacle"]
  prop = next((a[0] for a in atoms if a[0] in _APPLIANCE), None)
  return Goal(otype[placed[0][1]], rtype[placed[0][2]], False, prop, len({a[1] for a in placed}))


class Expert:
  """Deterministic policy over a `FastEngine`'s state."""

  def __init__(self, engine: FastEngine):
    self.goal = goal_of(engine.world.goal)

  def next_action(self, env: FastEngine) -> str:
    w, g = env.world, self.goal
    held = env.held
    if held and w.otype.get(held[0]) != g.obj_type:
      return self._put_away(env, held[0])
    if not held:
      return self._fetch(env)
    o = held[0]
    if g.look:
      lamp = min(self._lamps(env), key=lambda lamp: (not env.has("istoggled", lamp), lamp))
      return self._go(env, self._where(env, lamp)) or f"use {w.names[lamp]}"
    if g.prop and not env.has(g.prop, o):
      verb, kind = _APPLIANCE[g.prop]
      appliance = self._nearest(env, [r for r, t in w.rtype.items() if t == kind])
      return self._go(env, appliance) or f"{verb} {w.names[o]} with {w.names[appliance]}"
    dest = self._destination(env)
    return self._reach(env, dest) or self._put_command(env, o, dest)

  def plan(self, env: FastEngine, max_len: int = 200) -> List[str]:
    """The actions this policy takes from env's state until the game is won (env itself is not changed)."""
    sim, actions = env.copy(), []
    while not sim.won:
      if sim.done:
        raise RuntimeError(f"the episode ended (step limit) before the expert won, after {actions}")
      action = self.next_action(sim)
      if action not in sim.admissible_commands or len(actions) >= max_len:
        raise RuntimeError(f"expert stuck at {action!r} after {actions}")
      sim.step(action)
      actions.append(action)
    return actions

  # ----------------------------------------------------------------------------------------------- helpers
  def _satisfies(self, env: FastEngine, o: str) -> bool:
    return env.world.otype.get(o) == self.goal.obj_type and (self.goal.prop is None or env.has(self.goal.prop, o))

  def _destination(self, env: FastEngine) -> str:
    """The destination holding the most finished objects (pick two fills one receptacle), nearest on ties."""
    w = env.world
    dests = [r for r, t in w.rtype.items() if t == self.goal.target_type]
    here = w.receps_at.get(env.location, ())
    return max(sorted(dests), key=lambda r: (sum(self._satisfies(env, o) for o in env.contents(r)), r in here))

  def _fetch(self, env: FastEngine) -> str:
    """Go to, open, and take the best target object still to be moved."""
    w = env.world
    done = set() if self.goal.look else {o for o in env.contents(self._destination(env)) if self._satisfies(env, o)}
    options = [(o, r) for o, r in sorted(env.facts["inreceptacle"])
               if w.otype.get(o) == self.goal.obj_type and o in w.pickupable and o not in done]
    here = w.receps_at.get(env.location, ())
    o, r = min(options, key=lambda p: (not self._satisfies(env, p[0]), p[1] not in here))
    return self._reach(env, r) or f"take {w.names[o]} from {w.names[r]}"

  def _put_away(self, env: FastEngine, o: str) -> str:
    """Free the hands: put a non-target object into the nearest receptacle that accepts it."""
    w = env.world
    fits = [r for r, t in w.rtype.items() if (t, w.otype.get(o)) in w.can_contain]
    r = self._nearest(env, fits)
    return self._reach(env, r) or self._put_command(env, o, r)

  def _lamps(self, env: FastEngine) -> List[str]:
    return [o for o, _ in env.facts["inreceptacle"] if env.world.otype.get(o) == self.goal.target_type]

  @staticmethod
  def _where(env: FastEngine, o: str) -> str:
    return min(r for oo, r in env.facts["inreceptacle"] if oo == o)

  @staticmethod
  def _nearest(env: FastEngine, receptacles: List[str]) -> str:
    """A receptacle at the agent's location if there is one (no walking), else the first by id."""
    here = env.world.receps_at.get(env.location, ())
    return min(receptacles, key=lambda r: (r not in here, r))

  @staticmethod
  def _go(env: FastEngine, r: str) -> Optional[str]:
    """`go to r` unless the agent already stands where r is (then `go to` would be "Nothing happens.")."""
    return None if r in env.world.receps_at.get(env.location, ()) else f"go to {env.world.names[r]}"

  @classmethod
  def _reach(cls, env: FastEngine, r: str) -> Optional[str]:
    """The next step to be able to take from / put into r, or None when it is ready."""
    if cls._go(env, r):
      return cls._go(env, r)
    return f"open {env.world.names[r]}" if r in env.world.openable and not env.is_open(r) else None

  @staticmethod
  def _put_command(env: FastEngine, o: str, r: str) -> str:
    verb = "put {} in/on {}" if env.world.version == "2.1.1" else "move {} to {}"
    return verb.format(env.world.names[o], env.world.names[r])


def solve(env: FastEngine) -> List[str]:
  """The expert's full plan from env's current state."""
  return Expert(env).plan(env)


def explore_then_solve(env: FastEngine, seed: int = 0, max_len: int = 60, first: Sequence[str] = (),
                       skip_destination: bool = False) -> List[str]:
  """A demonstration a text-only policy can imitate: search receptacles in a random order (opening closed ones)
  until the task object is in view, take it with the expert, search again for a lamp in a look task, and let the
  expert finish. `first`: receptacle names searched before the others, in that order (those the room lacks are
  skipped); `skip_destination`: the object search passes over receptacles of the goal's destination type. Together
  they play what the shipped ALFWorld skills say ("Tables First", "Skip the Destination").

  `solve` walks straight to the hidden object, which a policy that only reads observations cannot know; imitating it
  teaches "go somewhere, then take", not "take what you see". Here every `take` and `use` follows an observation that
  shows its object. Falls back to `solve` when the search would exceed `max_len` steps.
  """
  sim, rng, actions = env.copy(), random.Random(seed), []
  w, expert = sim.world, Expert(sim)
  by_name = {w.names[r]: r for r in w.rtype}
  order = sorted(by_name)
  rng.shuffle(order)
  order = [n for n in first if n in by_name] + [n for n in order if n not in first]

  def names_of(type_const: str) -> List[str]:
    return [w.names[o] for o, t in w.otype.items() if t == type_const]

  def act(action: str) -> str:
    actions.append(action)
    return sim.step(action)[0]

  looked: dict = {}  # receptacle name -> what was seen there (a lamp noticed while searching is remembered)

  def search(names: List[str]) -> None:
    seen = re.compile("|".join(rf"\b{re.escape(n)}\b" for n in names))
    known = [name for name, obs in looked.items() if seen.search(obs)]
    here = {w.names[r] for r in w.receps_at.get(sim.location, ())}
    if any(name in here for name in known):  # seen where the agent stands (a lamp beside the object just taken)
      return
    for name in known[:1] + [n for n in order if n not in looked]:
      if f"go to {name}" not in sim.admissible_commands:
        continue
      obs = act(f"go to {name}")
      if by_name[name] in w.openable and not sim.is_open(by_name[name]):
        obs = act(f"open {name}")
      looked[name] = obs
      if seen.search(obs):
        return

  def follow_until(done) -> None:
    while not done() and len(actions) < max_len:
      act(expert.next_action(sim))

  if skip_destination and not expert.goal.look:
    order = [n for n in order if w.rtype[by_name[n]] != expert.goal.target_type]
  search(names_of(expert.goal.obj_type))
  follow_until(lambda: bool(sim.held) or sim.won)
  if expert.goal.look and not sim.won:
    search(names_of(expert.goal.target_type))
  follow_until(lambda: sim.won)
  if not sim.won:
    return solve(env)
  return actions
