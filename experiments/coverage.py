"""Coverage analysis (F1) of a finished GRPO run: how far the union of its checkpoints' solved sets exceeds any one.

  python experiments/coverage.py --run_dir=runs/alfworld_cpu                     # writes runs/alfworld_cpu/coverage/
  python experiments/coverage.py --run_dir=RUN --out=/tmp/cov --solved_rule=majority --student_step=40

Reads every checkpoint's validation outcomes from RUN/checkpoints, groups the problems as the run's env groups its
tasks (RUN/config.json's env: ALFWorld by task type, search-QA by data source) and writes coverage.json (the full
report of `agentopd_jax.eval.coverage.coverage_report`), coverage.md (overall, per group, per checkpoint) and
coverage.png (the historical-gap curve: solved by the current checkpoint vs by any checkpoint up to that step).
This is the evidence Agentic-OPD rests on (research/methods.md §2.5): if the union is no larger than the best
checkpoint, a teacher pool from this run has nothing to teach.
"""
import json
import os

from absl import app, flags

from agentopd_jax.eval.coverage import SOLVED_RULES, coverage_report, plot_historical_gap, run_group_of, to_markdown
from agentopd_jax.methods.agentic_opd.pool import run_outcomes
from agentopd_jax.storage.logs import configure_cli_logging

_RUN_DIR = flags.DEFINE_string("run_dir", None, "GRPO run folder (holds checkpoints/)", required=True)
_OUT = flags.DEFINE_string("out", "", "output folder (default: <run_dir>/coverage)")
_STUDENT = flags.DEFINE_string("student_step", "best", "the step compared against the union: 'best' or a step")
_RULE = flags.DEFINE_enum("solved_rule", "any", list(SOLVED_RULES), "when a problem counts as solved")


def main(argv):
  del argv
  configure_cli_logging()
  run_dir = _RUN_DIR.value
  outcomes, best = run_outcomes(run_dir, _STUDENT.value)
  report = coverage_report(outcomes, best, run_group_of(run_dir), _RULE.value)
  report["run_dir"] = os.path.abspath(run_dir)
  out = _OUT.value or os.path.join(run_dir, "coverage")
  os.makedirs(out, exist_ok=True)
  paths = {ext: os.path.join(out, f"coverage.{ext}") for ext in ("json", "md", "png")}
  with open(paths["json"], "w") as f:
    json.dump(report, f, indent=2, allow_nan=False)
    f.write("\n")
  title = f"Checkpoint coverage: {run_dir}"
  with open(paths["md"], "w") as f:
    f.write(to_markdown(report, title))
  plot_historical_gap(report, paths["png"], title)
  print(json.dumps({"problems": report["problems"], "union": report["union"], "best": report["best"],
                    "union_over_best": report["union_over_best"], **paths}))


if __name__ == "__main__":
  app.run(main)
