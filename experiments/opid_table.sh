#!/usr/bin/env bash
# OPID's table on the ALFWorld CPU default (docs/results.md, "OPID's table"), resumable:
#
#   bash experiments/opid_table.sh                   # everything, into runs/opid_*, records into results/opid_*
#   SEEDS="0 1" bash experiments/opid_table.sh       # some seeds of the table (the ablations take seeds 0-2)
#   RESULTS_ROOT=/elsewhere/results bash experiments/opid_table.sh   # records into another checkout's results/
#
# 1. The warm start, once: the CPU default's SFT with half the demo games also in OPID's injection format and those
#    games' won episodes again in the hindsight retry's setting (`sft.opid_fraction=0.5`, `sft.opid_retries=1`,
#    docs/opid.md), `grpo.iterations=0`; its teacher-forced probe on OPID-format demonstrations of validation games,
#    with and without the skills (`probe_demos.py --opid`), and its hindsight retry (`evaluate.py --opid_hindsight`)
#    at T = 1.0 and 0.4 on the 64-game panel.
# 2. The check before any OPID run counts: the same retry at T = 1.0 on 256 games of another generator seed, which no
#    warm start was picked on (the panel's 64 chose between the demonstration designs of step 5). If the paired
#    difference's 95 % interval does not lie above zero, the script stops.
# 3. Per seed: the table's arms (configs/sweeps/opid_table.py), then for seeds 0-2 the ablations
#    (configs/sweeps/opid_ablations.py); every finished run recorded in results/.
# 4. One run with the `local` analyzer (the warm start served by agentopd_jax.serve behind the openai client), seed 0,
#    2 iterations: the real analyzer path end to end, with its parse-failure count in the record.
# 5. The other demonstration designs and the control, probed and retried as in step 1 (each skipped once its records
#    are there): three copies of the retries (`sft.opid_retries=3`); no retries; and SDAR's table's warm start
#    (runs/sdar_table/warm_start, made by experiments/sdar_table.sh), which never saw OPID's sections. Two more
#    designs, the expert's own actions under the episode skill (`sft.opid_targets=expert`) and additive routing
#    (`opid.route=additive`), were checked with the sections at OPID's own splice points only (results/opid_anchors).
set -euo pipefail
SEEDS=${SEEDS:-"0 1 2 3 4"}
CONFIG=configs/alfworld.py
WARM=runs/opid_table/warm_start_retries
RESULTS_ROOT=${RESULTS_ROOT:-results}
RESULTS=$RESULTS_ROOT/opid_table

. experiments/runs.sh

probe() {  # workdir record-folder: the teacher-forced probe on OPID-format demonstrations, recorded
  [ -f "$RESULTS/$2/probe_opid.json" ] || { mkdir -p "$RESULTS/$2" && python experiments/probe_demos.py \
    --config=$CONFIG --config.workdir="$1" --step=0 --opid --games=40 > "$RESULTS/$2/probe_opid.json"; }
}
check() {  # workdir record-folder temperature [suffix flags...]: the hindsight retry of a warm start, recorded
  local workdir=$1 name=$2 temperature=$3 suffix=${4:-}
  shift $(($# < 4 ? $# : 4))
  local dest=$RESULTS/$name/eval_opid_hindsight_T$temperature$suffix.json
  if [ ! -f "$dest" ]; then
    python experiments/evaluate.py --config=$CONFIG --config.workdir="$workdir" --step=0 --opid_hindsight \
      --config.validation.temperature="$temperature" "$@" --out="$workdir/eval_opid_hindsight_T$temperature$suffix"
    python experiments/record_run.py --eval "$workdir/eval_opid_hindsight_T$temperature$suffix/eval.json" "$dest"
  fi
}
warm_start() {  # workdir record-folder sft-flags...: a warm start of this table, trained, recorded, probed, retried
  local workdir=$1 name=$2
  shift 2
  local dest=$RESULTS/$name
  if [ -f "$dest/probe_opid.json" ] && [ -f "$dest/eval_opid_hindsight_T1.0.json" ] && \
     [ -f "$dest/eval_opid_hindsight_T0.4.json" ]; then
    return
  fi
  [ $# -eq 0 ] || train "" "$workdir" --config.grpo.iterations=0 "$@"
  [ $# -eq 0 ] || [ -d "$dest" ] || python experiments/record_run.py "$workdir" "$dest"
  probe "$workdir" "$name"
  check "$workdir" "$name" 1.0
  check "$workdir" "$name" 0.4
}

warm_start "$WARM" warm_start_retries --config.sft.opid_fraction=0.5 --config.sft.opid_retries=1
check "$WARM" warm_start_retries 1.0 _new256 --config.env.generate_seed=1 --config.env.generate_valid=256 \
  --config.validation.num_tasks=256
python - "$RESULTS/warm_start_retries/eval_opid_hindsight_T1.0_new256.json" <<'EOF'
import json, sys
retry = json.load(open(sys.argv[1]))["opid_hindsight"]
low = retry["paired_difference"]["ci95"][0]
print(f"[opid_table] hindsight retry at T = 1.0 on 256 new games: {retry['success_without']:.1f} % -> "
      f"{retry['success_with']:.1f} %, paired 95 % CI lower bound {low}")
sys.exit(0 if low is not None and low > 0 else "[opid_table] the warm start does not read OPID's skills: no OPID run counts, stopping")
EOF

record_seed() {  # root seed: record every finished run of a sweep root for that seed
  local run
  for run in "$1"/*-s"$2"; do
    [ -f "$run/summary.json" ] || continue
    [ -d "$RESULTS_ROOT/$(basename "$1")/$(basename "$run")" ] || \
      python experiments/record_run.py "$run" "$RESULTS_ROOT/$(basename "$1")/$(basename "$run")"
  done
}
for seed in $SEEDS; do
  python experiments/sweep.py --sweep=configs/sweeps/opid_table.py --sweep.seeds="($seed,)" || \
    echo "[opid_table] seed $seed: a run failed"
  record_seed runs/opid_table "$seed"
  if [ "$seed" -le 2 ]; then
    python experiments/sweep.py --sweep=configs/sweeps/opid_ablations.py --sweep.seeds="($seed,)" || \
      echo "[opid_ablations] seed $seed: a run failed"
    record_seed runs/opid_ablations "$seed"
  fi
done
train ":opid" runs/opid_local/local_analyzer-s0 --config.seed=0 --config.warm_start_run="$WARM" \
  --config.grpo.iterations=2 --config.validation.every=2 --config.opid.analyzer=local \
  --config.opid.analyzer_model="$WARM" --config.opid.max_completion_tokens=256
[ -d "$RESULTS_ROOT/opid_local/local_analyzer-s0" ] || \
  python experiments/record_run.py runs/opid_local/local_analyzer-s0 "$RESULTS_ROOT/opid_local/local_analyzer-s0"

warm_start runs/opid_table/warm_start_retries3 warm_start_retries3 --config.sft.opid_fraction=0.5 \
  --config.sft.opid_retries=3
warm_start runs/opid_table/warm_start warm_start --config.sft.opid_fraction=0.5
warm_start runs/sdar_table/warm_start sdar_warm_start
