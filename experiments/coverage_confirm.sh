#!/usr/bin/env bash
# F1 with sampling luck taken out (docs/results.md, "A GRPO run's checkpoints together solve more than its best one"):
# every checkpoint of each finished run is re-evaluated on the same panel with an independent key (the run's seed
# plus $OFFSET gives the validation key), recorded beside the run's record as confirm_step<K>.json; then the table.
#
#   bash experiments/coverage_confirm.sh                                   # the GRPO runs of SDAR's table
#   RUNS="runs/sdar_table/default-s0" RESULTS=results/sdar_table bash experiments/coverage_confirm.sh
#   RUNS=runs/forgetting/look_then_pick_lr3e-4_s0 NAME=pool-s0 METHOD=pool RESULTS=results/forgetting \
#     bash experiments/coverage_confirm.sh                               # one run, recorded as NAME
#
# The run's own validation outcomes (its record's outcomes.json) pick the solved sets and the best checkpoint; the
# independent evaluations confirm them (agentopd_jax/eval/coverage.py, `confirmation_report`).
set -euo pipefail
TABLE=${TABLE:-sdar_table}
METHOD=${METHOD:-default}
RESULTS=${RESULTS:-results/$TABLE}
RUNS=${RUNS:-$(ls -d runs/"$TABLE"/"$METHOD"-s[0-9]*)}
CONFIG=${CONFIG:-configs/alfworld.py}
OFFSET=${OFFSET:-1000}

for run in $RUNS; do
  record=$RESULTS/${NAME:-$(basename "$run")}
  if [ ! -f "$run/summary.json" ]; then echo "[coverage_confirm] $run has not finished"; continue; fi
  [ -d "$record" ] || python experiments/record_run.py "$run" "$record"
  seed=$(python -c "import json, sys; print(json.load(open(sys.argv[1]))['seed'])" "$run/config.json")
  for ckpt in "$run"/checkpoints/[0-9]*; do
    step=$(basename "$ckpt")
    [ ! -f "$record/confirm_step$step.json" ] || continue
    python experiments/evaluate.py --config="$CONFIG" --config.workdir="$run" --config.seed=$((seed + OFFSET)) \
      --step="$step" --out="$run/confirm_step$step"
    python experiments/record_run.py --eval "$run/confirm_step$step/eval.json" "$record/confirm_step$step.json"
  done
done
python experiments/tables.py "$RESULTS" --coverage "$METHOD"
