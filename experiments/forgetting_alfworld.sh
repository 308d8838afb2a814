#!/usr/bin/env bash
# The forgetting benchmark (docs/results.md), one command, resumable: every finished step is skipped.
#
#   bash experiments/forgetting_alfworld.sh
#   ATTEMPTS=8 bash experiments/forgetting_alfworld.sh
#   SWEEPS=composition bash experiments/forgetting_alfworld.sh   # the pool's steps, then the composition alone
#   SWEEPS=forgetting_opd SEEDS=3 bash experiments/forgetting_alfworld.sh   # one seed of one sweep (a parallel lane)
#
# 1. The shared skill-reading warm start of SDAR's table (runs/sdar_table/warm_start; experiments/sdar_table.sh makes
#    it, and here it is made when missing).
# 2. The pool: configs/alfworld.py:forgetting from that warm start, 8 iterations of look_at_obj_in_light, then 12
#    of pick_and_place at lr 3e-4, a validated checkpoint every 2.
# 3. Skill, not luck: the end of phase A (step 8) and the last checkpoint re-evaluated with $ATTEMPTS attempts per
#    problem, compared problem by problem (experiments/forgetting.py); the pool's coverage (experiments/coverage.py),
#    and F1 confirmed on independent attempts, from the pool's record (results/forgetting/pool-s0, which also keeps
#    the two re-evaluations).
# 4. Agentic-OPD on that pool against continued GRPO, 5 seeds (configs/sweeps/forgetting_opd.py), and the
#    composition, SDAR's gate over the pool's step 8 against plain distillation from it, 3 seeds
#    (configs/sweeps/composition.py; its baseline is the first sweep's continued GRPO, which it does not rerun).
# 5. Records (results/forgetting_opd, results/composition), as each seed finishes: every run, and its last checkpoint
#    on the report half of the 64-game panel with $ATTEMPTS attempts per game (`eval_report$ATTEMPTS.json`), and the
#    student the same way (`student/`); then the tables, per task type, paired by seed, seed by seed, and their plots
#    (experiments/tables.py --endpoint).
set -euo pipefail
ATTEMPTS=${ATTEMPTS:-16}
CONFIG=configs/alfworld.py
WARM=runs/sdar_table/warm_start
POOL=runs/forgetting/look_then_pick_lr3e-4_s0   # configs/sweeps/forgetting_opd.py's POOL
PANEL=64
STUDENT_TABLE=forgetting_opd

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
# A pool record of another pool (its checkpoints gone, the pool remade on another CPU) would keep its confirmations.
RECORD=results/forgetting/pool-s0
if [ -f "$RECORD/metrics.jsonl" ] && ! cmp -s "$RECORD/metrics.jsonl" "$POOL/logs/metrics.jsonl"; then
  echo "[forgetting] $RECORD records another pool than $POOL: move it away first" >&2
  exit 1
fi
RUNS=$POOL NAME=pool-s0 METHOD=pool RESULTS=results/forgetting bash experiments/coverage_confirm.sh
for step in 8 latest; do  # the skill-not-luck evaluations, beside the pool's record
  [ -f "$RECORD/eval_${step}_attempts$ATTEMPTS.json" ] || \
    python experiments/record_run.py --eval "$POOL/eval_$step/eval.json" "$RECORD/eval_${step}_attempts$ATTEMPTS.json"
done
EVAL=report$ATTEMPTS
for sweep in ${SWEEPS:-forgetting_opd composition}; do
  case $sweep in
    forgetting_opd) seeds=${SEEDS:-0 1 2 3 4} ;;
    composition) seeds=${SEEDS:-0 1 2} ;;
    *) echo "[forgetting] SWEEPS: unknown sweep $sweep (forgetting_opd, composition)" >&2; exit 1 ;;
  esac
  for seed in $seeds; do  # seed by seed, each seed's records and evaluations written before the next starts
    python experiments/sweep.py --sweep=configs/sweeps/$sweep.py --sweep.seeds="($seed,)" || \
      echo "[$sweep] seed $seed: a run failed"
    record_seed "$sweep" "$seed"
  done
done
python experiments/tables.py results/forgetting_opd --endpoint "$EVAL" \
  --against results/forgetting_opd:static_best,continued_grpo --plot docs/results_forgetting_report.png
python experiments/tables.py results/forgetting_opd --endpoint "$EVAL" --per_seed
python experiments/tables.py results/composition --endpoint "$EVAL" \
  --against results/forgetting_opd:continued_grpo,static_best --plot docs/results_composition.png
python experiments/tables.py results/composition --endpoint "$EVAL" --against results/composition:opd_pool
