"""Copies a finished run's small record into `results/` (results/README.md): its resolved config, every metrics
record, its summary, the machine of each of its starts (`machine.jsonl`, `storage.machine`) and, per validation step,
each panel problem's [successes, attempts], the problem named by its env's `EnvSpec.record_name` (an ALFWorld game by
its folder below the data root). No checkpoint.

  python experiments/record_run.py runs/precision_ab/bfloat16_s0 results/precision_ab/bfloat16_s0
  python experiments/record_run.py --eval runs/x/eval/eval.json results/x/eval_T0.4.json   # an evaluation's report
  python experiments/record_run.py --ran_here RUN DEST   # a run whose code wrote no machine.jsonl, run on this machine
"""
import argparse
import json
import shutil
from pathlib import Path

from agentopd_jax.envs import registry
from agentopd_jax.storage import machine
from agentopd_jax.storage.checkpoints import CheckpointPool


def _names(config: Path, what: Path):
  """The record_name of the env that `config` (a run's config.json) names; `what` is the file being recorded."""
  if not config.is_file():
    raise SystemExit(f"{what}: no {config} to name its env by (the trainer writes config.json in the run folder)")
  return registry.get(json.loads(config.read_text())["env"]["name"]).record_name


def record(run: Path, dest: Path, ran_here: bool = False) -> None:
  """`ran_here`: the run's code wrote no machine.jsonl (code older than `storage.machine`) and the run ran on this
  machine, which the record then names instead (one line, marked `"recorded_by_this_machine": true`)."""
  if not (run / "summary.json").exists():
    raise SystemExit(f"{run}: no summary.json, the run has not finished")
  starts = machine.read(run)
  if starts and ran_here:
    raise SystemExit(f"{run}: --ran_here is for runs without a machine.jsonl; this run names its machine itself")
  dest.mkdir(parents=True, exist_ok=True)
  for name, src in (("config.json", "config.json"), ("metrics.jsonl", "logs/metrics.jsonl"),
                    ("summary.json", "summary.json")):
    shutil.copyfile(run / src, dest / name)
  if starts:
    shutil.copyfile(run / machine.FILE, dest / machine.FILE)
  elif ran_here:
    (dest / machine.FILE).write_text(json.dumps({"recorded_by_this_machine": True, **machine.describe()}) + "\n")
  name = _names(run / "config.json", run)
  pool = CheckpointPool(run / "checkpoints")
  outcomes = {str(step): {name(p): list(o)
                                for p, o in sorted(pool.metadata(step)["outcomes"].items())}
              for step in pool.steps()}
  (dest / "outcomes.json").write_text(json.dumps(outcomes, indent=0) + "\n")


def record_eval(report: Path, dest: Path) -> None:
  """An `experiments/evaluate.py` report (eval.json) with its per-problem outcomes named as `record` names them: by the
  env the report names, or for a report that names none, the env of the run it sits in (<run>/<folder>/eval.json)."""
  summary = json.loads(report.read_text())
  if "env" in summary:
    name = registry.get(summary["env"]).record_name
  else:
    name = _names(report.parent.parent / "config.json", report)
  for part in (summary, summary.get("opid_hindsight", {})):  # the hindsight retry's second play has its own
    if "outcomes" in part:
      part["outcomes"] = {name(p): o for p, o in sorted(part["outcomes"].items())}
  dest.parent.mkdir(parents=True, exist_ok=True)
  dest.write_text(json.dumps(summary, indent=0) + "\n")


def main():
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("run", type=Path, help="a finished run's folder, or with --eval an evaluation's eval.json")
  parser.add_argument("dest", type=Path, help="the record's folder, or with --eval its file")
  parser.add_argument("--eval", action="store_true", help="record an experiments/evaluate.py report")
  parser.add_argument("--ran_here", action="store_true",
                      help="the run wrote no machine.jsonl (older code) and ran on this machine: name this one")
  args = parser.parse_args()
  if args.eval:
    record_eval(args.run, args.dest)
  else:
    record(args.run, args.dest, args.ran_here)


if __name__ == "__main__":
  main()
