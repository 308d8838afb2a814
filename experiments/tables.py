"""The method comparisons' tables, regenerated from their records alone (`results/<table>`, layout in
agentopd_jax/eval/records.py):

  python experiments/tables.py results/sdar_table                  # SDAR's main table, as docs/results.md holds it
  python experiments/tables.py results/sdar_table --plot docs/results_sdar_table.png --doc docs/results.md
  python experiments/tables.py results/sdar_ablations --against results/sdar_table:sdar --doc docs/results.md
  python experiments/tables.py results/sdar_horizon --horizon --plot docs/results_sdar_horizon.png
  python experiments/tables.py results/opid_table --against results/opid_table:grpo   # OPID's arms against GRPO
  python experiments/tables.py results/opid_table --retry          # OPID's warm-start check (hindsight retry)
  python experiments/tables.py results/sdar_table --coverage default   # F1 on GRPO's checkpoints, luck taken out
  python experiments/tables.py results/forgetting_opd --endpoint report16 --per_seed   # each arm, seed by seed
  python experiments/tables.py results/forgetting_opd --endpoint report16 \
    --against results/forgetting_opd:static_best,continued_grpo --plot docs/results_forgetting_report.png

SDAR's main table (`experiments/sdar_table.sh`): every row of the paper's table, trained rows by their sweep method
name ("default" is GRPO), Vanilla and Skill-Prompt from the warm start's evaluations. Endpoint, fixed in advance:
validation success at the last step on the whole panel at T = 1.0; also the last checkpoint re-evaluated at
T = 0.4. Against GRPO: the paired per-seed difference, its 95 % t interval and a Holm-corrected p over the table's
contrasts (one family per temperature). Below it, the teacher's signals per method (the paper's Fig. 2-5
quantities). `--against TABLE:METHOD`: every run of the folder against that table's method, paired by seed (the
ablations against the main table's SDAR; OPID's arms against the GRPO of their own table), with OPID's signals
where the runs logged them. `--horizon`: success, first-turn KL, gate activity and teacher gap over the iterations.
`--retry`: the warm starts' OPID hindsight retries.
`--endpoint EVAL`: every arm's evaluation EVAL of its last checkpoint per task group, beside the student's, paired with
the methods `--against` names; with `--per_seed`, the same evaluations seed by seed.
`--coverage METHOD`: F1 on each of that method's runs (`experiments/coverage_confirm.sh`), its checkpoints' solved
sets from the run's validations confirmed on independent attempts. `--doc` rewrites the table's generated block of that page
(`markers`). A row with no record says so.
"""
import argparse
import contextlib
import dataclasses
import json
import re
import sys
from pathlib import Path
from typing import Dict, List, Optional

import numpy as np

from agentopd_jax.eval.compare import paired_ci
from agentopd_jax.eval.coverage import confirmation_report
from agentopd_jax.eval.records import (Table, eval_groups, last_validation, load_record, load_table, paired_rows,
                                       seed_mean, work)
from agentopd_jax.training import sweep as sweeps

# (row label, row key): the trained rows by their sweep method name ("+skills": validated with its skills).
ROWS = (("Vanilla (warm start)", "vanilla"), ("Skill-Prompt (warm start, skills in context)", "skill_prompt"),
        ("GRPO", "default"), ("OPSD", "opsd"), ("Skill-GRPO, validated without skills", "skill_grpo"),
        ("Skill-GRPO, validated with skills", "skill_grpo+skills"), ("GRPO+OPSD (authors' form)", "grpo_opsd"),
        ("GRPO+OPSD-RKL", "grpo_opsd_rkl"), ("Skill-SD", "skill_sd"), ("RLSD", "rlsd"), ("SDAR", "sdar"))
LABELS = {key.split("+")[0]: label.split(",")[0] for label, key in ROWS}
BASELINE = "default"
TEMPERATURES = ("1.0", "0.4")
REPO = Path(__file__).resolve().parents[1]
WARM_ROWS = ("vanilla", "skill_prompt")


def planned(folder: Path) -> Dict[str, List[int]]:
  """{method: seeds} of the runs the table's sweep (configs/sweeps/<records folder name>.py) plans, in its order;
  {} when there is no such sweep. A planned run without a record is a missing cell, named as such."""
  path = REPO / "configs" / "sweeps" / f"{folder.name}.py"
  if not path.exists():
    return {}
  with contextlib.chdir(REPO):
    points = sweeps.expand(sweeps.load_sweep(str(path.relative_to(REPO))))
  out: Dict[str, List[int]] = {}
  for p in points:
    out.setdefault(p.name.rsplit("-s", 1)[0], []).append(p.seed)
  return out


def _seeds(values: Dict[str, float], plan: Optional[List[int]]) -> str:
  got = ",".join(sorted(values, key=int)) or "–"
  return f"{got} of {len(plan)}" if plan else got


@dataclasses.dataclass(frozen=True)
class Block:
  """Which of a table folder's blocks: the flags of the command line that regenerates it (module docstring)."""
  against: str = ""
  horizon: bool = False
  retry: bool = False
  coverage: str = ""
  endpoint: str = ""
  per_seed: bool = False

  def flags(self) -> List[str]:
    return ([f"--against {self.against}"] if self.against else []) + (["--horizon"] if self.horizon else []) + (
        ["--retry"] if self.retry else []) + ([f"--coverage {self.coverage}"] if self.coverage else []) + (
        [f"--endpoint {self.endpoint}"] if self.endpoint else []) + (["--per_seed"] if self.per_seed else [])


def command(folder: Path, block: Block = Block()) -> str:
  """The command line that regenerates a table's block (named in its markers, which the test reads back)."""
  return " ".join(["python experiments/tables.py", f"results/{folder.name}"] + block.flags())


def markers(folder: Path, block: Block = Block()):
  """The lines that open and close a table's generated block in docs/results.md: the first names the command."""
  return f"<!-- generated by: {command(folder, block)} -->", f"<!-- /{folder.name} -->"


def endpoint(t: Table, row: str, temperature: str, score: bool = False) -> Dict[int, float]:
  """{seed: success %} (`score`: WebShop's task score) of one row at `temperature`: the last checkpoint's evaluation
  there, or its last validation where the run validated at that temperature (T = 1.0 on ALFWorld; search-QA's and
  WebShop's runs validate at 0.4)."""
  if row in WARM_ROWS:
    warm = t.warm_score if score else t.warm
    out = {s: v[f"{row}@{temperature}"] for s, v in warm.items() if f"{row}@{temperature}" in v}
    if row == "vanilla":  # else the shared step-0 validation, as every run of the seed logged it
      for s, r in t.runs.get(BASELINE, {}).items():
        val = r.val_score if score else r.val
        if s not in out and r.val_temperature == float(temperature) and 0 in val:
          out[s] = val[0]
    return out
  method, skills = row.split("+")[0], row.endswith("+skills")
  values = {seed: r.success_at(float(temperature), skills, score) for seed, r in t.runs.get(method, {}).items()}
  return {seed: v for seed, v in values.items() if v is not None}


def main_rows(plan: Dict[str, List[int]]):
  """The rows of the paper's table this table's sweep runs (every row without a sweep)."""
  return [(label, row) for label, row in ROWS if not plan or row in WARM_ROWS or row.split("+")[0] in plan]


def main_table(t: Table, plan: Dict[str, List[int]], score: bool = False) -> Dict[str, List[dict]]:
  rows = main_rows(plan)
  return {temp: paired_rows([(label, None if row == BASELINE else row, endpoint(t, row, temp, score))
                             for label, row in rows], endpoint(t, BASELINE, temp, score))
          for temp in TEMPERATURES}


def _cell(values: Dict[str, float], missing: str = "missing: not run yet") -> str:
  v = np.asarray(list(values.values()), float)
  if len(v) == 0:
    return missing
  return f"{v.mean():.1f}" if len(v) == 1 else f"{v.mean():.1f} ± {v.std(ddof=1):.1f}"


def _diff(r: dict) -> str:
  if r["row"] is None or not r.get("paired_seeds"):
    return "–"
  if r["paired_seeds"] < 2:
    return f"{r['diff']:+.1f} (1 seed)"
  if np.isnan(r["ci"][0]):
    return f"{r['diff']:+.1f} ({r['paired_seeds']} seeds, no spread: no interval)"
  return f"{r['diff']:+.1f} [{r['ci'][0]:+.1f}, {r['ci'][1]:+.1f}]"


def _p(r: dict) -> str:
  return "–" if r.get("p_holm") is None else f"{r['p_holm']:.2f}"


def _work_cells(w: Dict[str, Dict[str, float]], method: Optional[str]) -> str:
  return f"{w[method]['updates']:.2f} | {w[method]['samples']:.0f}" if method in w else "– | –"


def main_markdown(rows: Dict[str, List[dict]], w: Dict[str, Dict[str, float]], plan: Dict[str, List[int]],
                  measure: str = "success, T = {} (%)") -> str:
  every_seed = sorted({s for seeds in plan.values() for s in seeds})
  measure_hot, measure_cold = measure.format("1.0"), measure.format("0.4")
  lines = [f"| method | seeds | {measure_hot} | − GRPO, paired [95 % CI] | Holm p | {measure_cold} "
           "| − GRPO, paired [95 % CI] | Holm p | optimizer steps / iteration | step samples / iteration |",
           "|---|---|---|---|---|---|---|---|---|---|"]
  for (hot, cold), (_, key) in zip(zip(rows["1.0"], rows["0.4"]), main_rows(plan)):
    trained = key.split("+")[0] if key not in WARM_ROWS else None
    seeds = _seeds({**hot["values"], **cold["values"]}, plan.get(trained) if trained else every_seed)
    lines.append(f"| {hot['label']} | {seeds} | {_cell(hot['values'])} | {_diff(hot)} "
                 f"| {_p(hot)} | {_cell(cold['values'])} | {_diff(cold)} | {_p(cold)} | {_work_cells(w, trained)} |")
  return "\n".join(lines)


def _at(series: Dict[int, float], step: int) -> str:
  return f"{series[step]:.3f}" if step in series else "–"


def signals_markdown(t: Table) -> str:
  """The teacher's signals per method (seed means): the first turn's sampled KL(π_old ‖ π_T) at the first and the
  last iteration, the batch's teacher gap Δ and the share of loss tokens the gate opens (g > ½) at the last."""
  lines = ["| method | first-turn KL, iteration 1 | first-turn KL, last | teacher gap Δ, last | gate active (g > ½), "
           "last |", "|---|---|---|---|---|"]
  for method, runs in sorted(t.runs.items(), key=lambda kv: list(LABELS).index(kv[0]) if kv[0] in LABELS else 99):
    kl = seed_mean(runs, "teacher/kl_turn0")
    if not kl:
      continue
    gap, gate = seed_mean(runs, "teacher/gap_mean"), seed_mean(runs, "actor/sdar/gate_active_ratio")
    last = max(kl)
    lines.append(f"| {LABELS.get(method, method)} | {_at(kl, min(kl))} | {_at(kl, last)} | {_at(gap, last)} "
                 f"| {_at(gate, last)} |")
  return "\n".join(lines) if len(lines) > 2 else "Teacher signals: no teacher-reading run recorded yet."


def drift_line(w: Dict[str, Dict[str, float]]) -> str:
  drift = [v["drift"] for v in w.values() if np.isfinite(v["drift"])]
  if not drift:
    return "Sampler↔trainer log-prob drift: no run recorded yet."
  return (f"Sampler↔trainer log-prob drift (`rollout/logprob_drift`, mean |Δ log π| per token before the first "
          f"update), the methods' means over their recorded iterations: {min(drift):.1e} to {max(drift):.1e} nats.")


def against_rows(t: Table, reference: Table, method: str, plan: Dict[str, List[int]], same: bool = False
                 ) -> List[dict]:
  """Every planned or recorded method of `t` against `method` of `reference` at T = 1.0, paired by seed (the
  reference row first). `same`: the reference is a method of `t` itself (its row is the baseline, not an arm)."""
  base = {s: last_validation(r) for s, r in reference.runs.get(method, {}).items()}
  rows = [(f"{LABELS.get(method, method)}{' (baseline)' if same else ' (main table)'}", None, base)]
  names = [n for n in list(plan) + sorted(set(t.runs) - set(plan)) if not (same and n == method)]
  rows += [(name, name, {s: last_validation(r) for s, r in t.runs.get(name, {}).items()}) for name in names]
  return paired_rows(rows, base)


def against_markdown(rows: List[dict], w: Dict[str, Dict[str, float]], method: str,
                     plan: Dict[str, List[int]]) -> str:
  ref = LABELS.get(method, method)
  lines = [f"| arm | seeds | success, T = 1.0 (%) | − {ref}, paired [95 % CI] | Holm p | optimizer steps / iteration "
           "| step samples / iteration |", "|---|---|---|---|---|---|---|"]
  for r in rows:
    key = r["row"] if r["row"] is not None or method not in plan else method  # a baseline of this table's own
    seeds = _seeds(r["values"], plan.get(key))
    lines.append(f"| {r['label']} | {seeds} | {_cell(r['values'])} | {_diff(r)} | {_p(r)} "
                 f"| {_work_cells(w, key)} |")
  return "\n".join(lines)


OPID_SIGNALS = (("share of samples on the step route", "opid/route_step"), ("Δ^ep mean", "opid/delta_episode_mean"),
                ("Δ^ep std", "opid/delta_episode_std"), ("Δ^step mean", "opid/delta_step_mean"),
                ("Δ^step std", "opid/delta_step_std"), ("analysed fraction", "opid/analysed_fraction"))


def opid_signals_markdown(t: Table) -> str:
  """OPID's per-iteration signals, per arm: the mean over its seeds and iterations of each, and the analyzer's
  failure counts summed over every iteration of every seed (parse failures, trajectories without an analysis)."""
  lines = ["| arm | " + " | ".join(name for name, _ in OPID_SIGNALS) + " | parse failures | analysis failures |",
           "|---|" + "---|" * (len(OPID_SIGNALS) + 2)]
  for method, runs in sorted(t.runs.items()):
    if not any(r.series("opid/analysed_fraction") for r in runs.values()):
      continue
    cells = []
    for _, key in OPID_SIGNALS:
      values = [v for r in runs.values() for v in r.series(key).values()]
      cells.append(f"{np.mean(values):.3f}" if values else "–")
    totals = [sum(v for r in runs.values() for v in r.series(key).values())
              for key in ("opid/parse_failures", "opid/analysis_failures")]
    lines.append(f"| {method} | " + " | ".join(cells) + f" | {totals[0]:.0f} | {totals[1]:.0f} |")
  return "\n".join(lines) if len(lines) > 2 else "OPID's signals: no OPID run recorded yet."


def retry_markdown(folder: Path) -> str:
  """The hindsight retries of warm starts (`evaluate.py --opid_hindsight`, recorded as
  `<warm start>/eval_opid_hindsight_T<temperature>.json` in the table's folder, `..._new<N>.json` on N games of
  another generator seed): success without and with the
  oracle's episode skill, the paired difference over panel problems with its 95 % CI, and the split by the first
  play's outcome."""
  lines = ["| warm start | T | episodes | without skill (%) | with the episode skill (%) | − without, paired over "
           "problems [95 % CI] | first play won: without → with | first play lost: without → with |",
           "|---|---|---|---|---|---|---|---|"]
  for path in sorted(folder.glob("*/eval_opid_hindsight_T*.json")):
    r = json.loads(path.read_text())["opid_hindsight"]
    d = r["paired_difference"]
    ci = "–" if None in d["ci95"] else f"[{d['ci95'][0]:+.1f}, {d['ci95'][1]:+.1f}]"
    split = [f"{r[k]['success_without']:.1f} → {r[k]['success_with']:.1f} ({r[k]['episodes']})"
             if r[k]["episodes"] else "–" for k in ("first_won", "first_lost")]
    temperature, _, games = path.stem[len("eval_opid_hindsight_T"):].partition("_new")
    temperature += f", {games} new games" if games else ""  # a panel the warm start was not picked on
    lines.append(f"| {path.parent.name} | {temperature} | {r['episodes']} | {r['success_without']:.1f} "
                 f"| {r['success_with']:.1f} | {d['mean']:+.1f} {ci} | {split[0]} | {split[1]} |")
  retry = "\n".join(lines) if len(lines) > 2 else "Hindsight retry: no warm start checked yet."
  return f"{retry}\n\n{probe_markdown(folder)}"


def probe_markdown(folder: Path) -> str:
  """The teacher-forced probes of warm starts (`probe_demos.py --opid`, recorded as `<warm start>/probe_opid.json`):
  on OPID-format demonstrations of validation games, how often the checkpoint's argmax is the whole reply, and the
  reply's mean probability, with the routed skills and with the plain prompt."""
  lines = ["| warm start | route / review | replies | argmax = reply, with skills → plain | reply probability, "
           "with skills → plain |", "|---|---|---|---|---|"]
  for path in sorted(folder.glob("*/probe_opid.json")):
    for part, r in json.loads(path.read_text())["opid"].items():
      w, p = r["with_skills"], r["plain"]
      if w["n"]:
        lines.append(f"| {path.parent.name} | {part} | {w['n']} | {w['reply_accuracy']:.3f} → {p['reply_accuracy']:.3f} "
                     f"| {w['reply_probability']:.3f} → {p['reply_probability']:.3f} |")
  return "\n".join(lines) if len(lines) > 2 else "Teacher-forced probe: no warm start probed yet."


def _outcomes(mapping: dict) -> Dict[str, tuple]:
  return {p: tuple(o) for p, o in mapping.items()}


def coverage_reports(folder: Path, method: str) -> Dict[int, Optional[dict]]:
  """{seed: `confirmation_report`} of each recorded run of `method`: the solved sets from its validations'
  outcomes (outcomes.json), the best checkpoint from their recorded success (ties: the newer step, as
  `CheckpointPool.best_step` picks it), the confirmation from `confirm_step<K>.json`
  (`experiments/coverage_confirm.sh`); None where a step is unconfirmed."""
  out: Dict[int, Optional[dict]] = {}
  for record in sorted(folder.glob(f"{method}-s*")):
    m = re.fullmatch(rf"{re.escape(method)}-s(\d+)", record.name)
    if not m or not (record / "outcomes.json").exists():
      continue
    select = {int(s): _outcomes(v) for s, v in json.loads((record / "outcomes.json").read_text()).items()}
    confirm = {int(p.stem[len("confirm_step"):]): _outcomes(json.loads(p.read_text())["outcomes"])
               for p in record.glob("confirm_step*.json")}
    val = load_record(record).val
    best = max(val, key=lambda s: (val[s], s))
    out[int(m[1])] = confirmation_report(select, confirm, best) if set(select) <= set(confirm) else None
  return dict(sorted(out.items()))


def _ci(lo: float, hi: float) -> str:
  return "–" if np.isnan(lo) else f"[{lo:+.1f}, {hi:+.1f}]"


def coverage_markdown(reports: Dict[int, Optional[dict]]) -> str:
  """One row per seed (union and best solved on the selecting and the confirming attempts; on the confirming ones, the
  union-only problems' success by their solvers and by the best checkpoint, and the mean difference), then the
  difference over all seeds' union-only problems and over the seeds' means."""
  lines = ["| seed | best step | selecting attempts: union / best | confirming attempts: union / best | union-only "
           "problems | confirming success, their solvers (%) | the best checkpoint's (%) | solvers − best [95 % CI] |",
           "|---|---|---|---|---|---|---|---|"]
  diffs, means = [], []
  for seed, r in reports.items():
    if r is None:
      lines.append(f"| {seed} | – | – | – | – | – | – | not confirmed yet |")
      continue
    sel, con, d = r["select"], r["confirm"], r["difference"]
    rates = [f"{r[k]:.1f}" if r[k] is not None else "–" for k in ("solvers_rate", "best_rate")]
    lines.append(f"| {seed} | {r['best_step']} | {sel['union']} / {sel['best']} | {con['union']} / {con['best']} "
                 f"| {r['only_union']} | {rates[0]} | {rates[1]} | {d['mean']:+.1f} {_ci(*d['ci95'])} |")
    diffs += [p["solvers_rate"] - p["best_rate"] for p in r["problems"].values()]
    if r["only_union"]:
      means.append(d["mean"])
  if len(lines) == 2:
    return "F1 confirmation: no run recorded yet."
  if diffs:
    pooled, seeds = paired_ci(diffs), paired_ci(means)
    lines += ["", f"Solvers − best over the {len(diffs)} union-only problems of {len(means)} seeds: "
              f"{pooled[0]:+.1f} points {_ci(*pooled[1:])} (t over problems); over the seeds' means: "
              f"{seeds[0]:+.1f} {_ci(*seeds[1:])} (t over seeds)."]
  return "\n".join(lines)


HORIZON = (("validation success, T = 1.0 (%)", None), ("first-turn KL(π_old ‖ π_T)", "teacher/kl_turn0"),
           ("gate active share (g > ½)", "actor/sdar/gate_active_ratio"), ("teacher gap Δ", "teacher/gap_mean"))


def _val_mean(runs) -> Dict[int, float]:
  steps = sorted(set.intersection(*(set(r.val) for r in runs.values())))
  return {s: float(np.mean([r.val[s] for r in runs.values()])) for s in steps}


def horizon_markdown(t: Table, plan: Dict[str, List[int]]) -> str:
  """Per method (seed means), each quantity at every validated iteration, and with several seeds each seed's success
  above their mean (a seed's runs share its warm start, which may be another seed's remade elsewhere); the planned
  runs without a record below."""
  missing = [f"{LABELS.get(m, m)} seed {s}" for m, seeds in plan.items() for s in seeds if s not in t.runs.get(m, {})]
  note = f"\n\nNot run yet: {', '.join(missing)}." if missing else ""
  if not t.runs:
    return f"No run recorded yet.{note}"
  steps = sorted({s for runs in t.runs.values() for s in _val_mean(runs)})
  lines = ["| method | quantity | " + " | ".join(f"it. {s}" for s in steps) + " |",
           "|---|---|" + "---|" * len(steps)]
  for method, runs in sorted(t.runs.items()):
    for name, key in HORIZON:
      rows = [(f"{name}, seed {seed}", run.val) for seed, run in sorted(runs.items())] if (
          key is None and len(runs) > 1) else []
      rows.append((name, _val_mean(runs) if key is None else seed_mean(runs, key)))
      for label, series in rows:
        if series:
          cells = [(f"{series[s]:.1f}" if key is None else f"{series[s]:.3f}") if s in series else "–" for s in steps]
          lines.append(f"| {LABELS.get(method, method)} | {label} | " + " | ".join(cells) + " |")
  return "\n".join(lines) + note


def _students(folder: Path, endpoint: str) -> Dict[int, dict]:
  """{seed: the student's evaluation report} of a per-group table (`student/eval_<endpoint>_s<seed>.json`)."""
  return {int(p.stem.rsplit("_s", 1)[1]): json.loads(p.read_text())
          for p in sorted((Path(folder) / "student").glob(f"eval_{endpoint}_s*.json"))}


def _endpoint_values(t: Table, arms: List[str], endpoint: str) -> Dict[str, Dict[int, Dict[str, float]]]:
  return {arm: {s: r.eval_groups[endpoint] for s, r in t.runs.get(arm, {}).items() if endpoint in r.eval_groups}
          for arm in arms}


def _groups(tables: List[Dict[int, Dict[str, float]]]) -> List[str]:
  """The task groups the evaluations hold, "All" first, the rest in the order they first appear."""
  seen = [g for v in tables for groups in v.values() for g in groups]
  return sorted(set(seen), key=lambda g: (g != "All", seen.index(g)))


@dataclasses.dataclass
class Endpoint:
  """A per-group table's contents: each arm's {seed: {group: success %}} at one evaluation, the student's, the
  reference methods, and the plan and work the table's rows show."""
  arms: List[str]
  values: Dict[str, Dict[int, Dict[str, float]]]
  student: Dict[int, Dict[str, float]]
  groups: List[str]
  refs: List[str]
  plan: Dict[str, List[int]]
  work: Dict[str, Dict[str, float]]
  recorded: set

  def paired(self, ref: str) -> Dict[str, List[dict]]:
    """{group: every other arm's paired difference from `ref`, Holm-corrected over the arms}."""
    base = self.values.get(ref, {})
    return {g: paired_rows([(a, a, {s: v[g] for s, v in self.values[a].items() if g in v})
                            for a in self.arms if a != ref], {s: v[g] for s, v in base.items() if g in v})
            for g in self.groups}


def endpoint_arms(t: Table, folder: Path, endpoint: str, against: str, w: Dict[str, Dict[str, float]],
                  plan: Dict[str, List[int]]) -> Endpoint:
  """The arms' evaluations `eval_<endpoint>` of their last checkpoints and the student's (`per_group_markdown`).
  The methods `against` names may be another table's whose arms start from the same student (the same evaluations
  of it): they are then listed below this table's arms as "method (that table)"."""
  ref_folder, names = against.rsplit(":", 1) if against else ("", "")
  arms = list(plan) + sorted(set(t.runs) - set(plan))
  values = _endpoint_values(t, arms, endpoint)
  students = _students(folder, endpoint)
  refs = [n for n in names.split(",") if n]
  recorded = set(t.runs)
  if against and Path(ref_folder).resolve() != Path(folder).resolve():
    theirs = _students(Path(ref_folder), endpoint)
    if any(theirs.get(s, report) != report for s, report in students.items()):
      raise SystemExit(f"--against {against}: its student's {endpoint} evaluations differ from {folder}'s, so its "
                       "arms did not start where these did")
    ref_table, ref_plan = load_table(Path(ref_folder)), planned(Path(ref_folder))
    ref_work = work(ref_table)
    labels = {ref: f"{ref} ({Path(ref_folder).name})" for ref in refs}
    for ref, label in labels.items():
      values[label] = _endpoint_values(ref_table, [ref], endpoint)[ref]
      recorded |= {label} if ref in ref_table.runs else set()
      plan = dict(plan, **({label: ref_plan[ref]} if ref in ref_plan else {}))
      w = dict(w, **({label: ref_work[ref]} if ref in ref_work else {}))
      arms.append(label)
    refs = list(labels.values())
  student = {s: eval_groups(report) for s, report in students.items()}
  return Endpoint(arms, values, student, _groups([student, *values.values()]), refs, plan, w, recorded)


def per_seed_markdown(e: Endpoint) -> str:
  """One row per seed: the student's evaluation and each arm's, every group in one cell ("All" first, the others in
  brackets), so that a reader sees which arm is above the student on which seed; a planned seed without its
  evaluation is a dash."""
  seeds = sorted({s for v in [e.student, *e.values.values()] for s in v} | {s for p in e.plan.values() for s in p})

  def cell(by_seed: Dict[int, Dict[str, float]], seed: int) -> str:
    v = by_seed.get(seed)
    if v is None:
      return "–"
    rest = ", ".join(f"{v[g]:.1f}" if g in v else "–" for g in e.groups[1:])
    return f"{v[e.groups[0]]:.1f}" + (f" ({rest})" if rest else "")

  order = f"{e.groups[0]} ({', '.join(e.groups[1:])})" if len(e.groups) > 1 else "".join(e.groups)
  lines = [f"Per seed, {order} in %:", "", "| seed | student | " + " | ".join(e.arms) + " |",
           "|---|---|" + "---|" * len(e.arms)]
  lines += [f"| {s} | {cell(e.student, s)} | " + " | ".join(cell(e.values[a], s) for a in e.arms) + " |"
            for s in seeds]
  return "\n".join(lines)


def per_group_markdown(e: Endpoint) -> str:
  """Each arm's evaluation of its last checkpoint per task group ("All" first), mean ± sd over seeds, below the
  student's (`student/eval_<endpoint>_s<seed>.json`, the start every arm shares); then for each reference method
  every other arm's paired difference per group with its 95 % CI and Holm p over the arms."""
  def of(by_seed: Dict[int, Dict[str, float]], group: str) -> Dict[str, float]:
    return {str(s): v[group] for s, v in by_seed.items() if group in v}

  lines = ["| arm | seeds | " + " | ".join(f"{g} (%)" for g in e.groups) + " | optimizer steps / iteration "
           "| step samples / iteration |", "|---|---|" + "---|" * (len(e.groups) + 2)]
  for name, by_seed, work_key in [("student (the start)", e.student, None)] + [(a, e.values[a], a) for a in e.arms]:
    seeds = _seeds({str(s): 0.0 for s in by_seed}, e.plan.get(work_key) if work_key else None)
    missing = "missing: recorded, not evaluated yet" if work_key in e.recorded else "missing: not run yet"
    lines.append(f"| {name} | {seeds} | " + " | ".join(_cell(of(by_seed, g), missing) for g in e.groups)
                 + f" | {_work_cells(e.work, work_key)} |")
  for ref in e.refs:
    paired = e.paired(ref)
    lines += ["", "| arm | " + " | ".join(f"− {ref}: {g}, paired [95 % CI] | Holm p" for g in e.groups) + " |",
              "|---|" + "---|---|" * len(e.groups)]
    for i, arm in enumerate(a for a in e.arms if a != ref):
      lines.append(f"| {arm} | " + " | ".join(f"{_diff(paired[g][i])} | {_p(paired[g][i])}" for g in e.groups)
                   + " |")
  return "\n".join(lines)


def _against(t: Table, folder: Path, against: str, plan: Dict[str, List[int]]) -> List[dict]:
  ref_folder, method = against.rsplit(":", 1)
  same = Path(ref_folder).resolve() == Path(folder).resolve()
  return against_rows(t, t if same else load_table(Path(ref_folder)), method, plan, same)


def report(folder: Path, block: Block = Block()) -> str:
  """The generated block of a table in docs/results.md."""
  if block.coverage:
    return coverage_markdown(coverage_reports(folder, block.coverage))
  if block.retry:
    return retry_markdown(folder)
  t, plan = load_table(folder), planned(folder)
  w = work(t)
  if block.horizon:
    return horizon_markdown(t, plan)
  if block.per_seed:
    if not block.endpoint:
      raise SystemExit("--per_seed: give the evaluation it reads with --endpoint EVAL")
    return per_seed_markdown(endpoint_arms(t, folder, block.endpoint, "", w, plan))
  if block.endpoint:
    return per_group_markdown(endpoint_arms(t, folder, block.endpoint, block.against, w, plan))
  against = block.against
  if against:
    method = against.rsplit(":", 1)[1]
    table = against_markdown(_against(t, folder, against, plan), w, method, plan)
    signals = opid_signals_markdown(t)
    return table if signals.startswith("OPID's signals: no") else f"{table}\n\n{drift_line(w)}\n\n{signals}"
  text = main_markdown(main_table(t, plan), w, plan)
  if t.warm_score or any(r.val_score or r.eval_scores for runs in t.runs.values() for r in runs.values()):
    text += ("\n\nWebShop's task score (the mean episode score, 0–100; paired as above):\n\n"
             + main_markdown(main_table(t, plan, score=True), w, plan, "task score, T = {}"))
  return f"{text}\n\n{drift_line(w)}\n\n{signals_markdown(t)}"


def update_doc(path: Path, text_block: str, folder: Path, block: Block = Block()) -> None:
  """Replaces the text between the table's `markers` in `path` with `text_block`."""
  begin, end = markers(folder, block)
  text = path.read_text(encoding="utf-8")
  if begin not in text or end not in text:
    raise SystemExit(f"{path}: no {begin} ... {end} block to regenerate")
  head, rest = text.split(begin, 1)
  path.write_text(f"{head}{begin}\n{text_block}\n{end}{rest.split(end, 1)[1]}", encoding="utf-8")


def _forest(fx, rows: List[dict], reference: str) -> None:
  rows = [r for r in rows if r["row"] is not None and r.get("paired_seeds", 0) >= 2]
  for y, r in enumerate(rows):
    fx.errorbar(r["diff"], y, xerr=[[r["diff"] - r["ci"][0]], [r["ci"][1] - r["diff"]]], fmt="o", capsize=3)
  fx.axvline(0.0, color="grey", lw=0.8)
  fx.set_yticks(range(len(rows)), [f"{r['label']} ({r['paired_seeds']} seeds)" for r in rows], fontsize=7)
  fx.set_xlabel(f"− {reference} at the last step, paired (points, 95 % CI)")


def _endpoint_forest(fig, e: Endpoint) -> None:
  """One panel per reference method: each other arm's paired difference per task group with its 95 % CI."""
  axes = fig.subplots(1, len(e.refs), squeeze=False)[0]
  for ax, ref in zip(axes, e.refs):
    paired, others = e.paired(ref), [a for a in e.arms if a != ref]
    for k, g in enumerate(e.groups):
      y = np.arange(len(others)) + (k - (len(e.groups) - 1) / 2) * 0.2
      rows = paired[g]
      shown = [i for i, r in enumerate(rows) if r.get("paired_seeds", 0) >= 2 and not np.isnan(r["ci"][0])]
      diff = np.array([rows[i]["diff"] for i in shown])
      lo, hi = (np.array([rows[i]["ci"][j] for i in shown]) for j in (0, 1))
      ax.errorbar(diff, y[shown], xerr=[diff - lo, hi - diff], fmt="o", capsize=3, label=g)
    ax.axvline(0.0, color="grey", lw=0.8)
    ax.set_yticks(range(len(others)), others, fontsize=7)
    ax.set_xlabel(f"− {ref}, paired (points, 95 % CI)", fontsize=8)
  axes[0].legend(fontsize=7)


def plot(folder: Path, path: str, against: str = "", horizon: bool = False, endpoint: str = "") -> None:
  """Main table: validation success (WebShop's: its task score) over iterations per method (seed mean, band ± sd)
  and the paired differences of success against GRPO at T = 1.0 with their 95 % CIs; `against`: the same two panels
  against that method. Horizon: each of its quantities over the iterations. `endpoint`: the per-group table's paired
  differences, one panel per method `against` names."""
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  t = load_table(folder)
  if endpoint:
    e = endpoint_arms(t, folder, endpoint, against, work(t), planned(folder))
    if not e.refs:
      raise SystemExit("--plot with --endpoint: name the methods to pair with in --against FOLDER:M1,M2")
    fig = plt.figure(figsize=(5.5 * len(e.refs), 0.5 * len(e.arms) + 1.8))
    _endpoint_forest(fig, e)
  elif horizon:
    fig, axes = plt.subplots(1, len(HORIZON), figsize=(4 * len(HORIZON), 3.4))
    colour = dict(zip(sorted(t.runs), plt.cm.tab10.colors))  # a method keeps its colour in every panel
    for ax, (name, key) in zip(axes, HORIZON):
      for method, runs in sorted(t.runs.items()):
        series = _val_mean(runs) if key is None else seed_mean(runs, key)
        if series:
          ax.plot(list(series), list(series.values()), marker="o" if key is None else None,
                  label=LABELS.get(method, method), color=colour[method])
      ax.set_xlabel("GRPO iteration")
      ax.set_title(name, fontsize=9)
    axes[0].legend(fontsize=7)
  else:
    fig, (ax, fx) = plt.subplots(1, 2, figsize=(11, 4))
    ax.set_prop_cycle(color=plt.cm.tab20.colors)  # up to 20 arms without a repeated colour
    # WebShop's runs log a task score: its curve, where full success stays near zero
    scores = bool(t.runs) and all(r.val_score for runs in t.runs.values() for r in runs.values())
    for method, runs in sorted(t.runs.items()):
      vals = [r.val_score if scores else r.val for r in runs.values()]
      steps = sorted(set.intersection(*(set(v) for v in vals)))
      curve = np.array([[v[s] for s in steps] for v in vals])
      mean = curve.mean(0)
      sd = curve.std(0, ddof=1) if len(curve) > 1 else np.zeros(len(steps))
      ax.plot(steps, mean, marker="o", label=LABELS.get(method, method))
      ax.fill_between(steps, mean - sd, mean + sd, alpha=0.15)
    ax.set_xlabel("GRPO iteration")
    temperatures = sorted({r.val_temperature for runs in t.runs.values() for r in runs.values()} or {1.0})
    measure, unit = ("task score", "0–100") if scores else ("success", "%")
    ax.set_ylabel(f"validation {measure}, T = {', '.join(map(str, temperatures))} ({unit})")
    ax.legend(fontsize=7)
    if against:
      method = against.rsplit(":", 1)[1]
      _forest(fx, _against(t, folder, against, planned(folder)), LABELS.get(method, method))
    else:
      _forest(fx, main_table(t, planned(folder))["1.0"], "GRPO")
  fig.tight_layout()
  fig.savefig(path, dpi=120)


def parse(argv=None) -> argparse.Namespace:
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("folder", type=Path)
  parser.add_argument("--against", default="", help="TABLE_FOLDER:METHOD: pair every run with that method's")
  parser.add_argument("--horizon", action="store_true", help="the quantities over the iterations")
  parser.add_argument("--retry", action="store_true", help="the warm starts' OPID hindsight retries")
  parser.add_argument("--coverage", default="", metavar="METHOD",
                      help="F1 on that method's checkpoints, confirmed on independent attempts")
  parser.add_argument("--endpoint", default="", metavar="EVAL",
                      help="the arms at evaluation EVAL of their last checkpoint, per task group, paired with each "
                           "method --against names (FOLDER:M1,M2)")
  parser.add_argument("--per_seed", action="store_true",
                      help="with --endpoint: one row per seed, the student and every arm, each group in one cell")
  parser.add_argument("--plot", default="")
  parser.add_argument("--doc", type=Path, default=None, help="rewrite this page's generated block (docs/results.md)")
  return parser.parse_args(argv)


def block_of(args: argparse.Namespace) -> Block:
  return Block(**{f.name: getattr(args, f.name) for f in dataclasses.fields(Block)})


def main(argv=None):
  args = parse(argv)
  block = block_of(args)
  text = report(args.folder, block)
  print(text)
  if args.doc:
    update_doc(args.doc, text, args.folder, block)
  if args.plot:
    plot(args.folder, args.plot, args.against, args.horizon, args.endpoint)


if __name__ == "__main__":
  sys.exit(main())
