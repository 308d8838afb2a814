"""Coverage analysis: hand-computed union / per-group / historical-gap numbers, and the CLI's three output files."""
import importlib.util
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from agentopd_jax.envs import registry
from agentopd_jax.eval.coverage import (confirmation_report, coverage_report, forgetting_markdown, forgetting_report, historical_gap,
                                        is_solved, run_group_of, solved_set, to_markdown)
from agentopd_jax.storage.checkpoints import CheckpointPool

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
P1 = "valid_seen/pick_and_place_simple-Apple-None-Fridge-1/trial_1/game.tw-pddl"
P2 = "valid_seen/pick_and_place_simple-Mug-None-Shelf-2/trial_2/game.tw-pddl"
L1 = "valid_seen/look_at_obj_in_light-Book-None-DeskLamp-3/trial_3/game.tw-pddl"
L2 = "valid_seen/look_at_obj_in_light-Pen-None-DeskLamp-4/trial_4/game.tw-pddl"
X = "nq:17"  # an id that names no ALFWorld task type
PANEL = (P1, P2, L1, L2, X)
GROUP_OF = registry.get("alfworld").group_of  # ALFWorld's problem ids are its tasks (game paths)


def _outcomes(solved, attempts=2):
  return {p: (1 if p in solved else 0, attempts) for p in PANEL}


# Solved: 0 {P1}, 4 {P1, L1}, 8 {P2, L1} (best), 12 {L2}.
RUN = {0: _outcomes({P1}), 4: _outcomes({P1, L1}), 8: _outcomes({P2, L1}), 12: _outcomes({L2})}
BEST = 8


def test_solved_rules():
  assert is_solved(1, 4) and not is_solved(0, 4) and not is_solved(0, 0)
  assert not is_solved(2, 4, "majority") and is_solved(3, 4, "majority")
  assert solved_set({"a": (1, 2), "b": (2, 2), "c": (0, 2)}, "majority") == {"b"}
  with pytest.raises(ValueError, match="solved_rule must be one of"):
    is_solved(1, 1, "some")


def test_overall_and_per_group():
  r = coverage_report(RUN, BEST, GROUP_OF)
  assert r["steps"] == [0, 4, 8, 12] and r["best_step"] == 8 and r["problems"] == 5
  assert (r["union"], r["best"], r["max_single"], r["max_single_step"]) == (4, 2, 2, 4)  # 4 and 8 tie: earlier
  assert r["union_over_best"] == 2.0 and r["only_union"] == 2
  assert r["only_union_problems"] == {P1: [0, 4], L2: [12]}
  assert r["per_type"] == {
      "look_at_obj_in_light": {"problems": 2, "union": 2, "best": 1, "max_single": 1, "max_single_step": 4,
                               "union_over_best": 2.0},
      "other": {"problems": 1, "union": 0, "best": 0, "max_single": 0, "max_single_step": 0, "union_over_best": None},
      "pick_and_place": {"problems": 2, "union": 2, "best": 1, "max_single": 1, "max_single_step": 0,
                         "union_over_best": 2.0},
  }
  assert r["checkpoints"] == [
      {"step": 0, "solved": 1, "solved_frac": 0.2, "union_minus_this": 3, "not_in_best": 1},
      {"step": 4, "solved": 2, "solved_frac": 0.4, "union_minus_this": 2, "not_in_best": 1},
      {"step": 8, "solved": 2, "solved_frac": 0.4, "union_minus_this": 2, "not_in_best": 0},
      {"step": 12, "solved": 1, "solved_frac": 0.2, "union_minus_this": 3, "not_in_best": 1},
  ]
  json.dumps(r, allow_nan=False)


def test_historical_gap():
  assert coverage_report(RUN, BEST, GROUP_OF)["historical_gap"] == [
      {"step": 0, "current": 1, "historical": 1, "gap": 0},
      {"step": 4, "current": 2, "historical": 2, "gap": 0},
      {"step": 8, "current": 2, "historical": 3, "gap": 1},   # P1 lost
      {"step": 12, "current": 1, "historical": 4, "gap": 3},  # P1, P2, L1 lost, L2 new
  ]
  # Steps are taken in order whatever the mapping's order.
  assert [r["step"] for r in historical_gap({5: frozenset("a"), 1: frozenset("b")})] == [1, 5]


def test_majority_rule_and_bad_input():
  run = {**RUN, 4: {**RUN[4], L1: (2, 2)}}  # every step has 1 success of 2, except L1 at step 4
  r = coverage_report(run, BEST, GROUP_OF, rule="majority")
  assert (r["union"], r["best"], r["solved_rule"]) == (1, 0, "majority") and r["union_over_best"] is None
  with pytest.raises(ValueError, match="best_step 3 is not among"):
    coverage_report(RUN, 3, GROUP_OF)
  with pytest.raises(ValueError, match="at least one checkpoint"):
    coverage_report({}, 0, GROUP_OF)


def test_markdown():
  md = to_markdown(coverage_report(RUN, BEST, GROUP_OF), "T")
  assert md.startswith("# T\n")
  assert "| 5 | 4 | 2 | 2 (4) | 2.00x | 2 |" in md
  assert "| look_at_obj_in_light | 2 | 2 | 1 | 1 (4) | 2.00x |" in md
  assert "| other | 1 | 0 | 0 | 0 (0) | n/a |" in md
  assert "| 8 (best) | 2 | 40.0 | 2 | 0 | 3 | 1 |" in md


def _alfworld_run(root) -> tuple:
  """(a run folder whose config.json names ALFWorld games written under `root`, {panel id: that game's path})."""
  data = root / "data"
  for game in (P1, P2, L1, L2, "train/pick_and_place_simple-Cup-None-Sink-5/trial_5/game.tw-pddl"):
    folder = (data / "json_2.1.1" / game).parent
    folder.mkdir(parents=True)
    (folder / "traj_data.json").write_text(json.dumps({"task_type": game.split("/")[1].split("-")[0]}))
    (folder / "game.tw-pddl").write_text(json.dumps({"solvable": True}))
  run_dir = root / "run"
  run_dir.mkdir()
  (run_dir / "config.json").write_text(json.dumps({"seed": 0, "env": {
      "name": "alfworld", "data_root": str(data), "train_split": "train", "valid_split": "valid_seen",
      "task_types": ["pick_and_place_simple", "look_at_obj_in_light"]}}))
  return run_dir, {p: str(data / "json_2.1.1" / p) for p in (P1, P2, L1, L2)}


def test_a_run_groups_its_problems_as_its_env_groups_its_tasks(tmp_path):
  run_dir, path = _alfworld_run(tmp_path)
  group_of = run_group_of(run_dir)
  assert group_of(path[P1]) == "pick_and_place" and group_of(path[L2]) == "look_at_obj_in_light"
  assert group_of(X) is None  # no task of the run
  name = registry.get("alfworld").record_name
  assert group_of(name(path[L1])) == "look_at_obj_in_light"  # a record's name for it (experiments/record_run)
  assert name(path[L1]) == L1.rsplit("/", 1)[0] and name(name(path[L1])) == name(path[L1]) and name(X) == X
  webshop = tmp_path / "webshop"
  webshop.mkdir()
  (webshop / "config.json").write_text(json.dumps({"env": {"name": "webshop"}}))
  assert run_group_of(webshop)("3") is None  # an env without groups
  with pytest.raises(FileNotFoundError, match="no config.json"):
    run_group_of(tmp_path)


def test_an_evaluation_is_recorded_under_its_envs_names(tmp_path):
  """record_run --eval names problems by the env the report names, or by its run's env when it names none."""
  spec = importlib.util.spec_from_file_location("record_run", os.path.join(REPO, "experiments", "record_run.py"))
  record_run = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(record_run)
  run_dir, path = _alfworld_run(tmp_path)
  outcomes = {path[P1]: [1, 2], path[L1]: [0, 2]}
  named = {P1.rsplit("/", 1)[0]: [1, 2], L1.rsplit("/", 1)[0]: [0, 2]}
  for report in ({"outcomes": outcomes, "env": "alfworld"}, {"outcomes": outcomes}):
    (run_dir / "eval").mkdir(exist_ok=True)
    (run_dir / "eval" / "eval.json").write_text(json.dumps(report))
    record_run.record_eval(run_dir / "eval" / "eval.json", tmp_path / "record.json")
    assert json.loads((tmp_path / "record.json").read_text())["outcomes"] == named
  search = {"outcomes": {"nq:17": [1, 4]}, "env": "search"}  # an env whose ids are their own names
  (tmp_path / "search.json").write_text(json.dumps(search))
  record_run.record_eval(tmp_path / "search.json", tmp_path / "search_record.json")
  assert json.loads((tmp_path / "search_record.json").read_text())["outcomes"] == {"nq:17": [1, 4]}
  (tmp_path / "lost.json").write_text(json.dumps({"outcomes": outcomes}))  # no env, no run around it
  with pytest.raises(SystemExit, match="config.json"):
    record_run.record_eval(tmp_path / "lost.json", tmp_path / "lost_record.json")


def test_cli_writes_json_markdown_and_png(tmp_path):
  run_dir, path = _alfworld_run(tmp_path)
  run = {step: {path.get(p, p): o for p, o in outcomes.items()} for step, outcomes in RUN.items()}
  with CheckpointPool(run_dir / "checkpoints") as pool:
    for step, outcomes in run.items():
      pool.save(step, {"params": {"w": np.full((2, 2), step, np.float32)}},
                metrics={"val/success_rate": 0.9 if step == BEST else 0.1}, outcomes=outcomes, config={})
  out = tmp_path / "cov"
  env = {**os.environ, "JAX_PLATFORMS": "cpu"}
  proc = subprocess.run([sys.executable, "experiments/coverage.py", f"--run_dir={run_dir}", f"--out={out}"],
                        cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert sorted(os.listdir(out)) == ["coverage.json", "coverage.md", "coverage.png"]
  report = json.loads((out / "coverage.json").read_text())
  assert report == {**coverage_report(run, BEST, GROUP_OF), "run_dir": str(run_dir)}
  assert set(report["per_type"]) == {"look_at_obj_in_light", "other", "pick_and_place"}
  assert "| 8 (best) |" in (out / "coverage.md").read_text()
  assert (out / "coverage.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
  assert json.loads(proc.stdout.strip().splitlines()[-1])["union_over_best"] == 2.0


def test_forgetting_report_tells_skill_from_luck_by_hand_values(tmp_path):
  then = {P1: (5, 16), P2: (4, 16), L1: (0, 16), L2: (3, 16), X: (0, 16)}
  now = {P1: (0, 16), P2: (0, 16), L1: (6, 16), L2: (3, 16), X: (0, 16)}
  report = forgetting_report(then, now, GROUP_OF)
  # P(X >= 5) for X ~ Hypergeometric(32 attempts, 5 wins, 16 drawn) = C(16,5) / C(32,5) = 4368 / 201376.
  assert report["problems"][P1]["p_forgotten"] == pytest.approx(4368 / 201376)
  assert report["problems"][P2]["p_forgotten"] == pytest.approx(1820 / 35960)  # 0.0506: could be luck
  assert report["forgotten"] == [P1] and report["learned"] == [L1]
  pick = report["per_type"]["pick_and_place"]
  assert (pick["problems"], pick["then"], pick["now"], pick["forgotten"]) == (2, 9 / 32, 0.0, 1)
  assert pick["wilcoxon_p"] == pytest.approx(0.5)  # 2 problems, both down: exact two-sided p = 2 / 2^2
  assert report["per_type"]["other"]["wilcoxon_p"] is None  # nothing changed
  md = forgetting_markdown(report, "t")
  assert "| pick_and_place | 2 | 28.1 | 0.0 | 1 | 0 | 0.5 |" in md and f"| {P1} | 5/16 | 0/16 | 0.0217 |" in md
  with pytest.raises(ValueError, match="share no problem"):
    forgetting_report({P1: (1, 2)}, {P2: (1, 2)}, GROUP_OF)
  # the command reads two evaluate.py reports of a run (by default the folder above the later report's)
  run_dir, path = _alfworld_run(tmp_path)
  for name, outcomes in (("then", then), ("now", now)):
    (run_dir / f"eval_{name}").mkdir()
    (run_dir / f"eval_{name}" / "eval.json").write_text(
        json.dumps({"outcomes": {path.get(p, p): list(v) for p, v in outcomes.items()}}))
  proc = subprocess.run([sys.executable, "experiments/forgetting.py", f"--then={run_dir / 'eval_then' / 'eval.json'}",
                         f"--now={run_dir / 'eval_now' / 'eval.json'}", f"--out={tmp_path / 'f'}"],
                        cwd=REPO, capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert json.loads((tmp_path / "f" / "forgetting.json").read_text())["forgotten"] == [path[P1]]
  assert "| pick_and_place | 2 |" in (tmp_path / "f" / "forgetting.md").read_text()
  bad = subprocess.run([sys.executable, "experiments/forgetting.py", f"--then={tmp_path / 'nope.json'}",
                        f"--now={run_dir / 'eval_now' / 'eval.json'}"], cwd=REPO, capture_output=True, text=True,
                       timeout=300)
  assert bad.returncode != 0 and "nope.json" in bad.stderr
  (tmp_path / "now.json").write_text((run_dir / "eval_now" / "eval.json").read_text())
  no_run = subprocess.run([sys.executable, "experiments/forgetting.py", f"--then={tmp_path / 'now.json'}",
                           f"--now={tmp_path / 'now.json'}"], cwd=REPO, capture_output=True, text=True, timeout=300)
  assert no_run.returncode != 0 and "no config.json" in no_run.stderr and "--run_dir" in no_run.stderr


def test_confirmation_report_by_hand():
  """F1's union-only problems, picked on one set of attempts and rated on another."""
  a, b, c, d = "a", "b", "c", "d"
  select = {0: {a: (1, 4), b: (0, 4), c: (0, 4), d: (2, 4)}, 4: {a: (0, 4), b: (2, 4), c: (1, 4), d: (0, 4)},
            8: {a: (3, 4), b: (0, 4), c: (0, 4), d: (0, 4)}}
  confirm = {0: {a: (0, 4), b: (1, 4), c: (0, 4), d: (4, 4)}, 4: {a: (1, 4), b: (3, 4), c: (0, 4), d: (0, 4)},
             8: {a: (2, 4), b: (1, 4), c: (1, 4), d: (0, 4)}}
  r = confirmation_report(select, confirm, best_step=8)
  # union-only: b (solved by 4), c (4), d (0); confirming rates solvers vs best: 75 vs 25, 0 vs 25, 100 vs 0
  assert r["only_union"] == 3 and {p: q["solvers"] for p, q in r["problems"].items()} == {b: [4], c: [4], d: [0]}
  assert [(q["solvers_rate"], q["best_rate"]) for q in r["problems"].values()] == [(75, 25), (0, 25), (100, 0)]
  assert r["select"] == {"union": 4, "best": 1, "union_over_best": 4.0}
  assert r["confirm"] == {"union": 4, "best": 3, "union_over_best": 4 / 3}
  assert r["solvers_rate"] == pytest.approx(175 / 3) and r["best_rate"] == pytest.approx(50 / 3)
  # differences 50, -25, 100: mean 125/3, sd = sqrt(71250 / 18) = 62.9153, t(0.975, 2) = 4.302653 -> 156.2902
  assert r["difference"]["mean"] == pytest.approx(125 / 3)
  assert r["difference"]["ci95"] == pytest.approx([125 / 3 - 156.2902, 125 / 3 + 156.2902], abs=1e-3)
  with pytest.raises(ValueError, match=r"no outcomes of steps \[4\]"):
    confirmation_report(select, {0: confirm[0], 8: confirm[8]}, 8)
  with pytest.raises(ValueError, match="'d' is missing"):
    confirmation_report(select, {s: {p: o for p, o in v.items() if p != d} for s, v in confirm.items()}, 8)


@pytest.mark.parametrize("coverage", [False, True])
def test_confirmation_separates_luck_from_coverage(coverage):
  """Checkpoints of equal skill: the union's extra problems are luck, and the solvers are not ahead on new attempts.
  Checkpoints that each know problems the others do not: the solvers stay ahead."""
  rng = np.random.default_rng(0)
  problems = [f"p{i}" for i in range(600)]
  base = rng.uniform(0.0, 0.4, len(problems))
  rates = {s: base.copy() for s in (0, 4, 8)}
  if coverage:  # each earlier checkpoint is much better on its own third of the problems
    for k, s in enumerate((0, 4)):
      rates[s][k::3] = np.minimum(1.0, rates[s][k::3] + 0.5)

  def play():
    return {s: {p: (int(rng.binomial(4, r[i])), 4) for i, p in enumerate(problems)} for s, r in rates.items()}

  r = confirmation_report(play(), play(), best_step=8)
  lo, hi = r["difference"]["ci95"]
  assert r["only_union"] > 100
  if coverage:
    assert lo > 10
  else:
    assert lo < 0 < hi and abs(r["difference"]["mean"]) < 3
