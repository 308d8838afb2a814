"""benchmarks/bench_iteration.py's arms: method, precision, revision and per-arm config fields, and the command each
arm runs (no run is made)."""
import os
import sys
from pathlib import Path

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))

import bench_iteration  # noqa: E402


def test_an_arm_names_its_method_precision_revision_and_fields():
  assert bench_iteration.parse_arm("grpo:float32") == ("grpo", "float32", "")
  arm = bench_iteration.parse_arm("skill_grpo:bfloat16@d7e18ff+rollout.max_prompt_tokens=1024+seed=3")
  assert arm == ("skill_grpo", "bfloat16", "d7e18ff", "rollout.max_prompt_tokens=1024", "seed=3")
  assert bench_iteration.arm_name(*arm) == "skill_grpo:bfloat16@d7e18ff+rollout.max_prompt_tokens=1024+seed=3"


def test_an_arms_fields_reach_its_command_only(monkeypatch, tmp_path):
  commands = []

  def fake_run(cmd, **_):
    commands.append(cmd)
    raise SystemExit("not run")

  monkeypatch.setattr(bench_iteration.subprocess, "run", fake_run)
  args = type("Args", (), {"warm_start": str(tmp_path), "iterations": 2})()
  for overrides in ((), ("rollout.max_prompt_tokens=1024",)):
    try:
      bench_iteration.run_arm("skill_grpo", "float32", Path(ROOT), args, tmp_path / "w", tmp_path / "c", overrides)
    except SystemExit:
      pass
  plain, changed = commands
  assert plain[2].endswith("alfworld.py:skill_grpo") and "--config.model.dtype=float32" in plain
  assert plain[-1] == "--config.reuse_warm_start=False"
  assert changed == plain[:-1] + ["--config.rollout.max_prompt_tokens=1024", plain[-1]]
