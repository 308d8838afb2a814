"""Each iteration's task draw. What a run plays comes from its env's registered spec (`envs.registry`): the
training pool and validation tasks, the env workers, the expert demonstrations and the tokenizer corpus.

The tasks are fixed across run seeds, as a benchmark's are, so seed-to-seed spread measures training randomness (init,
data order, sampling), not a different task set per seed. The draw for iteration i is a pure function of (seed, i): a
resumed run replays the same tasks as an uninterrupted one without storing any data-loader state.
"""
from __future__ import annotations

from typing import Any, Callable, List, Optional, Sequence, Tuple

import numpy as np


def iteration_tasks(pool: Sequence[str], n: int, seed: int, iteration: int) -> List[str]:
  """n distinct tasks for one iteration (with replacement across iterations), a pure function of (seed, i)."""
  if n > len(pool):
    raise ValueError(f"grpo.tasks_per_iteration={n} exceeds the {len(pool)} training tasks")
  rng = np.random.default_rng([seed, iteration])
  return [pool[i] for i in rng.choice(len(pool), n, replace=False)]


def parse_task_phases(spec: str) -> List[Tuple[int, Tuple[str, ...]]]:
  """`grpo.task_phases` -> [(first iteration, groups)] in order: "look_at_obj_in_light@1,pick_and_place@9" trains on
  Look tasks from iteration 1 and on Pick tasks from iteration 9 on ("a+b" draws from both). "" -> [] (no phases)."""
  if not spec.strip():
    return []
  phases = []
  for part in spec.split(","):
    groups, sep, start = part.strip().partition("@")
    names = tuple(g.strip() for g in groups.split("+") if g.strip())
    if not sep or not names or not start.strip().isdigit():
      raise ValueError(f"grpo.task_phases: {part.strip()!r} is not 'group[+group]@iteration' "
                       f"(e.g. 'look_at_obj_in_light@1,pick_and_place@9')")
    phases.append((int(start), names))
  starts = [s for s, _ in phases]
  if starts[0] != 1 or starts != sorted(set(starts)):
    raise ValueError(f"grpo.task_phases: the first phase must start at iteration 1 and each later one after it, "
                     f"got starts {starts}")
  return phases


def phase_pools(pool: Sequence[Any], group_of: Optional[Callable[[Any], Optional[str]]], spec: str, env_name: str,
                tasks_per_iteration: int) -> List[Tuple[int, List[Any]]]:
  """[(first iteration, the training tasks of that phase's groups)], checked once when the run starts: every group
  has training tasks, every phase enough for one iteration's draw. [] when `spec` is "" (the whole pool always)."""
  phases = parse_task_phases(spec)
  if phases and group_of is None:
    raise ValueError(f"grpo.task_phases: env {env_name!r} does not group its tasks (its EnvSpec has no task_group)")
  out = []
  for start, groups in phases:
    tasks = [t for t in pool if group_of(t) in groups]
    found = {group_of(t) for t in tasks}
    missing = [g for g in groups if g not in found]
    if missing:
      present = sorted({str(group_of(t)) for t in pool})
      raise ValueError(f"grpo.task_phases: no training tasks of group(s) {missing}; the pool has {present}")
    if len(tasks) < tasks_per_iteration:
      raise ValueError(f"grpo.task_phases: the phase from iteration {start} ({'+'.join(groups)}) has {len(tasks)} "
                       f"training task(s), fewer than grpo.tasks_per_iteration={tasks_per_iteration}")
    out.append((start, tasks))
  return out


def phase_pool(pool: Sequence[Any], phases: List[Tuple[int, List[Any]]], iteration: int) -> Sequence[Any]:
  """The tasks iteration `iteration` draws from: the latest phase started by then, or the whole pool."""
  current = [tasks for start, tasks in phases if start <= iteration]
  return current[-1] if current else pool
