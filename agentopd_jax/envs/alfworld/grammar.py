"""The two ALFWorld text versions, built at run time from the domain and grammar the installed alfworld wheel ships.

alfworld 0.4 (game files `json_2.1.2`/`2.1.3`) changed the text: `put {o} in/on {r}` became `move {o} to {r}`, the
go-to feedback names the receptacle instead of leaking `loc N`, and a `help` action was added (alfworld's
`scripts/patch_tw-pddl.py` lists exactly these edits). The wheel (0.4.2) ships the new files, so version "2.1.3" is
them verbatim and "2.1.1" undoes those edits. Nothing is copied into this repository: the files are read from the
installed package, and reading them is the only place this package needs alfworld itself.
"""
from __future__ import annotations

import functools
import json
import os
import re
from typing import Dict, Tuple

VERSIONS = ("2.1.1", "2.1.3")
DEFAULT_VERSION = "2.1.3"

# (2.1.3 text, 2.1.1 text) pairs of the grammar edits.
_GRAMMAR_EDITS = (
    ("You arrive at {r.name}.", "You arrive at {lend.name}."),
    ("move {o} to {r}", "put {o} in/on {r}"),
    ("You move the {o.name} to the {r.name}.", "You put the {o.name} in/on the {r.name}."),
)


def _wheel_file(name: str) -> str:
  import importlib.util
  spec = importlib.util.find_spec("alfworld")
  if spec is None or not spec.submodule_search_locations:
    raise ImportError("alfworld is not installed: `pip install alfworld==0.4.2` provides alfred.pddl and alfred.twl2")
  with open(os.path.join(list(spec.submodule_search_locations)[0], "data", name)) as f:
    return f.read()


def _drop_balanced(text: str, start: str) -> str:
  """Remove the parenthesised PDDL block that begins with `start`, plus the blank lines after it."""
  i = text.index(start)
  depth = 0
  for j in range(i, len(text)):
    depth += {"(": 1, ")": -1}.get(text[j], 0)
    if depth == 0:
      break
  return text[:i] + text[j + 1:].lstrip("\n")


@functools.lru_cache(maxsize=None)
def game_logic(version: str = DEFAULT_VERSION) -> Tuple[str, str]:
  """(pddl_domain, grammar) of a text version, with the goal still the placeholder `UNKNOWN GOAL`."""
  if version not in VERSIONS:
    raise ValueError(f"unknown ALFWorld text version {version!r}; expected one of {VERSIONS}")
  domain, grammar = _wheel_file("alfred.pddl"), _wheel_file("alfred.twl2")
  if version == "2.1.3":
    return domain, grammar
  domain = _drop_balanced(domain, "(:action help")
  grammar = re.sub(r"\naction help \{.*?\n\}\n", "\n", grammar, flags=re.S)
  for new, old in _GRAMMAR_EDITS:
    grammar = grammar.replace(new, old)
  return domain, grammar


def with_goal(grammar: str, goal: str) -> str:
  """Substitute the task sentence the way alfworld's `add_task_to_grammar` does."""
  return grammar.replace("UNKNOWN GOAL", goal)


def version_of(grammar: str) -> str:
  """Which text version a game file's grammar is (2.1.1 files say `put {o} in/on {r}`)."""
  return "2.1.1" if "put {o} in/on {r}" in grammar else "2.1.3"


def rules(grammar: str) -> Dict[str, list]:
  """All production rules of a twl2 grammar: the JSON of its `grammar :: \"\"\"...\"\"\"` blocks, merged."""
  out = {}
  for block in re.findall(r'grammar :: """(.*?)"""', grammar, flags=re.S):
    out.update(json.loads("\n".join(line for line in block.split("\n") if not line.lstrip().startswith("#"))))
  return out


def rule_text(grammar: str, name: str) -> str:
  """The unconditional text of a rule as TextWorld renders it (its parser skips whitespace before the first token)."""
  return rules(grammar)[name][0]["rhs"].lstrip()
