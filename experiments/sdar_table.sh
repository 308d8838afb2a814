#!/usr/bin/env bash
# SDAR's main table on the ALFWorld CPU default (docs/results.md, "SDAR's table"), seed by seed, resumable:
#
#   bash experiments/sdar_table.sh                    # seeds 0-4 into runs/sdar_table, records into results/sdar_table
#   SEEDS="0 1" bash experiments/sdar_table.sh        # some seeds (a partly run table already pairs them)
#   TABLE=sdar_search CONFIG=configs/searchqa.py SEEDS="0 1 2" bash experiments/sdar_table.sh   # search-QA's table
#   TABLE=sdar_webshop CONFIG=configs/webshop.py SEEDS="0" bash experiments/sdar_table.sh         # WebShop, one seed
#
# TABLE names the sweep (configs/sweeps/$TABLE.py, whose root is runs/$TABLE) and the records (results/$TABLE).
# WARM_FLAGS: the warm start's own flags (search-QA's: demonstrations of the question searcher, and half of them
# also the oracle's behind the privileged skill prompt, so that the checkpoint can read skills).
#
# 1. The warm start, once: the CPU default's skill-reading SFT (`grpo.iterations=0`: SFT and its step-0 checkpoint).
#    WARM_FROM=<run> copies an existing one instead (the recorded table started from runs/precision_ab2/warm_start).
#    The recorded tables' warm start (results/sdar_table/warm_start) is the SFT of commit 157b4fc's code, whose
#    demonstrations today's code no longer builds token for token; on the CPU that made it (a 2-core Xeon) it is remade
#    bit for bit (outcomes and every SFT loss) from a worktree of that commit. On another CPU XLA's kernels round
#    otherwise: a 2-core AMD EPYC (Zen 3, AVX2) gives losses that part from step 10 and 9.4 % at step 0, not 12.5 %
#    (results/sdar_horizon/warm_start_s1, its machine.jsonl), so runs from it do not pair with the recorded ones:
#      here=$PWD; git worktree add /tmp/ws157 157b4fc && (cd /tmp/ws157 && PYTHONPATH=/tmp/ws157 python \
#        experiments/train.py --config=configs/alfworld.py --config.grpo.iterations=0 --config.model.dtype=float32 \
#        --config.workdir="$here/runs/sdar_table/warm_start")
# 2. Per seed: the warm start's rows, Vanilla at T = 0.4 and Skill-Prompt at T = 1.0 and 0.4 (the warm start with its
#    KM-retrieved skills before the chat template, as SDAR's teacher reads them); the trained rows
#    (configs/sweeps/$TABLE.py); every trained row's last checkpoint at T = 0.4, and Skill-GRPO's with its skills in
#    the prompt at T = 0.4. Where a config validates at another temperature than the endpoint's T = 1.0 (search-QA's
#    and WebShop's at 0.4), the warm start and every last checkpoint are evaluated at 1.0 instead, the run's last
#    validation being its T = 0.4 row. Each finished run and evaluation is recorded in results/$TABLE.
# 3. experiments/tables.py regenerates the table and its plots from results/sdar_table alone.
set -euo pipefail
SEEDS=${SEEDS:-"0 1 2 3 4"}
TABLE=${TABLE:-sdar_table}
OUT=runs/$TABLE
RESULTS=${RESULTS:-results/$TABLE}
SWEEP=configs/sweeps/$TABLE.py
CONFIG=${CONFIG:-configs/alfworld.py}
WARM=$OUT/warm_start

. experiments/runs.sh

if [ "$TABLE" = sdar_search ]; then
  WARM_FLAGS=${WARM_FLAGS:-$SEARCH_WARM_FLAGS}
fi

if [ -n "${WARM_FROM:-}" ] && [ ! -d "$WARM" ]; then
  mkdir -p "$OUT" && cp -r "$WARM_FROM" "$WARM"
fi
# shellcheck disable=SC2086
train "" "$WARM" --config.grpo.iterations=0 ${WARM_FLAGS:-}
[ -d "$RESULTS/warm_start" ] || python experiments/record_run.py "$WARM" "$RESULTS/warm_start"

evaluate() {  # workdir step seed name extra-flags...: experiments/evaluate.py into $workdir/eval_<name>, recorded
  local workdir=$1 step=$2 seed=$3 name=$4 dest
  shift 4
  dest=$RESULTS/$(basename "$workdir")/eval_$name.json
  [ "$(basename "$workdir")" = warm_start ] && dest=$RESULTS/warm_start/eval_${name}_s$seed.json
  if [ ! -f "$dest" ]; then
    python experiments/evaluate.py --config=$CONFIG --config.workdir="$workdir" --config.seed="$seed" --step="$step" \
      --out="$workdir/eval_${name}_s$seed" "$@"
    python experiments/record_run.py --eval "$workdir/eval_${name}_s$seed/eval.json" "$dest"
  fi
}

validates_at() {  # workdir T: whether its run validates at T (ALFWorld's at 1.0, the endpoint; search-QA's at 0.4)
  python -c "import json, sys; config = json.load(open(sys.argv[1] + '/config.json'))
sys.exit(config['validation']['temperature'] != float(sys.argv[2]))" "$1" "$2"
}

for seed in $SEEDS; do
  # The warm start's rows first: Skill-Prompt measures whether skills help this checkpoint before any run counts.
  evaluate "$WARM" 0 "$seed" vanilla_T0.4 --config.validation.temperature=0.4
  validates_at "$WARM" 1.0 || evaluate "$WARM" 0 "$seed" vanilla_T1.0 --config.validation.temperature=1.0
  evaluate "$WARM" 0 "$seed" skill_prompt_T1.0 --skill_prompt=raw --config.skills.retrieval=km --config.validation.temperature=1.0
  evaluate "$WARM" 0 "$seed" skill_prompt_T0.4 --skill_prompt=raw --config.skills.retrieval=km --config.validation.temperature=0.4
  python experiments/sweep.py --sweep=$SWEEP --sweep.seeds="($seed,)" || echo "[sdar_table] seed $seed: a run failed"
  for run in "$OUT"/*-s"$seed"; do
    [ -f "$run/summary.json" ] || continue
    [ -d "$RESULTS/$(basename "$run")" ] || python experiments/record_run.py "$run" "$RESULTS/$(basename "$run")"
    # A run's last validation is its last checkpoint evaluated at that temperature (tests/test_trainer.py).
    validates_at "$run" 0.4 || evaluate "$run" latest "$seed" T0.4 --config.validation.temperature=0.4
    validates_at "$run" 1.0 || evaluate "$run" latest "$seed" T1.0 --config.validation.temperature=1.0
  done
  [ ! -f "$OUT/skill_grpo-s$seed/summary.json" ] || evaluate "$OUT/skill_grpo-s$seed" latest "$seed" skills_T0.4 --skill_prompt=user --config.skills.retrieval=km --config.validation.temperature=0.4
done
python experiments/tables.py "$RESULTS" --plot "docs/results_$TABLE.png" --doc docs/results.md
