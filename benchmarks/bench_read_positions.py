#!/usr/bin/env python
"""Work at the positions that are read, against work at every position, paired in one process on the tiny model.

1. The update (`make_train_step`, GRPO, one mini-batch of 160 samples packed in rows of 512, micro-batches of 16):
   with each row's loss targets listed (`TrainBatch.scored`: the last layer and the log-softmax at the targets
   only) against every position (`scored=None`). Two sample shapes: the CPU default's GRPO step samples (prompts of
   120-300 tokens, replies of 6-18), and Skill-GRPO's (a 600-800-token skill head shared by the 8 rollouts of a
   task, then 60-250 tokens and the reply), trained with shared heads (`share_prefixes`). Seconds per step, best of
   `--repeats` after a compiling call, and the loss of each (equal to rounding).
2. Decoding 32 rows after prompts of `--decode_prompts` tokens, bf16: the sampler's cache kept as its uint16 bit
   pattern (`transformer.storage_dtype`, the default on CPU) against a bf16 cache, which XLA:CPU widens to f32 and
   back at every decode step to write it. Milliseconds per decode step: (64 new tokens - 1 new token) / 63.

  python benchmarks/bench_read_positions.py --out /tmp/read_positions.json
"""
from __future__ import annotations

import argparse
import dataclasses
import time

import jax
import jax.numpy as jnp
import numpy as np
from common import emit_json

from agentopd_jax.batching.samples import Sample
from agentopd_jax.models import transformer
from agentopd_jax.models.config import PRESETS
from agentopd_jax.objectives.registry import LossCore, LossParams
from agentopd_jax.sampling.sampler import Sampler, SamplingParams
from agentopd_jax.training.train_step import OptimConfig, init_state, make_minibatches, make_optimizer, make_train_step


def samples(kind: str, n: int = 160, group: int = 8):
  rng = np.random.default_rng(0)
  heads = [rng.integers(3, 2000, int(rng.integers(600, 800))).tolist() for _ in range(n // group)]
  out = []
  for i in range(n):
    if kind == "grpo":
      prompt = rng.integers(3, 2000, int(rng.integers(120, 300))).tolist()
    else:
      prompt = heads[i // group] + rng.integers(3, 2000, int(rng.integers(60, 250))).tolist()
    r = int(rng.integers(6, 18))
    out.append(Sample(prompt_ids=prompt, completion_ids=rng.integers(3, 2000, r).tolist(), completion_mask=[1] * r,
                      behaviour_logprobs=[-7.0] * r, group_id=i // group, problem_id=str(i // group), traj_id=i,
                      step_index=0, action_valid=1.0))
  return out, rng.standard_normal(n).tolist()


def time_step(step, params, optimizer, batch, repeats: int):
  state, metrics = step(init_state(jax.tree.map(jnp.copy, params), optimizer), batch)
  jax.block_until_ready(metrics)
  times = []
  for _ in range(repeats):
    state = init_state(jax.tree.map(jnp.copy, params), optimizer)
    t = time.perf_counter()
    _, metrics = step(state, batch)
    jax.block_until_ready(metrics)
    times.append(time.perf_counter() - t)
  return min(times), float(metrics["loss"])


def update(kind: str, dtype: str, repeats: int) -> dict:
  config = dataclasses.replace(PRESETS["tiny"](), dtype=dtype)
  batch_samples, advantages = samples(kind)
  (batch,) = make_minibatches(batch_samples, advantages, 160, 16, pack_width=512, share_prefixes=kind != "grpo")
  params = transformer.init_params(PRESETS["tiny"](), jax.random.key(0))
  optimizer = make_optimizer(OptimConfig(learning_rate=1e-5))
  step = make_train_step(config, LossParams(core=LossCore(kl_coef=0.0, entropy_coef=0.0)), optimizer)
  out = {"rows": list(batch.tokens.shape), "scored_width": int(batch.scored.shape[-1]),
         "head_rows": None if batch.prefix_tokens is None else list(batch.prefix_tokens.shape[1:])}
  for name, b in (("targets_s", batch), ("every_position_s", batch.replace(scored=None))):
    seconds, loss = time_step(step, params, optimizer, b, repeats)
    out[name], out[name.replace("_s", "_loss")] = round(seconds, 3), loss
  out["speedup"] = round(out["every_position_s"] / out["targets_s"], 2)
  return out


def decode(prompt_len: int, repeats: int) -> dict:
  config = dataclasses.replace(PRESETS["tiny"](), dtype="bfloat16")
  params = transformer.init_params(config, jax.random.key(0))
  prompts = [np.random.default_rng(b).integers(5, 2000, prompt_len).tolist() for b in range(32)]
  storage = transformer.storage_dtype
  out = {}
  for name, kept in (("uint16_cache", storage), ("bf16_cache", lambda c: c.compute_dtype)):
    transformer.storage_dtype = kept
    try:
      sampler = Sampler(config)
      best = {}
      for timed in [False] + [True] * repeats:  # the first round compiles
        for n in (1, 64):
          t = time.perf_counter()
          sampler.generate(params, prompts, jax.random.key(1), SamplingParams(max_new_tokens=n, temperature=1.0))
          best[n] = min(best.get(n, np.inf), time.perf_counter() - t) if timed else np.inf
    finally:
      transformer.storage_dtype = storage
    out[name + "_ms_per_step"] = round(1e3 * (best[64] - best[1]) / 63, 2)
  out["speedup"] = round(out["bf16_cache_ms_per_step"] / out["uint16_cache_ms_per_step"], 2)
  return out


def main():
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--repeats", type=int, default=2, help="timed calls after a compiling one (at least 1)")
  p.add_argument("--decode_prompts", default="200,1000", help="comma-separated prompt lengths for the decode part")
  p.add_argument("--out", default=None)
  args = p.parse_args()
  result = {"what": "work at read positions against every position, same process (benchmarks/bench_read_positions.py)",
            "update": {f"{kind}:{dtype}": update(kind, dtype, args.repeats)
                       for kind in ("grpo", "skill_grpo") for dtype in ("float32", "bfloat16")},
            "decode": {f"prompt_{n}": decode(int(n), args.repeats) for n in args.decode_prompts.split(",")}}
  emit_json(result, args.out)


if __name__ == "__main__":
  main()
