"""Evaluation reports: pass@k, the papers' per-group table (an env's `ReportSpec.columns`), and JSON + markdown output.

Pure functions over `EpisodeRecord`s, so a report can be rebuilt from saved episodes without a model or an env.
Summaries keep fractions in [0, 1]; only the markdown shows percentages, as the papers' tables do (methods.md §6-7).
"""
from __future__ import annotations

import json
import math
import os
from collections.abc import Hashable, Mapping, Sequence
from pathlib import Path

from agentopd_jax.envs.verl_agent.metrics import WEBSHOP_SCORE_KEY, EpisodeRecord, episode_metrics

Columns = Sequence[tuple[str, str]]  # ((label, group), ...): `envs.registry.ReportSpec.columns`


def pass_at_k(n: int, c: int, k: int) -> float:
  """Unbiased pass@k from n samples with c correct (Chen et al. 2021): 1 - C(n-c, k) / C(n, k).

  Written as 1 - prod_{i=n-c+1}^{n} (1 - k/i), which never forms the huge binomials.
  """
  if not (0 <= c <= n and 1 <= k <= n):
    raise ValueError(f"need 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
  if n - c < k:
    return 1.0  # every k-subset holds a success
  return 1.0 - math.prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def pass_at_k_by_problem(outcomes: Mapping[Hashable, tuple[int, int]], k: int) -> float:
  """Mean pass@k over problems given as {problem: (successes, attempts)}; problems with fewer than k attempts are
  left out, since pass@k is undefined for them."""
  values = [pass_at_k(n, c, k) for c, n in outcomes.values() if n >= k]
  if not values:
    raise ValueError(f"no problem has at least k={k} attempts")
  return math.fsum(values) / len(values)


def outcomes_by_problem(records: Sequence[EpisodeRecord]) -> dict[str, tuple[int, int]]:
  """{problem: (successes, attempts)} of the records."""
  out: dict[str, tuple[int, int]] = {}
  for e in records:
    if e.problem is None:
      raise ValueError("outcomes_by_problem needs a problem on every record")
    c, n = out.get(e.problem, (0, 0))
    out[e.problem] = (c + int(e.won), n + 1)
  return out


def group_table(records: Sequence[EpisodeRecord], columns: Columns) -> dict[str, dict]:
  """{label: {"success_rate": fraction or None, "episodes": count}}: a column per (label, group) of `columns` in
  their order, over the records of that group, then "All".

  "All" is over every record (the papers' Avg is the overall success rate); a column with no episodes has
  success_rate None, so an absent group is not mistaken for a 0% one.
  """
  label_of = {group: label for label, group in columns}
  groups: dict[str, list[bool]] = {label: [] for label, _ in columns}
  groups["All"] = []
  for e in records:
    label = label_of.get(e.group)
    if label:
      groups[label].append(e.won)
    groups["All"].append(e.won)
  return {col: {"success_rate": sum(v) / len(v) if v else None, "episodes": len(v)} for col, v in groups.items()}


def evaluation_summary(records: Sequence[EpisodeRecord], columns: Columns,
                       outcomes: Mapping[Hashable, tuple[int, int]] | None = None, ks: Sequence[int] = (1,)) -> dict:
  """Everything a report shows, JSON-ready. `columns`: the env's per-group columns (`ReportSpec.columns`), tabulated
  as `per_type` (`group_table`). `outcomes` ({problem: (successes, attempts)}) defaults to grouping the records by
  problem when all have one; pass@k is None for a k above the fewest attempts of any problem, so each reported pass@k
  averages over the same problems. `outcomes` is kept per problem; `metrics` holds the full verl-agent metric dict.
  """
  metrics = episode_metrics(records)
  if outcomes is None and all(e.problem for e in records):
    outcomes = outcomes_by_problem(records)
  min_attempts = min((n for _, n in outcomes.values()), default=0) if outcomes else 0
  return {
      "episodes": len(records),
      "problems": len(outcomes) if outcomes is not None else None,
      "success_rate": metrics["success_rate"],
      "per_type": group_table(records, columns),
      "reward_mean": metrics["reward/mean"],
      "valid_action_ratio": metrics["valid_action_ratio"],
      "length_mean": metrics["length/mean"],
      "task_score_mean": metrics.get(WEBSHOP_SCORE_KEY),
      "pass_at_k": {f"pass@{k}": pass_at_k_by_problem(outcomes, k) if k <= min_attempts else None for k in ks},
      # per problem [successes, attempts]: what two checkpoints' evaluations are compared on, problem by problem
      "outcomes": {str(p): [int(s), int(n)] for p, (s, n) in outcomes.items()} if outcomes is not None else None,
      "metrics": metrics,
  }


def _pct(x: float | None) -> str:
  return "n/a" if x is None else f"{100 * x:.1f}"


def _num(x: float | None) -> str:
  return "n/a" if x is None else f"{x:.4g}"


def to_markdown(summary: dict, title: str = "Evaluation") -> str:
  """A report: the per-group table in the env's column order (when any record falls in a group column), the
  headline metrics, then every verl-agent metric."""
  lines = [f"# {title}", ""]
  per_type = summary["per_type"]
  columns = list(per_type)  # the group columns, then "All"
  if any(per_type[c]["episodes"] for c in columns[:-1]):
    lines += [
        "| Task type | " + " | ".join(columns) + " |",
        "|---" * (len(columns) + 1) + "|",
        "| Success (%) | " + " | ".join(_pct(per_type[c]["success_rate"]) for c in columns) + " |",
        "| Episodes | " + " | ".join(str(per_type[c]["episodes"]) for c in columns) + " |",
        "",
    ]
  rows = [
      ("Episodes", str(summary["episodes"])),
      ("Problems", "n/a" if summary["problems"] is None else str(summary["problems"])),
      ("Success rate (%)", _pct(summary["success_rate"])),
  ]
  if summary.get("task_score_mean") is not None:
    rows.append(("Task score (x100)", _pct(summary["task_score_mean"])))
  rows += [
      ("Mean reward", _num(summary["reward_mean"])),
      ("Valid-action ratio (%)", _pct(summary["valid_action_ratio"])),
      ("Mean episode length", _num(summary["length_mean"])),
  ]
  rows += [(f"{name} (%)", _pct(value)) for name, value in summary["pass_at_k"].items()]
  lines += ["| Metric | Value |", "|---|---|", *(f"| {k} | {v} |" for k, v in rows), ""]
  lines += ["## All episode metrics", "", "| Key | Value |", "|---|---|"]
  lines += [f"| `{k}` | {_num(v)} |" for k, v in summary["metrics"].items()]
  return "\n".join(lines) + "\n"


def write_report(summary: dict, out_dir: str | os.PathLike, name: str = "eval",
                 title: str | None = None) -> tuple[str, str]:
  """Write `{name}.json` (the summary, for tools) and `{name}.md` (for people); returns their paths."""
  out = Path(out_dir)
  out.mkdir(parents=True, exist_ok=True)
  json_path, md_path = out / f"{name}.json", out / f"{name}.md"
  json_path.write_text(json.dumps(summary, indent=2, allow_nan=False) + "\n", encoding="utf-8")
  md_path.write_text(to_markdown(summary, title or name), encoding="utf-8")
  return str(json_path), str(md_path)
