"""Coverage of a GRPO run's checkpoints on the validation panel: the evidence Agentic-OPD starts from.

The method's premise (research/methods.md §2, §2.5) is that the best-validation checkpoint fails problems that other
checkpoints of the same run solved, so the union of the solved sets is well above any single checkpoint, and that
the gap opens over training (the "historical gap": what the current checkpoint solves vs what some checkpoint up to
then solved). These are pure functions over per-checkpoint outcome records {problem id: (successes, attempts)}, so
they are tested on hand-made records; `experiments/coverage.py` feeds them a run's checkpoint pool, and the teacher
pool (`methods/agentic_opd/pool.py`) uses the same solved rule.

The per-group counts take `group_of`: problem id -> its group (ALFWorld's task type, search-QA's data source);
`run_group_of` builds it for a run folder from its env's tasks. A problem of no group is grouped as "other".
"""
from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping

from agentopd_jax.envs import registry

# "any": solved if some attempt succeeded (the authors' EM > 0 at greedy n=1); "majority": more than half did.
SOLVED_RULES = ("any", "majority")
OTHER_GROUP = "other"

Outcomes = Mapping[str, tuple[int, int]]
GroupOf = Callable[[str], "str | None"]


def is_solved(successes: int, attempts: int, rule: str = "any") -> bool:
  if rule == "any":
    return successes > 0
  if rule == "majority":
    return 2 * successes > attempts
  raise ValueError(f"solved_rule must be one of {SOLVED_RULES}, got {rule!r}")


def solved_set(outcomes: Outcomes, rule: str = "any") -> frozenset[str]:
  """The problems `outcomes` counts as solved under `rule` (see SOLVED_RULES)."""
  return frozenset(p for p, (s, a) in outcomes.items() if is_solved(s, a, rule))


def run_group_of(run_dir: str | os.PathLike) -> GroupOf:
  """problem id -> group for the run in `run_dir`: its env's `EnvSpec.group_of` over the validation tasks its
  `config.json` names (the panel is a prefix of them), under the ids the rollout gives problems (`str(task)`) and
  under those its records give them (`EnvSpec.record_name`), so a run's record groups as the run does."""
  path = os.path.join(run_dir, "config.json")
  if not os.path.isfile(path):
    raise FileNotFoundError(f"{run_dir}: no config.json (the trainer writes it), so no env to group problems by")
  import ml_collections

  with open(path) as f:
    env_cfg = ml_collections.ConfigDict(json.load(f)["env"])
  spec = registry.get(env_cfg.name)
  if spec.task_group is None:
    return lambda problem: None
  groups = {}
  for task in spec.tasks(env_cfg)[1]:
    groups[str(task)] = groups[spec.record_name(str(task))] = spec.group_of(task)
  return groups.get


def _group(group_of: GroupOf, problem: str) -> str:
  return group_of(problem) or OTHER_GROUP


def historical_gap(solved: Mapping[int, frozenset[str]]) -> list[dict]:
  """Per step (ascending): `current` = |Q_step|, `historical` = |union of Q_s for s <= step| (this step included, so
  `gap` = historical - current >= 0 counts problems solved before but not now)."""
  seen: set[str] = set()
  rows = []
  for step in sorted(solved):
    seen |= solved[step]
    rows.append({"step": step, "current": len(solved[step]), "historical": len(seen),
                 "gap": len(seen) - len(solved[step])})
  return rows


def _ratio(num: int, den: int) -> float | None:
  return num / den if den else None


def _group_counts(problems: frozenset[str], solved: Mapping[int, frozenset[str]], best_step: int) -> dict:
  """|problems|, and how many of them the union, the best checkpoint and the top single checkpoint solve."""
  union = frozenset().union(*solved.values()) & problems
  top = max(solved, key=lambda s: (len(solved[s] & problems), -s))  # ties: the earlier step
  return {"problems": len(problems), "union": len(union), "best": len(solved[best_step] & problems),
          "max_single": len(solved[top] & problems), "max_single_step": top,
          "union_over_best": _ratio(len(union), len(solved[best_step] & problems))}


def coverage_report(outcomes: Mapping[int, Outcomes], best_step: int, group_of: GroupOf, rule: str = "any") -> dict:
  """The coverage analysis of one run, JSON-ready.

  outcomes: {step: {problem id: (successes, attempts)}}; the panel U is every problem any step was evaluated on.
  best_step: the student's (best-validation) step. group_of: problem id -> its group (None: "other"). Returns the
  overall counts (`_group_counts`) plus `only_union` (how many problems some checkpoint solves but the best one does
  not) and `only_union_problems` ({such problem: the steps that solve it}), `per_type` counts per group, one row per
  checkpoint
  (solved, fraction of U, |union - Q_i|, |Q_i - Q_best|) and the `historical_gap` curve.
  """
  if not outcomes:
    raise ValueError("coverage_report needs at least one checkpoint's outcomes")
  if best_step not in outcomes:
    raise ValueError(f"coverage_report: best_step {best_step} is not among the steps {sorted(outcomes)}")
  solved = {s: solved_set(o, rule) for s, o in outcomes.items()}
  panel = frozenset().union(*(o.keys() for o in outcomes.values()))
  union, best = frozenset().union(*solved.values()), solved[best_step]
  report = {"solved_rule": rule, "steps": sorted(solved), "best_step": best_step,
            **_group_counts(panel, solved, best_step), "only_union": len(union - best),
            "only_union_problems": {p: [s for s in sorted(solved) if p in solved[s]] for p in sorted(union - best)}}
  report["per_type"] = {t: _group_counts(frozenset(p for p in panel if _group(group_of, p) == t), solved, best_step)
                        for t in sorted({_group(group_of, p) for p in panel})}
  report["checkpoints"] = [{"step": s, "solved": len(q), "solved_frac": _ratio(len(q), len(panel)),
                            "union_minus_this": len(union - q), "not_in_best": len(q - best)}
                           for s, q in sorted(solved.items())]
  report["historical_gap"] = historical_gap(solved)
  return report


def confirmation_report(select: Mapping[int, Outcomes], confirm: Mapping[int, Outcomes], best_step: int,
                        rule: str = "any") -> dict:
  """F1 with sampling luck taken out: the solved sets picked on one set of attempts, tested on an independent one.

  With a few attempts per problem, the union over C checkpoints has C times the best one's attempts, so it solves
  more problems by luck alone. `select` ({step: outcomes}, e.g. the run's own validations) gives each checkpoint's
  solved set (under `rule`) and the problems only the union solves, each with the checkpoints that solved it.
  `confirm` holds the same checkpoints re-played on the same problems with independent random numbers. On it, each
  union-only problem compares its solvers' success rate (their attempts pooled) with the best checkpoint's. Were
  the union's extra problems luck, the two rates would be equal in expectation: selection favoured the solvers' luck
  and the best one's bad luck, and neither carries over to new random numbers. Coverage shows as the solvers ahead.

  Returns the union / best counts on each set, per union-only problem its solvers and both confirm rates, and over
  those problems the mean difference (points) with its 95 % t interval and the Wilcoxon signed-rank p."""
  from scipy import stats

  from agentopd_jax.eval.compare import paired_ci

  if best_step not in select:
    raise ValueError(f"confirmation_report: best_step {best_step} is not among the steps {sorted(select)}")
  missing = sorted(set(select) - set(confirm))
  if missing:
    raise ValueError(f"confirmation_report: the confirming set has no outcomes of steps {missing}")
  chosen = {s: solved_set(o, rule) for s, o in select.items()}
  union = frozenset().union(*chosen.values())
  only = sorted(union - chosen[best_step])

  def rate(steps, problem):
    pairs = [confirm[s].get(problem) for s in steps]
    if None in pairs:
      raise ValueError(f"confirmation_report: problem {problem!r} is missing from the confirming outcomes")
    return 100.0 * sum(s for s, _ in pairs) / sum(a for _, a in pairs)

  problems = {}
  for p in only:
    solvers = [s for s in sorted(chosen) if p in chosen[s]]
    problems[p] = {"solvers": solvers, "solvers_rate": rate(solvers, p), "best_rate": rate([best_step], p)}
  diffs = [r["solvers_rate"] - r["best_rate"] for r in problems.values()]
  mean, lo, hi = paired_ci(diffs) if diffs else (float("nan"),) * 3
  confirmed = {s: solved_set(o, rule) for s, o in confirm.items() if s in select}

  def counts(solved):
    u, b = len(frozenset().union(*solved.values())), len(solved[best_step])
    return {"union": u, "best": b, "union_over_best": _ratio(u, b)}

  return {"solved_rule": rule, "steps": sorted(select), "best_step": best_step, "select": counts(chosen),
          "confirm": counts(confirmed), "only_union": len(only), "problems": problems,
          "solvers_rate": float(sum(r["solvers_rate"] for r in problems.values()) / len(only)) if only else None,
          "best_rate": float(sum(r["best_rate"] for r in problems.values()) / len(only)) if only else None,
          "difference": {"mean": mean, "ci95": [lo, hi],
                         "wilcoxon_p": float(stats.wilcoxon(diffs).pvalue) if any(diffs) else None}}


def forgetting_report(then: Outcomes, now: Outcomes, group_of: GroupOf, alpha: float = 0.05) -> dict:
  """Which problems a later checkpoint lost, telling skill from luck with many attempts per problem.

  then, now: {problem: (successes, attempts)} of an earlier and a later checkpoint on the same problems (e.g. two
  `experiments/evaluate.py --attempts=16` runs). A problem is `forgotten` when the one-sided Fisher exact test says
  `then` won it more often than `now` (p < alpha), `learned` for the reverse. Per group (`group_of`, as in
  `coverage_report`): the pooled success rates and the Wilcoxon signed-rank p over problems of (then rate − now
  rate), a test that respects that attempts cluster by problem (None when no problem's rate changed). With alpha
  0.05, about 5 % of the problems some checkpoint sometimes wins are flagged by chance alone."""
  from scipy import stats

  common = sorted(set(then) & set(now))
  if not common:
    raise ValueError("forgetting_report: the two evaluations share no problem")
  rows = {}
  for p in common:
    (s1, n1), (s2, n2) = then[p], now[p]
    table = [[s1, n1 - s1], [s2, n2 - s2]]
    rows[p] = {"then": [s1, n1], "now": [s2, n2],
               "p_forgotten": float(stats.fisher_exact(table, alternative="greater")[1]),
               "p_learned": float(stats.fisher_exact(table, alternative="less")[1])}
  per_type = {}
  for t in sorted({_group(group_of, p) for p in common}):
    ps = [p for p in common if _group(group_of, p) == t]
    diffs = [then[p][0] / then[p][1] - now[p][0] / now[p][1] for p in ps]
    per_type[t] = {
        "problems": len(ps),
        "then": sum(then[p][0] for p in ps) / sum(then[p][1] for p in ps),
        "now": sum(now[p][0] for p in ps) / sum(now[p][1] for p in ps),
        "forgotten": sum(rows[p]["p_forgotten"] < alpha for p in ps),
        "learned": sum(rows[p]["p_learned"] < alpha for p in ps),
        "wilcoxon_p": float(stats.wilcoxon(diffs).pvalue) if any(diffs) else None}
  return {"alpha": alpha, "problems": rows, "per_type": per_type,
          "forgotten": [p for p in common if rows[p]["p_forgotten"] < alpha],
          "learned": [p for p in common if rows[p]["p_learned"] < alpha]}


def forgetting_markdown(report: dict, title: str = "Forgetting") -> str:
  """`forgetting_report` as one table of its groups, then the forgotten problems with their counts."""
  def p_value(x):
    return "n/a" if x is None else f"{x:.3g}"

  lines = [f"# {title}", "", f"Per problem: one-sided Fisher exact test at alpha = {report['alpha']}.", "",
           "| Task type | Problems | Then (%) | Now (%) | Forgotten | Learned | Wilcoxon p |",
           "|---|---|---|---|---|---|---|"]
  lines += [f"| {t} | {g['problems']} | {_pct(g['then'])} | {_pct(g['now'])} | {g['forgotten']} | {g['learned']} | "
            f"{p_value(g['wilcoxon_p'])} |" for t, g in report["per_type"].items()]
  rows = report["problems"]
  lines += ["", "| Forgotten problem | Then | Now | p |", "|---|---|---|---|"]
  lines += [f"| {p} | {rows[p]['then'][0]}/{rows[p]['then'][1]} | {rows[p]['now'][0]}/{rows[p]['now'][1]} | "
            f"{rows[p]['p_forgotten']:.3g} |" for p in report["forgotten"]]
  return "\n".join(lines) + "\n"


def _pct(x: float | None) -> str:
  return "n/a" if x is None else f"{100 * x:.1f}"


def _times(x: float | None) -> str:
  return "n/a" if x is None else f"{x:.2f}x"


def to_markdown(report: dict, title: str = "Checkpoint coverage") -> str:
  """The report as three tables: overall and per group, then one row per checkpoint with the historical gap."""
  b = report["best_step"]
  lines = [f"# {title}", "", f"Solved rule: `{report['solved_rule']}`; best (student) step: {b}.", "",
           f"| Problems | Union solved | Best (step {b}) | Max single (step) | Union / best | Union only |",
           "|---|---|---|---|---|---|",
           f"| {report['problems']} | {report['union']} | {report['best']} | {report['max_single']} "
           f"({report['max_single_step']}) | {_times(report['union_over_best'])} | {report['only_union']} |", ""]
  lines += ["| Task type | Problems | Union solved | Best | Max single (step) | Union / best |",
            "|---|---|---|---|---|---|"]
  lines += [f"| {t} | {g['problems']} | {g['union']} | {g['best']} | {g['max_single']} ({g['max_single_step']}) | "
            f"{_times(g['union_over_best'])} |" for t, g in report["per_type"].items()]
  lines += ["", "| Step | Solved | Solved (%) | Union - this | Not in best | Historical union | Historical gap |",
            "|---|---|---|---|---|---|---|"]
  gaps = {row["step"]: row for row in report["historical_gap"]}
  lines += [f"| {c['step']}{' (best)' if c['step'] == b else ''} | {c['solved']} | {_pct(c['solved_frac'])} | "
            f"{c['union_minus_this']} | {c['not_in_best']} | {gaps[c['step']]['historical']} | "
            f"{gaps[c['step']]['gap']} |" for c in report["checkpoints"]]
  return "\n".join(lines) + "\n"


def plot_historical_gap(report: dict, path, title: str) -> None:
  """The historical-gap curve of `coverage_report` as a PNG (matplotlib, Agg backend)."""
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  from matplotlib.ticker import MaxNLocator

  rows = report["historical_gap"]
  steps = [r["step"] for r in rows]
  fig, ax = plt.subplots(figsize=(6, 3.8))
  ax.plot(steps, [r["historical"] for r in rows], marker="o", label="union of checkpoints up to step")
  ax.plot(steps, [r["current"] for r in rows], marker="s", label="current checkpoint")
  ax.axvline(report["best_step"], color="gray", linestyle="--", linewidth=1, label=f"best (step {report['best_step']})")
  ax.set_xlabel("GRPO step")
  ax.set_ylabel(f"problems solved (of {report['problems']})")
  ax.yaxis.set_major_locator(MaxNLocator(integer=True))
  ax.set_title(title, fontsize=9)
  ax.grid(alpha=0.3)
  ax.legend(fontsize=8)
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)
