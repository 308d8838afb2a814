"""Paper-style comparison tables from finished runs and sweeps (layout: agentopd_jax/eval/compare.py).

  python experiments/compare.py runs/sdar_table                         # a sweep folder (its sweep.json)
  python experiments/compare.py grpo=runs/sdar_table/default-s0,runs/sdar_table/default-s1 \
      sdar=runs/sdar_table/sdar-s0,runs/sdar_table/sdar-s1 --baseline=grpo --csv /tmp/t.csv --plot /tmp/t.png
  python experiments/compare.py runs/sdar_table --step=4                # a folder of runs, at validation step 4
  python experiments/compare.py runs/sweeps/forgetting_opd --since=0    # what each method changed from its start

Prints one markdown table per env: mean ± sd over seeds of each method's validation success (%) per task type / data
source, and with --baseline the paired difference on the headline column and its paired t-test.
"""
import argparse
import json
import sys

from agentopd_jax.eval import compare


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("runs", nargs="+", help="label=dir[,dir...], a sweep folder, a run folder or a folder of runs")
  parser.add_argument("--baseline", default=None, help="the method the others are paired against")
  parser.add_argument("--step", type=int, default=None, help="validation step (default: each run's last)")
  parser.add_argument("--since", type=int, default=None,
                      help="report each run's change from this validation step to --step (0: from its start)")
  parser.add_argument("--csv", default="")
  parser.add_argument("--json", default="")
  parser.add_argument("--plot", default="")
  args = parser.parse_args(argv)
  try:
    runs = compare.find_runs(args.runs)
    tables = compare.tables(runs, args.baseline, args.step, args.since)
  except ValueError as exc:
    parser.exit(2, f"compare.py: error: {exc}\n")
  print("\n\n".join(compare.markdown(t, args.baseline) for t in tables))
  if args.csv:
    with open(args.csv, "w") as f:
      f.write(compare.to_csv(tables))
  if args.json:
    with open(args.json, "w") as f:
      json.dump([dict(env=t.env, columns=t.columns, rows=t.rows, since=t.since) for t in tables], f, indent=2)
  if args.plot:
    compare.plot(runs, args.plot)


if __name__ == "__main__":
  sys.exit(main())
