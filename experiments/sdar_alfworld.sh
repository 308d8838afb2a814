#!/usr/bin/env bash
# SDAR against GRPO and GRPO+OPSD on the ALFWorld CPU default, from one warm start (docs/results.md):
#
#   bash experiments/sdar_alfworld.sh                 # seeds 0 1 2, λ = 1.0, into runs/sdar_exp
#   SEEDS="0" LAMBDA=0.1 OUT=runs/sdar_lam01 bash experiments/sdar_alfworld.sh
#
# 1. The GRPO run of seed 0 does the SFT warm start (with its skill-in-context demonstrations); every other run
#    starts from its step-0 checkpoint (`warm_start_run`), so all methods share one base policy.
# 2. Per seed: the warm start evaluated with and without the skills in context (Skill-Prompt, SDAR's raw prefix; the
#    seed changes the validation's sampling key, not the checkpoint), then SDAR, GRPO+OPSD (β = 0) and GRPO, with
#    λ = LAMBDA for both distillation terms.
# 3. experiments/sdar_report.py tabulates and plots them.
# Every step resumes: a finished run or evaluation is not redone.
set -euo pipefail
SEEDS=${SEEDS:-"0 1 2"}
LAMBDA=${LAMBDA:-1.0}
OUT=${OUT:-runs/sdar_exp}
CONFIG=configs/alfworld.py
WARM=$OUT/grpo_s0
mkdir -p "$OUT"

. experiments/runs.sh

train "" "$WARM" --config.seed=0
for seed in $SEEDS; do
  for mode in plain raw; do
    out=$OUT/skill_gap/${mode}_s$seed
    flags=()
    [ "$mode" = raw ] && flags=(--skill_prompt=raw)
    [ -f "$out/eval.json" ] || python experiments/evaluate.py --config=$CONFIG --config.workdir="$WARM" \
      --config.seed="$seed" --step=0 --out="$out" "${flags[@]}"
  done
  for method in sdar grpo_opsd; do
    train ":$method" "$OUT/${method}_s$seed" --config.seed="$seed" --config.warm_start_run="$WARM" \
      --config.sdar.coef="$LAMBDA"
  done
  [ "$seed" = 0 ] || train "" "$OUT/grpo_s$seed" --config.seed="$seed" --config.warm_start_run="$WARM"
done
python experiments/sdar_report.py grpo="$(seed_runs "$OUT/grpo_s")" grpo_opsd="$(seed_runs "$OUT/grpo_opsd_s")" \
  sdar="$(seed_runs "$OUT/sdar_s")" --plot "$OUT/sdar_alfworld.png" --json "$OUT/sdar_alfworld.json"
