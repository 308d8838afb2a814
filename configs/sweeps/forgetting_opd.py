"""The forgetting benchmark's second half: Agentic-OPD on a pool that forgot, against continued GRPO.

  python experiments/sweep.py --sweep=configs/sweeps/forgetting_opd.py
  python experiments/compare.py --baseline=continued_grpo runs/sweeps/forgetting_opd

The pool is a GRPO run whose task mix shifted (configs/alfworld.py:forgetting: 8 iterations of look_at_obj_in_light,
then 12 of pick_and_place at lr 3e-4, a checkpoint every 2), made from SDAR's warm start by

  python experiments/train.py --config=configs/alfworld.py:forgetting \\
      --config.workdir=runs/forgetting/look_then_pick_lr3e-4_s0 --config.warm_start_run=runs/sdar_exp/grpo_s0

Its last checkpoint, the policy that lost some of Look, is the student of every method. Four methods, 3 seeds each, on
one budget (the same iterations, each rolling out 8 tasks x 4 with the student, from both task types):
  hcn_lad         Agentic-OPD as published: HCN (v3) picks the teacher every 4 iterations, LAD routes rollouts
  static_best     the teacher that solved the most validation problems teaches throughout, with LAD
  hcn_no_lad      HCN, every rollout distilled
  continued_grpo  GRPO from the student on the same rollouts per iteration
"""
import ml_collections

POOL = "runs/forgetting/look_then_pick_lr3e-4_s0"


def get_config():
  s = ml_collections.ConfigDict()
  s.base = "configs/alfworld.py:agentic_opd"
  s.root = "runs/sweeps/forgetting_opd"
  s.seeds = (0, 1, 2)
  s.overrides = {
      "agentic_opd": {"teacher_run": POOL, "student_step": "latest"},
      "warm_start_run": POOL, "warm_start_step": "latest",   # continued GRPO's start; Agentic-OPD reads agentic_opd.*
      "grpo": {"iterations": 8},
      "validation": {"every": 4},
  }
  s.zip = {
      "method": ["agentic_opd", "agentic_opd", "agentic_opd", "grpo"],
      "agentic_opd": {"scheduler": ["hcn", "static_best", "hcn", "hcn"],
                      "lad": ["group_rates", "group_rates", "off", "off"]},
  }
  s.zip_labels = ("hcn_lad", "static_best", "hcn_no_lad", "continued_grpo")
  return s
