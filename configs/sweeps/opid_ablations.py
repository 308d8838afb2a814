"""OPID's ablations on the ALFWorld CPU default (docs/results.md, "OPID's table"), paired by seed with its table:

  python experiments/sweep.py --sweep=configs/sweeps/opid_ablations.py

The table's scaled arm (w = 0.3, the oracle analyzer, step-priority routing) with one thing changed, 3 seeds:
  route_additive    a critical step is scored under both skills (`opid.route=additive`)
  stats_selector    OPID's statistical critical-step selector picks the candidate steps (`opid.analyzer=stats`)
  weight_0.03       w = 0.03, a tenth of the scaled weight: chosen after every w = 0.3 run collapsed while the
                    paper's 0.001 left GRPO's runs unchanged, so it asks whether a weight between them changes
                    anything without collapsing (an exploratory arm, not a weight picked on its result)
Same warm start as the table (experiments/opid_table.sh makes it).
"""
import ml_collections

ARMS = {  # label: (route, analyzer, w_ep = w_step)
    "route_additive": ("additive", "oracle", 0.3),
    "stats_selector": ("step_priority", "stats", 0.3),
    "weight_0.03": ("step_priority", "oracle", 0.03),
}


def get_config():
  s = ml_collections.ConfigDict()
  s.base = "configs/alfworld.py:opid"
  s.root = "runs/opid_ablations"
  s.seeds = (0, 1, 2)
  s.overrides = {"warm_start_run": "runs/opid_table/warm_start_retries"}
  route, analyzer, weight = (list(c) for c in zip(*ARMS.values()))
  s.zip = {"opid": {"route": route, "analyzer": analyzer, "w_episode": weight, "w_step": weight}}
  s.zip_labels = tuple(ARMS)
  return s
