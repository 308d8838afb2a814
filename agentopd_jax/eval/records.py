"""Method comparisons read from run records (`results/<table>/`, `experiments/record_run.py`): no run folder, no
checkpoint, so a table and its plots regenerate from what the repository holds.

A table's folder holds one record per trained run, `<method>-s<seed>` (a sweep point's name), with its metrics log,
its per-problem validation outcomes and its evaluations (`eval_<name>.json`: the last checkpoint re-evaluated, e.g.
at T = 0.4), and the warm start's evaluations per seed (`warm_start/eval_<row>_T<temperature>_s<seed>.json`). A row
of a table is a method's endpoint per seed; rows are paired with a baseline row by seed: the mean difference, its
95 % t interval, and the paired t-test's p, Holm-corrected over the table's contrasts.
"""
from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import numpy as np

from agentopd_jax.eval.compare import holm, paired, paired_ci
from agentopd_jax.envs.verl_agent.metrics import WEBSHOP_SCORE_KEY
from agentopd_jax.storage.logs import renamed

VAL_SCORE = f"val/{WEBSHOP_SCORE_KEY}"


@dataclasses.dataclass
class Record:
  """One trained run's record: validation success by step (%; `val_skills`: Skill-GRPO's panel with its skills) and
  the temperature it validated at, its evaluations by name (%; `eval_groups`: per task group, "All" included), and
  its per-iteration training metrics. `val_score`, `eval_scores`: the same for WebShop's task score (the mean
  episode score, 0–100), where the env reports one."""
  val: Dict[int, float]
  val_skills: Dict[int, float]
  evals: Dict[str, float]
  train: List[dict]
  eval_groups: Dict[str, Dict[str, float]] = dataclasses.field(default_factory=dict)
  val_temperature: float = 1.0
  val_score: Dict[int, float] = dataclasses.field(default_factory=dict)
  eval_scores: Dict[str, float] = dataclasses.field(default_factory=dict)

  def success_at(self, temperature: float, skills: bool = False, score: bool = False) -> Optional[float]:
    """Success % (`score`: the task score) of the last checkpoint at `temperature`: its evaluation there
    (`eval_[skills_]T<temperature>`), else the last validation when the run validated at that temperature; None when
    neither was made."""
    name = f"skills_T{temperature}" if skills else f"T{temperature}"
    evals = self.eval_scores if score else self.evals
    if name in evals:
      return evals[name]
    if self.val_temperature != temperature or (score and skills):  # no run validates a score with its skills
      return None
    val = self.val_score if score else self.val_skills if skills else self.val
    return val[max(val)] if val else None

  def series(self, key: str) -> Dict[int, float]:
    """{iteration: value} of one training metric, where logged."""
    return {r["step"]: r[key] for r in self.train if key in r}


@dataclasses.dataclass
class Table:
  """What a table's folder holds: `runs[method][seed]` and `warm[seed]["<row>@<temperature>"]` (success %;
  `warm_score`: the task score, where the env reports one)."""
  runs: Dict[str, Dict[int, Record]]
  warm: Dict[int, Dict[str, float]]
  warm_score: Dict[int, Dict[str, float]] = dataclasses.field(default_factory=dict)


def _score(report: dict) -> Optional[float]:
  """An evaluation report's task score (0–100), None where the env reports none."""
  return None if report.get("task_score_mean") is None else 100.0 * report["task_score_mean"]


def eval_groups(report: dict) -> Dict[str, float]:
  """{group: success %} of an evaluation report's groups that played an episode (its `per_type`)."""
  return {g: 100.0 * r["success_rate"] for g, r in report.get("per_type", {}).items() if r["episodes"]}


def load_record(folder: Path) -> Record:
  lines = [renamed(json.loads(line)) for line in (folder / "metrics.jsonl").read_text().splitlines()]
  val = {r["step"]: r for r in lines if r.get("phase") == "val"}
  reports = {p.stem[len("eval_"):]: json.loads(p.read_text()) for p in sorted(folder.glob("eval_*.json"))}
  config = folder / "config.json"
  temperature = json.loads(config.read_text())["validation"]["temperature"] if config.exists() else 1.0
  return Record(val={s: 100.0 * r["val/success_rate"] for s, r in val.items()},
                val_skills={s: 100.0 * r["val_skills/success_rate"] for s, r in val.items()
                            if "val_skills/success_rate" in r},
                evals={name: 100.0 * r["success_rate"] for name, r in reports.items()},
                train=[r for r in lines if r.get("phase") == "train"],
                eval_groups={name: eval_groups(r) for name, r in reports.items()}, val_temperature=float(temperature),
                val_score={s: 100.0 * r[VAL_SCORE] for s, r in val.items() if r.get(VAL_SCORE) is not None},
                eval_scores={name: _score(r) for name, r in reports.items() if _score(r) is not None})


def load_table(folder: Path) -> Table:
  """Every finished run's record in `folder` and the warm start's evaluations (none where `folder` is missing)."""
  runs: Dict[str, Dict[int, Record]] = {}
  if not Path(folder).is_dir():
    return Table(runs, {})
  for record in sorted(Path(folder).iterdir()):
    m = re.fullmatch(r"([\w.=+]+)-s(\d+)", record.name)
    if m and (record / "summary.json").exists():
      runs.setdefault(m[1], {})[int(m[2])] = load_record(record)
  warm: Dict[int, Dict[str, float]] = {}
  warm_score: Dict[int, Dict[str, float]] = {}
  for path in sorted((Path(folder) / "warm_start").glob("eval_*_s*.json")):
    m = re.fullmatch(r"eval_(\w+)_T([\d.]+)_s(\d+)\.json", path.name)
    if m:
      report = json.loads(path.read_text())
      warm.setdefault(int(m[3]), {})[f"{m[1]}@{m[2]}"] = 100.0 * report["success_rate"]
      if _score(report) is not None:
        warm_score.setdefault(int(m[3]), {})[f"{m[1]}@{m[2]}"] = _score(report)
  return Table(runs, warm, warm_score)


def last_validation(record: Record, skills: bool = False) -> Optional[float]:
  val = record.val_skills if skills else record.val
  return val[max(val)] if val else None


def paired_rows(rows: Sequence[tuple], baseline: Dict[int, float]) -> List[dict]:
  """Rows (label, key, {seed: %}) against `baseline` {seed: %}: each row's values, and unless it is the baseline
  itself (key None), its paired difference over the seeds both have, the 95 % t interval, and the paired t-test's p
  Holm-corrected over the rows."""
  out = []
  for label, key, values in rows:
    entry = {"label": label, "row": key, "values": {str(s): v for s, v in sorted(values.items())}}
    if key is not None:
      seeds = sorted(set(values) & set(baseline))
      n, _, _, p = paired(values, baseline)
      mean, lo, hi = paired_ci([values[s] - baseline[s] for s in seeds])
      entry.update(paired_seeds=n, diff=mean, ci=[lo, hi], p=p)
    out.append(entry)
  for entry, p in zip(out, holm([e.get("p") for e in out])):
    if entry["row"] is not None:
      entry["p_holm"] = p
  return out


def work(table: Table) -> Dict[str, Dict[str, float]]:
  """Per method, means over its runs' iterations: optimizer steps, step samples, and the sampler↔trainer log-prob
  drift (`rollout/logprob_drift`, before the first update)."""
  def mean(runs: Dict[int, Record], key: str) -> float:
    values = [x for r in runs.values() for x in r.series(key).values()]
    return float(np.mean(values)) if values else float("nan")
  return {method: {"updates": mean(runs, "batch/updates"), "samples": mean(runs, "batch/samples"),
                   "drift": mean(runs, "rollout/logprob_drift")} for method, runs in table.runs.items()}


def seed_mean(runs: Dict[int, Record], key: str) -> Dict[int, float]:
  """{iteration: mean over the seeds that logged it} of one training metric."""
  by_step: Dict[int, List[float]] = {}
  for r in runs.values():
    for step, v in r.series(key).items():
      by_step.setdefault(step, []).append(v)
  return {s: float(np.mean(v)) for s, v in sorted(by_step.items())}
