#!/usr/bin/env python
"""HCN teacher selection time at the target scale: 100 teachers × 10 000 validation problems, target < 50 ms a round.

A synthetic pool (fixed seed): problems split between two namespaced datasets (`nq:` 1/3, `hotpotqa:` 2/3, as in
the original's NQ + HotpotQA validation), each teacher solving a random 30–60 % of them. Each strategy is warmed up,
then `select` is timed over --rounds rounds against student solved sets that drift like a training run's (each
round ~2 % of the problems flip, around 45 % solved); the student's sets are built before timing, the conversion of
a set of ids to a mask is timed (it is part of `select`). Prints one JSON object on stdout.

  python benchmarks/bench_hcn.py                       # 100 x 10 000, 20 timed rounds (a few seconds)
  python benchmarks/bench_hcn.py --teachers 200 --problems 20000 --rounds 50 --out /tmp/hcn.json
"""
from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
from common import emit_json

from agentopd_jax.methods.agentic_opd.hcn import Teacher, make_scheduler

TARGET_MS = 50
STRATEGIES = ("hcn", "hcn_global")


def parse_args(argv=None):
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--teachers", type=int, default=100)
  p.add_argument("--problems", type=int, default=10_000)
  p.add_argument("--rounds", type=int, default=20, help="timed rounds per strategy (median reported)")
  p.add_argument("--warmup", type=int, default=3)
  p.add_argument("--seed", type=int, default=0)
  p.add_argument("--out", help="also write the JSON here")
  return p.parse_args(argv)


def synthetic_pool(teachers: int, problems: int, rng: np.random.Generator):
  ids = np.array([f"nq:{k}" if k < problems // 3 else f"hotpotqa:{k}" for k in range(problems)])
  pool = []
  for i in range(teachers):
    solved = ids[rng.random(problems) < rng.uniform(0.3, 0.6)]
    pool.append(Teacher(f"global_step_{5 * (i + 1)}", 5 * (i + 1), frozenset(solved.tolist())))
  return ids, pool


def student_sets(ids: np.ndarray, rounds: int, rng: np.random.Generator) -> list[set[str]]:
  solved = rng.random(len(ids)) < 0.45
  out = []
  for _ in range(rounds):
    flip = rng.random(len(ids)) < 0.02
    solved = solved ^ flip
    out.append(set(ids[solved].tolist()))
  return out


def main(argv=None) -> dict:
  args = parse_args(argv)
  rng = np.random.default_rng(args.seed)
  ids, pool = synthetic_pool(args.teachers, args.problems, rng)
  rounds = student_sets(ids, args.warmup + args.rounds, rng)
  median_ms, build_ms = {}, {}
  for name in STRATEGIES:
    t0 = time.perf_counter()
    scheduler = make_scheduler(name, pool, ids.tolist())
    build_ms[name] = round((time.perf_counter() - t0) * 1e3, 1)
    times = []
    for k, p in enumerate(rounds):
      t0 = time.perf_counter()
      scheduler.select(p)
      if k >= args.warmup:
        times.append((time.perf_counter() - t0) * 1e3)
    median_ms[name] = round(statistics.median(times), 2)
  result = {
      "benchmark": "hcn_select",
      "teachers": args.teachers, "problems": args.problems, "rounds": args.rounds,
      "mean_solved_per_teacher": round(float(np.mean([len(t.solved) for t in pool])), 1),
      "median_ms": median_ms, "build_ms": build_ms,
      "target_ms": TARGET_MS,
      "meets_target": all(v < TARGET_MS for v in median_ms.values()),
  }
  emit_json(result, args.out)
  return result


if __name__ == "__main__":
  main()
