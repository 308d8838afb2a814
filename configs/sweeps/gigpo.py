"""GiGPO against GRPO on the ALFWorld CPU default (docs/results.md, "GiGPO against GRPO"), paired by seed with the
GRPO runs of SDAR's table:

  python experiments/sweep.py --sweep=configs/sweeps/gigpo.py          # runs/gigpo/gigpo-s{0..4}
  python experiments/record_run.py runs/gigpo/gigpo-s0 results/gigpo/gigpo-s0   # each finished run
  python experiments/tables.py results/gigpo --against results/sdar_table:default --doc docs/results.md

One arm, the `gigpo` variant (verl-agent's ALFWorld script: γ 0.95, ω 1, mean_std_norm at both levels, so its episode
advantage is GRPO's default estimator and the two arms differ by the step term alone), from the warm start of SDAR's
table (experiments/sdar_table.sh makes it), seeds 0-4 as that table's GRPO. GiGPO changes only the advantages: the
same rollouts and optimizer steps per iteration as GRPO.
"""
import ml_collections


def get_config():
  s = ml_collections.ConfigDict()
  s.base = "configs/alfworld.py:gigpo"
  s.root = "runs/gigpo"
  s.seeds = (0, 1, 2, 3, 4)
  s.overrides = {"warm_start_run": "runs/sdar_table/warm_start"}
  s.zip = {"method": ["gigpo"]}
  s.zip_labels = ("gigpo",)
  return s
