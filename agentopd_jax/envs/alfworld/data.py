"""Find the games of a split, in generated data or the real `alfworld-download` layout, with alfworld's filters.

Both layouts are `<root>/json_2.1.1/{train,valid_seen,valid_unseen}/<task>-<Obj>-<mrecep>-<Recep>-<scene>/<trial>/`
holding `traj_data.json` and `game.tw-pddl`. Like alfworld's `AlfredTWEnv.collect_game_files`, a game is skipped when
its path mentions `movable` or `Sliced`, its task type is not requested, its game file is missing, or the file does not
say `"solvable": true`. Unlike it, the list is sorted, so a split reads the same on every machine, and a damaged
`traj_data.json` or game file is an error naming it (`datafiles.DataFileError`) rather than a bare KeyError.
"""
from __future__ import annotations

import os
from collections import defaultdict
from typing import Dict, Iterable, List, Optional

from agentopd_jax.envs import datafiles
from agentopd_jax.envs.alfworld.vocab import TASK_TYPES

SPLITS = ("train", "valid_seen", "valid_unseen")  # alfworld's train / eval_in_distribution / eval_out_of_distribution


def data_root(root: Optional[str] = None) -> str:
  return os.path.expanduser(root or os.environ.get("ALFWORLD_DATA") or "~/.cache/alfworld")


def task_type_of(gamefile: str) -> str:
  """The task type a game path names (verl-agent derives per-type success from it the same way)."""
  for task in TASK_TYPES.values():
    if task in gamefile:
      return task
  raise ValueError(f"no ALFWorld task type in {gamefile}")


def game_files(split: str, root: Optional[str] = None, task_types: Optional[Iterable[str]] = None) -> List[str]:
  """Sorted `game.tw-pddl` paths of a split; `task_types` are names or alfworld's ids 1-6 (default: all six)."""
  wanted = {TASK_TYPES.get(t, t) for t in (task_types or TASK_TYPES.values())}
  base = os.path.join(data_root(root), "json_2.1.1", split)
  out = []
  for folder, _, files in os.walk(base):
    if "traj_data.json" not in files or "movable" in folder or "Sliced" in folder:
      continue
    traj = os.path.join(folder, "traj_data.json")
    if datafiles.field(datafiles.read_json(traj), "task_type", str, traj) not in wanted:
      continue
    path = os.path.join(folder, "game.tw-pddl")
    if os.path.exists(path) and _solvable(path):
      out.append(path)
  return sorted(out)


def _solvable(path: str) -> bool:
  return bool(datafiles.field(datafiles.read_json(path), "solvable", bool, path, required=False))


def by_task_type(gamefiles: Iterable[str]) -> Dict[str, List[str]]:
  out: Dict[str, List[str]] = defaultdict(list)
  for path in gamefiles:
    out[task_type_of(path)].append(path)
  return dict(out)
