#!/usr/bin/env bash
# The forgetting benchmark (docs/results.md), one command, resumable: every finished step is skipped.
#
#   bash experiments/forgetting_alfworld.sh
#   ATTEMPTS=8 bash experiments/forgetting_alfworld.sh
#
# 1. The shared skill-reading warm start of SDAR's table (runs/sdar_table/warm_start; experiments/sdar_table.sh makes
#    it, and here it is made when missing).
# 2. The pool: configs/alfworld.py:forgetting from that warm start, 8 iterations of look_at_obj_in_light, then 12
#    of pick_and_place at lr 3e-4, a validated checkpoint every 2.
# 3. Skill, not luck: the end of phase A (step 8) and the last checkpoint re-evaluated with $ATTEMPTS attempts per
#    problem, compared problem by problem (experiments/forgetting.py); the pool's coverage (experiments/coverage.py).
# 4. Agentic-OPD on that pool against continued GRPO, 5 seeds (configs/sweeps/forgetting_opd.py), and the tables:
#    final per-type success, and each method's per-type change from the student.
set -euo pipefail
ATTEMPTS=${ATTEMPTS:-16}
CONFIG=configs/alfworld.py
WARM=runs/sdar_table/warm_start
POOL=runs/forgetting/look_then_pick_lr3e-4_s0   # configs/sweeps/forgetting_opd.py's POOL

. experiments/runs.sh

train "" "$WARM" --config.grpo.iterations=0
train ":forgetting" "$POOL" --config.seed=0 --config.warm_start_run="$WARM"
for step in 8 latest; do
  if [ ! -f "$POOL/eval_$step/eval.json" ]; then
    python experiments/evaluate.py --config="$CONFIG:forgetting" --config.workdir="$POOL" --step="$step" \
      --attempts="$ATTEMPTS" --out="$POOL/eval_$step"
  fi
done
python experiments/forgetting.py --then="$POOL/eval_8/eval.json" --now="$POOL/eval_latest/eval.json"
python experiments/coverage.py --run_dir="$POOL" --student_step=latest
python experiments/coverage.py --run_dir="$POOL" --student_step=latest --solved_rule=majority --out="$POOL/coverage_majority"
python experiments/sweep.py --sweep=configs/sweeps/forgetting_opd.py
python experiments/compare.py runs/sweeps/forgetting_opd --baseline=continued_grpo --plot runs/sweeps/forgetting_opd/curves.png
python experiments/compare.py runs/sweeps/forgetting_opd --baseline=continued_grpo --since=0
