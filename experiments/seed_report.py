"""Seed-to-seed comparison of finished runs: warm-start (step 0) vs final validation success, as markdown + JSON.

  python experiments/seed_report.py runs/alfworld_cpu_s0 runs/alfworld_cpu_s1 runs/alfworld_cpu_s2 [--plot out.png]

`--plot` also draws every run's validation success against the GRPO iteration (step 0 = the warm start).
"""
import argparse
import json
import statistics

from agentopd_jax.training.checkpoints import CheckpointPool
from agentopd_jax.training.trainer import summarize


def plot(rows, path):
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt

  fig, ax = plt.subplots(figsize=(5, 3.5))
  for r in rows:
    steps = sorted(r["curve"], key=int)
    ax.plot([int(s) for s in steps], [100 * r["curve"][s] for s in steps], marker="o", label=f"seed {r['seed']}")
  ax.set_xlabel("GRPO iteration (0 = SFT warm start)")
  ax.set_ylabel("validation success (%)")
  ax.grid(alpha=0.3)
  ax.legend()
  fig.tight_layout()
  fig.savefig(path, dpi=120)


def main(workdirs, plot_path=""):
  rows = []
  for workdir in workdirs:
    with CheckpointPool(f"{workdir}/checkpoints", read_only=True) as pool:
      s = summarize(pool)
      seed = pool.metadata(s["steps"][-1])["config"]["seed"]
    rows.append(dict(run=workdir, seed=seed, sft=s["start_success"], final=s["final_success"],
                     best=s["best_success"], lift=s["final_success"] - s["start_success"], curve=s["val_success"]))

  def stat(key):
    values = [r[key] for r in rows]
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else 0.0)

  print("| run | seed | SFT (step 0) | GRPO final | GRPO best | lift |")
  print("|---|---|---|---|---|---|")
  for r in rows:
    print(f"| {r['run']} | {r['seed']} | {r['sft']:.3f} | {r['final']:.3f} | {r['best']:.3f} | {r['lift']:+.3f} |")
  summary = {k: stat(k) for k in ("sft", "final", "best", "lift")}
  print("| mean ± std | | " + " | ".join(f"{m:.3f} ± {s:.3f}" for m, s in summary.values()) + " |")
  if plot_path:
    plot(rows, plot_path)
  print(json.dumps({"runs": rows, "mean_std": summary}))


if __name__ == "__main__":
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("workdirs", nargs="+")
  parser.add_argument("--plot", default="", help="also save the validation curves to this PNG")
  args = parser.parse_args()
  main(args.workdirs, args.plot)
