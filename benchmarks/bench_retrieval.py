#!/usr/bin/env python
"""Search retrieval throughput: BM25 in-process vs through the HTTP server, and search-env steps/s. Prints JSON
(progress on stderr).

Queries are the bundled test questions (what a policy might search). The server runs as a subprocess started by
`serve(mode="process")`, as a user would run it, so client and server do not share a GIL. Measured:
  in_process       BM25Retriever.retrieve, one query per call, and `--batch` queries per call
  http             RetrievalClient -> server: one query per request from one thread (with latency percentiles),
                   from `--threads` threads (keep-alive connection each), and `--batch` queries per request
  env              SearchEnv steps/s with the oracle playing bundled test questions, in-process and over HTTP
Every figure records `cpu_util` (process CPU seconds / wall seconds); on a shared machine repeat when it is low.

  python benchmarks/bench_retrieval.py                  # ~6 s on 2 CPU cores
  python benchmarks/bench_retrieval.py --quick          # a smoke test
"""
from __future__ import annotations

import argparse
import concurrent.futures
import random
import statistics
import time

from common import emit_json, logger


log = logger("bench_retrieval")


def parse_args(argv=None):
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--queries", type=int, default=2000, help="queries per measurement")
  p.add_argument("--batch", type=int, default=64, help="queries per call in the batched measurements")
  p.add_argument("--threads", type=int, default=8, help="client threads in the concurrent HTTP measurement")
  p.add_argument("--episodes", type=int, default=400, help="oracle episodes per env measurement")
  p.add_argument("--quick", action="store_true", help="a smoke test: 200 queries, 50 episodes")
  p.add_argument("--out", help="also write the JSON here")
  return p.parse_args(argv)


def timed(fn, count: int) -> dict:
  """Runs fn() once, which handles `count` queries; throughput, seconds and CPU utilisation."""
  cpu0, t0 = time.process_time(), time.perf_counter()
  fn()
  wall = time.perf_counter() - t0
  return {"per_s": round(count / wall, 1), "seconds": round(wall, 3),
          "cpu_util": round((time.process_time() - cpu0) / wall, 2)}


def batches(items, size):
  return [items[i:i + size] for i in range(0, len(items), size)]


def main(argv=None):
  args = parse_args(argv)
  if args.quick:
    args.queries, args.episodes = 200, 50
  from agentopd_jax.envs.search.client import RetrievalClient
  from agentopd_jax.envs.search.env import SearchEnv
  from agentopd_jax.envs.search.oracle import play
  from agentopd_jax.envs.search.questions import bundled_tasks
  from agentopd_jax.envs.search.retriever import BM25Retriever
  from agentopd_jax.envs.search.server import serve
  from agentopd_jax.envs.search.world import generate_world

  world = generate_world(0)
  t0 = time.perf_counter()
  retriever = BM25Retriever(world.passages)
  index_s = time.perf_counter() - t0
  tasks = bundled_tasks("test", 0, world=world)
  queries = [tasks[i % len(tasks)].question for i in range(args.queries)]
  result = {"corpus_passages": len(world.passages), "index_build_s": round(index_s, 3), "topk": 3,
            "queries": args.queries}

  log("in-process retrieval")
  result["in_process"] = {
      "single": timed(lambda: [retriever.retrieve([q], 3, True) for q in queries], len(queries)),
      f"batch_{args.batch}": timed(lambda: [retriever.retrieve(b, 3, True) for b in batches(queries, args.batch)],
                                   len(queries)),
  }

  log("starting the server subprocess")
  with serve(mode="process") as url:
    client = RetrievalClient(url)
    client.retrieve(queries[:10])  # connect and warm up
    latencies = []

    def sequential():
      for q in queries:
        t = time.perf_counter()
        client.retrieve([q])
        latencies.append(time.perf_counter() - t)

    def concurrent_requests():
      with concurrent.futures.ThreadPoolExecutor(args.threads) as pool:
        list(pool.map(lambda q: client.retrieve([q]), queries))

    log("HTTP retrieval")
    single = timed(sequential, len(queries))
    latencies.sort()
    single.update(latency_ms_p50=round(1e3 * statistics.median(latencies), 3),
                  latency_ms_p99=round(1e3 * latencies[int(0.99 * (len(latencies) - 1))], 3))
    result["http"] = {
        "single": single,
        f"threads_{args.threads}": timed(concurrent_requests, len(queries)),
        f"batch_{args.batch}": timed(lambda: [client.retrieve(b) for b in batches(queries, args.batch)],
                                     len(queries)),
        "note": "cpu_util counts the client process only; the server is a separate process",
    }

    log("env steps")
    episodes = random.Random(0).sample(tasks, min(args.episodes, len(tasks)))  # all sources and question types
    result["env"] = {}
    for where in ("in_process", "http"):
      for fmt in ("verl-agent", "search-r1"):
        env = SearchEnv(search_url=url if where == "http" else None, obs_format=fmt)
        cpu0, t0 = time.process_time(), time.perf_counter()
        outcomes = [play(env, task) for task in episodes]
        wall = time.perf_counter() - t0
        steps = sum(len(actions) for actions, _, _ in outcomes)
        result["env"][f"{where}/{fmt}"] = {
            "steps_per_s": round(steps / wall, 1), "episodes": len(episodes), "steps": steps,
            "oracle_success": round(sum(infos["won"] for _, _, infos in outcomes) / len(episodes), 3),
            "cpu_util": round((time.process_time() - cpu0) / wall, 2)}
  emit_json(result, args.out)


if __name__ == "__main__":
  main()
