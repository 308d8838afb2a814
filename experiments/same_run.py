"""Are two same-seed runs the same, bit for bit? (docs/architecture.md; runs from experiments/same_run.sh)

  python experiments/same_run.py RUN_A RUN_B                         # two run folders
  python experiments/same_run.py runs/same_run/base runs/same_run/new  # two folders of runs
  python experiments/same_run.py A/agentic_opd B/agentic_opd --keys_of=a  # A's metric keys only

Per run it compares
  1. every record of `logs/metrics.jsonl`, matched by (phase, step, occurrence), without the timing keys (those that
     start with `time` or `timing_s/` or end with `_s`, and the compilation counts `compile/*`:
     `storage.logs.untimed`), printing the differing
     (phase, step, key, A's value, B's value);
  2. a SHA-256 over the param leaves (`state["params"]`) of every checkpoint `checkpoints/<step>` present in both,
     the final one printed: leaves in tree-flatten order, each hashed as its path, dtype, shape and little-endian
     bytes;
  3. the validation outcomes ({problem: [successes, attempts]}) in each checkpoint's record (`meta`), and
     `teacher_outcomes/<step>.json` where an Agentic-OPD run has them.
It ends with a JSON summary {"runs": {name: {...}}, "only_in_a": [...], "only_in_b": [...], "all_equal": bool} and
exits 0 iff every run present in both has finished (its summary.json) and is equal (sub-runs present in only one
are listed, not counted).
"""
import argparse
import hashlib
import json
import os
import sys

from agentopd_jax.models.loading import pool_params
from agentopd_jax.storage.checkpoints import CheckpointPool, path_str
from agentopd_jax.storage.logs import renamed, untimed

METRICS = os.path.join("logs", "metrics.jsonl")
CHECKPOINTS = "checkpoints"
TEACHER_OUTCOMES = "teacher_outcomes"


def is_run(path):
  return os.path.isfile(os.path.join(path, METRICS)) or os.path.isdir(os.path.join(path, CHECKPOINTS))


def pair_runs(a, b):
  """({name: (run_a, run_b)}, only in a, only in b): two run folders, or the common sub-runs of two folders."""
  if is_run(a) and is_run(b):
    return {os.path.basename(os.path.normpath(a)) or "run": (a, b)}, [], []
  subs = [{n for n in os.listdir(d) if is_run(os.path.join(d, n))} if os.path.isdir(d) else set() for d in (a, b)]
  both = sorted(subs[0] & subs[1])
  return ({n: (os.path.join(a, n), os.path.join(b, n)) for n in both}, sorted(subs[0] - subs[1]),
          sorted(subs[1] - subs[0]))


# --- 1. metrics ---------------------------------------------------------------------------------------------------

def read_records(run):
  """{(phase, step, n): record} of the run's metrics.jsonl (n: the record's occurrence of that phase and step); a
  half-written last line is skipped, as `read_metrics` does."""
  path = os.path.join(run, METRICS)
  if not os.path.isfile(path):
    return {}
  with open(path, encoding="utf-8") as f:
    lines = [line for line in f.read().splitlines() if line.strip()]
  out, seen = {}, {}
  for i, line in enumerate(lines):
    try:
      record = renamed(json.loads(line))
    except json.JSONDecodeError:
      if i != len(lines) - 1:
        raise
      continue
    key = (record.get("phase"), record.get("step"))
    seen[key] = seen.get(key, -1) + 1
    out[(*key, seen[key])] = record
  return out


_MISSING = "<missing>"


def metric_diffs(run_a, run_b, keys_of=None):
  """[(phase, step, key, a value, b value)] of every untimed value that differs. keys_of="a": only the keys (and
  records) A has, so new keys or records of B are not differences."""
  ra, rb = read_records(run_a), read_records(run_b)
  diffs = []
  ids = sorted(set(ra) | (set() if keys_of == "a" else set(rb)), key=lambda i: (str(i[0]), i[1] or 0, i[2]))
  for i in ids:
    a, b = untimed(ra.get(i, {})), untimed(rb.get(i, {}))
    if i not in ra or i not in rb:
      diffs.append((i[0], i[1], "<record>", "present" if i in ra else _MISSING, "present" if i in rb else _MISSING))
      continue
    keys = a if keys_of == "a" else {**a, **b}
    for k in keys:
      va, vb = a.get(k, _MISSING), b.get(k, _MISSING)
      if type(va) is not type(vb) or va != vb:
        diffs.append((i[0], i[1], k, va, vb))
  return diffs


# --- 2. params ----------------------------------------------------------------------------------------------------

def params_digest(params):
  """SHA-256 over a param pytree: leaves in tree-flatten order (sorted dict keys), each as its path, dtype, shape
  and its bytes as a C-ordered little-endian numpy array."""
  import jax
  import numpy as np

  h = hashlib.sha256()
  for path, leaf in jax.tree_util.tree_flatten_with_path(params)[0]:
    arr = np.ascontiguousarray(np.asarray(leaf))
    if arr.dtype.byteorder == ">":
      arr = arr.byteswap().view(arr.dtype.newbyteorder("<"))
    head = f"{path_str(path)}\0{arr.dtype.name}\0{','.join(map(str, arr.shape))}\0"
    h.update(len(head).to_bytes(8, "little") + head.encode())
    h.update(arr.nbytes.to_bytes(8, "little") + arr.tobytes())
  return h.hexdigest()


def _pool(run):
  directory = os.path.join(run, CHECKPOINTS)
  if not os.path.isdir(directory):
    return None
  return CheckpointPool(directory, read_only=True)


def _abstract_params(pool, step):
  """ShapeDtypeStructs of `state["params"]` of `step` (a LoRA run's: of its base), from the saved array metadata (no
  model config needed)."""
  import jax
  import orbax.checkpoint as ocp
  from etils import epath

  meta = ocp.PyTreeCheckpointHandler().metadata(epath.Path(os.path.join(pool.directory, str(step), "state")))
  saved = getattr(meta, "tree", meta)
  if "params" not in saved:
    return pool.saved_base()
  return jax.tree.map(lambda m: jax.ShapeDtypeStruct(tuple(m.shape), m.dtype), saved["params"])


def run_checkpoints(run):
  """{step: (params digest, outcomes or None)} of every checkpoint of the run."""
  pool = _pool(run)
  if pool is None:
    return {}
  out = {}
  with pool:
    for step in pool.steps():
      params = pool_params(pool, step, _abstract_params(pool, step))
      outcomes = pool.metadata(step)["outcomes"]
      out[step] = (params_digest(params), None if outcomes is None else
                   {p: [int(s), int(a)] for p, (s, a) in sorted(outcomes.items())})
  return out


def teacher_outcomes(run):
  folder = os.path.join(run, TEACHER_OUTCOMES)
  if not os.path.isdir(folder):
    return {}
  out = {}
  for name in sorted(os.listdir(folder)):
    if name.endswith(".json"):
      with open(os.path.join(folder, name), encoding="utf-8") as f:
        out[name[:-5]] = json.load(f)
  return out


def _outcome_diffs(label, a, b, limit=5):
  """Lines naming the problems whose [successes, attempts] differ between outcome dicts a and b."""
  if a is None or b is None:
    return [] if a is b else [f"{label}: outcomes {'none' if a is None else 'present'} in A, "
                              f"{'none' if b is None else 'present'} in B"]
  bad = [p for p in sorted(set(a) | set(b)) if a.get(p) != b.get(p)]
  lines = [f"{label} problem {p}: A {a.get(p, _MISSING)}, B {b.get(p, _MISSING)}" for p in bad[:limit]]
  if len(bad) > limit:
    lines.append(f"{label}: ... {len(bad) - limit} more problems differ")
  return lines


# --- the comparison -----------------------------------------------------------------------------------------------

def compare_run(name, run_a, run_b, keys_of=None, max_lines=40, out=None):
  """Prints the differences of one run pair (to `out`, default stdout); returns its summary."""
  out = out or sys.stdout
  diffs = metric_diffs(run_a, run_b, keys_of)
  for phase, step, key, va, vb in diffs[:max_lines]:
    print(f"[{name}] metrics {phase} step {step} {key}: A {va!r}, B {vb!r}", file=out)
  if len(diffs) > max_lines:
    print(f"[{name}] metrics: ... {len(diffs) - max_lines} more differences ({len(diffs)} in all)", file=out)

  ca, cb = run_checkpoints(run_a), run_checkpoints(run_b)
  common = sorted(set(ca) & set(cb))
  lines = []
  if sorted(ca) != sorted(cb):
    lines.append(f"checkpoint steps: A {sorted(ca)}, B {sorted(cb)}")
  params_equal = bool(ca) and sorted(ca) == sorted(cb)
  for step in common:
    if ca[step][0] != cb[step][0]:
      params_equal = False
      lines.append(f"checkpoint {step} params: A {ca[step][0]}, B {cb[step][0]}")
  if not ca and not cb:
    lines.append("no checkpoints in either run")
  unfinished = [label for label, run in (("A", run_a), ("B", run_b))
                if not os.path.isfile(os.path.join(run, "summary.json"))]
  if unfinished:
    lines.append(f"unfinished (no summary.json): {' and '.join(unfinished)}")
  outcome_lines = [line for step in common for line in _outcome_diffs(f"checkpoint {step}", ca[step][1], cb[step][1])]
  ta, tb = teacher_outcomes(run_a), teacher_outcomes(run_b)
  if sorted(ta) != sorted(tb):
    outcome_lines.append(f"{TEACHER_OUTCOMES}: A steps {sorted(ta)}, B steps {sorted(tb)}")
  for step in sorted(set(ta) & set(tb)):
    outcome_lines += _outcome_diffs(f"{TEACHER_OUTCOMES}/{step}.json", ta[step], tb[step])
  for line in (lines + outcome_lines)[:max_lines]:
    print(f"[{name}] {line}", file=out)

  final_a, final_b = (max(c) if c else None for c in (ca, cb))
  summary = {"metrics_equal": not diffs, "metric_differences": len(diffs),
             "final_step_a": final_a, "final_step_b": final_b,
             "params_digest_a": ca[final_a][0] if ca else None, "params_digest_b": cb[final_b][0] if cb else None,
             "params_equal": params_equal, "checkpoint_steps": common,
             "outcomes_equal": not outcome_lines and sorted(ca) == sorted(cb)}
  summary["finished"] = not unfinished
  summary["equal"] = (summary["metrics_equal"] and summary["params_equal"] and summary["outcomes_equal"]
                      and summary["finished"])
  return summary


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("run_a")
  parser.add_argument("run_b")
  parser.add_argument("--keys_of", choices=["a"], default=None,
                      help="a: compare only the metric keys (and records) present in A's metrics.jsonl")
  parser.add_argument("--max_lines", type=int, default=40, help="differences printed per run and kind")
  parser.add_argument("--record", default="", help="also write the JSON summary here, with --base and --new")
  parser.add_argument("--base", default="", help="--record: what A is (e.g. its commit)")
  parser.add_argument("--new", default="", help="--record: what B is")
  args = parser.parse_args(argv)
  if args.record and not (args.base and args.new):
    parser.error("--record needs --base and --new")
  os.environ.setdefault("JAX_PLATFORMS", "cpu")  # reading checkpoints needs no accelerator
  pairs, only_a, only_b = pair_runs(args.run_a, args.run_b)
  if not pairs:
    parser.exit(2, f"same_run.py: error: no run in both {args.run_a} and {args.run_b} (a run folder has "
                   f"{METRICS} or {CHECKPOINTS}/)\n")
  for name in only_a:
    print(f"[{name}] only in A ({args.run_a})")
  for name in only_b:
    print(f"[{name}] only in B ({args.run_b})")
  runs = {name: compare_run(name, a, b, args.keys_of, args.max_lines) for name, (a, b) in pairs.items()}
  result = {"runs": runs, "only_in_a": only_a, "only_in_b": only_b,
            "all_equal": all(r["equal"] for r in runs.values())}
  print(json.dumps(result, indent=2, sort_keys=True))
  if args.record:
    record = dict(result, base=args.base, new=args.new, **({"keys_of": args.keys_of} if args.keys_of else {}))
    with open(args.record, "w") as f:
      f.write(json.dumps(record, indent=2, sort_keys=True) + "\n")
  return 0 if result["all_equal"] else 1


if __name__ == "__main__":
  sys.exit(main())
