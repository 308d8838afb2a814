"""Sweeps (`experiments/sweep.py`, `training/sweep.py`): points expand from a sweep file in seed-major order with one
clear error per bad field, and a sweep of 3 settings runs end to end, skips what finished, resumes the point a kill
interrupted and starts the rest."""
import json
import os
import signal
import subprocess
import sys
import time

import ml_collections
import pytest

from agentopd_jax.training import sweep as sweeps
from conftest import TEST_MODEL

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SEARCH = os.path.join(ROOT, "configs", "searchqa.py")
ALFWORLD = os.path.join(ROOT, "configs", "alfworld.py")


def _sweep(**fields):
  return ml_collections.ConfigDict({"base": f"{ALFWORLD}:opid", "root": "/tmp/sweep_root", "seeds": (0, 1), **fields})


def test_points_are_seed_major_with_every_grid_and_zip_setting():
  s = _sweep(base=[ALFWORLD, f"{ALFWORLD}:opid"], overrides={"warm_start_run": "runs/w", "loss": {"kl_coef": 0.0}},
             grid={"grpo": {"group_size": [4, 8]}},
             zip={"optim": {"learning_rate": [1e-4, 3e-4]}, "loss": {"entropy_coef": [0.0, 0.01]}})
  points = sweeps.expand(s)
  assert len(points) == 2 * 2 * 2 * 2  # seeds x bases x grid x zip
  assert [p.seed for p in points] == [0] * 8 + [1] * 8
  first = points[0]
  assert first.name == "default-group_size=4-entropy_coef=0.0-learning_rate=0.0001-s0"  # fields in sorted order
  assert first.workdir == os.path.join("/tmp/sweep_root", first.name)
  assert dict(first.overrides) == {"warm_start_run": "runs/w", "loss.kl_coef": 0.0, "grpo.group_size": 4,
                                   "optim.learning_rate": 1e-4, "loss.entropy_coef": 0.0}
  # zip varies its leaves together; the grid multiplies.
  settings = {(dict(p.overrides)["grpo.group_size"], dict(p.overrides)["optim.learning_rate"],
               dict(p.overrides)["loss.entropy_coef"]) for p in points}
  assert settings == {(g, lr, e) for g in (4, 8) for lr, e in ((1e-4, 0.0), (3e-4, 0.01))}
  assert points[4].name.startswith("opid-") and points[4].base == f"{ALFWORLD}:opid"
  assert first.command("py", "train.py") == [
      "py", "train.py", f"--config={ALFWORLD}", f"--config.workdir={first.workdir}", "--config.seed=0",
      "--config.loss.kl_coef=0.0", "--config.warm_start_run=runs/w", "--config.grpo.group_size=4",
      "--config.loss.entropy_coef=0.0", "--config.optim.learning_rate=0.0001"]
  assert len({p.name for p in points}) == len(points)


def test_zip_labels_name_methods_that_differ_in_several_fields():
  s = _sweep(base=f"{ALFWORLD}:agentic_opd", grid={"grpo": {"iterations": [4, 8]}},
             zip={"method": ["agentic_opd", "grpo"], "agentic_opd": {"lad": ["group_rates", "off"]}},
             zip_labels=("hcn_lad", "continued_grpo"))
  points = sweeps.expand(s)
  assert [p.name for p in points[:4]] == ["iterations=4-hcn_lad-s0", "iterations=4-continued_grpo-s0",
                                          "iterations=8-hcn_lad-s0", "iterations=8-continued_grpo-s0"]
  assert dict(points[1].overrides) == {"grpo.iterations": 4, "method": "grpo", "agentic_opd.lad": "off"}


def test_one_base_and_no_axes_names_points_by_variant_and_seed_and_tuples_pass_as_flags():
  points = sweeps.expand(_sweep(overrides={"mesh_shape": (4, 2, 1)}))
  assert [p.name for p in points] == ["opid-s0", "opid-s1"]
  assert "--config.mesh_shape=(4, 2, 1)" in points[0].command()


@pytest.mark.parametrize("fields, message", [
    (dict(extra=1), r"unknown field\(s\) \['extra'\]"),
    (dict(seeds=()), r"sweep\.seeds: a non-empty list of distinct ints"),
    (dict(seeds=(0, 0)), r"sweep\.seeds"),
    (dict(root=""), r"sweep\.root"),
    (dict(base="configs/nope.py"), r"sweep\.base: config file 'configs/nope.py' not found"),
    (dict(base=f"{ALFWORLD}:opd"), r"sweep\.base: unknown .*variant 'opd'"),
    (dict(grid={"opid": {"w_epsiode": [1.0]}}), r"sweep\.grid\.opid\.w_epsiode: .* has no field 'opid\.w_epsiode'"),
    (dict(grid={"opdi": {"w_step": [1.0]}}), r"sweep\.grid\.opdi\.w_step: .* has no config section 'opdi'"),
    (dict(grid={"opid": {"w_step": 1.0}}), r"sweep\.grid\.opid\.w_step: a non-empty list of values"),
    (dict(zip={"opid": {"w_step": [1.0], "w_episode": [1.0, 2.0]}}), r"sweep\.zip: every list must have the same"),
    (dict(overrides={"grpo": {"group_size": "eight"}}), r"sweep\.overrides\.grpo\.group_size: value 'eight' does"),
    (dict(overrides={"seed": 3}), r"sweep\.overrides\.seed: 'seed' is set by the sweep"),
    (dict(overrides={"opid": {"w_step": 1.0}}, grid={"opid": {"w_step": [1.0]}}), r"\['opid\.w_step'\] set in more"),
    (dict(grid={"opid": {"analyzer": ["oracle", None]}}), r"sweep\.grid\.opid\.analyzer: None cannot"),
    (dict(zip={"opid": {"w_step": [1.0, 2.0]}}, zip_labels=("a",)), r"sweep\.zip_labels: 2 distinct non-empty"),
    (dict(zip={"opid": {"w_step": [1.0, 2.0]}}, zip_labels=("a", "a")), r"sweep\.zip_labels: 2 distinct"),
    (dict(zip_labels=("a",)), r"sweep\.zip_labels: names zip columns, but the sweep has no zip"),
    # the single-section layout: the key in the method groups
    (dict(overrides={"loss": {"sdar_coef": 1.0}}), r"no field 'loss\.sdar_coef'; loss\.sdar_coef is now sdar\.coef"),
    (dict(zip={"opd": {"lad": ["off"]}}), r"has no config section 'opd'; opd\.lad is now agentic_opd\.lad"),
    (dict(overrides={"grpo": {"advantage": "opid"}}), r"grpo\.advantage=opid is now method=<primary>\+opid"),
])
def test_a_bad_sweep_field_is_one_error_naming_it(fields, message):
  with pytest.raises(ValueError, match=message):
    sweeps.expand(_sweep(**fields))


TINY = {"model": {"preset": TEST_MODEL}, "env": {"num_workers": 1}, "sft": {"steps": 2, "demos": 6, "batch_size": 8, "micro_batch_size": 8},
        "grpo": {"iterations": 1, "tasks_per_iteration": 2, "group_size": 2, "mini_batch_size": 16,
                 "micro_batch_size": 8},
        "rollout": {"max_steps": 4, "max_response_tokens": 8},
        "validation": {"num_tasks": 4, "attempts": 1, "every": 1}, "logging": {"plot": False}}


def _sweep_file(tmp_path):
  path = tmp_path / "tiny_sweep.py"
  path.write_text(f'''import ml_collections


def get_config():
  s = ml_collections.ConfigDict()
  s.base = {SEARCH!r}
  s.root = {str(tmp_path / "sweep")!r}
  s.seeds = (0,)
  s.overrides = {TINY!r}
  s.grid = {{"loss": {{"kl_coef": [0.0, 0.01, 0.02]}}}}
  return s
''')
  return str(path)


def _cli(sweep_file, *extra, **popen):
  return subprocess.Popen([sys.executable, os.path.join(ROOT, "experiments", "sweep.py"), f"--sweep={sweep_file}",
                           *extra], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **popen)


def test_a_sweep_runs_every_point_and_resumes_the_one_a_kill_interrupted(tmp_path):
  sweep_file = _sweep_file(tmp_path)
  root = tmp_path / "sweep"
  names = ["kl_coef=0.0-s0", "kl_coef=0.01-s0", "kl_coef=0.02-s0"]
  printed = subprocess.run([sys.executable, os.path.join(ROOT, "experiments", "sweep.py"), f"--sweep={sweep_file}",
                            "--print_commands"], cwd=ROOT, capture_output=True, text=True, timeout=300)
  assert printed.returncode == 0, printed.stderr[-3000:]
  assert [line.split("--config.workdir=")[1].split()[0] for line in printed.stdout.splitlines()] == [
      str(root / n) for n in names]
  # Kill the whole sweep (the sweep process and its train.py) once the second point has its first checkpoint.
  proc = _cli(sweep_file, start_new_session=True)
  second = root / names[1] / "checkpoints" / "0"
  deadline = time.time() + 900
  while not second.is_dir() and proc.poll() is None and time.time() < deadline:
    time.sleep(0.5)
  assert second.is_dir(), proc.communicate()[0][-3000:] if proc.poll() is not None else "timed out"
  time.sleep(1.0)
  os.killpg(proc.pid, signal.SIGKILL)
  proc.wait()
  assert (root / names[0] / "summary.json").exists() and not (root / names[1] / "summary.json").exists()
  finished_at = os.path.getmtime(root / names[0] / "summary.json")
  # The same command again: the finished point is skipped, the killed one resumes, the rest run.
  out, _ = _cli(sweep_file, "--parallel=2").communicate(timeout=1800)
  assert f"[sweep] {names[0]}: finished, skipped" in out, out[-3000:]
  assert f"[sweep] {names[1]}: resuming" in out and f"[sweep] {names[2]}: starting" in out
  assert "done 2, skipped 1, failed 0" in out
  assert os.path.getmtime(root / names[0] / "summary.json") == finished_at
  assert "resumed from step 0" in (root / names[1] / "train.log").read_text()
  manifest = json.loads((root / "sweep.json").read_text())
  assert [p["name"] for p in manifest["points"]] == names
  assert [p["overrides"]["loss.kl_coef"] for p in manifest["points"]] == [0.0, 0.01, 0.02]
  assert all(p["seed"] == 0 for p in manifest["points"])
  for name in names:
    summary = json.loads((root / name / "summary.json").read_text())
    assert summary["steps"] == [0, 1]


@pytest.mark.parametrize("name", sorted(f for f in os.listdir(os.path.join(ROOT, "configs", "sweeps"))
                                        if f.endswith(".py")))
def test_every_shipped_sweep_expands(name, monkeypatch):
  """Each sweep file in configs/sweeps builds every point's config (a renamed field is an error here, not mid-run)."""
  monkeypatch.chdir(ROOT)
  path = os.path.join("configs", "sweeps", name)
  points = sweeps.expand(sweeps.load_sweep(path), where=path)
  assert points and len({p.workdir for p in points}) == len(points)
