#!/usr/bin/env python
"""A decode step against the weight-streaming floor, and what lies between them, in one process.

The `small` preset (bf16 by default, or `--dtype float32`, the CPU default's precision; parameters and compute in
that dtype), greedy decoding after 64-token prompts, per decode step at batch sizes 1, 8 and 32: (the time of 65 new
tokens - the time of 1) / 64, best of `--repeats`. Beside it, the same weights through their products alone, one
step's worth (each weight matrix times `batch` rows of a random input, in a loop of 32 steps): in the order x · w,
and in the order the sampler uses below f32 on CPU, wᵀ · xᵀ (`matmul.by_rows`: the weights are the streamed left
operand). Two floors, from `common.machine_roofline` in the same run: the weights' bytes over the memory bandwidth
(a one-row product over 256 MB: the floor a step cannot beat), and over the rate an 8-row f32 product streams
a matrix (what the GEMM kernel itself reaches at a decode step's shape).

  python benchmarks/bench_decode_floor.py --out /tmp/decode_floor.json
"""
from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
import numpy as np
from common import best_time, emit_json, machine_roofline

from agentopd_jax.models import matmul, transformer
from agentopd_jax.models.config import PRESETS
from agentopd_jax.sampling.sampler import Sampler, SamplingParams

STEPS = 32


def decode_ms(config, params, batch: int, repeats: int) -> float:
  prompts = np.random.default_rng(0).integers(5, config.vocab_size, (batch, 64)).tolist()
  sampler = Sampler(config)
  times = {n: best_time(lambda n=n: sampler.generate(params, prompts, jax.random.key(1),
                                                    SamplingParams(max_new_tokens=n, temperature=0.0)), repeats)
           for n in (1, 65)}
  return 1e3 * (times[65] - times[1]) / 64


def products_ms(weights, batch: int, streamed: bool, repeats: int) -> float:
  """One step's worth of products over `weights`: x · w with w [K, N], or (`streamed`) `matmul.by_rows` with w given
  as rows [N, K], the sampler's own product."""
  keys = jax.random.split(jax.random.key(0), len(weights))
  inputs = [jax.random.normal(k, (batch, w.shape[1] if streamed else w.shape[0])) for k, w in zip(keys, weights)]

  @jax.jit
  def run(weights, inputs):
    def step(i, total):
      for w, x0 in zip(weights, inputs):
        x = (x0 * (1 + i)).astype(w.dtype)  # an input XLA cannot fold into the product (a constant row it can)
        y = matmul.by_rows(x, w) if streamed else jnp.dot(x, w, preferred_element_type=jnp.float32)
        total = total + jnp.max(y)  # a max, which no algebraic rewrite moves inside the product
      return total
    return jax.lax.fori_loop(0, STEPS, step, jnp.float32(0))
  return 1e3 * best_time(lambda: run(weights, inputs).block_until_ready(), repeats) / STEPS


def main():
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--repeats", type=int, default=3)
  p.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float32"),
                 help="parameters and compute; float32 is the CPU default's precision")
  p.add_argument("--out", default=None)
  args = p.parse_args()
  config = PRESETS["small"]().replace(dtype=args.dtype, param_dtype=args.dtype)
  params = transformer.init_params(config, jax.random.key(0))
  matrices = [w.reshape(-1, w.shape[-1]) for w in jax.tree.leaves(params) if w.ndim >= 2]
  rows = [jnp.asarray(np.ascontiguousarray(np.asarray(w).T)) for w in matrices]
  weight_bytes = sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(params))
  machine = machine_roofline()
  out = {"what": __doc__.split("\n\n")[0], "preset": "small", "dtype": args.dtype, "weight_mb": weight_bytes / 1e6,
         "machine": machine, "batches": {}}
  for batch in (1, 8, 32):
    entry = {"decode_step_ms": round(decode_ms(config, params, batch, args.repeats), 2),
             "products_x_w_ms": round(products_ms(matrices, batch, False, args.repeats), 2),
             "products_streamed_ms": round(products_ms(rows, batch, True, args.repeats), 2)}
    entry["floor_ms"] = round(1e3 * weight_bytes / (machine["memory_stream_gb_per_s"] * 1e9), 2)
    entry["of_floor"] = round(entry["floor_ms"] / entry["decode_step_ms"], 2)
    entry["kernel_floor_ms"] = round(1e3 * weight_bytes / (machine["jax_weight_stream_gb_per_s"] * 1e9), 2)
    entry["of_kernel_floor"] = round(entry["kernel_floor_ms"] / entry["decode_step_ms"], 2)
    entry["of_products_alone"] = round(entry["products_streamed_ms"] / entry["decode_step_ms"], 2)
    out["batches"][str(batch)] = entry
  emit_json(out, args.out)


if __name__ == "__main__":
  main()
