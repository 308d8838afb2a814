#!/usr/bin/env bash
# Agentic-OPD on search-QA (docs/results.md), one command, resumable: every finished step is skipped.
#
#   bash experiments/searchqa_opd.sh
#   SEEDS=1 bash experiments/searchqa_opd.sh      # one seed (a parallel lane)
#
# 1. Search-QA's skill-reading warm start (runs/sdar_search/warm_start, as experiments/sdar_table.sh makes it).
# 2. The pool: configs/searchqa.py:pool from it, 24 GRPO iterations, a validated checkpoint every 4, recorded in
#    results/searchqa_pool; F1 on it, every checkpoint played again with an independent key
#    (experiments/coverage_confirm.sh).
# 3. HCN + LAD, static best and continued GRPO from the pool's last checkpoint, 3 seeds
#    (configs/sweeps/searchqa_opd.py), seed by seed.
# 4. Records (results/searchqa_opd), as each seed finishes: every run, and its last checkpoint on the report half of
#    the 128-question panel with $ATTEMPTS attempts per question (`eval_report$ATTEMPTS.json`), the student the same
#    way (`student/`); then the table, paired by seed (experiments/tables.py --endpoint).
set -euo pipefail
ATTEMPTS=${ATTEMPTS:-4}
CONFIG=configs/searchqa.py
WARM=runs/sdar_search/warm_start
POOL=runs/searchqa_pool/grpo-s0   # configs/sweeps/searchqa_opd.py's POOL
PANEL=128
STUDENT_TABLE=searchqa_opd

. experiments/runs.sh

# shellcheck disable=SC2086
train "" "$WARM" --config.grpo.iterations=0 $SEARCH_WARM_FLAGS
train ":pool" "$POOL" --config.seed=0 --config.warm_start_run="$WARM"
RUNS=$POOL NAME=grpo-s0 METHOD=grpo RESULTS=results/searchqa_pool CONFIG=$CONFIG bash experiments/coverage_confirm.sh
for seed in ${SEEDS:-0 1 2}; do
  python experiments/sweep.py --sweep=configs/sweeps/searchqa_opd.py --sweep.seeds="($seed,)" || \
    echo "[searchqa_opd] seed $seed: a run failed"
  record_seed searchqa_opd "$seed"
done
python experiments/tables.py results/searchqa_opd --endpoint "report$ATTEMPTS" \
  --against results/searchqa_opd:static_best,continued_grpo
