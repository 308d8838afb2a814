"""SDAR on search-QA (docs/results.md, "SDAR's table"): GRPO, GRPO+OPSD-RKL, RLSD and SDAR, 3 seeds, λ = 1, from a
search warm start that reads skills:

  TABLE=sdar_search CONFIG=configs/searchqa.py SEEDS="0 1 2" bash experiments/sdar_table.sh

The warm start (`runs/sdar_search/warm_start`, made by that command) imitates the question searcher, which searches
the question as written, and on half of its demonstration questions also the oracle searcher, which does what the
shipped search skills say, behind SDAR's privileged skill prompt (`sft.skill_fraction=0.5`), as ALFWorld's does.
Search-QA's config validates at T = 0.4, so the curves are at 0.4 and the table's T = 1.0 endpoint is each last
checkpoint's evaluation at 1.0, which the driver makes.
"""
import ml_collections

METHODS = ("grpo", "grpo_opsd_rkl", "rlsd", "sdar")


def get_config():
  s = ml_collections.ConfigDict()
  s.base = [f"configs/searchqa.py:{m}" if m != "grpo" else "configs/searchqa.py" for m in METHODS]
  s.root = "runs/sdar_search"
  s.seeds = (0, 1, 2)
  s.overrides = {"warm_start_run": "runs/sdar_search/warm_start", "sdar": {"coef": 1.0}}
  return s
