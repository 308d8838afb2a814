"""Teacher pool from a hand-built checkpoint pool: solved sets, student choice, pruning, manifest, hashes, errors, and
the held-out split (selection on the panel's first half, success reported on the rest)."""
import json
import os
import shutil
import types

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agentopd_jax.methods.agentic_opd.config import AgenticOpdConfig
from agentopd_jax.methods.agentic_opd.method import AgenticOpd
from agentopd_jax.methods.agentic_opd.pool import (
  build_teacher_pool,
  checkpoint_sha256,
  read_manifest,
  split_panel,
  write_manifest,
)
from agentopd_jax.storage.checkpoints import CheckpointPool

# step: (val success, outcomes). Solved ("any"): 0 {b}, 5 {a,b}, 10 {a,c} (best), 15 {c,d}, 20 {a,b} (= step 5).
RUN = {
    0: (0.1, {"a": (0, 2), "b": (1, 2), "c": (0, 2), "d": (0, 2)}),
    5: (0.5, {"a": (2, 2), "b": (1, 2), "c": (0, 2), "d": (0, 2)}),
    10: (0.8, {"a": (2, 2), "b": (0, 2), "c": (2, 2), "d": (0, 2)}),
    15: (0.4, {"a": (0, 2), "b": (0, 2), "c": (1, 2), "d": (2, 2)}),
    20: (0.3, {"a": (1, 2), "b": (1, 2), "c": (0, 2), "d": (0, 2)}),
}


def _save(pool, step, value, outcomes):
  params = {"w": jax.random.normal(jax.random.key(step), (4, 8))}
  pool.save(step, {"params": params, "step": np.int32(step)}, metrics={"val/success_rate": value},
            outcomes=outcomes, config={"model": "test"})


def _write_run(tmp_path_factory, name, run):
  """A fake GRPO run's checkpoint pool: {step: (val/success_rate, outcomes)}."""
  path = tmp_path_factory.mktemp(name)
  with CheckpointPool(path / "checkpoints") as pool:
    for step, (value, outcomes) in run.items():
      _save(pool, step, value, outcomes)
  return path


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
  return _write_run(tmp_path_factory, "grpo_run", RUN)


def _solved(pool):
  return {t.step: set(t.solved) for t in pool.teachers}


def test_student_is_best_and_solved_sets(run_dir):
  pool = build_teacher_pool(run_dir)
  assert pool.student.step == 10 and pool.student.solved == {"a", "c"}
  assert pool.steps == [0, 5, 15, 20] and pool.pruned == ()
  assert _solved(pool) == {0: {"b"}, 5: {"a", "b"}, 15: {"c", "d"}, 20: {"a", "b"}}
  assert pool.problems == {"a", "b", "c", "d"}
  t = pool.teacher(15)
  assert t.name == "step_15" and t.path == os.path.join(run_dir, "checkpoints", "15")
  assert t.outcomes == RUN[15][1] and len(t.sha256) == 64
  with pytest.raises(KeyError, match="step 10 is not a teacher"):
    pool.teacher(10)


def test_majority_rule_and_explicit_student(run_dir):
  pool = build_teacher_pool(run_dir, student_step="15", solved_rule="majority")
  assert pool.student.step == 15 and pool.student.solved == {"d"}
  assert _solved(pool) == {0: set(), 5: {"a"}, 10: {"a", "c"}, 20: set()}
  assert build_teacher_pool(run_dir, student_step=0).steps == [5, 10, 15, 20]
  with pytest.raises(ValueError, match="student_step=7: not a checkpoint"):
    build_teacher_pool(run_dir, student_step=7)
  with pytest.raises(ValueError, match="student_step must be 'best', 'latest' or a step"):
    build_teacher_pool(run_dir, student_step="newest")
  with pytest.raises(ValueError, match="solved_rule must be one of"):
    build_teacher_pool(run_dir, solved_rule="all")


def test_prune_dominated(run_dir):
  pool = build_teacher_pool(run_dir, prune_dominated=True)
  # {b} inside {a,b}; steps 5 and 20 solve the same set, so the lower step (5) stays; {c,d} is nobody's subset.
  assert pool.steps == [5, 15] and pool.pruned == (0, 20)


def test_sha256_is_content_and_layout(run_dir, tmp_path):
  ckpt = os.path.join(run_dir, "checkpoints", "5")
  digest = checkpoint_sha256(ckpt)
  assert digest == checkpoint_sha256(ckpt)
  assert digest != checkpoint_sha256(os.path.join(run_dir, "checkpoints", "20"))
  shutil.copytree(ckpt, tmp_path / "copy")
  assert checkpoint_sha256(tmp_path / "copy") == digest  # relative paths: the location does not matter
  os.rename(tmp_path / "copy" / "meta", tmp_path / "copy" / "meta2")
  assert checkpoint_sha256(tmp_path / "copy") != digest  # ... but the file names do
  with pytest.raises(FileNotFoundError, match="no checkpoint directory"):
    checkpoint_sha256(tmp_path / "nope")


def test_manifest_round_trip_and_hash_mismatch(tmp_path_factory):
  run = tmp_path_factory.mktemp("manifest_run")
  with CheckpointPool(run / "checkpoints") as ckpts:
    for step, (value, outcomes) in RUN.items():
      _save(ckpts, step, value, outcomes)
  pool = build_teacher_pool(run)
  path = run / "teachers" / "manifest.json"
  write_manifest(path, pool.teachers)
  doc = json.loads(path.read_text())
  assert doc["version"] == 1
  assert doc["teachers"][1] == {"name": "step_5", "path": pool.teacher(5).path, "step": 5,
                                "sha256": pool.teacher(5).sha256}
  assert os.listdir(run / "teachers") == ["manifest.json"]  # no temp file left behind
  assert read_manifest(path) == pool.teachers
  assert [t.solved for t in read_manifest(path, solved_rule="majority")] == [set(), {"a"}, {"d"}, set()]

  (run / "checkpoints" / "15" / "extra.bin").write_bytes(b"x")  # the checkpoint changed after the manifest
  with pytest.raises(ValueError, match=r"manifest.json: checkpoint .*checkpoints/15 has changed"):
    read_manifest(path)


@pytest.mark.parametrize("doc, match", [
    ({"version": 2, "teachers": []}, "version must be 1"),
    ({"version": 1}, "'teachers' must be a list"),
    ({"version": 1, "teachers": [{"name": "a", "path": "x/5", "step": "5", "sha256": "0"}]}, r"teachers\[0\].step"),
    ({"version": 1, "teachers": [{"name": "a", "path": "x/6", "step": 5, "sha256": "0"}]}, "not the folder of step 5"),
])
def test_bad_manifest(tmp_path, doc, match):
  path = tmp_path / "manifest.json"
  path.write_text(json.dumps(doc))
  with pytest.raises(ValueError, match=match):
    read_manifest(path)


def test_missing_outcomes_is_a_clear_error(tmp_path):
  with CheckpointPool(tmp_path / "checkpoints") as ckpts:
    _save(ckpts, 0, 0.5, {"a": (1, 1)})
    _save(ckpts, 5, 0.2, None)
  with pytest.raises(ValueError, match=r"step 5 in .* has no validation outcomes.*leave it out of the pool"):
    build_teacher_pool(tmp_path)
  # With an `evaluate` function the missing outcomes are computed, for that checkpoint only.
  asked = []
  pool = build_teacher_pool(tmp_path, evaluate=lambda step: asked.append(step) or {"a": (0, 1), "b": (2, 2)})
  assert asked == [5] and pool.teacher(5).solved == frozenset({"b"}) and pool.student.solved == frozenset({"a"})
  with CheckpointPool(tmp_path / "only_student" / "checkpoints") as ckpts:
    _save(ckpts, 0, 0.5, {"a": (1, 1)})
  with pytest.raises(ValueError, match="no teachers"):
    build_teacher_pool(tmp_path / "only_student")


# ---------------------------------------------------------------- held-out selection

# The OPD run's panel in play order (not sorted): selection half d, b, h, a; report half f, c, g, e.
PANEL = ["d", "b", "h", "a", "f", "c", "g", "e"]
SELECTION, REPORT = frozenset("dbha"), frozenset("fcge")
GROUPS = {"d": "pick", "f": "pick", "b": "heat", "c": "heat"}  # the rest have no group


def _outcomes(**won):
  """2 attempts on every panel problem, `won[q]` of them successful (0 if not named)."""
  return {q: (won.get(q, 0), 2) for q in PANEL}


# Recorded best: step 10 (whole panel). On the selection half: 0 -> 1/8, 5 -> 5/8 (best), 10 -> 1/8.
HELD_OUT_RUN = {
    0: (0.1, _outcomes(d=1)),
    5: (0.3, _outcomes(d=2, b=2, h=1)),
    10: (0.6, _outcomes(a=1, f=2, c=2, g=2, e=1)),
}
# The student's validation: selection half solved {d, a} (2 of 4 attempts), report half 3 of 5 attempts.
STUDENT = {"d": (1, 1), "b": (0, 1), "h": (0, 1), "a": (1, 1), "f": (1, 2), "c": (0, 1), "g": (1, 1), "e": (1, 1)}


@pytest.fixture(scope="module")
def held_out_run(tmp_path_factory):
  return _write_run(tmp_path_factory, "held_out_run", HELD_OUT_RUN)


def test_split_panel_keeps_play_order_and_rounds_the_selection_half_up():
  assert split_panel(PANEL) == (SELECTION, REPORT)
  assert split_panel(["z", "y", "x"]) == ({"z", "y"}, {"x"})
  assert split_panel(["z", "z", "y"]) == ({"z"}, {"y"})  # a repeated problem is one problem, on one side
  with pytest.raises(ValueError, match="selection_panel='held_out' needs a validation panel of at least 2"):
    split_panel(["z"])


def test_split_panel_splits_each_group_so_every_group_is_reported():
  """A panel in play order with its groups in runs (ALFWorld's sorted games: every Look before every Pick): a plain
  cut would report no Look; the split within groups puts each group's first half in selection."""
  panel = ["l1", "l2", "l3", "p1", "p2", "p3", "p4", "p5"]
  assert split_panel(panel) == ({"l1", "l2", "l3", "p1"}, {"p2", "p3", "p4", "p5"})
  assert split_panel(panel, lambda p: p[0]) == ({"l1", "l2", "p1", "p2", "p3"}, {"l3", "p4", "p5"})
  assert split_panel(PANEL, GROUPS.get) == (SELECTION, REPORT)  # pick d | f, heat b | c, the ungrouped h a | g e


def test_held_out_pool_reads_only_the_selection_half(held_out_run):
  pool = build_teacher_pool(held_out_run, selection=SELECTION)
  assert pool.student.step == 5  # best on the selection half; the recorded (whole-panel) best is step 10
  assert pool.problems == SELECTION and pool.student.solved == {"d", "b", "h"}
  assert {t.step: set(t.solved) for t in pool.teachers} == {0: {"d"}, 10: {"a"}}
  assert all(set(t.outcomes) <= SELECTION for t in (pool.student, *pool.teachers))
  assert build_teacher_pool(held_out_run, student_step=10, selection=SELECTION).student.solved == {"a"}
  assert build_teacher_pool(held_out_run).student.step == 10  # no selection: the whole panel, as recorded
  with pytest.raises(ValueError, match="no checkpoint has outcomes on the selection half"):
    build_teacher_pool(held_out_run, selection={"z"})


class _Log:
  def __init__(self):
    self.records = []

  def log(self, step, metrics, phase="train"):
    self.records.append((step, phase, dict(metrics)))


def _method(run_dir, workdir, selection_panel):
  """An Agentic-OPD method started on `run_dir` with a context holding only what its pool, scheduler and validation
  hooks read; its scheduler's `select` records the solved set it is handed."""
  method = AgenticOpd(AgenticOpdConfig(teacher_run=str(run_dir), selection_panel=selection_panel,
                                       selection_interval=1))
  ctx = types.SimpleNamespace(env_name="alfworld", workdir=workdir, primary=True, log=_Log(),
                              panel_groups={q: GROUPS.get(q) for q in PANEL},
                              abstract_params={"w": jax.ShapeDtypeStruct((4, 8), jnp.float32)})
  method.start(ctx)
  select, method.handed = method.scheduler.select, []
  method.scheduler.select = lambda solved: method.handed.append(frozenset(solved)) or select(solved)
  return method


def test_no_reported_problem_is_seen_by_selection(held_out_run, tmp_path):
  method = _method(held_out_run, tmp_path, "held_out")
  try:
    assert set(method.scheduler.problems) <= SELECTION and method.pool.student.step == 5
    assert all(t.solved <= SELECTION for t in method.scheduler.teachers)
    metrics = method.validation_metrics(None, STUDENT, 0)
    method.after_validation(STUDENT, 0)
  finally:
    method.close()
  assert method.handed == [{"d", "a"}]  # the student's P_t on the selection half only
  assert metrics == {"val_select/success_rate": 2 / 4, "val_select/pick_success_rate": 1.0,
                     "val_select/heat_success_rate": 0.0,
                     "val_report/success_rate": 3 / 5, "val_report/pick_success_rate": 1 / 2,
                     "val_report/heat_success_rate": 0.0}
  (_, _, logged), = method.ctx.log.records
  assert logged["opd/student_solved"] == 2.0


def test_whole_selects_on_the_whole_panel_and_reports_nothing_apart(held_out_run, tmp_path):
  method = _method(held_out_run, tmp_path, "whole")
  try:
    assert set(method.scheduler.problems) == set(PANEL) and method.pool.student.step == 10
    assert method.validation_metrics(None, STUDENT, 0) == {}
    method.after_validation(STUDENT, 0)
  finally:
    method.close()
  assert method.handed == [{"d", "a", "f", "g", "e"}]


def test_a_bad_selection_panel_is_one_error_naming_the_field():
  with pytest.raises(ValueError, match=r"^agentic_opd.selection_panel must be one of \('held_out', 'whole'\)"):
    AgenticOpdConfig(selection_panel="first_half")
