"""Agentic-OPD in the authors' own domain: search-QA, a pool from a longer GRPO run, against static best and continued
GRPO, 3 seeds (docs/results.md).

  bash experiments/searchqa_opd.sh          # the pool, this sweep, the evaluations and the records

The pool is configs/searchqa.py:pool (24 GRPO iterations, a validated checkpoint every 4) from search-QA's
skill-reading warm start (runs/sdar_search/warm_start, experiments/sdar_table.sh). Its last checkpoint is the student
of every arm, the earlier ones are the teachers. Three arms, 3 seeds, one budget: 8 iterations of 8 questions x 4
rollouts by the student, split into `grpo.mini_batch_size` mini-batches (`batch/updates` counts the optimizer steps):
  hcn_lad          Agentic-OPD as published: HCN (v3) picks the teacher every 4 iterations, LAD routes rollouts
  static_best      the teacher that solved the most selection questions teaches throughout, with LAD
  continued_grpo   GRPO from the student on the same rollouts per iteration
Held-out selection: the pool's panel (128 in-domain validation questions) splits in two; teachers are chosen on the
first half, success is reported on the rest (`val_report/`, and each last checkpoint's evaluation on it).
"""
import ml_collections

POOL = "runs/searchqa_pool/grpo-s0"


def get_config():
  s = ml_collections.ConfigDict()
  s.base = "configs/searchqa.py:agentic_opd"
  s.root = "runs/sweeps/searchqa_opd"
  s.seeds = (0, 1, 2)
  s.overrides = {
      "agentic_opd": {"teacher_run": POOL, "student_step": "latest"},
      "warm_start_run": POOL, "warm_start_step": "latest",   # continued GRPO's start; Agentic-OPD reads agentic_opd.*
      "grpo": {"iterations": 8},
  }
  s.zip = {
      "method": ["agentic_opd", "agentic_opd", "grpo"],
      "agentic_opd": {"scheduler": ["hcn", "static_best", "hcn"], "lad": ["group_rates", "group_rates", "off"]},
  }
  s.zip_labels = ("hcn_lad", "static_best", "continued_grpo")
  return s
