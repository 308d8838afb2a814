#!/usr/bin/env python
"""The roof of a GRPO iteration, part by part: how long its work would take at what this CPU measurably sustains.

For each finished run given (`--run`, e.g. the CPU default from a warm start for 3 iterations, once per precision),
the work of its iterations 2.. is read from `logs/metrics.jsonl` and `config.json`:
- generation: `rollout/prefill_tokens` fed through the model (the sampler's prefill writes the cache; each row's
  last prompt token goes through the first decode step) and `rollout/decode_steps` steps that generate
  `rollout/generated_tokens` tokens, each step streaming the weights once;
- update: `batch/tokens` real tokens forward and backward (backward = 2x forward), the log-softmax over the vocab at
  every position, plus a reference forward when `loss.kl_coef` > 0; and `batch/prefix_tokens`, the shared prompt
  heads forwarded once per mini-batch, forward and backward without the vocab (their attention is not counted, nor
  the rows' attention to them: the roof stays a lower bound).
The roof prices matmul and attention FLOPs at the GEMM throughput measured here, in the run's compute precision, on
the model's own projection shapes (bf16: bf16 x bf16 -> f32, the kernel `models.matmul` feeds), and a decode step at
the larger of its FLOPs and one read of the weights in that precision at the measured weight-streaming bandwidth.
Env stepping, advantages and host work have no roof: they count toward the gap. The JSON gives per part the measured
seconds (`time/*`), the roof and their ratio, and which part leaves the most seconds above its roof.

  python benchmarks/iteration_roof.py --run runs/roof_f32 --run runs/roof_bf16 --out /tmp/roof.json
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from common import best_time, emit_json, machine_roofline

from agentopd_jax.storage.logs import read_metrics


def gemm_roof(model, dtype: str) -> dict:
  """GFLOP/s of [8192, D] x [D, N] for the model's projection widths N, in `dtype` (f32 out): the best shape and
  each one."""
  import jax
  import jax.numpy as jnp
  dt = jnp.dtype(dtype)
  d = model.hidden_size
  widths = sorted({model.intermediate_size, model.num_heads * model.head_dim, d, model.vocab_size})
  dot = jax.jit(lambda a, b: jax.lax.dot_general(a, b, (((1,), (0,)), ((), ())), preferred_element_type=jnp.float32))
  per = {}
  for n in widths:
    a, b = jnp.ones((8192, d), dt), jnp.ones((d, n), dt)
    per[n] = round(2 * 8192 * d * n / best_time(lambda: dot(a, b).block_until_ready()) / 1e9, 1)
  return {"gflops": max(per.values()), "by_width": per}


def forward_flops(model, tokens: float, context: float, unembed_positions: float) -> float:
  """FLOPs of `tokens` through every layer (projections, MLP, attention over `context` keys on average) and of the
  unembedding at `unembed_positions`."""
  c = model
  attn_out = c.num_heads * c.head_dim
  projections = 2 * c.hidden_size * (attn_out + 2 * c.num_kv_heads * c.head_dim) + 2 * attn_out * c.hidden_size
  mlp = 6 * c.hidden_size * c.intermediate_size
  attention = 4 * attn_out * context
  return tokens * c.num_layers * (projections + mlp + attention) + unembed_positions * 2 * c.hidden_size * c.vocab_size


def param_count(model) -> int:
  import jax
  from agentopd_jax.models import transformer
  return sum(int(x.size) for x in jax.tree.leaves(transformer.abstract_params(model)))


def run_roof(run: Path, machine: dict, gemm: dict) -> dict:
  config = json.loads((run / "config.json").read_text())
  model = _model(config)
  records = read_metrics(run / "logs")  # under today's names, whatever code wrote them
  later = [r for r in records if r.get("phase") == "train"][1:]
  if not later:
    raise SystemExit(f"{run}: needs at least 2 training iterations in logs/metrics.jsonl")
  mean = lambda key: sum(r.get(key, 0.0) for r in later) / len(later)  # noqa: E731
  dtype = config["model"]["dtype"] or "float32"
  roof = gemm[dtype]["gflops"] * 1e9
  bytes_per = 2 if dtype == "bfloat16" else 4
  weights = param_count(model) * bytes_per
  bandwidth = machine["jax_weight_stream_gb_per_s"] * 1e9

  samples, prefill, generated, steps = (mean(k) for k in ("batch/samples", "rollout/prefill_tokens",
                                                          "rollout/generated_tokens", "rollout/decode_steps"))
  if not steps:
    raise SystemExit(f"{run}: no rollout/decode_steps in its metrics (a run from before they were logged)")
  prompt = prefill / max(samples, 1.0)
  completion = generated / max(samples, 1.0)
  prefill_s = forward_flops(model, prefill - samples, prompt / 2, 0) / roof
  rows = generated / steps
  step_flops = forward_flops(model, rows, prompt + completion / 2, rows)
  decode_s = steps * max(weights / bandwidth, step_flops / roof)
  tokens = mean("batch/tokens")
  length = tokens / max(mean("batch/trained_samples"), 1.0)
  heads = mean("batch/prefix_tokens")
  update_flops = 3 * (forward_flops(model, tokens, (length + 1) / 2, tokens) + forward_flops(model, heads, 0, 0))
  if config["loss"]["kl_coef"] > 0:
    update_flops += forward_flops(model, tokens, (length + 1) / 2, tokens) + forward_flops(model, heads, 0, 0)
  update_s = update_flops / roof
  parts = {
      "generate": {"measured_s": mean("timing_s/gen"), "roof_s": prefill_s + decode_s,
                   "roof_prefill_s": prefill_s, "roof_decode_s": decode_s,
                   "decode_streaming_bound": weights / bandwidth >= step_flops / roof},
      "update": {"measured_s": mean("timing_s/update_actor"), "roof_s": update_s},
      "env": {"measured_s": mean("timing_s/env"), "roof_s": 0.0},
      "other": {"measured_s": mean("timing_s/step") - mean("timing_s/gen") - mean("timing_s/update_actor")
                - mean("timing_s/env"), "roof_s": 0.0},
  }
  for part in parts.values():
    part["gap_s"] = part["measured_s"] - part["roof_s"]
    part["ratio"] = round(part["measured_s"] / part["roof_s"], 2) if part["roof_s"] else None
    for k in ("measured_s", "roof_s", "roof_prefill_s", "roof_decode_s", "gap_s"):
      if k in part:
        part[k] = round(part[k], 3)
  iteration = mean("timing_s/step")
  roof_total = sum(p["roof_s"] for p in parts.values())
  return {"run": str(run), "dtype": dtype, "iterations": len(later),
          "work": {"samples": samples, "prefill_tokens": prefill, "generated_tokens": generated,
                   "decode_steps": steps, "update_tokens": tokens, "update_prefix_tokens": heads,
                   "mean_sample_tokens": round(length, 1), "weight_bytes": weights},
          "parts": parts, "iteration_s": round(iteration, 2), "roof_s": round(roof_total, 3),
          "ratio": round(iteration / roof_total, 2),
          "biggest_gap": max(parts, key=lambda k: parts[k]["gap_s"])}


def _model(config: dict):
  from agentopd_jax.models.config import preset
  m = config["model"]
  if m.get("path"):
    raise SystemExit("iteration_roof: runs of the built-in presets only (a model folder's config is not in the run)")
  return preset(m["preset"], dtype=m["dtype"] or "float32")


def main(argv=None) -> dict:
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--run", action="append", required=True, help="a finished run folder (repeat for several)")
  p.add_argument("--out", default=None)
  args = p.parse_args(argv)
  machine = machine_roofline()
  runs = [Path(r) for r in args.run]
  dtypes = {json.loads((r / "config.json").read_text())["model"]["dtype"] or "float32" for r in runs}
  model = _model(json.loads((runs[0] / "config.json").read_text()))
  gemm = {dt: gemm_roof(model, dt) for dt in sorted(dtypes)}
  result = {"machine": machine, "gemm_roof": gemm, "runs": [run_roof(r, machine, gemm) for r in runs]}
  emit_json(result, args.out)
  return result


if __name__ == "__main__":
  main()
