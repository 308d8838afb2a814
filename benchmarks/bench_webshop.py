#!/usr/bin/env python
"""WebShop simulator throughput: how fast episodes and searches run in one process (one core), as JSON on stdout.

  * build_s: shop construction (catalogue generation, processing, goals, BM25 index) for --products products.
  * cycle: per goal, reset -> search (the goal's instruction) -> click the first result -> Buy Now, the shortest
    episode that exercises search, page rendering and the reward; reported as env steps/s (4 calls per cycle,
    reset counted as a step) and cycles/s.
  * bm25: searches/s of `SearchEngine.search` alone, over the goals' instruction texts.
  * expert: the oracle's win rate and steps/s over --expert-goals test goals (its episodes are longer).
Progress goes to stderr; `--out FILE` also writes the JSON.

  python benchmarks/bench_webshop.py                   # 1000 products, ~5 s on a 2-core CPU
  python benchmarks/bench_webshop.py --products 3000 --out /tmp/webshop.json
"""
from __future__ import annotations

import argparse
import platform
import random
import time

from common import best_time, emit_json, logger


log = logger("bench_webshop")


def parse_args(argv=None):
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--products", type=int, default=1000)
  p.add_argument("--cycles", type=int, default=2000, help="reset/search/click/buy cycles")
  p.add_argument("--queries", type=int, default=5000, help="BM25 searches")
  p.add_argument("--expert-goals", type=int, default=500)
  p.add_argument("--repeats", type=int, default=3, help="passes per measurement (best reported)")
  p.add_argument("--out", help="also write the JSON here")
  return p.parse_args(argv)


def main(argv=None):
  args = parse_args(argv)
  from agentopd_jax.envs.webshop.env import WebshopEnv, build_shop
  from agentopd_jax.envs.webshop.expert import plan

  t0 = time.perf_counter()
  shop = build_shop(args.products)
  build_s = time.perf_counter() - t0
  log(f"shop: {len(shop.products)} products, {len(shop.goals)} goals in {build_s:.2f} s")
  env = WebshopEnv(args.products)
  goal_ids = [i % len(shop.goals) for i in range(args.cycles)]

  def cycles():
    for i in goal_ids:
      env.reset(i)
      env.step(f"search[{shop.goals[i]['instruction_text']}]")
      env.step(f"click[{env.available_actions()['clickables'][2]}]")
      env.step("click[buy now]")

  cycle_s = best_time(cycles, args.repeats, warm=False)
  log(f"cycles: {args.cycles / cycle_s:.0f}/s")

  rng = random.Random(0)
  queries = [shop.goals[i % len(shop.goals)]["instruction_text"].split(" ") for i in range(args.queries)]
  query_s = best_time(lambda: [shop.engine.search(q, rng) for q in queries], args.repeats, warm=False)
  log(f"bm25: {args.queries / query_s:.0f} queries/s")

  plans = [plan(shop, i) for i in range(min(args.expert_goals, len(shop.goals)))]
  won, steps = 0, 0
  t0 = time.perf_counter()
  for i, actions in enumerate(plans):
    env.reset(i)
    for action in actions:
      _, _, _, infos = env.step(action)
    won, steps = won + infos["won"], steps + len(actions) + 1
  expert_s = time.perf_counter() - t0
  log(f"expert: won {won}/{len(plans)}")

  emit_json({
      "benchmark": "webshop",
      "machine": {"python": platform.python_version(), "processor": platform.processor() or platform.machine()},
      "products": len(shop.products), "goals": len(shop.goals), "build_s": round(build_s, 3),
      "cycle": {"cycles": args.cycles, "cycles_per_s": round(args.cycles / cycle_s, 1),
                "env_steps_per_s": round(4 * args.cycles / cycle_s, 1)},
      "bm25": {"queries": args.queries, "queries_per_s": round(args.queries / query_s, 1)},
      "expert": {"goals": len(plans), "win_rate": round(won / len(plans), 4),
                 "env_steps_per_s": round(steps / expert_s, 1)},
  }, args.out)


if __name__ == "__main__":
  main()
