"""docs/results.md agrees with the run records in results/: each table recorded there is recomputed from them."""
import json
import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _validations(run: str) -> dict:
  records = [json.loads(line) for line in open(os.path.join(ROOT, "results", run, "metrics.jsonl"))]
  return {r["step"]: r for r in records if r.get("phase") == "val"}


def _table(heading: str) -> list:
  """The rows (cells) of the first table after `heading` in docs/results.md."""
  text = open(os.path.join(ROOT, "docs", "results.md"), encoding="utf-8").read()
  section = text[text.index(heading):]
  rows = re.findall(r"^\|(.+)\|$", section[section.index("\n|"):].split("\n\n")[0], re.M)
  return [[c.strip() for c in row.split("|")] for row in rows[2:]]


def test_default_rerun_table_matches_its_records():
  rows = _table("## Reproducing the default run")
  assert [r[0] for r in rows] == ["0", "1", "2"]
  for seed, steps, look, pick in rows:
    val = _validations(f"alfworld_default/seed{seed}")
    pct = lambda step, key="success_rate": f"{100 * val[step][f'val/{key}']:.1f}"
    assert steps == " → ".join(pct(s) for s in (0, 4, 8))
    assert look == f"{pct(0, 'look_at_obj_in_light_success_rate')} → {pct(8, 'look_at_obj_in_light_success_rate')}"
    assert pick == f"{pct(0, 'pick_and_place_success_rate')} → {pct(8, 'pick_and_place_success_rate')}"
    with open(os.path.join(ROOT, "results", f"alfworld_default/seed{seed}", "outcomes.json")) as f:
      outcomes = json.load(f)
    for step in (0, 4, 8):  # the per-problem outcomes are the validation's episodes
      won, played = (sum(o[i] for o in outcomes[str(step)].values()) for i in (0, 1))
      assert played == 256 and f"{100 * won / played:.1f}" == pct(step)


def test_default_rerun_paired_change_matches_its_records():
  import numpy as np
  from scipy import stats

  change = np.array([100 * (_validations(f"alfworld_default/seed{s}")[8]["val/success_rate"]
                            - _validations(f"alfworld_default/seed{s}")[0]["val/success_rate"]) for s in range(3)])
  half = stats.t.ppf(0.975, 2) * change.std(ddof=1) / np.sqrt(3)
  line = (f"Final − start, paired by seed: {', '.join(f'{d:.1f}' for d in change).replace('-', '−')} points (mean "
          f"{change.mean():.1f}, 95 % CI [{change.mean() - half:.1f}, {change.mean() + half:.1f}], "
          f"t = {stats.ttest_1samp(change, 0).statistic:.1f} on 2 df).").replace("-", "−")
  assert line in open(os.path.join(ROOT, "docs", "results.md"), encoding="utf-8").read()


@pytest.mark.parametrize("folder, seeds", [("precision_ab", [0, 1, 2]), ("precision_ab2", [0, 1, 2, 3, 4])])
def test_precision_table_matches_its_records(folder, seeds):
  """The f32 / bf16 compute A/Bs on the CPU default (experiments/precision_ab.sh): the tables and decision lines of
  docs/results.md are `experiments/precision_report.py` of the records, verbatim."""
  import importlib.util
  from pathlib import Path

  spec = importlib.util.spec_from_file_location("precision_report",
                                                os.path.join(ROOT, "experiments", "precision_report.py"))
  report = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(report)
  table = report.table(report.load(Path(ROOT, "results", folder)))
  assert table["seeds"] == seeds and [r["step"] for r in table["rows"]] == [0, 4, 8]
  assert report.markdown(table) in open(os.path.join(ROOT, "docs", "results.md"), encoding="utf-8").read()


def test_sdar_table_matches_its_records():
  """SDAR's table (experiments/sdar_table.sh): the generated block of docs/results.md is `experiments/sdar_table.py`
  of results/sdar_table, verbatim, and every recorded run's validations are its per-episode outcomes."""
  import importlib.util
  from pathlib import Path

  from agentopd_jax.eval.records import load_table

  spec = importlib.util.spec_from_file_location("sdar_table", os.path.join(ROOT, "experiments", "sdar_table.py"))
  report = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(report)
  folder = Path(ROOT, "results", "sdar_table")
  table = load_table(folder)
  assert table.runs["default"], "GRPO's runs are the table's baseline"
  begin, end = report.markers(folder)
  text = open(os.path.join(ROOT, "docs", "results.md"), encoding="utf-8").read()
  assert f"{begin}\n{report.report(folder)}\n{end}" in text
  for method, seeds in table.runs.items():
    for seed, run in seeds.items():
      outcomes = json.loads((folder / f"{method}-s{seed}" / "outcomes.json").read_text())
      for step, success in run.val.items():
        won, played = (sum(o[i] for o in outcomes[str(step)].values()) for i in (0, 1))
        assert played == 256 and abs(100 * won / played - success) < 1e-9, (method, seed, step)


def test_holm_and_paired_ci_by_hand():
  from agentopd_jax.eval.compare import holm, paired_ci

  # p = .01, .04, .03 (m = 3): sorted .01·3 = .03, .03·2 = .06, .04·1 = .04 → running max .03, .06, .06
  assert holm([0.01, 0.04, None, 0.03]) == [0.03, 0.06, None, 0.06]
  assert holm([0.6, 0.5]) == [1.0, 1.0]  # min(1, 2·.5) = 1, then max(1, .6) = 1
  # diffs 1, 2, 3: mean 2, sd 1, t(0.975, 2) = 4.302653 → half-width 4.302653 / √3 = 2.484138
  mean, lo, hi = paired_ci([1.0, 2.0, 3.0])
  assert mean == 2.0 and abs(lo - (2 - 2.484138)) < 1e-6 and abs(hi - (2 + 2.484138)) < 1e-6
