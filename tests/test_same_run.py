"""experiments/same_run.py on tiny fake runs (metrics.jsonl, checkpoints saved by the project's own pool): equal runs
are equal, timings are ignored, and a metric, one param bit or one validation outcome that differs is reported; and
experiments/same_run.sh spells each tree's flags (the method groups' or the single-section layout's)."""
import copy
import importlib.util
import json
import os
import re
import shutil
import subprocess

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_spec = importlib.util.spec_from_file_location("same_run", os.path.join(ROOT, "experiments", "same_run.py"))
same_run = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(same_run)

PARAMS = {"layer": {"w": np.arange(6, dtype=np.float32).reshape(2, 3) / 7, "b": np.ones(3, np.float32)},
          "embedding": np.linspace(-1, 1, 8, dtype=np.float32).reshape(4, 2)}
OUTCOMES = {"p0": (1, 2), "p1": (0, 2)}
RECORDS = [{"step": 1, "phase": "sft", "time": 10.0, "sft/loss": 2.5},
           {"step": 1, "phase": "train", "time": 11.0, "train/loss": 0.5, "rollout/time_s": 3.0},
           {"step": 2, "phase": "train", "time": 12.0, "train/loss": 0.25, "rollout/time_s": 3.5},
           {"step": 2, "phase": "val", "time": 13.0, "val/success_rate": 0.25, "val/time_s": 1.0}]


def _flip_one_bit(params):
  out = copy.deepcopy(params)
  out["layer"]["w"].view(np.uint32)[1, 2] ^= 1
  return out


def _write_run(run, records=RECORDS, params=PARAMS, outcomes=OUTCOMES, like=None):
  """A run folder: `records` as its metrics.jsonl, checkpoints 0 and 2 (step 2 with `params` and `outcomes`), or
  a copy of run `like`'s checkpoints (saving takes a while)."""
  os.makedirs(os.path.join(run, "logs"))
  with open(os.path.join(run, "logs", "metrics.jsonl"), "w") as f:
    f.writelines(json.dumps(r) + "\n" for r in records)
  with open(os.path.join(run, "summary.json"), "w") as f:
    json.dump({"final_success": 0.25}, f)
  if like is not None:
    shutil.copytree(os.path.join(like, "checkpoints"), os.path.join(run, "checkpoints"))
    return
  pool = same_run.CheckpointPool(os.path.join(run, "checkpoints"))
  with pool:
    pool.save(0, {"params": PARAMS, "step": np.int32(0)}, metrics={"val/success_rate": 0.0}, outcomes=OUTCOMES,
              config={})
    pool.save(2, {"params": params, "step": np.int32(2)}, metrics={"val/success_rate": 0.25}, outcomes=outcomes,
              config={})


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
  """Folders A and B of sub-runs: `same`, `timing` (B's timings and compilation counts differ), `metric` (B's train/loss at step 2),
  `param` (one bit of B's step-2 params), `outcome` (B's step-2 outcome of p1), `newkey` (B logs one more key);
  `a_only` is in A only."""
  root = tmp_path_factory.mktemp("same_run")
  a, b = str(root / "A"), str(root / "B")
  timing = [dict(r, time=r["time"] + 100, **{k: v * 2 for k, v in r.items() if k.endswith("_s")},
                **{"compile/programs": 3.0}) for r in RECORDS]  # a cache that held other executables
  metric = copy.deepcopy(RECORDS)
  metric[2]["train/loss"] = 0.2500001
  newkey = [dict(r, **{"batch/tokens": 7.0}) if r["phase"] == "train" else r for r in RECORDS]
  variants = {"same": {}, "timing": {"records": timing}, "metric": {"records": metric},
              "param": {"params": _flip_one_bit(PARAMS)}, "outcome": {"outcomes": {"p0": (1, 2), "p1": (1, 2)}},
              "newkey": {"records": newkey}}
  first = os.path.join(a, "same")
  for name, b_changes in variants.items():
    _write_run(os.path.join(a, name), like=None if name == "same" else first)
    _write_run(os.path.join(b, name), **b_changes, like=None if {"params", "outcomes"} & set(b_changes) else first)
  os.makedirs(os.path.join(a, "a_only", "logs"))
  with open(os.path.join(a, "a_only", "logs", "metrics.jsonl"), "w") as f:
    f.write(json.dumps(RECORDS[0]) + "\n")
  return a, b


def _main(capsys, *argv):
  code = same_run.main(list(argv))
  out = capsys.readouterr().out
  summary = json.loads(out[out.index("\n{") + 1:] if not out.startswith("{") else out)
  return code, out, summary


def test_folders_of_runs(runs, capsys):
  a, b = runs
  code, out, summary = _main(capsys, a, b)
  assert code == 1 and summary["all_equal"] is False
  assert summary["only_in_a"] == ["a_only"] and summary["only_in_b"] == []
  assert "[a_only] only in A" in out
  r = summary["runs"]
  assert sorted(r) == ["metric", "newkey", "outcome", "param", "same", "timing"]
  for name in ("same", "timing"):  # timing keys (time, *_s) are not compared
    assert r[name]["equal"] and r[name]["metrics_equal"] and r[name]["params_equal"] and r[name]["outcomes_equal"]
    assert r[name]["params_digest_a"] == r[name]["params_digest_b"] and len(r[name]["params_digest_a"]) == 64
  assert r["same"]["checkpoint_steps"] == [0, 2] and r["same"]["final_step_a"] == 2

  assert not r["metric"]["metrics_equal"] and r["metric"]["params_equal"] and r["metric"]["outcomes_equal"]
  assert r["metric"]["metric_differences"] == 1
  assert "[metric] metrics train step 2 train/loss: A 0.25, B 0.2500001" in out

  assert r["param"]["metrics_equal"] and not r["param"]["params_equal"] and r["param"]["outcomes_equal"]
  assert r["param"]["params_digest_a"] != r["param"]["params_digest_b"]
  assert r["param"]["params_digest_a"] == r["same"]["params_digest_a"]
  assert "[param] checkpoint 2 params:" in out and "[param] checkpoint 0 params" not in out

  assert r["outcome"]["metrics_equal"] and r["outcome"]["params_equal"] and not r["outcome"]["outcomes_equal"]
  assert "[outcome] checkpoint 2 problem p1: A [0, 2], B [1, 2]" in out

  assert not r["newkey"]["metrics_equal"]
  assert "[newkey] metrics train step 1 batch/tokens: A '<missing>', B 7.0" in out


def test_keys_of_a_ignores_keys_b_adds(runs, capsys):
  a, b = runs
  code, _, summary = _main(capsys, os.path.join(a, "newkey"), os.path.join(b, "newkey"), "--keys_of=a")
  assert code == 0 and summary["all_equal"] and list(summary["runs"]) == ["newkey"]
  code, out, summary = _main(capsys, os.path.join(b, "newkey"), os.path.join(a, "newkey"), "--keys_of=a")
  assert code == 1 and "B '<missing>'" in out  # A's keys are all compared
  record = os.path.join(os.path.dirname(a), "record.json")
  code, _, summary = _main(capsys, os.path.join(a, "newkey"), os.path.join(b, "newkey"), "--keys_of=a",
                           f"--record={record}", "--base=abc", "--new=def")
  with open(record) as f:
    assert json.load(f) == dict(summary, base="abc", new="def", keys_of="a")


def test_two_equal_run_folders_exit_zero(runs, capsys):
  a, b = runs
  code, _, summary = _main(capsys, os.path.join(a, "timing"), os.path.join(b, "timing"))
  assert code == 0 and summary["all_equal"] and summary["runs"]["timing"]["metrics_equal"]


def test_one_bit_changes_the_digest_and_order_is_fixed():
  digest = same_run.params_digest(PARAMS)
  assert same_run.params_digest(_flip_one_bit(PARAMS)) != digest
  assert same_run.params_digest(dict(reversed(list(PARAMS.items())))) == digest  # dict key order does not matter
  assert same_run.params_digest({**PARAMS, "embedding": PARAMS["embedding"].reshape(2, 4)}) != digest
  assert same_run.params_digest({**PARAMS, "embedding": PARAMS["embedding"].astype(np.float64)}) != digest


def test_an_unfinished_run_is_not_equal(runs, capsys, tmp_path):
  a, b = runs
  shutil.copytree(os.path.join(b, "same"), tmp_path / "same")
  os.remove(tmp_path / "same" / "summary.json")  # still running, or killed
  code, out, summary = _main(capsys, os.path.join(a, "same"), str(tmp_path / "same"))
  assert code == 1 and not summary["runs"]["same"]["finished"] and not summary["all_equal"]
  assert "unfinished (no summary.json): B" in out


def test_recorded_comparison_matches_docs():
  """docs/architecture.md's same-run table is the records in results/same_run/ it names: every run listed, equal,
  its digest."""
  with open(os.path.join(ROOT, "docs", "architecture.md")) as f:
    doc = f.read()
  section = doc[doc.index("### Recorded"):]
  section = section[:section.find("\n## ")] if "\n## " in section else section
  runs = {}
  for name in re.findall(r"`(results/same_run/[\w.]+\.json)`", section):
    with open(os.path.join(ROOT, name)) as f:
      record = json.load(f)
    assert record["all_equal"] and f"`{record['base']}`" in section and f"`{record['new']}`" in section
    runs.update(record["runs"])
  rows = re.findall(r"^\| (\w+) \| ([\d, ]+) \| `([0-9a-f]{16})…` \| identical \| identical \|$", section, re.M)
  assert rows and sorted(name for name, _, _ in rows) == sorted(runs)
  for name, steps, digest in rows:
    run = runs[name]
    assert run["equal"] and run["finished"]
    assert run["params_digest_a"] == run["params_digest_b"] and run["params_digest_a"].startswith(digest)
    assert [int(s) for s in steps.split(",")] == run["checkpoint_steps"]


def _printed(tree, out):
  """{run: its train.py command} that `PRINT=1 same_run.sh tree out` prints for SDAR + OPID and Agentic-OPD."""
  done = subprocess.run(["bash", os.path.join(ROOT, "experiments", "same_run.sh"), str(tree), str(out)],
                        env=dict(os.environ, PRINT="1", RUNS="sdar_opid agentic_opd"), capture_output=True, text=True,
                        timeout=300)
  assert done.returncode == 0, done.stderr
  return dict(line.split(": ", 1) for line in done.stdout.splitlines())


def test_same_run_sh_spells_the_flags_of_each_trees_layout(tmp_path):
  """The same runs from a tree of the method groups (this one) and from one of the single-section layout (a stub
  whose presets hold an `opd` section): SDAR + OPID and Agentic-OPD's teacher run in each tree's own keys."""
  out = tmp_path / "out"
  groups = _printed(ROOT, out)
  assert groups["sdar_opid"].startswith("python experiments/train.py --config=configs/alfworld.py:sdar ")
  assert groups["sdar_opid"].endswith(" --config.method=sdar+opid")
  assert groups["agentic_opd"].endswith(f" --config.agentic_opd.teacher_run={out}/grpo")
  assert groups["grpo"].startswith("python experiments/train.py --config=configs/alfworld.py --config.workdir=")
  single = tmp_path / "single"
  (single / "agentopd_jax" / "training").mkdir(parents=True)
  (single / "agentopd_jax" / "__init__.py").write_text("")
  (single / "agentopd_jax" / "training" / "__init__.py").write_text("")
  (single / "agentopd_jax" / "training" / "presets.py").write_text(
      "def cpu_base(env):\n  return {'loss': {'objective': 'grpo'}, 'opd': {'teacher_run': ''}}\n")
  old = _printed(single, out)
  assert old["sdar_opid"].startswith("python experiments/train.py --config=configs/alfworld.py:sdar ")
  assert old["sdar_opid"].endswith(" --config.grpo.advantage=opid")
  assert old["agentic_opd"].endswith(f" --config.opd.teacher_run={out}/grpo")
