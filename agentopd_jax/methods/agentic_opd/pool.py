"""The teacher pool of Agentic-OPD, built from a finished GRPO run's checkpoint pool (research/methods.md §2.1-2.2).

Student = the best-validation checkpoint (or a given step) with solved set P_0; teachers = every other checkpoint,
each with its solved set Q_i on the run's fixed validation panel. Both come from the outcome records that
`storage/checkpoints.CheckpointPool` stores in every checkpoint, under one of `eval.coverage.SOLVED_RULES`:
"any" (the default) counts a problem as solved when some validation attempt succeeded (the authors' EM > 0 with
greedy n=1); "majority" when more than half did (for runs validated with several sampled attempts). A checkpoint
saved without outcomes gets them from the caller's `evaluate(step)` (the OPD trainer plays it on the panel).

Held-out selection (`split_panel`, `agentic_opd.selection_panel="held_out"`): the student's choice, the solved sets
and the scheduler's universe read only the selection half of the validation panel (the first half of each task
group's problems), so the success reported on the other half (`val_report/`) is measured on problems no choice has
seen, every group on both sides; with `selection=None` they read the whole panel.

Optional startup pruning (the authors' older version): drop teacher i when Q_i ⊆ Q_j for some j ≠ i; of equal sets
the lowest step stays. The newest authors' code keeps every teacher eligible, hence off by default.

Every checkpoint gets a content hash (sha256 over its directory), recorded in the authors' manifest format
`{"version": 1, "teachers": [{"name", "path", "step", "sha256"}]}`, so a run that later reads the manifest knows it
distils from exactly the checkpoints that were analysed, not ones rewritten since.
"""
from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import Dict, List, Optional

from agentopd_jax.eval.coverage import SOLVED_RULES, solved_set
from agentopd_jax.storage.atomic import atomic_write_json
from agentopd_jax.storage.checkpoints import CheckpointPool, checkpoint_sha256
from agentopd_jax.methods.agentic_opd import hcn

MANIFEST_VERSION = 1


@dataclasses.dataclass(frozen=True)
class TeacherEntry:
  """One checkpoint of the run (a teacher, or the student's own record): its identity, solved set and outcomes.

  outcomes: {problem id: (successes, attempts)} from the checkpoint's validation record (for rollout-level routing
  that compares teacher and student success counts); left out of the hash.
  """
  name: str
  path: str
  step: int
  sha256: str
  solved: frozenset[str]
  outcomes: Mapping[str, tuple[int, int]] = dataclasses.field(default_factory=dict, hash=False, repr=False)


@dataclasses.dataclass(frozen=True)
class TeacherPool:
  """The student's record, the teachers (ascending step) and the steps pruning dropped, of the run in `run_dir`."""
  run_dir: str
  solved_rule: str
  student: TeacherEntry
  teachers: tuple[TeacherEntry, ...]
  pruned: tuple[int, ...] = ()

  @property
  def steps(self) -> list[int]:
    return [t.step for t in self.teachers]

  @property
  def problems(self) -> frozenset[str]:
    """The validation panel U: every problem the student or a teacher was evaluated on."""
    return frozenset().union(self.student.outcomes, *(t.outcomes for t in self.teachers))

  def teacher(self, step: int) -> TeacherEntry:
    for t in self.teachers:
      if t.step == step:
        return t
    raise KeyError(f"step {step} is not a teacher of {self.run_dir}; teachers are steps {self.steps}")


Evaluate = Callable[[int], Mapping[str, tuple[int, int]]]  # step -> outcomes on the validation panel


def checkpoint_outcomes(pool: CheckpointPool, step: int,
                        evaluate: Evaluate | None = None) -> Mapping[str, tuple[int, int]]:
  """The validation outcomes recorded in checkpoint `step`; when it has none, `evaluate(step)`'s (the OPD trainer
  passes one that plays the validation panel), else a clear error."""
  outcomes = pool.metadata(step)["outcomes"]
  if outcomes is None and evaluate is not None:
    return evaluate(step)
  if outcomes is None:
    raise ValueError(f"checkpoint step {step} in {pool.directory} has no validation outcomes (it was saved without "
                     f"validation; every checkpoint experiments/train.py writes has them): leave it out of the pool, "
                     f"or build the pool with an `evaluate` function")
  return outcomes


def split_panel(panel: Sequence[str], group_of: Callable[[str], Optional[str]] = lambda problem: None
                ) -> tuple[frozenset[str], frozenset[str]]:
  """(selection half, report half) of the validation panel's problem ids in play order, split within each group
  (`group_of`, e.g. ALFWorld's task type; problems of no group form one): its first ceil(n/2) distinct problems
  and the rest. Choosing on one half and reporting the other keeps the choice from inflating the reported success;
  splitting each group keeps every group on both sides, where a panel in play order (ALFWorld's games sorted by
  task type) would put whole types on one side, and per-type success could not be reported."""
  ids = list(dict.fromkeys(panel))
  if len(ids) < 2:
    raise ValueError(f"agentic_opd.selection_panel='held_out' needs a validation panel of at least 2 problems "
                     f"(validation.num_tasks), got {len(ids)}")
  groups: Dict[Optional[str], List[str]] = {}
  for problem in ids:
    groups.setdefault(group_of(problem), []).append(problem)
  selection = {p for members in groups.values() for p in members[:-(-len(members) // 2)]}
  return frozenset(selection), frozenset(ids) - selection


def restricted(outcomes: Mapping[str, tuple[int, int]],
               problems: Collection[str] | None) -> Mapping[str, tuple[int, int]]:
  """The outcomes of `problems` only (None: `outcomes` itself)."""
  return outcomes if problems is None else {q: o for q, o in outcomes.items() if q in problems}


def success_rate(outcomes: Mapping[str, tuple[int, int]]) -> float | None:
  """Successes over attempts, every attempt weighing the same (as `val/success_rate`); None without attempts."""
  attempts = sum(a for _, a in outcomes.values())
  return sum(s for s, _ in outcomes.values()) / attempts if attempts else None


def best_step(entries: Iterable[TeacherEntry]) -> int:
  """The step of the highest success over the entries' (restricted) outcomes; ties go to the newer step, as
  `CheckpointPool.best_step` breaks them on the recorded `val/success_rate`."""
  rates = {e.step: success_rate(e.outcomes) for e in entries}
  return max((s for s, r in rates.items() if r is not None), key=lambda s: (rates[s], s))


def _entry(pool: CheckpointPool, step: int, rule: str, evaluate: Evaluate | None,
           selection: Collection[str] | None) -> TeacherEntry:
  outcomes = restricted(checkpoint_outcomes(pool, step, evaluate), selection)
  path = os.path.join(pool.directory, str(step))
  return TeacherEntry(name=f"step_{step}", path=path, step=step, sha256=checkpoint_sha256(path),
                      solved=solved_set(outcomes, rule), outcomes=outcomes)


def build_teacher_pool(run_dir: str | os.PathLike, student_step: int | str = "best", prune_dominated: bool = False,
                       solved_rule: str = "any", evaluate: Evaluate | None = None,
                       selection: Collection[str] | None = None) -> TeacherPool:
  """The teacher pool of the GRPO run in `run_dir` (its checkpoints live in `run_dir/checkpoints`).

  student_step: "best" (the pool's best-validation step) or a checkpoint step; every other checkpoint is a teacher.
  prune_dominated: drop teachers whose solved set another teacher's contains (`hcn.prune_dominated`).
  solved_rule: one of `eval.coverage.SOLVED_RULES`. Hashes every checkpoint (reads them once in full).
  evaluate: step -> outcomes, for checkpoints saved without validation outcomes (else they are an error).
  selection: the problems the pool may read (`split_panel`'s selection half; None: all). Every entry's outcomes and
  solved set are restricted to them, and "best" is the best success on them (`best_step`).
  """
  if solved_rule not in SOLVED_RULES:
    raise ValueError(f"solved_rule must be one of {SOLVED_RULES}, got {solved_rule!r}")
  on_selection = selection is not None and student_step == "best"
  with CheckpointPool(os.path.join(os.fspath(run_dir), "checkpoints"), read_only=True) as pool:
    resolved = None if on_selection else pool.resolve_step(student_step, "student_step")
    entries = [_entry(pool, s, solved_rule, evaluate, selection) for s in pool.steps()]
  if selection is not None and not any(e.outcomes for e in entries):
    raise ValueError(f"run {run_dir}: no checkpoint has outcomes on the selection half of the validation panel "
                     f"(agentic_opd.selection_panel='held_out'; its first {len(selection)} problems)")
  student = best_step(entries) if on_selection else resolved
  teachers = [e for e in entries if e.step != student]
  if not teachers:
    raise ValueError(f"run {run_dir} has no checkpoint other than the student's (step {student}): no teachers")
  kept = {t.step for t in (hcn.prune_dominated(teachers) if prune_dominated else teachers)}
  return TeacherPool(run_dir=os.path.abspath(run_dir), solved_rule=solved_rule,
                     student=next(e for e in entries if e.step == student),
                     teachers=tuple(t for t in teachers if t.step in kept),
                     pruned=tuple(t.step for t in teachers if t.step not in kept))


# --- manifest -------------------------------------------------------------------------------------------------

def write_manifest(path: str | os.PathLike, teachers: Iterable[TeacherEntry]) -> None:
  """Writes the authors' manifest for `teachers` atomically (`atomic_write_json`)."""
  atomic_write_json(path, {"version": MANIFEST_VERSION, "teachers": [
      {"name": t.name, "path": t.path, "step": t.step, "sha256": t.sha256} for t in teachers]}, indent=2)


def _manifest_record(path: str, i: int, t) -> tuple[str, str, int, str]:
  """(name, checkpoint path, step, sha256) of teacher `i`; relative paths are relative to the manifest's folder."""
  if not isinstance(t, dict):
    raise ValueError(f"teacher manifest {path}: teachers[{i}] must be an object, got {type(t).__name__}")
  for key, kind in (("name", str), ("path", str), ("step", int), ("sha256", str)):
    if not isinstance(t.get(key), kind) or isinstance(t.get(key), bool):
      raise ValueError(f"teacher manifest {path}: teachers[{i}].{key} must be a {kind.__name__}, got {t.get(key)!r}")
  ckpt = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(path)), t["path"]))
  if os.path.basename(ckpt) != str(t["step"]):
    raise ValueError(f"teacher manifest {path}: teachers[{i}].path {t['path']!r} is not the folder of step {t['step']}")
  return t["name"], ckpt, t["step"], t["sha256"]


def read_manifest(path: str | os.PathLike, solved_rule: str = "any") -> tuple[TeacherEntry, ...]:
  """The teachers a manifest lists, each checked against its checkpoint: a sha256 that no longer matches the
  checkpoint directory is a ValueError naming it. Solved sets are re-read from the checkpoints' outcome records."""
  path = os.fspath(path)
  with open(path) as f:
    doc = json.load(f)
  if not isinstance(doc, dict) or doc.get("version") != MANIFEST_VERSION:
    got = doc.get("version") if isinstance(doc, dict) else type(doc).__name__
    raise ValueError(f"teacher manifest {path}: version must be {MANIFEST_VERSION}, got {got!r}")
  if not isinstance(doc.get("teachers"), list):
    raise ValueError(f"teacher manifest {path}: 'teachers' must be a list")
  entries = []
  for i, t in enumerate(doc["teachers"]):
    name, ckpt, step, sha = _manifest_record(path, i, t)
    actual = checkpoint_sha256(ckpt)
    if actual != sha:
      raise ValueError(f"teacher manifest {path}: checkpoint {ckpt} has changed since the manifest was written "
                       f"(sha256 {actual}, manifest {sha})")
    with CheckpointPool(os.path.dirname(ckpt), read_only=True) as pool:
      outcomes = checkpoint_outcomes(pool, step)
    entries.append(TeacherEntry(name=name, path=ckpt, step=step, sha256=sha, solved=solved_set(outcomes, solved_rule),
                                outcomes=outcomes))
  return tuple(entries)


def run_outcomes(run_dir: str | os.PathLike, student_step: int | str = "best") -> tuple[dict, int]:
  """({step: outcomes} of every checkpoint, the student step) of the run in `run_dir`."""
  with CheckpointPool(os.path.join(run_dir, "checkpoints"), read_only=True) as pool:
    return {s: checkpoint_outcomes(pool, s) for s in pool.steps()}, pool.resolve_step(student_step, "student_step")
