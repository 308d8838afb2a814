"""What a later checkpoint forgot, problem by problem, from two evaluations with many attempts per problem.

  python experiments/evaluate.py --config=configs/alfworld.py:forgetting --config.workdir=RUN --step=8 \
      --attempts=16 --out=RUN/eval_step8
  python experiments/evaluate.py ... --step=latest --attempts=16 --out=RUN/eval_latest
  python experiments/forgetting.py --then=RUN/eval_step8/eval.json --now=RUN/eval_latest/eval.json

Writes forgetting.json and forgetting.md (default: beside --now): per group (the run's env groups its problems:
ALFWorld by task type) the pooled success then and now, how many problems the later checkpoint lost (one-sided Fisher
exact test per problem) or gained, and a Wilcoxon signed-rank test over problems
(`agentopd_jax.eval.coverage.forgetting_report`). The run is `--run_dir`, by default the folder above --now's report
folder (evaluate.py writes its reports in <workdir>/...). The validation a run logs uses a few attempts per problem,
where a lost problem is as often luck as skill; this is the check with enough attempts.
"""
import argparse
import json
import os
import sys

from agentopd_jax.eval.coverage import forgetting_markdown, forgetting_report, run_group_of


def _outcomes(path: str) -> dict:
  if not os.path.isfile(path):
    sys.exit(f"forgetting.py: error: {path}: no such evaluation report (experiments/evaluate.py writes eval.json)")
  with open(path) as f:
    outcomes = json.load(f).get("outcomes")
  if not outcomes:
    sys.exit(f"forgetting.py: error: {path}: no per-problem outcomes (an evaluate.py report from before they were "
             "recorded, or an env without problem ids)")
  return {p: tuple(v) for p, v in outcomes.items()}


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("--then", required=True, help="eval.json of the earlier checkpoint")
  parser.add_argument("--now", required=True, help="eval.json of the later checkpoint")
  parser.add_argument("--alpha", type=float, default=0.05, help="per-problem significance level")
  parser.add_argument("--out", default="", help="output folder (default: the folder of --now)")
  parser.add_argument("--run_dir", default="", help="the evaluated run, whose config.json's env groups the problems "
                      "(default: the folder above --now's folder)")
  args = parser.parse_args(argv)
  then, now = _outcomes(args.then), _outcomes(args.now)
  run_dir = args.run_dir or os.path.dirname(os.path.dirname(os.path.abspath(args.now)))
  try:
    group_of = run_group_of(run_dir)
  except FileNotFoundError as e:
    sys.exit(f"forgetting.py: error: {e}; pass --run_dir, the run the evaluations are of")
  report = forgetting_report(then, now, group_of, args.alpha)
  report.update(then_report=os.path.abspath(args.then), now_report=os.path.abspath(args.now))
  out = args.out or os.path.dirname(os.path.abspath(args.now))
  os.makedirs(out, exist_ok=True)
  with open(os.path.join(out, "forgetting.json"), "w") as f:
    json.dump(report, f, indent=2)
    f.write("\n")
  md = forgetting_markdown(report, f"Forgetting: {args.then} -> {args.now}")
  with open(os.path.join(out, "forgetting.md"), "w") as f:
    f.write(md)
  print(md)


if __name__ == "__main__":
  main()
