# Helpers the experiment scripts source (`. experiments/runs.sh`), with CONFIG and SEEDS set by the caller.

# Search-QA's skill-reading warm start (runs/sdar_search/warm_start): demonstrations of the question searcher, and
# half of them also the oracle's behind SDAR's privileged skill prompt.
SEARCH_WARM_FLAGS="--config.sft.expert=question_searcher --config.sft.skill_fraction=0.5"
SEARCH_WARM_FLAGS+=" --config.sft.skill_expert=oracle"

train() {  # variant workdir extra-flags...: train.py on $CONFIG$variant, unless the run has finished
  local variant=$1 workdir=$2
  shift 2
  if [ ! -f "$workdir/summary.json" ]; then
    python experiments/train.py --config="$CONFIG$variant" --config.workdir="$workdir" "$@"
  fi
}

seed_runs() {  # prefix: "<prefix><seed>" for every seed of $SEEDS, comma-joined (a report's label=dir,dir,...)
  local out=() s
  for s in $SEEDS; do out+=("$1$s"); done
  (IFS=,; echo "${out[*]}")
}

# The Agentic-OPD benchmarks' records (experiments/forgetting_alfworld.sh, experiments/searchqa_opd.sh), with POOL (the
# teacher run, whose last checkpoint is the student), ATTEMPTS, PANEL (the panel's problem count) and STUDENT_TABLE
# (the table whose `student/` keeps the student's evaluations) set by the caller.

report_eval() {  # workdir seed dest: the last checkpoint on the report half of the panel, $ATTEMPTS attempts each
  local out=$1/eval_report${ATTEMPTS}_s$2
  if [ ! -f "$3" ]; then
    python experiments/evaluate.py --config="$CONFIG" --config.workdir="$1" --config.seed="$2" \
      --config.validation.num_tasks="$PANEL" --step=latest --panel_half=report --attempts="$ATTEMPTS" --out="$out"
    python experiments/record_run.py --eval "$out/eval.json" "$3"
  fi
}

record_seed() {  # table seed: that seed's finished runs of a sweep recorded and evaluated, the student too
  local run student=results/$STUDENT_TABLE/student/eval_report${ATTEMPTS}_s$2.json  # one student, every table
  report_eval "$POOL" "$2" "$student"
  [ "$1" = "$STUDENT_TABLE" ] || { mkdir -p "results/$1/student" && cp "$student" "results/$1/student/"; }
  for run in runs/sweeps/$1/*-s"$2"; do
    [ -f "$run/summary.json" ] || continue
    [ -d "results/$1/$(basename "$run")" ] || python experiments/record_run.py "$run" "results/$1/$(basename "$run")"
    report_eval "$run" "$2" "results/$1/$(basename "$run")/eval_report$ATTEMPTS.json"
  done
}
