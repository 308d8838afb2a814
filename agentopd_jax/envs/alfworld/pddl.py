"""PDDL problem text for ALFWorld games: write it, read it back, and decide whether its goal holds.

The fast engine and the expert read the same `pddl_problem` string the real engine hands to Fast Downward. Names are
lower-cased on reading because Fast Downward lower-cases every token, and TextWorld shows entities under those names.
Goals use `and`, `or`, `not`, `exists`, `=` and atoms, which is all ALFWorld's goal library needs.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Dict, Iterator, List, Sequence, Set, Tuple

Facts = Dict[str, Set[Tuple[str, ...]]]

_MANGLE = (("-", "_minus_"), ("|", "_bar_"), ("+", "_plus_"), (".", "_dot_"), (",", "_comma_"))


def mangle(alfred_id: str) -> str:
  """ALFRED object id (`Apple|-01.23|+00.95|-02.10`) -> PDDL name, as alfworld writes its problems."""
  for char, word in _MANGLE:
    alfred_id = alfred_id.replace(char, word)
  return alfred_id


def parse_sexp(text: str):
  """Nested lists of lower-cased tokens; `;` starts a comment. Text that is not one balanced parenthesised
  expression (a truncated file, say) is a ValueError."""
  tokens = re.findall(r"[()]|[^\s()]+", re.sub(r";[^\n]*", "", text).lower())
  stack: List[list] = [[]]
  for tok in tokens:
    if tok == "(":
      stack.append([])
    elif tok == ")":
      if len(stack) == 1:
        raise ValueError("unbalanced ')'")
      done = stack.pop()
      stack[-1].append(done)
    else:
      stack[-1].append(tok)
  if len(stack) > 1:
    raise ValueError(f"{len(stack) - 1} unclosed '('")
  if len(stack[0]) != 1 or not isinstance(stack[0][0], list):
    raise ValueError("expected one parenthesised expression")
  return stack[0][0]


def typed_list(items: Sequence[str]) -> List[Tuple[str, str]]:
  """`a b - t c - u` -> [(a, t), (b, t), (c, u)]."""
  out, pending = [], []
  it = iter(items)
  for tok in it:
    if tok == "-":
      kind = next(it, None)
      if not isinstance(kind, str):
        raise ValueError(f"a '-' without a type after {pending}")
      out += [(name, kind) for name in pending]
      pending = []
    else:
      pending.append(tok)
  return out + [(name, "object") for name in pending]


@dataclass
class Problem:
  objects: Dict[str, str]  # name -> type
  init: List[Tuple[str, ...]]  # atoms (predicate, *args); numeric fluents dropped
  goal: list  # parsed goal formula


def parse_problem(text: str) -> Problem:
  """The objects, initial atoms and goal of a `(define (problem ...) ...)`; anything else is a ValueError."""
  parts = [part for part in parse_sexp(text)[1:] if isinstance(part, list) and part and isinstance(part[0], str)]
  sections = {part[0]: part[1:] for part in parts}
  if not all(isinstance(name, str) for name in sections.get(":objects", [])):
    raise ValueError("(:objects ...) holds a parenthesised expression, not names and types")
  init = [atom for atom in sections.get(":init", []) if atom[:1] != ["="]]  # numeric fluents are dropped
  bad = [atom for atom in init if not (isinstance(atom, list) and atom and all(isinstance(t, str) for t in atom))]
  if bad:
    raise ValueError(f"(:init ...) holds {bad[0]!r}, not an atom")
  if len(sections.get(":goal", ())) != 1 or not isinstance(sections[":goal"][0], list):
    raise ValueError("no (:goal (...)) section")
  return Problem(dict(typed_list(sections.get(":objects", []))), [tuple(atom) for atom in init],
                 sections[":goal"][0])


def facts_of(atoms) -> Facts:
  facts: Facts = {}
  for pred, *args in atoms:
    facts.setdefault(pred, set()).add(tuple(args))
  return facts


def problem_text(name: str, objects: Sequence[Tuple[str, str]], init: Sequence[Tuple[str, ...]], goal: str) -> str:
  """A problem in the layout of alfworld's `initial_state.pddl` files (objects are (name, type) pairs)."""
  lines = [f"(define (problem plan_{name})", "(:domain alfred)", "(:objects"]
  lines += [f"        {obj} - {kind}" for obj, kind in objects]
  lines += ["        )", "    (:init"]
  lines += ["        (" + " ".join(atom) + ")" for atom in init]
  lines += ["        )", goal, ")"]
  return "\n".join(lines) + "\n"


def satisfied(goal, facts: Facts, objects: Dict[str, str]) -> bool:
  """Whether some assignment of the goal's quantified variables makes it true in `facts`."""
  return next(_solve(goal, {}, facts, objects), None) is not None


def _value(term: str, env: Dict[str, str]) -> str:
  return env.get(term) if term.startswith("?") else term


def _solve(f, env: Dict[str, str], facts: Facts, objects: Dict[str, str]) -> Iterator[Dict[str, str]]:
  op = f[0]
  if op == "and":
    yield from _solve_all(sorted(f[1:], key=lambda g: _cost(g, facts)), env, facts, objects)
  elif op == "or":
    for g in f[1:]:
      yield from _solve(g, env, facts, objects)
  elif op == "not":
    _require_bound(f[1], env)
    if next(_solve(f[1], env, facts, objects), None) is None:
      yield env
  elif op == "exists":
    declared = typed_list(f[1])
    local = {v for v, _ in declared}
    for out in _solve(f[2], {**env, **{v: None for v in local}}, facts, objects):
      # A variable no positive atom bound only needs some object of its type to exist.
      if all(out[v] is not None or kind in objects.values() for v, kind in declared):
        yield {k: env[k] if k in local else out[k] for k in env}  # outer bindings come back into scope
  elif op == "=":
    _require_bound(f, env)
    if _value(f[1], env) == _value(f[2], env):
      yield env
  else:
    args = [_value(a, env) for a in f[1:]]
    if None not in args:
      if tuple(args) in facts.get(op, ()):
        yield env
      return
    for fact in facts.get(op, ()):
      out = dict(env)
      for term, value in zip(f[1:], fact):
        bound = _value(term, out)
        if bound is None:
          out[term] = value
        elif bound != value:
          break
      else:
        yield out


def _cost(f, facts: Facts) -> Tuple[int, int]:
  """Conjunct order: atoms over the fewest facts first (they bind variables cheaply), then nested formulas, then the
  tests (`not`, `=`), which need their variables bound whatever order the goal lists them in."""
  if f[0] in ("not", "="):
    return 2, 0
  if f[0] in ("and", "or", "exists"):
    return 1, 0
  return 0, len(facts.get(f[0], ()))


def _require_bound(f, env: Dict[str, str]) -> None:
  free = [t for t in _terms(f) if t.startswith("?") and env.get(t) is None and t in env]
  if free:
    raise ValueError(f"unsupported PDDL goal: it tests {free} before any atom binds them (ALFWorld goals never do)")


def _terms(f) -> Iterator[str]:
  for part in f[1:]:
    if isinstance(part, list):
      yield from _terms(part)
    else:
      yield part


def _solve_all(fs, env, facts, objects) -> Iterator[Dict[str, str]]:
  if not fs:
    yield env
    return
  for out in _solve(fs[0], env, facts, objects):
    yield from _solve_all(fs[1:], out, facts, objects)
