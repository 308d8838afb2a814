#!/usr/bin/env python
"""glibc's malloc as `host_memory.tune` sets it (one arena, no mmap'd chunks, no trimming) against glibc's defaults,
paired: each round runs one child process of each, in turn, so background load hits both alike.

A child does the CPU default's two kinds of work on the tiny model, in f32 and steady state (after a compiling call):
decoding (32 rows, prompts of `--prompt` tokens, 64 new tokens, 3 calls) and a GRPO update step (160 step samples
packed in rows of 512, 2 calls). Per child: wall seconds of each part, the process's user and system CPU seconds and
minor page faults over the timed parts, its peak resident memory, and a digest of what it computed (sampled tokens,
their log-probs, the update's loss and new parameters), which must be equal in both arms: only where memory comes
from differs.

  python benchmarks/bench_host_allocator.py --rounds 3 --out /tmp/host_allocator.json
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import statistics
import subprocess
import sys
import time

from common import emit_json

ARMS = {"tuned": {}, "default": {"AGENTOPD_HOST_ALLOCATOR": "default"}}


def child(prompt: int) -> dict:
  from agentopd_jax import host_memory

  tuned = host_memory.tune()
  import jax
  import jax.numpy as jnp
  import numpy as np

  import bench_read_positions
  from agentopd_jax.models import transformer
  from agentopd_jax.models.config import PRESETS
  from agentopd_jax.objectives.registry import LossCore, LossParams
  from agentopd_jax.sampling.sampler import Sampler, SamplingParams
  from agentopd_jax.training.train_step import OptimConfig, init_state, make_minibatches, make_optimizer, \
      make_train_step

  config = PRESETS["tiny"]()
  params = transformer.init_params(config, jax.random.key(0))
  digest = hashlib.sha256()
  usage = []

  def timed(fn, calls):
    fn()  # compiles
    r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    for _ in range(calls):
      out = fn()
    r1, seconds = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter() - t0
    usage.append((r1.ru_utime - r0.ru_utime, r1.ru_stime - r0.ru_stime, r1.ru_minflt - r0.ru_minflt))
    return seconds / calls, out

  prompts = [np.random.default_rng(b).integers(5, 2000, prompt).tolist() for b in range(32)]
  sampler = Sampler(config)
  decode_s, out = timed(lambda: sampler.generate(params, prompts, jax.random.key(1),
                                                 SamplingParams(max_new_tokens=64, temperature=1.0)), 3)
  digest.update(np.asarray(out.tokens).tobytes() + np.asarray(out.logprobs, np.float32).tobytes())

  samples, advantages = bench_read_positions.samples("grpo")
  (batch,) = make_minibatches(samples, advantages, 160, 16, pack_width=512)
  optimizer = make_optimizer(OptimConfig(learning_rate=1e-5))
  step = make_train_step(config, LossParams(core=LossCore(kl_coef=0.0, entropy_coef=0.0)), optimizer)

  def update():
    state, metrics = step(init_state(jax.tree.map(jnp.copy, params), optimizer), batch)
    return jax.block_until_ready((state.params, metrics))

  update_s, (new_params, metrics) = timed(update, 2)
  digest.update(np.float32(metrics["loss"]).tobytes())
  for leaf in jax.tree.leaves(new_params):
    digest.update(np.asarray(leaf).tobytes())
  user, system, faults = (sum(u[i] for u in usage) for i in range(3))
  return {"tuned": tuned, "decode_s_per_call": round(decode_s, 3), "update_s_per_step": round(update_s, 3),
          "user_s": round(user, 2), "system_s": round(system, 2), "minor_faults": faults,
          "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024), "digest": digest.hexdigest()}


def main():
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--rounds", type=int, default=3)
  p.add_argument("--prompt", type=int, default=1000, help="prompt tokens of each decoding row")
  p.add_argument("--out", default=None)
  p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
  args = p.parse_args()
  if args.child:
    print(json.dumps(child(args.prompt)))
    return
  base = {k: v for k, v in os.environ.items() if k not in ("AGENTOPD_HOST_ALLOCATOR", "GLIBC_TUNABLES")}
  runs = {arm: [] for arm in ARMS}
  for _ in range(args.rounds):
    for arm, env in ARMS.items():
      out = subprocess.run([sys.executable, __file__, "--child", "--prompt", str(args.prompt)], env={**base, **env},
                           capture_output=True, text=True, check=True).stdout
      runs[arm].append(json.loads(out.strip().splitlines()[-1]))
  summary = {arm: {k: statistics.median(r[k] for r in rs) for k in rs[0] if k not in ("tuned", "digest")}
             for arm, rs in runs.items()}
  speedup = lambda part: round(summary["default"][part] / summary["tuned"][part], 3)
  emit_json({"what": "host allocator, tuned against glibc's defaults (benchmarks/bench_host_allocator.py)",
             "rounds": args.rounds, "prompt_tokens": args.prompt, "median": summary,
             "decode_speedup": speedup("decode_s_per_call"), "update_speedup": speedup("update_s_per_step"),
             # each child set (or kept) the allocator its arm names, and all computed the same values
             "arms_as_named": all(r["tuned"] == (arm == "tuned") for arm, rs in runs.items() for r in rs),
             "same_values": len({r["digest"] for rs in runs.values() for r in rs}) == 1, "runs": runs}, args.out)

if __name__ == "__main__":
  main()
