"""A game file read into the static facts, names and indexes the fast engine and the expert work from.

Entity names follow alfworld's `Demangler` (what `AlfredDemangler(shuffle=False)` gives the real engine): the name
is the id's part before the first `_bar_` (plus `basin` when the id mentions a basin), and instances of a name are
numbered over the sorted ids by popping from [1..k], so the first sorted id gets the highest number. Entities are the
arguments of the initial facts, exactly the set TextWorld builds its entity table from.
"""
from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Dict, FrozenSet, List, Mapping, Optional, Tuple, Union

from agentopd_jax.envs import datafiles
from agentopd_jax.envs.alfworld import grammar as tw_grammar
from agentopd_jax.envs.alfworld import pddl, vocab

# Predicates some action changes; every other predicate is fixed for the whole episode. `not_inreceptacle` is the fact
# TextWorld keeps for the negative effect of `take` (alfred.twl2's `look` reads it; see FastEngine._next_to).
DYNAMIC = frozenset({"atlocation", "inreceptacle", "not_inreceptacle", "objectatlocation", "holds", "holdsany",
                     "opened", "isclean", "ishot", "iscool", "istoggled", "ison", "issliced"})
KNIFE_TYPES = frozenset(k.lower() + "type" for k in vocab.KNIVES)  # what SliceObject accepts as the knife


def demangle(ids) -> Dict[str, str]:
  """Display name of every entity id (alfworld `Demangler`, no shuffling)."""
  ids = sorted(ids)

  def base(i: str) -> str:
    return i.split("_bar_", 1)[0] + ("basin" if "basin" in i else "")

  numbers = {name: list(range(1, k + 1)) for name, k in Counter(base(i) for i in ids if "_bar_" in i).items()}
  names = {}
  for i in ids:
    if "_bar_" in i:
      names[i] = f"{base(i)} {numbers[base(i)].pop()}"
    else:
      text = i
      for word, char in (("_minus_", "-"), ("_plus_", "+"), ("_dot_", "."), ("_comma_", ",")):
        text = text.replace(word, char)
      names[i] = f"{text} "
  return names


def _unary(facts: pddl.Facts, pred: str) -> FrozenSet[str]:
  return frozenset(args[0] for args in facts.get(pred, ()))


@dataclass
class World:
  gamefile: Optional[str]
  version: str
  task_text: str
  help_text: Optional[str]
  objects: Dict[str, str]
  init: pddl.Facts
  goal: list
  names: Dict[str, str]
  agent: str
  rtype: Dict[str, str]  # receptacle -> its type constant, e.g. "fridgetype"
  otype: Dict[str, str]  # object -> its type constant
  recep_locs: List[Tuple[str, str]]  # sorted (receptacle, location) pairs
  receps_at: Dict[str, List[str]]  # location -> receptacles there, sorted
  openable: FrozenSet[str]
  pickupable: FrozenSet[str]
  cleanable: FrozenSet[str]
  heatable: FrozenSet[str]
  coolable: FrozenSet[str]
  toggleable: FrozenSet[str]
  sliceable: FrozenSet[str]
  receptacle_objects: FrozenSet[str]
  can_contain: FrozenSet[Tuple[str, str]]  # (rtype, otype)
  inside_objects: Dict[str, List[str]]  # receptacle-object -> objects in it (never changes in ALFWorld text)


def load(game: Union[str, Mapping]) -> World:
  """Read a `game.tw-pddl` file (path or its parsed JSON); one that is damaged or not an ALFWorld game is a
  `DataFileError` naming the file and the field at fault."""
  path = game if isinstance(game, str) else None
  where = path or "ALFWorld game"
  if path is not None:
    game = datafiles.read_json(path)
  text, grammar = (datafiles.field(game, key, str, where) for key in ("pddl_problem", "grammar"))
  try:
    problem = pddl.parse_problem(text)
  except ValueError as e:
    raise datafiles.DataFileError(f"{where}: field 'pddl_problem' is not a PDDL problem: {e}") from None
  facts = pddl.facts_of(problem.init)
  if not facts.get("atlocation"):
    raise datafiles.DataFileError(f"{where}: field 'pddl_problem' places no agent (no atLocation fact)")
  try:  # the grammar's rules are JSON blocks of {name: [{"rhs": text}, ...]}
    rules = tw_grammar.rules(grammar)
    task_text = tw_grammar.rule_text(grammar, "task")
  except (ValueError, KeyError, IndexError, TypeError) as e:
    raise datafiles.DataFileError(f"{where}: field 'grammar' is not a TextWorld grammar with a 'task' rule "
                                  f"({type(e).__name__}: {e})") from None
  entities = {arg for args_set in facts.values() for args in args_set for arg in args}
  recep_locs = sorted(facts.get("receptacleatlocation", ()))
  receps_at: Dict[str, List[str]] = defaultdict(list)
  for r, loc in recep_locs:
    receps_at[loc].append(r)
  inside: Dict[str, List[str]] = defaultdict(list)
  for inner, outer in sorted(facts.get("inreceptacleobject", ())):
    inside[outer].append(inner)
  return World(
      gamefile=path,
      version=tw_grammar.version_of(grammar),
      task_text=task_text,
      help_text=tw_grammar.rule_text(grammar, "help.feedback") if "help.feedback" in rules else None,
      objects=problem.objects,
      init=facts,
      goal=problem.goal,
      names=demangle(entities),
      agent=sorted(facts["atlocation"])[0][0],
      rtype=dict(facts.get("receptacletype", ())),
      otype=dict(facts.get("objecttype", ())),
      recep_locs=recep_locs,
      receps_at=dict(receps_at),
      openable=_unary(facts, "openable"),
      pickupable=_unary(facts, "pickupable"),
      cleanable=_unary(facts, "cleanable"),
      heatable=_unary(facts, "heatable"),
      coolable=_unary(facts, "coolable"),
      toggleable=_unary(facts, "toggleable"),
      sliceable=_unary(facts, "sliceable"),
      receptacle_objects=_unary(facts, "isreceptacleobject"),
      can_contain=frozenset(facts.get("cancontain", ())),
      inside_objects=dict(inside),
  )
