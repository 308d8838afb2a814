"""Coverage analysis (F1) of a finished GRPO run: how far the union of its checkpoints' solved sets exceeds any one.

  python experiments/coverage.py --run_dir=runs/alfworld_cpu                     # writes runs/alfworld_cpu/coverage/
  python experiments/coverage.py --run_dir=RUN --out=/tmp/cov --solved_rule=majority --student_step=40

Reads every checkpoint's validation outcomes from RUN/checkpoints and writes coverage.json (the full report of
`agentopd_jax.teachers.coverage.coverage_report`), coverage.md (overall, per task type, per checkpoint) and
coverage.png (the historical-gap curve: solved by the current checkpoint vs by any checkpoint up to that step).
This is the evidence Agentic-OPD rests on (research/methods.md §2.5): if the union is no larger than the best
checkpoint, a teacher pool from this run has nothing to teach.
"""
import json
import os

from absl import app, flags

from agentopd_jax.teachers.coverage import SOLVED_RULES, coverage_report, to_markdown
from agentopd_jax.teachers.pool import checkpoint_outcomes
from agentopd_jax.training.checkpoints import CheckpointPool
from agentopd_jax.training.logging import configure_cli_logging

_RUN_DIR = flags.DEFINE_string("run_dir", None, "GRPO run folder (holds checkpoints/)", required=True)
_OUT = flags.DEFINE_string("out", "", "output folder (default: <run_dir>/coverage)")
_STUDENT = flags.DEFINE_string("student_step", "best", "the step compared against the union: 'best' or a step")
_RULE = flags.DEFINE_enum("solved_rule", "any", list(SOLVED_RULES), "when a problem counts as solved")


def load_run(run_dir: str, student_step: str) -> tuple[dict, int]:
  """({step: outcomes} of every checkpoint, the student step) of the run in `run_dir`."""
  if student_step != "best" and not student_step.isdigit():
    raise ValueError(f"--student_step must be 'best' or a step number, got {student_step!r}")
  with CheckpointPool(os.path.join(run_dir, "checkpoints"), read_only=True) as pool:
    outcomes = {s: checkpoint_outcomes(pool, s) for s in pool.steps()}
    best = pool.best_step() if student_step == "best" else int(student_step)
  if best is None:
    raise ValueError(f"--student_step=best: no checkpoint of {run_dir} has a validation metric; pass a step")
  return outcomes, best


def plot(report: dict, path: str, title: str) -> None:
  import matplotlib

  matplotlib.use("Agg")
  import matplotlib.pyplot as plt
  from matplotlib.ticker import MaxNLocator

  rows = report["historical_gap"]
  steps = [r["step"] for r in rows]
  fig, ax = plt.subplots(figsize=(6, 3.8))
  ax.plot(steps, [r["historical"] for r in rows], marker="o", label="union of checkpoints up to step")
  ax.plot(steps, [r["current"] for r in rows], marker="s", label="current checkpoint")
  ax.axvline(report["best_step"], color="gray", linestyle="--", linewidth=1, label=f"best (step {report['best_step']})")
  ax.set_xlabel("GRPO step")
  ax.set_ylabel(f"problems solved (of {report['problems']})")
  ax.yaxis.set_major_locator(MaxNLocator(integer=True))
  ax.set_title(title, fontsize=9)
  ax.grid(alpha=0.3)
  ax.legend(fontsize=8)
  fig.tight_layout()
  fig.savefig(path, dpi=120)
  plt.close(fig)


def main(argv):
  del argv
  configure_cli_logging()
  run_dir = _RUN_DIR.value
  outcomes, best = load_run(run_dir, _STUDENT.value)
  report = coverage_report(outcomes, best, _RULE.value)
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
  plot(report, paths["png"], title)
  print(json.dumps({"problems": report["problems"], "union": report["union"], "best": report["best"],
                    "union_over_best": report["union_over_best"], **paths}))


if __name__ == "__main__":
  app.run(main)
