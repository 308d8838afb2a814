"""OPID's ablations on the ALFWorld CPU default (docs/results.md, "OPID's table"), paired by seed with its table:

  python experiments/sweep.py --sweep=configs/sweeps/opid_ablations.py

The table's scaled arm (w = 0.3, the oracle analyzer, step-priority routing) with one thing changed, 3 seeds:
  route_additive    a critical step is scored under both skills (`opid.route=additive`)
  stats_selector    OPID's statistical critical-step selector picks the candidate steps (`opid.analyzer=stats`)
Same warm start as the table (experiments/opid_table.sh makes it).
"""
import ml_collections


def get_config():
  s = ml_collections.ConfigDict()
  s.base = "configs/alfworld.py:opid"
  s.root = "runs/opid_ablations"
  s.seeds = (0, 1, 2)
  s.overrides = {"warm_start_run": "runs/opid_table/warm_start_retries", "opid": {"w_episode": 0.3, "w_step": 0.3}}
  s.zip = {"opid": {"route": ["additive", "step_priority"], "analyzer": ["oracle", "stats"]}}
  s.zip_labels = ("route_additive", "stats_selector")
  return s
