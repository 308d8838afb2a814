"""Stability over a longer horizon (docs/results.md, "SDAR's table"): 24 iterations, 2 seeds, GRPO, GRPO+OPSD-RKL,
OPSD and SDAR from the main table's warm start, λ = 1. Does naive self-distillation drift where SDAR does not?

  python experiments/sweep.py --sweep=configs/sweeps/sdar_horizon.py

Each run logs the paper's Fig. 2–5 quantities per iteration (`teacher/kl_turn*`, `teacher/gate_*`, `teacher/gap_*`).
"""
import ml_collections


def get_config():
  s = ml_collections.ConfigDict()
  s.base = ["configs/alfworld.py", "configs/alfworld.py:grpo_opsd_rkl", "configs/alfworld.py:opsd",
            "configs/alfworld.py:sdar"]
  s.root = "runs/sdar_horizon"
  s.seeds = (0, 1)
  s.overrides = {"warm_start_run": "runs/sdar_table/warm_start", "sdar": {"coef": 1.0}, "grpo": {"iterations": 24}}
  return s
