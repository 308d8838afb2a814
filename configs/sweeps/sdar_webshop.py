"""SDAR on WebShop, one seed (docs/results.md, "SDAR's table"): GRPO and SDAR from the WebShop CPU default's warm
start, λ = 1:

  TABLE=sdar_webshop CONFIG=configs/webshop.py SEEDS="0" bash experiments/sdar_table.sh
"""
import ml_collections


def get_config():
  s = ml_collections.ConfigDict()
  s.base = ["configs/webshop.py", "configs/webshop.py:sdar"]
  s.root = "runs/sdar_webshop"
  s.seeds = (0,)
  s.overrides = {"warm_start_run": "runs/sdar_webshop/warm_start", "sdar": {"coef": 1.0}}
  return s
