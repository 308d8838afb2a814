"""Comparison tables (`experiments/compare.py`, `eval/compare.py`): the papers' columns per env, mean ± sd over
seeds and the paired test, checked against values computed by hand on run folders written here."""
import csv
import io
import json
import os
import subprocess
import sys

import pytest

from agentopd_jax.eval import compare

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(root, name, env, seed, vals):
  """A run folder as train.py leaves it: config.json and the validation lines of logs/metrics.jsonl."""
  workdir = os.path.join(root, name)
  os.makedirs(os.path.join(workdir, "logs"))
  with open(os.path.join(workdir, "config.json"), "w") as f:
    json.dump({"seed": seed, "env": {"name": env}}, f)
  with open(os.path.join(workdir, "logs", "metrics.jsonl"), "w") as f:
    f.write(json.dumps({"step": 1, "phase": "train", "time": 0.0, "actor/loss": 0.1}) + "\n")
    for step, metrics in vals.items():
      f.write(json.dumps({"step": step, "phase": "val", "time": 0.0, **{f"val/{k}": v for k, v in metrics.items()}})
              + "\n")
  return workdir


def _alf(all_, pick, look):
  return {"success_rate": all_, "pick_and_place_success_rate": pick, "look_at_obj_in_light_success_rate": look}


@pytest.fixture
def alfworld_runs(tmp_path):
  root = str(tmp_path)
  # grpo: final All 0.10, 0.20, 0.15; sdar: 0.20, 0.25, 0.30 -> diffs 0.10, 0.05, 0.15.
  for seed, (g, s) in enumerate(((0.10, 0.20), (0.20, 0.25), (0.15, 0.30))):
    _run(root, f"grpo_s{seed}", "alfworld", seed, {0: _alf(0.1, 0.1, 0.1), 8: _alf(g, g / 2, g * 2)})
    _run(root, f"sdar_s{seed}", "alfworld", seed, {0: _alf(0.1, 0.1, 0.1), 8: _alf(s, s / 2, s * 2)})
  return root


def test_methods_group_by_folder_name_and_cells_are_mean_sd_over_seeds(alfworld_runs):
  runs = compare.find_runs([alfworld_runs])
  assert sorted({(r.label, r.seed) for r in runs}) == [(m, s) for m in ("grpo", "sdar") for s in (0, 1, 2)]
  (table,) = compare.tables(runs, baseline="grpo")
  assert table.env == "alfworld" and table.columns == ["Pick", "Look", "All"]
  grpo, sdar = table.rows
  assert grpo["label"] == "grpo" and grpo["seeds"] == [0, 1, 2]
  assert grpo["All"] == pytest.approx((15.0, 5.0))  # mean 15, sd of (10, 20, 15) = 5
  assert grpo["Pick"] == pytest.approx((7.5, 2.5)) and grpo["Look"] == pytest.approx((30.0, 10.0))
  assert sdar["All"] == pytest.approx((25.0, 5.0))
  # paired diffs 10, 5, 15: mean 10, sd 5, t = 10 / (5 / sqrt 3) = 3.4641, p (2 df, two-sided) = 0.0742
  n, diff, t, p = sdar["vs_baseline"]
  assert (n, diff) == (3, pytest.approx(10.0)) and t == pytest.approx(3.4641, abs=1e-4)
  assert p == pytest.approx(0.0742, abs=1e-4)
  assert grpo["vs_baseline"] is None
  md = compare.markdown(table, "grpo")
  assert "| sdar | 3 | 12.5 ± 2.5 | 50.0 ± 10.0 | 25.0 ± 5.0 | +10.0 (3 paired) | 3.46 (0.074) |" in md
  # an earlier validation step
  (at0,) = compare.tables(runs, step=0)
  assert at0.rows[1]["All"] == pytest.approx((10.0, 0.0))


def test_since_reports_each_seeds_change_and_pairs_the_changes(alfworld_runs):
  runs = compare.find_runs([alfworld_runs])
  (table,) = compare.tables(runs, baseline="grpo", since=0)
  grpo, sdar = table.rows
  # grpo All 10/20/15 from 10 everywhere: changes 0, 10, 5 -> mean 5, sd 5; Pick g/2: -5, 0, -2.5; Look 2g: 10, 30, 20.
  assert grpo["All"] == pytest.approx((5.0, 5.0)) and grpo["Pick"] == pytest.approx((-2.5, 2.5))
  assert sdar["vs_baseline"][:2] == (3, pytest.approx(10.0))  # the same start, so the same paired difference
  md = compare.markdown(table, "grpo")
  assert md.startswith("**alfworld** (change since step 0, points)")
  assert "| grpo | 3 | -2.5 ± 2.5 | +20.0 ± 10.0 | +5.0 ± 5.0 | – | – |" in md


def test_search_averages_its_sources_and_webshop_reports_score_and_success(tmp_path):
  root = str(tmp_path)
  _run(root, "a_s0", "search", 0, {4: {"success_rate": 0.3, "nq_success_rate": 0.5, "hotpotqa_success_rate": 0.2}})
  _run(root, "w_s0", "webshop", 0, {4: {"success_rate": 0.25, "webshop_task_score (not success_rate)": 0.5}})
  search, webshop = compare.tables(compare.find_runs([root]))
  assert search.columns == ["NQ", "Hotp", "Avg"]
  assert search.rows[0]["Avg"] == pytest.approx((35.0, 0.0))  # the mean of the sources, not the 30 % overall
  assert webshop.columns == ["Score", "Succ"] and webshop.rows[0]["Score"] == pytest.approx((50.0, 0.0))
  assert webshop.rows[0]["Succ"] == pytest.approx((25.0, 0.0))


def test_explicit_labels_and_a_sweep_manifest(tmp_path, alfworld_runs):
  sweep_root = tmp_path / "sweep"
  points = []
  for name, seed, value in (("w=0.1-s0", 0, 0.2), ("w=0.1-s1", 1, 0.4), ("w=1.0-s0", 0, 0.1)):
    points.append(dict(name=name, seed=seed, workdir=_run(str(sweep_root), name, "alfworld", seed,
                                                            {8: {"success_rate": value}})))
  # a running sweep: a point that has not validated yet and one not started are left out
  points.append(dict(name="w=1.0-s1", seed=1, workdir=_run(str(sweep_root), "w=1.0-s1", "alfworld", 1, {})))
  points.append(dict(name="w=1.0-s2", seed=2, workdir=str(sweep_root / "w=1.0-s2")))
  (sweep_root / "sweep.json").write_text(json.dumps({"points": points}))
  assert len(compare.find_runs([str(sweep_root)])) == 3
  runs = compare.find_runs([str(sweep_root), f"base={alfworld_runs}/grpo_s0,{alfworld_runs}/grpo_s1",
                            f"w=2={sweep_root}/w=1.0-s0"])  # "=" in a label and in a path
  (table,) = compare.tables(runs, baseline="base")
  rows = {r["label"]: r for r in table.rows}
  assert set(rows) == {"w=0.1", "w=1.0", "base", "w=2"}
  assert rows["w=2"]["All"] == pytest.approx((10.0, 0.0))
  assert rows["w=0.1"]["All"] == pytest.approx((30.0, 14.1421), abs=1e-3)
  assert rows["w=0.1"]["vs_baseline"][:2] == (2, pytest.approx(15.0))  # (20 − 10 + 40 − 20) / 2
  assert rows["w=1.0"]["vs_baseline"] == (1, pytest.approx(0.0), None, None)  # one shared seed: no test
  rows_csv = list(csv.DictReader(io.StringIO(compare.to_csv([table]))))
  assert {"env": "alfworld", "method": "w=0.1", "column": "All", "mean": "30.0000", "sd": "14.1421",
          "seeds": "0 1"} in rows_csv


def test_bad_input_is_one_error_naming_it(tmp_path, alfworld_runs):
  with pytest.raises(ValueError, match="no such run or sweep folder"):
    compare.find_runs([str(tmp_path / "nope")])
  with pytest.raises(ValueError, match=r"--baseline 'ppo' is not among the alfworld methods"):
    compare.tables(compare.find_runs([alfworld_runs]), baseline="ppo")
  with pytest.raises(ValueError, match="no validation at step 3"):
    compare.tables(compare.find_runs([alfworld_runs]), step=3)
  with pytest.raises(ValueError, match="has seed 0 twice"):
    compare.tables(compare.find_runs([f"x={alfworld_runs}/grpo_s0,{alfworld_runs}/sdar_s0"]))


def test_the_command_prints_the_table_and_writes_csv_and_plot(tmp_path, alfworld_runs):
  out = subprocess.run([sys.executable, os.path.join(ROOT, "experiments", "compare.py"), alfworld_runs,
                        "--baseline=grpo", f"--csv={tmp_path}/t.csv", f"--plot={tmp_path}/t.png"],
                       capture_output=True, text=True, timeout=300)
  assert out.returncode == 0, out.stderr[-3000:]
  assert "| grpo | 3 | 7.5 ± 2.5 | 30.0 ± 10.0 | 15.0 ± 5.0 | – | – |" in out.stdout
  assert os.path.getsize(tmp_path / "t.png") > 0 and (tmp_path / "t.csv").read_text().startswith("env,method")
  bad = subprocess.run([sys.executable, os.path.join(ROOT, "experiments", "compare.py"), str(tmp_path / "nope")],
                       capture_output=True, text=True, timeout=300)
  assert bad.returncode == 2 and "nope: no such run or sweep folder" in bad.stderr
