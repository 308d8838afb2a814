# Helpers the experiment scripts source (`. experiments/runs.sh`), with CONFIG and SEEDS set by the caller.

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
