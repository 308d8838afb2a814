"""f32 against bf16 compute on the ALFWorld CPU default, paired by seed, from the run records (`results/`):

  python experiments/precision_report.py results/precision_ab                 # the table docs/results.md holds
  python experiments/precision_report.py results/precision_ab --plot docs/results_precision_ab.png

Each record folder is `<dtype>_s<seed>` (`experiments/precision_ab.sh`). Per validation step: each arm's mean ± sd
of validation success over the seeds, the paired difference bf16 − f32 with its 95 % CI (t over the seeds), and
the pooled episodes. The endpoint fixed in advance is the last step; the rule that decides the CPU default's
precision is that the CI's lower end is above −2 points.
"""
import argparse
import json
import re
import sys
from pathlib import Path
from typing import Dict, List

import numpy as np

from agentopd_jax.eval.compare import paired_ci

ARMS = ("float32", "bfloat16")
MARGIN = -2.0  # points: bf16 may not lose more than this on the endpoint


def validations(record: Path) -> Dict[int, float]:
  """{step: validation success in %} of one record."""
  out = {}
  for line in (record / "metrics.jsonl").read_text().splitlines():
    r = json.loads(line)
    if r.get("phase") == "val":
      out[int(r["step"])] = 100.0 * r["val/success_rate"]
  return out


def load(folder: Path) -> Dict[str, Dict[int, Dict[int, float]]]:
  """{arm: {seed: {step: success %}}} of the `<arm>_s<seed>` records in `folder`."""
  runs: Dict[str, Dict[int, Dict[int, float]]] = {arm: {} for arm in ARMS}
  for record in sorted(folder.iterdir()):
    m = re.fullmatch(r"(float32|bfloat16)_s(\d+)", record.name)
    if m and (record / "metrics.jsonl").exists():
      runs[m[1]][int(m[2])] = validations(record)
  return runs


def table(runs) -> dict:
  seeds = sorted(set(runs["float32"]) & set(runs["bfloat16"]))
  steps = sorted(set.intersection(*(set(runs[a][s]) for a in ARMS for s in seeds)))
  rows = []
  for step in steps:
    f32 = [runs["float32"][s][step] for s in seeds]
    bf16 = [runs["bfloat16"][s][step] for s in seeds]
    mean, lo, hi = paired_ci([b - f for b, f in zip(bf16, f32)])
    rows.append({"step": step, "float32": f32, "bfloat16": bf16, "diff": mean, "ci": [lo, hi]})
  final = rows[-1]
  return {"seeds": seeds, "rows": rows, "switch": bool(final["ci"][0] > MARGIN)}


def _interval(ci) -> str:
  """The CI's cell; none where every seed's difference is the same (`compare.paired_ci`: e.g. the shared start)."""
  return "none: the same difference on every seed" if np.isnan(ci[0]) else f"[{ci[0]:+.1f}, {ci[1]:+.1f}]"


def markdown(t: dict) -> str:
  lines = ["| step | f32 compute | bf16 compute | bf16 − f32, paired | 95 % CI |", "|---|---|---|---|---|"]
  for r in t["rows"]:
    f32, bf16 = np.asarray(r["float32"]), np.asarray(r["bfloat16"])
    lines.append(f"| {r['step']} | {f32.mean():.1f} ± {f32.std(ddof=1):.1f} "
                 f"| {bf16.mean():.1f} ± {bf16.std(ddof=1):.1f} "
                 f"| {r['diff']:+.1f} | {_interval(r['ci'])} |")
  per_seed = ", ".join(f"seed {s}: {r_f:.1f} → {r_b:.1f}" for s, r_f, r_b in
                       zip(t["seeds"], t["rows"][-1]["float32"], t["rows"][-1]["bfloat16"]))
  lines += ["", f"Last step, f32 → bf16 per seed: {per_seed}. Rule (lower CI end > {MARGIN:.0f} points): "
                f"{'switch to bf16' if t['switch'] else 'keep f32'}."]
  return "\n".join(lines)


def plot(runs, path: str) -> None:
  import matplotlib
  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  fig, ax = plt.subplots(figsize=(5, 3.2))
  for arm, color in zip(ARMS, ("tab:blue", "tab:orange")):
    for i, (seed, vals) in enumerate(sorted(runs[arm].items())):
      steps = sorted(vals)
      ax.plot(steps, [vals[s] for s in steps], color=color, marker="o", alpha=0.8,
              label=f"{arm} compute" if i == 0 else None)
  ax.set_xlabel("GRPO iteration")
  ax.set_ylabel("validation success (%)")
  ax.legend()
  fig.tight_layout()
  fig.savefig(path, dpi=120)


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("folder", type=Path)
  parser.add_argument("--plot", default="")
  parser.add_argument("--json", default="")
  args = parser.parse_args(argv)
  runs = load(args.folder)
  t = table(runs)
  print(markdown(t))
  if args.json:
    Path(args.json).write_text(json.dumps(t, indent=2))
  if args.plot:
    plot(runs, args.plot)


if __name__ == "__main__":
  sys.exit(main())
