"""OPID's weight sweep on the ALFWorld CPU default: w_ep = w_step over 0.001 … 1, from SDAR's warm start.

  python experiments/sweep.py --sweep=configs/sweeps/opid_w.py

Needs the warm start, the step-0 checkpoint of `runs/sdar_exp/grpo_s0` (experiments/sdar_alfworld.sh makes it).
"""
import ml_collections


def get_config():
  s = ml_collections.ConfigDict()
  s.base = "configs/alfworld.py:opid"
  s.root = "runs/sweeps/opid_w"
  s.seeds = (0,)
  s.overrides = {"warm_start_run": "runs/sdar_exp/grpo_s0"}
  s.zip = {"opid": {"w_episode": [0.001, 0.01, 0.1, 1.0], "w_step": [0.001, 0.01, 0.1, 1.0]}}
  return s
