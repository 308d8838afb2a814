"""Comparison tables from finished runs, in the papers' layout (methods.md §7), for `experiments/compare.py`.

Runs are grouped into methods by label: a sweep's points by their name without the seed ("kl_coef=0.01-s1" ->
"kl_coef=0.01"), a run folder by its name without a trailing "_s<seed>"/"-s<seed>", or as the caller labels them.
Each run contributes its validation metrics at one step (the last by default; `step=N` for another), or with
`since=M` their change from step M to that step (points; M = 0: what training did to the start); a method's cell
is mean ± sd over its seeds, in percent. The columns are the env's `ReportSpec` (`envs/registry.py`), those the runs
report: one per task group in the papers' order (ALFWorld's task types Pick ... Pick2, search-QA's data sources
NQ ... Bam), then the headline: All (every episode), Avg (the mean of the group columns, as the papers average) or
Score (the task score × 100, with success as Succ). The paired test against a baseline method is over the seeds both
have, on the headline column.
"""
from __future__ import annotations

import csv
import dataclasses
import io
import json
import os
import re
import statistics
from typing import Dict, List, Optional, Sequence, Tuple

from agentopd_jax.envs import registry
from agentopd_jax.envs.verl_agent.metrics import WEBSHOP_SCORE_KEY
from agentopd_jax.storage.logs import read_metrics

_SEED_SUFFIX = re.compile(r"[-_]s(\d+)$")


@dataclasses.dataclass(frozen=True)
class Run:
  label: str
  seed: int
  workdir: str
  env: str
  curve: Dict[int, Dict[str, float]]  # validation step -> its metrics (`val/` dropped)


def load_run(workdir: str, label: Optional[str] = None) -> Run:
  """One finished (or running) run: its env and seed from config.json, its validations from the metrics log."""
  config_path = os.path.join(workdir, "config.json")
  if not os.path.isfile(config_path):
    raise ValueError(f"{workdir}: not a run folder (no config.json)")
  with open(config_path) as f:
    config = json.load(f)
  curve = {r["step"]: {k[len("val/"):]: v for k, v in r.items() if k.startswith("val/")}
           for r in read_metrics(os.path.join(workdir, "logs")) if r["phase"] == "val"}
  if not curve:
    raise ValueError(f"{workdir}: no validation logged yet")
  name = os.path.basename(os.path.normpath(workdir))
  return Run(label or _SEED_SUFFIX.sub("", name), int(config["seed"]), workdir, config["env"]["name"], curve)


def find_runs(args: Sequence[str]) -> List[Run]:
  """Runs from command-line arguments: `label=dir[,dir...]`, a sweep folder (its sweep.json), a run folder, or a
  folder of run folders."""
  runs = []
  for arg in args:
    labelled = _split_label(arg)
    if labelled:
      label, dirs = labelled
      runs += [load_run(d, label) for d in dirs.split(",") if d]
    elif os.path.isfile(os.path.join(arg, "sweep.json")):
      with open(os.path.join(arg, "sweep.json")) as f:
        points = json.load(f)["points"]
      runs += [load_run(p["workdir"], _SEED_SUFFIX.sub("", p["name"])) for p in points
               if _validated(p["workdir"])]  # a running sweep: the points that have validated so far
    elif os.path.isfile(os.path.join(arg, "config.json")):
      runs.append(load_run(arg))
    elif os.path.isdir(arg):
      children = sorted(os.path.join(arg, d) for d in os.listdir(arg)
                        if os.path.isfile(os.path.join(arg, d, "config.json")))
      if not children:
        raise ValueError(f"{arg}: holds no run folders and no sweep.json")
      runs += [load_run(d) for d in children]
    else:
      raise ValueError(f"{arg}: no such run or sweep folder")
  return runs


def _validated(workdir: str) -> bool:
  """The run folder has a config and has logged a validation (a sweep point that has started and got that far)."""
  if not os.path.isfile(os.path.join(workdir, "config.json")):
    return False
  if not os.path.isfile(os.path.join(workdir, "logs", "metrics.jsonl")):
    return False
  return any(r["phase"] == "val" for r in read_metrics(os.path.join(workdir, "logs")))


def _split_label(arg: str) -> Optional[Tuple[str, str]]:
  """("label", "dir,dir") of a `label=dir[,dir...]` argument, None for a bare path. Labels and paths may both hold
  "=" (sweep point names do): the split is at the first "=" after which the first listed folder exists."""
  if os.path.exists(arg):
    return None
  for i, ch in enumerate(arg):
    if ch == "=" and os.path.exists(arg[i + 1:].split(",")[0]):
      return arg[:i], arg[i + 1:]
  return None


def cells(run: Run, step: Optional[int] = None) -> Dict[str, float]:
  """The run's table cells (percent) at validation `step` (None: its last)."""
  at = max(run.curve) if step is None else step
  if at not in run.curve:
    raise ValueError(f"{run.workdir}: no validation at step {at} (it has {sorted(run.curve)})")
  m = run.curve[at]
  report = registry.get(run.env).report
  out = {name: 100 * m[f"{group}_success_rate"] for name, group in report.columns
         if f"{group}_success_rate" in m}
  if report.headline == "Score":
    out["Score"] = 100 * m[WEBSHOP_SCORE_KEY]
    out["Succ"] = 100 * m["success_rate"]
  elif report.headline == "Avg":
    per_group = list(out.values())
    out["Avg"] = statistics.mean(per_group) if per_group else 100 * m["success_rate"]
  else:
    out["All"] = 100 * m["success_rate"]
  return out


def spread(diffs: Sequence[float]) -> float:
  """The sample standard deviation of paired differences, 0 where it is only rounding: differences that are equal
  counts of episodes (two seeds 5 episodes apart each) come out of different totals a few ulps apart, and a t-test
  on that residue would report p ≈ 0 for a variance the data cannot estimate."""
  sd = statistics.stdev(diffs)
  return 0.0 if sd <= 1e-9 * max(1.0, abs(statistics.mean(diffs))) else sd


def paired(a: Dict[int, float], b: Dict[int, float]) -> Tuple[int, float, Optional[float], Optional[float]]:
  """(seeds in both, mean of a − b over them, paired t, two-sided p); t and p are None under 2 seeds or no spread."""
  seeds = sorted(set(a) & set(b))
  diffs = [a[s] - b[s] for s in seeds]
  if not diffs:
    return 0, float("nan"), None, None
  mean = statistics.mean(diffs)
  if len(diffs) < 2 or spread(diffs) == 0:
    return len(diffs), mean, None, None
  from scipy import stats

  t, p = stats.ttest_rel([a[s] for s in seeds], [b[s] for s in seeds])
  return len(diffs), mean, float(t), float(p)


def paired_ci(diffs: Sequence[float], level: float = 0.95) -> Tuple[float, float, float]:
  """(mean, lower, upper) of the t interval of the mean of per-seed paired differences (nan bounds under 2 seeds, or
  with no spread: equal differences leave the variance, and so the interval, unestimated)."""
  import numpy as np
  from scipy import stats

  d = np.asarray(diffs, float)
  if len(d) < 2 or spread(d.tolist()) == 0:
    return float(d.mean()) if len(d) else float("nan"), float("nan"), float("nan")
  half = stats.t.ppf(0.5 + level / 2, len(d) - 1) * d.std(ddof=1) / np.sqrt(len(d))
  return float(d.mean()), float(d.mean() - half), float(d.mean() + half)


def holm(pvalues: Sequence[Optional[float]]) -> List[Optional[float]]:
  """Holm–Bonferroni adjusted p-values of one family of contrasts, in the given order (None stays None and does not
  count): the i-th smallest of m p-values becomes max over j ≤ i of min(1, (m − j + 1)·p_(j))."""
  present = sorted((p, i) for i, p in enumerate(pvalues) if p is not None)
  out: List[Optional[float]] = [None] * len(pvalues)
  running = 0.0
  for rank, (p, i) in enumerate(present):
    running = max(running, min(1.0, (len(present) - rank) * p))
    out[i] = running
  return out


@dataclasses.dataclass
class Table:
  env: str
  columns: List[str]
  rows: List[Dict]  # label, seeds, per column (mean, sd), vs_baseline (n, diff, t, p) or None
  since: Optional[int] = None  # cells are changes from this validation step


def _change(run: Run, step: Optional[int], since: int) -> Dict[str, float]:
  after, before = cells(run, step), cells(run, since)
  return {c: after[c] - before[c] for c in after if c in before}


def tables(runs: Sequence[Run], baseline: Optional[str] = None, step: Optional[int] = None,
           since: Optional[int] = None) -> List[Table]:
  """One table per env, methods in first-seen order; with `since`, of each run's change from that step."""
  out = []
  for env in dict.fromkeys(r.env for r in runs):
    env_runs = [r for r in runs if r.env == env]
    by_label: Dict[str, Dict[int, Dict[str, float]]] = {}
    for r in env_runs:
      seeds = by_label.setdefault(r.label, {})
      if r.seed in seeds:
        raise ValueError(f"{r.workdir}: method {r.label!r} has seed {r.seed} twice")
      seeds[r.seed] = cells(r, step) if since is None else _change(r, step, since)
    if baseline is not None and baseline not in by_label:
      raise ValueError(f"--baseline {baseline!r} is not among the {env} methods {sorted(by_label)}")
    present = {c for seeds in by_label.values() for v in seeds.values() for c in v}
    report = registry.get(env).report
    order = [n for n, _ in report.columns] + ["All", "Avg", "Score", "Succ"]
    columns = [c for c in order if c in present]
    head = report.headline
    rows = []
    for label, seeds in by_label.items():
      row = {"label": label, "seeds": sorted(seeds)}
      for c in columns:
        values = [v[c] for v in seeds.values() if c in v]
        row[c] = (statistics.mean(values), statistics.stdev(values) if len(values) > 1 else 0.0) if values else None
      row["vs_baseline"] = None
      if baseline is not None and label != baseline:
        row["vs_baseline"] = paired({s: v[head] for s, v in seeds.items()},
                                    {s: v[head] for s, v in by_label[baseline].items()})
      rows.append(row)
    out.append(Table(env, columns, rows, since))
  return out


def markdown(table: Table, baseline: Optional[str] = None) -> str:
  head = registry.get(table.env).report.headline
  cols = ["Method", "Seeds"] + table.columns + ([f"Δ {head} vs {baseline}", "paired t (p)"] if baseline else [])
  title = f"**{table.env}**" + ("" if table.since is None else f" (change since step {table.since}, points)")
  lines = [title, "", "| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
  sign = "+" if table.since is not None else ""
  for row in table.rows:
    cells_ = [row["label"], str(len(row["seeds"]))]
    cells_ += ["–" if row[c] is None else f"{row[c][0]:{sign}.1f} ± {row[c][1]:.1f}" for c in table.columns]
    if baseline:
      vs = row["vs_baseline"]
      if vs is None:
        cells_ += ["–", "–"]
      else:
        n, diff, t, p = vs
        cells_ += [f"{diff:+.1f} ({n} paired)", "–" if t is None else f"{t:.2f} ({p:.3f})"]
    lines.append("| " + " | ".join(cells_) + " |")
  return "\n".join(lines)


def to_csv(tables_: Sequence[Table]) -> str:
  """One row per env, method and column: env, method, column, mean, sd, seeds."""
  buf = io.StringIO()
  writer = csv.writer(buf)
  writer.writerow(["env", "method", "column", "mean", "sd", "seeds"])
  for t in tables_:
    for row in t.rows:
      for c in t.columns:
        if row[c] is not None:
          writer.writerow([t.env, row["label"], c, f"{row[c][0]:.4f}", f"{row[c][1]:.4f}",
                           " ".join(map(str, row["seeds"]))])
  return buf.getvalue()


def plot(runs: Sequence[Run], path: str) -> None:
  """Validation success (headline column) against the step: per method the mean over seeds, each seed faint."""
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  envs = list(dict.fromkeys(r.env for r in runs))
  fig, axes = plt.subplots(1, len(envs), figsize=(6 * len(envs), 4), squeeze=False)
  for ax, env in zip(axes[0], envs):
    head = registry.get(env).report.headline
    labels = list(dict.fromkeys(r.label for r in runs if r.env == env))
    for i, label in enumerate(labels):
      group = [r for r in runs if r.env == env and r.label == label]
      for r in group:
        steps = sorted(r.curve)
        ax.plot(steps, [cells(r, s)[head] for s in steps], color=f"C{i}", alpha=0.25)
      steps = sorted(set.intersection(*[set(r.curve) for r in group]))
      ax.plot(steps, [statistics.mean(cells(r, s)[head] for r in group) for s in steps], color=f"C{i}",
              marker="o", label=f"{label} ({len(group)})")
    ax.set_title(f"{env}: validation {head} (%)", fontsize=10)
    ax.set_xlabel("iteration")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
