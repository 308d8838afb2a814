#!/usr/bin/env bash
# Same-seed runs of one source tree, to compare two trees with experiments/same_run.py (docs/architecture.md).
#
#   git worktree add /tmp/base <commit>
#   bash experiments/same_run.sh /tmp/base runs/same_run/base          # shortened runs of every method
#   bash experiments/same_run.sh . runs/same_run/new
#   python experiments/same_run.py runs/same_run/base runs/same_run/new
#   RUNS="grpo default" bash experiments/same_run.sh . runs/same_run/new  # some of them; "default" is the CPU
#                                                                        # default itself (about an hour on one core)
#   PRINT=1 bash experiments/same_run.sh /tmp/base runs/same_run/base   # each run's command, nothing run
#
# Every run is pinned to one core (CPU, default 0): XLA:CPU's reductions depend on its thread count, so one thread
# gives the same figures whatever the machine's core count. Both trees share one cache
# ($AGENTOPD_CACHE, default <OUT>/../cache), so they read the same generated games and tokenizer. A finished run
# (its summary.json) is skipped.
set -euo pipefail
TREE=$(cd "$1" && pwd)
mkdir -p "$2"
OUT=$(cd "$2" && pwd)
export AGENTOPD_CACHE=${AGENTOPD_CACHE:-$(dirname "$OUT")/cache}
SHORT=(--config.sft.steps=30 --config.sft.demos=200 --config.grpo.iterations=2 --config.validation.every=2
       --config.validation.num_tasks=16)

run() {  # name variant flags...
  local name=$1 variant=$2
  shift 2
  if [ -n "${PRINT:-}" ]; then
    echo "$name: python experiments/train.py --config=configs/alfworld.py$variant --config.workdir=$OUT/$name $*"
  elif [ ! -f "$OUT/$name/summary.json" ]; then
    (cd "$TREE" && PYTHONPATH="$TREE" taskset -c "${CPU:-0}" python experiments/train.py \
      --config="configs/alfworld.py$variant" --config.workdir="$OUT/$name" "$@")
  fi
}

# The tree's flag spelling: a tree whose presets hold the method groups (an `agentic_opd` section) names the stacked
# method in `method` and Agentic-OPD's fields under `agentic_opd.`; a tree of the single-section layout spells the
# same runs with OPID's `grpo.advantage` and an `opd.` section.
LAYOUT=$(cd "$TREE" && PYTHONPATH="$TREE" taskset -c "${CPU:-0}" python -c "
import importlib.util
if importlib.util.find_spec('agentopd_jax.training.presets') is None:  # a tree without presets: single-section
    print('single')
else:
    from agentopd_jax.training.presets import cpu_base
    print('groups' if 'agentic_opd' in cpu_base('alfworld') else 'single')")
if [ "$LAYOUT" = groups ]; then
  SDAR_OPID="--config.method=sdar+opid" TEACHER_RUN="--config.agentic_opd.teacher_run"
else
  SDAR_OPID="--config.grpo.advantage=opid" TEACHER_RUN="--config.opd.teacher_run"
fi

declare -A FLAGS=(
  [grpo]=""
  [sdar]=":sdar"
  [rlsd]=":rlsd"
  [skill_grpo]=":skill_grpo"
  [opid]=":opid"
  [sdar_opid]=":sdar $SDAR_OPID"
  [agentic_opd]=":agentic_opd $TEACHER_RUN=$OUT/grpo"
)
for name in ${RUNS:-grpo sdar rlsd skill_grpo opid sdar_opid agentic_opd}; do
  if [ "$name" = default ]; then
    run default ""
  else
    read -r variant extra <<< "${FLAGS[$name]}"
    [ "$name" != agentic_opd ] || run grpo "" "${SHORT[@]}"  # its teacher pool
    # shellcheck disable=SC2086
    run "$name" "$variant" "${SHORT[@]}" $extra
  fi
done
