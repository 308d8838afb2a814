"""Pure-Python ALFWorld engine: the same game files and, step for step, the same text as the real engine.

The real engine grounds alfworld's PDDL domain with Fast Downward and renders text through TextWorld's grammar on every
step; here each action schema of `alfred.pddl` and each feedback rule of `alfred.twl2` is written out directly, for both
text versions. Behaviour the tests pin against the real engine (`tests/test_alfworld_engines.py`):
* admissible commands are every applicable action, de-duplicated and sorted; `go to` the location the agent already
  stands at is not one (Fast Downward drops the no-op), and a held object is the only examinable object;
* anything else, after `strip()`, is "Nothing happens." and changes nothing (the step still counts);
* lists follow the sorted entity ids, always with the article "a", joined by ", " and ", and ", or read "nothing";
* the goal is checked after every step; `done` when won or after 50 steps; score 1 iff won; once done, every step
  returns the final step's result unchanged (alfworld's env is textworld's batch env, which does that);
* `look` lists, "next to" the receptacles here, each object here once per receptacle here it was taken out of and not
  put back into since the reset (`_next_to`).
"""
from __future__ import annotations

from typing import Dict, List, Mapping, Tuple, Union

from agentopd_jax.envs.alfworld import pddl
from agentopd_jax.envs.alfworld.world import DYNAMIC, KNIFE_TYPES, World, load

MAX_STEPS = 50
NOTHING = "Nothing happens."
INTRO = "-= Welcome to TextWorld, ALFRED! =-\n\n{look}\n\n{task}"


def listing(items: List[str]) -> str:
  if not items:
    return "nothing"
  if len(items) == 1:
    return items[0]
  return ", ".join(items[:-1]) + ", and " + items[-1]


class FastEngine:
  """reset() -> (obs, infos); step(action) -> (obs, score, done, infos), like `TextWorldEngine`."""

  def __init__(self, game: Union[str, Mapping, World], max_steps: int = MAX_STEPS):
    self.world = game if isinstance(game, World) else load(game)
    self.max_steps = max_steps
    w = self.world
    locations = {loc for _, loc in w.recep_locs} | {loc for _, loc in w.init["atlocation"]}
    self._goto = {here: {f"go to {w.names[r]}": ("goto", r, loc) for r, loc in w.recep_locs if loc != here}
                  for here in locations}
    self.facts: pddl.Facts = {}

  # ----------------------------------------------------------------------------------------------- state
  def reset(self) -> Tuple[str, Dict]:
    self.facts = {k: (set(v) if k in DYNAMIC else v) for k, v in self.world.init.items()}
    for pred in DYNAMIC:
      self.facts.setdefault(pred, set())
    self.steps = 0
    self.done = False
    self._refresh()
    return INTRO.format(look=self._intro_look(), task=self.world.task_text), self._infos()

  def step(self, action: str) -> Tuple[str, int, bool, Dict]:
    if self.done:  # textworld's batch env copies a finished game's last step over instead of playing on
      return self._final
    command = self._commands.get(action.strip())
    obs = NOTHING if command is None else getattr(self, "_do_" + command[0])(*command[1:])
    self.steps += 1
    self._refresh()
    self.done = self.won or self.steps >= self.max_steps
    self._final = obs, int(self.won), self.done, self._infos()
    return self._final

  def copy(self) -> "FastEngine":
    """An independent engine in the same state (static facts are shared): for planning and oracles."""
    other = object.__new__(FastEngine)
    other.__dict__.update(self.__dict__)
    other.facts = {k: (set(v) if k in DYNAMIC else v) for k, v in self.facts.items()}
    return other

  @property
  def location(self) -> str:
    return next(loc for a, loc in self.facts["atlocation"] if a == self.world.agent)

  @property
  def held(self) -> List[str]:
    return sorted(o for a, o in self.facts["holds"] if a == self.world.agent)

  def contents(self, r: str) -> List[str]:
    return sorted(o for o, rr in self.facts["inreceptacle"] if rr == r)

  def is_open(self, r: str) -> bool:
    return (r,) in self.facts["opened"]

  def has(self, pred: str, obj: str) -> bool:
    return (obj,) in self.facts[pred]

  @property
  def admissible_commands(self) -> List[str]:
    return self._admissible

  def _refresh(self) -> None:
    self.won = pddl.satisfied(self.world.goal, self.facts, self.world.objects)
    self._commands = self._applicable()
    self._admissible = sorted(self._commands)

  def _infos(self) -> Dict:
    return {"won": self.won, "admissible_commands": self._admissible, "extra.gamefile": self.world.gamefile}

  # ----------------------------------------------------------------------------------------------- actions
  def _applicable(self) -> Dict[str, tuple]:
    w, f, n = self.world, self.facts, self.world.names
    loc, held = self.location, self.held
    cmds = {"look": ("look",), "inventory": ("inventory",)}
    if w.help_text is not None:
      cmds["help"] = ("help",)
    cmds.update(self._goto[loc])
    hands_free = (w.agent,) not in f["holdsany"]
    put = "put {} in/on {}" if w.version == "2.1.1" else "move {} to {}"
    for r in w.receps_at.get(loc, ()):
      rn, rt = n[r], w.rtype.get(r)
      cmds[f"examine {rn}"] = ("examine_receptacle", r)
      reachable = r not in w.openable or self.is_open(r)
      if r in w.openable:
        verb = "close" if self.is_open(r) else "open"
        cmds[f"{verb} {rn}"] = (verb, r)
      for o in self.contents(r):
        if reachable and hands_free and o in w.pickupable:
          cmds[f"take {n[o]} from {rn}"] = ("take", o, r)
        if o in w.toggleable:
          cmds[f"use {n[o]}"] = ("toggle", o)
      for o in held:
        if reachable and (rt, w.otype.get(o)) in w.can_contain:
          cmds[put.format(n[o], rn)] = ("put", o, r)
        for verb, rtype, able in (("heat", "microwavetype", w.heatable), ("cool", "fridgetype", w.coolable),
                                  ("clean", "sinkbasintype", w.cleanable)):
          if rt == rtype and o in able:
            cmds[f"{verb} {n[o]} with {rn}"] = (verb, o, r)
    for o in held:
      cmds[f"examine {n[o]}"] = ("examine_object", o)
      if w.otype.get(o) in KNIFE_TYPES:
        for co, where in f["objectatlocation"]:
          if where == loc and co in w.sliceable:
            cmds[f"slice {n[co]} with {n[o]}"] = ("slice", co, o)
    return cmds

  def _do_goto(self, r: str, loc: str) -> str:
    at = self.facts["atlocation"]
    at.discard((self.world.agent, self.location))
    at.add((self.world.agent, loc))
    where = self.world.names[loc if self.world.version == "2.1.1" else r]
    return f"You arrive at {where}. {self._examine(r)}"

  def _do_open(self, r: str) -> str:
    self.facts["opened"].add((r,))
    return f"You open the {self.world.names[r]}. {self._examine(r)}"

  def _do_close(self, r: str) -> str:
    self.facts["opened"].discard((r,))
    return f"You close the {self.world.names[r]}."

  def _do_take(self, o: str, r: str) -> str:
    a, f = self.world.agent, self.facts
    f["inreceptacle"].discard((o, r))
    f["not_inreceptacle"].add((o, r))
    f["objectatlocation"].discard((o, self.location))
    f["holds"].add((a, o))
    f["holdsany"].add((a,))
    return f"You pick up the {self.world.names[o]} from the {self.world.names[r]}."

  def _do_put(self, o: str, r: str) -> str:
    a, f, n = self.world.agent, self.facts, self.world.names
    f["inreceptacle"].add((o, r))
    f["not_inreceptacle"].discard((o, r))
    f["objectatlocation"].add((o, self.location))
    f["holds"].discard((a, o))
    f["holdsany"].discard((a,))
    if self.world.version == "2.1.1":
      return f"You put the {n[o]} in/on the {n[r]}."
    return f"You move the {n[o]} to the {n[r]}."

  def _do_heat(self, o: str, r: str) -> str:
    self.facts["ishot"].add((o,))
    self.facts["iscool"].discard((o,))
    return f"You heat the {self.world.names[o]} using the {self.world.names[r]}."

  def _do_cool(self, o: str, r: str) -> str:
    self.facts["iscool"].add((o,))
    self.facts["ishot"].discard((o,))
    return f"You cool the {self.world.names[o]} using the {self.world.names[r]}."

  def _do_clean(self, o: str, r: str) -> str:
    self.facts["isclean"].add((o,))
    return f"You clean the {self.world.names[o]} using the {self.world.names[r]}."

  def _do_toggle(self, o: str) -> str:
    on = self.facts["ison"]
    if (o,) in on:
      on.discard((o,))
    else:
      on.add((o,))
    self.facts["istoggled"].add((o,))
    return f"You turn on the {self.world.names[o]}."  # alfred.twl2 reads isToggled, which is now always set

  def _do_slice(self, co: str, ko: str) -> str:
    self.facts["issliced"].add((co,))
    return f"You sliced the {self.world.names[co]} with the {self.world.names[ko]}."

  def _do_look(self) -> str:
    here, n = self.world.receps_at.get(self.location), self.world.names
    if here:
      return (f"You are facing the {listing([n[r] for r in here])}. "
              f"Next to it, you see {listing(['a ' + n[o] for o in self._next_to(here)])}.")
    return "You are in the middle of a room. Looking quickly around you, you see nothing."

  def _next_to(self, here: List[str]) -> List[str]:
    """alfred.twl2's `list_objects_on_the_floor`: one entry per assignment of `objectatlocation(o, l) &
    receptacleatlocation(r, l) & not_inreceptacle(o, r)` at the agent's location l, in (o, r) id order. TextWorld
    adds a `not_` fact for each negative effect and keeps it until a positive effect on the same atom, so
    `not_inreceptacle(o, r)` holds from `take o from r` until o is put back into r: an object moved between
    receptacles sharing a spot is listed once for each of them it left."""
    loc, left = self.location, self.facts["not_inreceptacle"]
    return [o for o, at in sorted(self.facts["objectatlocation"]) if at == loc for r in here if (o, r) in left]

  def _do_inventory(self) -> str:
    if (self.world.agent,) not in self.facts["holdsany"]:
      return "You are not carrying anything."
    return f"You are carrying: {listing(['a ' + self.world.names[o] for o in self.held])}."

  def _do_help(self) -> str:
    return self.world.help_text

  def _do_examine_receptacle(self, r: str) -> str:
    return self._examine(r)

  def _do_examine_object(self, o: str) -> str:
    n = self.world.names[o]
    if o in self.world.receptacle_objects:
      inside = listing(["a " + self.world.names[i] for i in self.world.inside_objects.get(o, ())])
      return f"This is a normal {n}. In it, you see {inside}."
    return object_text(n, self.has("isclean", o), self.has("ishot", o), self.has("iscool", o), self.has("issliced", o),
                       o in self.world.sliceable, self.has("istoggled", o) and o in self.world.toggleable)

  # ----------------------------------------------------------------------------------------------- text
  def _examine(self, r: str) -> str:
    n = self.world.names
    if r in self.world.openable and not self.is_open(r):
      return f"The {n[r]} is closed."
    seen = listing(["a " + n[o] for o in self.contents(r)])
    if r in self.world.openable:
      return f"The {n[r]} is open. In it, you see {seen}."
    return f"On the {n[r]}, you see {seen}."

  def _intro_look(self) -> str:
    if self.world.receps_at.get(self.location):
      return self._do_look()
    appliances = listing(["a " + self.world.names[r] for r, _ in self.world.recep_locs])
    return f"You are in the middle of a room. Looking quickly around you, you see {appliances}."


def object_text(name: str, clean: bool, hot: bool, cool: bool, sliced: bool, sliceable: bool, on: bool) -> str:
  """The first matching rule of alfred.twl2's `examineObject.feedback` (note "cold", not "cool", when only cool)."""
  rules = ((clean and hot and sliced, "a hot and clean sliced"), (clean and cool and sliced, "a cool and clean sliced"),
           (clean and sliced, "a clean sliced"), (hot and sliced, "a hot sliced"), (cool and sliced, "a cool sliced"),
           (clean and hot, "a hot and clean"), (clean and cool, "a cool and clean"), (hot, "a hot"), (clean, "a clean"),
           (cool, "a cold"))
  for cond, text in rules:
    if cond:
      return f"This is {text} {name}."
  if on:
    return f"This {name} is on."
  if sliceable and sliced:
    return f"This is a sliced {name}."
  return f"There's nothing special about {name}."
