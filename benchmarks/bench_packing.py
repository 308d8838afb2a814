#!/usr/bin/env python
"""Sequence packing benchmark: one GRPO update (and one SFT step) on the CPU default's real step samples, one sample
per row (`pack_width=0`, rows padded to the longest sample rounded up to 128) vs packed rows (`pack_width=512`).

The samples are the expert demonstrations of the CPU default (`configs/alfworld.py`: generated games, built-in
tokenizer, step layout), so the length distribution is the one training sees. Both layouts run the same jitted train
step (`training.train_step.make_train_step`, the tiny preset) on the same samples, timed round-robin; the token-mean
loss of the two must agree (it is printed, and tests/test_train_step.py checks it to 1e-5). Reported: real (non-
padding) tokens per second, the share of padding, and the speed-up.

  python benchmarks/bench_packing.py                     # GRPO mini-batch of 160 samples + SFT batch of 16
  python benchmarks/bench_packing.py --quick             # smoke test (32 samples, 2 repeats)
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from bench_foundation import code_version, interleaved_times, timing_entry
from common import emit_json, logger, machine_roofline

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the repo root: configs/ is not a package install


log = logger("bench_packing")


def parse_args(argv=None):
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--samples", type=int, default=160, help="GRPO mini-batch (samples per optimizer step)")
  p.add_argument("--sft_batch", type=int, default=16, help="SFT batch (samples per step)")
  p.add_argument("--pack_width", type=int, default=512)
  p.add_argument("--micro", type=int, default=16, help="rows per micro-batch")
  p.add_argument("--repeats", type=int, default=5)
  p.add_argument("--quick", action="store_true")
  p.add_argument("--out", default=None)
  return p.parse_args(argv)


def demonstration_steps(n: int):
  """At least n step samples of the CPU default's expert demonstrations (games are generated and cached once)."""
  from configs import alfworld
  from agentopd_jax.envs import registry
  from agentopd_jax.envs.verl_agent.corpus import default_corpus
  from agentopd_jax.models.tokenizer import builtin_tokenizer
  from agentopd_jax.rollout.demonstrations import demonstration_samples
  from agentopd_jax.training import assembly

  c = alfworld.get_config()
  games, _ = registry.get(c.env.name).tasks(c.env)
  chat = assembly.chat_format(c, builtin_tokenizer(default_corpus()))
  samples, used = [], 0
  while len(samples) < n:
    batch = games[used:used + 16]
    used += len(batch)
    samples += demonstration_samples(assembly.demonstration_env(c), assembly.text_env_factory(c), chat, batch,
                                     registry.get(c.env.name).expert_policy(c.env, c.sft.expert), c.rollout.layout)
  return samples[:n]


def bench_layouts(samples, advantages, loss_cfg, pack_width: int, micro: int, repeats: int) -> dict:
  import jax
  import jax.numpy as jnp

  from agentopd_jax.models.config import preset
  from agentopd_jax.models import transformer
  from agentopd_jax.training import train_step as ts

  cfg = preset("tiny")
  params = transformer.init_params(cfg, jax.random.key(0))
  optimizer = ts.make_optimizer(ts.OptimConfig(learning_rate=1e-6))
  step = ts.make_train_step(cfg, loss_cfg, optimizer)
  real = sum(s.length for s in samples)
  fns, shapes, losses = {}, {}, {}
  for name, width in (("one_sample_per_row", 0), ("packed", pack_width)):
    (mb,) = ts.make_minibatches(samples, advantages, len(samples), micro, width)
    mb = jax.device_put(mb)
    holder = {"state": ts.init_state(jax.tree.map(jnp.copy, params), optimizer)}
    _, first = jax.block_until_ready(step(ts.init_state(jax.tree.map(jnp.copy, params), optimizer), mb))
    losses[name] = float(first["loss"])
    shapes[name] = list(mb.tokens.shape)

    def run(mb=mb, holder=holder):
      holder["state"], out = step(holder["state"], mb)
      jax.block_until_ready(out["loss"])
    fns[name] = run
    log(f"{name}: compiled and ran once, shape {shapes[name]}")
  times = interleaved_times(fns, repeats)
  out = {"samples": len(samples), "real_tokens": real, "loss_first_step": losses}
  for name in fns:
    a, m, t = shapes[name]
    out[name] = dict(timing_entry(times[name], real, "real_tokens_per_s"), shape=shapes[name],
                     padding_share=round(1 - real / (a * m * t), 3))
  out["speedup"] = round(out["one_sample_per_row"]["median_s"] / out["packed"]["median_s"], 2)
  return out


def main(argv=None) -> dict:
  args = parse_args(argv)
  if args.quick:
    args.samples, args.sft_batch, args.repeats = 32, 8, 2
  t0 = time.perf_counter()
  from agentopd_jax.objectives.registry import LossParams

  samples = demonstration_steps(args.samples)
  log(f"{len(samples)} demonstration step samples")
  advantages = [1.0 if i % 2 else -1.0 for i in range(len(samples))]
  result = {"benchmark": "sequence packing: train step on the CPU default's step samples",
            "command": "python benchmarks/bench_packing.py" + (" --quick" if args.quick else ""),
            "machine": machine_roofline(), "code": code_version(), "pack_width": args.pack_width,
            "grpo_update": bench_layouts(samples, advantages, LossParams(), args.pack_width, args.micro,
                                         args.repeats),
            "sft_step": bench_layouts(samples[:args.sft_batch], [0.0] * args.sft_batch, LossParams("sft"),
                                      args.pack_width, args.micro, args.repeats)}
  result["wall_s"] = round(time.perf_counter() - t0, 1)
  emit_json(result, args.out)
  return result


if __name__ == "__main__":
  main()
