#!/usr/bin/env python
"""A bounded load test of our two HTTP servers: `--threads` concurrent clients, each with its own keep-alive
connection, until `--requests` requests are done or `--seconds` pass, whichever comes first. Prints JSON (progress on
stderr): requests/s, latency p50/p99, errors (an exception or a non-200 answer) and wrong answers.

  retrieval  the retrieval server over the bundled corpus, started as a user would (`serve(mode="process")`) with an
             API key, so auth is on the measured path; queries are bundled test questions, and every answer must
             equal in-process BM25's
  openai     `python -m agentopd_jax.serve` over a tiny random model (the `tiny` preset and the built-in tokenizer,
             written as a HF folder); greedy chat completions of `--max_tokens` tokens, and every reply must equal the
             one the same prompt got alone (batching must not change a greedy reply). The sampler compiles a shape per
             batch width: a warm-up of bursts compiles them first, and its time is reported apart

  python benchmarks/bench_server_load.py                  # ~1-2 min on 2 shared CPU cores
  python benchmarks/bench_server_load.py --quick          # a smoke test
"""
from __future__ import annotations

import argparse
import concurrent.futures
import http.client
import itertools
import json
import statistics
import tempfile
import threading
import time
import urllib.parse
from typing import Callable

from common import emit_json, logger


log = logger("bench_server_load")


def parse_args(argv=None):
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--threads", type=int, default=32, help="concurrent clients")
  p.add_argument("--retrieval_requests", type=int, default=5000)
  p.add_argument("--openai_requests", type=int, default=640)
  p.add_argument("--seconds", type=float, default=45.0, help="the most each load phase may last")
  p.add_argument("--max_tokens", type=int, default=8, help="completion tokens per chat request")
  p.add_argument("--only", default="retrieval,openai", help="comma-separated: retrieval, openai")
  p.add_argument("--quick", action="store_true", help="a smoke test: 500 / 64 requests")
  p.add_argument("--out", help="also write the JSON here")
  return p.parse_args(argv)


def hammer(call: Callable[[int], bool], threads: int, requests: int, seconds: float) -> dict:
  """Runs `call(i)` (True: a right answer) for i = 0, 1, ... from `threads` threads until `requests` calls are made
  or `seconds` pass; throughput and latency count every call, failed ones too."""
  counter, deadline = itertools.count(), time.perf_counter() + seconds
  latencies, errors, wrong = [], [], [0]
  lock = threading.Lock()

  def worker():
    while time.perf_counter() < deadline and (i := next(counter)) < requests:
      t = time.perf_counter()
      try:
        ok, error = call(i), None
      except Exception as e:  # counted, never fatal: the point is to see what breaks under load
        ok, error = False, f"{type(e).__name__}: {e}"
      with lock:
        latencies.append(time.perf_counter() - t)
        if error is not None:
          errors.append(error)
        elif not ok:
          wrong[0] += 1

  cpu0, t0 = time.process_time(), time.perf_counter()
  pool = [threading.Thread(target=worker) for _ in range(threads)]
  for t in pool:
    t.start()
  for t in pool:
    t.join()
  wall = time.perf_counter() - t0
  latencies.sort()
  return {"threads": threads, "requests": len(latencies), "errors": len(errors), "wrong_answers": wrong[0],
          "seconds": round(wall, 3), "requests_per_s": round(len(latencies) / wall, 1),
          "latency_ms_p50": round(1e3 * statistics.median(latencies), 2),
          "latency_ms_p99": round(1e3 * latencies[int(0.99 * (len(latencies) - 1))], 2),
          "client_cpu_util": round((time.process_time() - cpu0) / wall, 2),
          "first_error": errors[0] if errors else None}


def retrieval_load(args) -> dict:
  from agentopd_jax.envs.search.client import RetrievalClient
  from agentopd_jax.envs.search.questions import bundled_tasks
  from agentopd_jax.envs.search.retriever import BM25Retriever
  from agentopd_jax.envs.search.server import serve
  from agentopd_jax.envs.search.world import generate_world

  world = generate_world(0)
  queries = [t.question for t in bundled_tasks("test", 0, world=world)[:200]]
  expected = dict(zip(queries, BM25Retriever(world.passages).retrieve(queries, 3, True)))
  key = "bench-key"
  log("starting the retrieval server subprocess")
  with serve(mode="process", api_key=key) as url:
    client = RetrievalClient(url, retries=0, api_key=key)  # one keep-alive connection per thread; no retry hides
    q = lambda i: queries[i % len(queries)]
    log(f"retrieval: {args.threads} threads")
    out = hammer(lambda i: client.retrieve([q(i)])[0] == expected[q(i)], args.threads, args.retrieval_requests,
                 args.seconds)
  return {"server": "subprocess, bundled corpus (seed 0), topk 3, API key on", "query": "1 per request", **out}


class ChatClient:
  """POST /v1/chat/completions over one keep-alive connection per thread: (status, JSON)."""

  def __init__(self, port: int):
    self.port, self._local = port, threading.local()

  def post(self, body: dict):
    conn = getattr(self._local, "conn", None)
    if conn is None:
      conn = self._local.conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=300)
    try:
      conn.request("POST", "/v1/chat/completions", body=json.dumps(body), headers={"Content-Type": "application/json"})
      response = conn.getresponse()
      return response.status, json.loads(response.read())
    except Exception:
      conn.close()
      self._local.conn = None
      raise


def openai_load(args) -> dict:
  import jax

  from agentopd_jax.models import config as model_config, transformer
  from agentopd_jax.envs.verl_agent.corpus import default_corpus
  from agentopd_jax.models.hf_io import save_hf
  from agentopd_jax.models.tokenizer import build_tokenizer
  from agentopd_jax.methods.opid.hindsight import LocalServer

  with tempfile.TemporaryDirectory() as folder:
    config = model_config.preset("tiny")
    save_hf(folder, config, transformer.init_params(config, jax.random.key(0)))
    build_tokenizer(folder, default_corpus())
    log("starting the OpenAI server subprocess")
    t0 = time.perf_counter()
    server = LocalServer(folder)
    start_s = time.perf_counter() - t0
    try:
      client = ChatClient(urllib.parse.urlsplit(server.url).port)
      prompts = [f"go to drawer {i}" for i in range(16)]

      def ask(i: int) -> str:
        status, body = client.post({"model": server.name, "max_tokens": args.max_tokens, "temperature": 0,
                                    "messages": [{"role": "user", "content": prompts[i % len(prompts)]}]})
        if status != 200:
          raise RuntimeError(f"HTTP {status}: {body}")
        return body["choices"][0]["message"]["content"]

      log("openai: warm-up (each prompt alone, then bursts of 2..32 to compile the batch widths)")
      t0 = time.perf_counter()
      alone = [ask(i) for i in range(len(prompts))]
      for width in (2, 4, 8, 16, 32):
        with concurrent.futures.ThreadPoolExecutor(width) as pool:
          list(pool.map(ask, range(width)))
      warmup_s = time.perf_counter() - t0
      log(f"openai: {args.threads} threads")
      out = hammer(lambda i: ask(i) == alone[i % len(prompts)], args.threads, args.openai_requests, args.seconds)
    finally:
      server.close()
  return {"server": f"subprocess, tiny preset (random init), --max_batch 16, greedy, max_tokens {args.max_tokens}",
          "startup_s": round(start_s, 1), "warmup_s": round(warmup_s, 1), **out}


def main(argv=None):
  args = parse_args(argv)
  if args.quick:
    args.retrieval_requests, args.openai_requests = 500, 64
  only = set(args.only.split(","))
  result = {}
  if "retrieval" in only:
    result["retrieval"] = retrieval_load(args)
  if "openai" in only:
    result["openai"] = openai_load(args)
  emit_json(result, args.out)


if __name__ == "__main__":
  main()
