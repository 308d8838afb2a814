#!/usr/bin/env bash
# f32 against bf16 compute on the ALFWorld CPU default, paired by seed, from one warm start (docs/results.md,
# "bf16 compute on the CPU default"):
#
#   bash experiments/precision_ab.sh                  # seeds 0 1 2 into runs/precision_ab, records into results/
#   OUT=runs/precision_ab2 RESULTS=results/precision_ab2 PLOT=docs/results_precision_ab2.png SEEDS="0 1 2 3 4" \
#     bash experiments/precision_ab.sh                # another A/B in folders of its own, from its own warm start
#
# 1. The CPU default's SFT warm start, once, in f32 (`grpo.iterations=0`: SFT and the step-0 validation).
# 2. Per seed, GRPO from its step-0 checkpoint with f32 compute and with bf16 compute (f32 master weights and Adam
#    moments either way): the same tasks, groups and random keys, only the matmul precision differs.
# 3. Each finished run's record goes to results/precision_ab/<dtype>_s<seed>; the report reads only those.
# Every step resumes: a finished run is not redone.
set -euo pipefail
SEEDS=${SEEDS:-"0 1 2"}
OUT=${OUT:-runs/precision_ab}
RESULTS=${RESULTS:-results/precision_ab}
PLOT=${PLOT:-docs/results_precision_ab.png}
CONFIG=configs/alfworld.py
WARM=$OUT/warm_start

. experiments/runs.sh

train "" "$WARM" --config.grpo.iterations=0 --config.model.dtype=float32
python experiments/record_run.py "$WARM" "$RESULTS/warm_start"
for seed in $SEEDS; do
  for dtype in float32 bfloat16; do
    train "" "$OUT/${dtype}_s$seed" --config.seed="$seed" --config.warm_start_run="$WARM" --config.model.dtype="$dtype"
    python experiments/record_run.py "$OUT/${dtype}_s$seed" "$RESULTS/${dtype}_s$seed"
  done
done
python experiments/precision_report.py "$RESULTS" --plot "$PLOT"
