"""The forgetting benchmark's second half: Agentic-OPD on a pool that forgot, against continued GRPO.

  python experiments/sweep.py --sweep=configs/sweeps/forgetting_opd.py
  python experiments/compare.py --baseline=continued_grpo runs/sweeps/forgetting_opd

The pool is a GRPO run whose task mix shifted (configs/alfworld.py:forgetting: 8 iterations of look_at_obj_in_light,
then 12 of pick_and_place at lr 3e-4, a checkpoint every 2), made from SDAR's warm start by

  python experiments/train.py --config=configs/alfworld.py:forgetting \\
      --config.workdir=runs/forgetting/look_then_pick_lr3e-4_s0 --config.warm_start_run=runs/sdar_table/warm_start

Its last checkpoint, the policy that lost some of Look, is the student of every method. Six arms, 5 seeds each, on
one budget: the same iterations, each rolling out 8 tasks x 4 with the student (from both task types) and splitting
its step samples into mini-batches of `grpo.mini_batch_size`, so every arm takes the same rollouts and about the same
optimizer steps (`batch/updates` in each run's metrics says how many):
  hcn_lad          Agentic-OPD as published: HCN (v3) picks the teacher every 4 iterations, LAD routes rollouts
  static_best      the teacher that solved the most selection problems teaches throughout, with LAD
  random_teacher   a teacher drawn from the pool at each selection, with LAD (does scheduling matter?)
  hcn_no_lad       HCN, every rollout distilled
  hcn_lad_routed   HCN + LAD, the OPD term a mean over the routed tokens (`agentic_opd.lad_norm`)
  continued_grpo   GRPO from the student on the same rollouts per iteration
Held-out selection: the runs validate on the pool's panel, the 64 generated validation games (17 Look, 47 Pick);
the first half of each task type's games are where teachers are chosen (`agentic_opd.selection_panel="held_out"`),
the rest (`val_report/`: 8 Look, 23 Pick) where success is reported, per type too.
"""
import ml_collections

POOL = "runs/forgetting/look_then_pick_lr3e-4_s0"


def get_config():
  s = ml_collections.ConfigDict()
  s.base = "configs/alfworld.py:agentic_opd"
  s.root = "runs/sweeps/forgetting_opd"
  s.seeds = (0, 1, 2, 3, 4)
  s.overrides = {
      "agentic_opd": {"teacher_run": POOL, "student_step": "latest"},
      "warm_start_run": POOL, "warm_start_step": "latest",   # continued GRPO's start; Agentic-OPD reads agentic_opd.*
      "grpo": {"iterations": 8},
      "validation": {"every": 4, "num_tasks": 64},
  }
  s.zip = {
      "method": ["agentic_opd"] * 5 + ["grpo"],
      "agentic_opd": {"scheduler": ["hcn", "static_best", "random", "hcn", "hcn", "hcn"],
                      "lad": ["group_rates", "group_rates", "group_rates", "off", "group_rates", "off"],
                      "lad_norm": ["loss_tokens"] * 4 + ["routed_tokens", "loss_tokens"]},
  }
  s.zip_labels = ("hcn_lad", "static_best", "random_teacher", "hcn_no_lad", "hcn_lad_routed", "continued_grpo")
  return s
