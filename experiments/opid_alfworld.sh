#!/usr/bin/env bash
# OPID against GRPO on the ALFWorld CPU default, from SDAR's warm start (docs/results.md):
#
#   bash experiments/opid_alfworld.sh                       # seeds 0 1 2 at w = 0.001, the w sweep on seed 0
#   SEEDS="0" WEIGHTS="1.0" bash experiments/opid_alfworld.sh
#
# 1. The warm start and the GRPO baselines are SDAR's (experiments/sdar_alfworld.sh, into $BASE): the GRPO run of
#    seed 0 does the SFT warm start with the skill-in-context demonstrations, the other GRPO seeds start from its
#    step-0 checkpoint. They are run here when missing, with the same commands.
# 2. Per seed: OPID with the oracle analyzer at OPID's w_ep = w_step = 0.001, from the same step-0 checkpoint.
# 3. On seed 0: the sweep w_ep = w_step over $WEIGHTS.
# 4. A short run with the `local` analyzer: agentopd_jax.serve on the warm-start checkpoint behind the openai client.
# 5. experiments/sdar_report.py tabulates and plots them (OPID's Δ by route included).
# Every step resumes: a finished run is not redone.
set -euo pipefail
SEEDS=${SEEDS:-"0 1 2"}
WEIGHTS=${WEIGHTS:-"1.0 0.1 0.01"}
BASE=${BASE:-runs/sdar_exp}
OUT=${OUT:-runs/opid_exp}
CONFIG=configs/alfworld.py
WARM=$BASE/grpo_s0
mkdir -p "$OUT"

. experiments/runs.sh

train "" "$WARM" --config.seed=0
for seed in $SEEDS; do
  [ "$seed" = 0 ] || train "" "$BASE/grpo_s$seed" --config.seed="$seed" --config.warm_start_run="$WARM"
  train ":opid" "$OUT/opid_s$seed" --config.seed="$seed" --config.warm_start_run="$WARM"
done
for w in $WEIGHTS; do
  train ":opid" "$OUT/opid_w${w}_s0" --config.seed=0 --config.warm_start_run="$WARM" \
    --config.opid.w_episode="$w" --config.opid.w_step="$w"
done
train ":opid" "$OUT/opid_local_s0" --config.seed=0 --config.warm_start_run="$WARM" --config.grpo.iterations=2 \
  --config.validation.every=2 --config.opid.analyzer=local --config.opid.analyzer_model="$WARM" \
  --config.opid.max_completion_tokens=256
sweep=()
for w in $WEIGHTS; do sweep+=("opid_w$w=$OUT/opid_w${w}_s0"); done
python experiments/sdar_report.py grpo="$(seed_runs "$BASE/grpo_s")" opid="$(seed_runs "$OUT/opid_s")" "${sweep[@]}" \
  --plot "$OUT/opid_alfworld.png" --json "$OUT/opid_alfworld.json"
