"""Seed-to-seed comparison of finished runs: warm-start (step 0) vs final validation success, as markdown + JSON.

  python experiments/seed_report.py runs/alfworld_cpu_s0 runs/alfworld_cpu_s1 runs/alfworld_cpu_s2
"""
import json
import statistics
import sys

from agentopd_jax.training.checkpoints import CheckpointPool
from agentopd_jax.training.trainer import summarize


def main(workdirs):
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
  print(json.dumps({"runs": rows, "mean_std": summary}))


if __name__ == "__main__":
  main(sys.argv[1:])
