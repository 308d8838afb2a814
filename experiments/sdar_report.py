"""SDAR and OPID against their baselines from finished runs: validation success, teacher gap, gate activity, per-turn
KL and OPID's skill shift.

  python experiments/sdar_report.py grpo=runs/a_s0,runs/a_s1 grpo_opsd=runs/b_s0 sdar=runs/c_s0 \
      --plot docs/results_sdar.png --json /tmp/sdar.json

Each argument is `label=workdir[,workdir...]` (one workdir per seed). Prints a markdown table: validation success at
the warm start and at the end (mean ± sd over seeds), and per method the teacher–student gap, the gate's active share
and the sampled KL(π_old ‖ π_T) by turn, and OPID's shift Δ on the episode and step routes, averaged over iterations
(GRPO runs log no teacher). `--plot` draws validation success, the gap, the active share and OPID's Δ against the
iteration, and the KL by turn index.
"""
import argparse
import json
import statistics
from typing import Dict, List

from agentopd_jax.storage.checkpoints import CheckpointPool
from agentopd_jax.storage.logs import read_metrics


def _mean_sd(values: List[float]) -> str:
  if not values:
    return "–"
  sd = statistics.stdev(values) if len(values) > 1 else 0.0
  return f"{100 * statistics.mean(values):.1f} ± {100 * sd:.1f}"


def run_record(workdir: str) -> Dict:
  """Validation success per checkpoint and the teacher metrics per iteration of one run."""
  with CheckpointPool(f"{workdir}/checkpoints", read_only=True) as pool:
    val = {s: pool.metadata(s)["metrics"].get("val/success_rate") for s in pool.steps()}
  train = [r for r in read_metrics(f"{workdir}/logs") if r["phase"] == "train"]
  teacher = {r["step"]: {k: v for k, v in r.items() if k.startswith(("teacher/", "actor/sdar/", "opid/"))} for r in train}
  return {"run": workdir, "val": val, "teacher": teacher}


def _turn_means(records: List[Dict], prefix: str) -> Dict[int, float]:
  values: Dict[int, List[float]] = {}
  for rec in records:
    for metrics in rec["teacher"].values():
      for k, v in metrics.items():
        if k.startswith(prefix) and k[len(prefix):].isdigit():
          values.setdefault(int(k[len(prefix):]), []).append(v)
  return {t: statistics.mean(v) for t, v in sorted(values.items())}


def summarize_method(records: List[Dict]) -> Dict:
  start = [r["val"][min(r["val"])] for r in records]
  final = [r["val"][max(r["val"])] for r in records]
  every = [m for r in records for m in r["teacher"].values()]
  mean = lambda key: statistics.mean([m[key] for m in every if key in m]) if any(key in m for m in every) else None
  return {"runs": [r["run"] for r in records], "start": start, "final": final,
          "gap_mean": mean("teacher/gap_mean"), "gate_active": mean("actor/sdar/gate_active_ratio"),
          "delta_episode": mean("opid/delta_episode_mean"), "delta_step": mean("opid/delta_step_mean"),
          "kl_by_turn": _turn_means(records, "teacher/kl_turn")}


def table(summary: Dict[str, Dict]) -> str:
  lines = ["| method | seeds | val success, warm start (%) | val success, final (%) | final − start (points) | "
           "teacher gap Δ (nats/token) | gate active share | OPID Δ^ep / Δ^step (nats/token) |",
           "|---|---|---|---|---|---|---|---|"]
  for label, s in summary.items():
    lift = [f - w for f, w in zip(s["final"], s["start"])]
    gap = "–" if s["gap_mean"] is None else f"{s['gap_mean']:.3f}"
    active = "–" if s["gate_active"] is None else f"{s['gate_active']:.2f}"
    shift = "–" if s["delta_episode"] is None else f"{s['delta_episode']:.2f} / {s['delta_step']:.2f}"
    lines.append(f"| {label} | {len(s['runs'])} | {_mean_sd(s['start'])} | {_mean_sd(s['final'])} | "
                 f"{_mean_sd(lift)} | {gap} | {active} | {shift} |")
  return "\n".join(lines)


def plot(records: Dict[str, List[Dict]], path: str) -> None:
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  fig, axes = plt.subplots(1, 5, figsize=(21, 3.6))
  for i, (label, runs) in enumerate(records.items()):
    color = f"C{i}"
    for j, r in enumerate(runs):
      steps = sorted(r["val"])
      axes[0].plot(steps, [100 * r["val"][s] for s in steps], color=color, marker="o", alpha=0.8,
                   label=label if j == 0 else None)
      iters = sorted(r["teacher"])
      for ax, key, style in ((axes[1], "teacher/gap_mean", "-"), (axes[2], "actor/sdar/gate_active_ratio", "-"),
                             (axes[4], "opid/delta_episode_mean", "-"), (axes[4], "opid/delta_step_mean", ":")):
        pts = [(t, r["teacher"][t][key]) for t in iters if key in r["teacher"][t]]
        if pts:
          name = label + (" (step)" if style == ":" else "")
          ax.plot(*zip(*pts), style, color=color, alpha=0.8, label=name if j == 0 else None)
    kl = _turn_means(runs, "teacher/kl_turn")
    if kl:
      axes[3].plot(list(kl), list(kl.values()), color=color, marker="o", label=label)
  titles = ("validation success (%)", "teacher gap Δ = log π_T − log π_old", "gate active share (g > 0.5)",
            "KL(π_old ‖ π_T) by turn (sampled)", "OPID Δ: episode (solid), step (dotted)")
  for ax, title, xlabel in zip(axes, titles, ("iteration", "iteration", "iteration", "turn index", "iteration")):
    ax.set_title(title, fontsize=10)
    ax.set_xlabel(xlabel)
    ax.grid(alpha=0.3)
    if ax.lines:
      ax.legend(fontsize=8)
  fig.tight_layout()
  fig.savefig(path, dpi=110)


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("groups", nargs="+", help="label=workdir[,workdir...]")
  parser.add_argument("--plot", default="")
  parser.add_argument("--json", default="")
  args = parser.parse_args(argv)
  records = {}
  for group in args.groups:
    label, _, dirs = group.partition("=")
    if not dirs:
      parser.error(f"{group!r}: expected label=workdir[,workdir...]")
    records[label] = [run_record(d) for d in dirs.split(",")]
  summary = {label: summarize_method(runs) for label, runs in records.items()}
  print(table(summary))
  if args.json:
    with open(args.json, "w") as f:
      json.dump({"summary": summary, "runs": records}, f, indent=2)
  if args.plot:
    plot(records, args.plot)


if __name__ == "__main__":
  main()
