"""SDAR's main table on the ALFWorld CPU default (docs/results.md, "SDAR's table"): every trained row, paired by seed.

  bash experiments/sdar_table.sh          # this sweep, the warm-start rows, the T = 0.4 re-evaluations, the records
  python experiments/sweep.py --sweep=configs/sweeps/sdar_table.py --sweep.seeds='(0,)'   # the training runs alone

Every method starts from one warm start, the CPU default's skill-reading SFT (`runs/sdar_table/warm_start`,
experiments/sdar_table.sh makes it), with λ = 1 for every self-distillation term (`sdar.coef`, `skill_sd.coef`).
"""
import ml_collections

# In order of what the table needs first: GRPO (the baseline), SDAR, the naive baselines, then the rest.
METHODS = ("grpo", "sdar", "grpo_opsd_rkl", "grpo_opsd", "rlsd", "skill_sd", "opsd", "skill_grpo")


def get_config():
  s = ml_collections.ConfigDict()
  s.base = [f"configs/alfworld.py:{m}" if m != "grpo" else "configs/alfworld.py" for m in METHODS]
  s.root = "runs/sdar_table"
  s.seeds = (0, 1, 2, 3, 4)
  s.overrides = {"warm_start_run": "runs/sdar_table/warm_start", "sdar": {"coef": 1.0}, "skill_sd": {"coef": 1.0}}
  return s
