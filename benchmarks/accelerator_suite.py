#!/usr/bin/env python
"""Accelerator suite: one command that measures a 1.5B-shaped model on whatever device JAX finds.

  (a) train-step MFU: `bench_train_step`'s GRPO step (policy fwd+bwd + reference fwd, kl_coef=0.01 and
      entropy_coef=0.001) on a synthetic B x T batch, its model-FLOPs formula, against the device's peak: the dense
      bf16 datasheet peak of a known device kind (TPU v4/v5e/v5p, A100, H100, H200) when compute is bf16/f16, else
      an n x n x n GEMM in the compute dtype measured in the same run (the CPU's roof, an unknown device's);
  (b) decode tokens/s of `Sampler.generate` (greedy, random prompts): the whole call, and the steady decode step
      (the call minus a prefill + one-step call with the same cache capacity);
  (c) one GRPO iteration end to end: the trainer's own `Trainer.iteration` (ALFWorld rollout on generated games
      through the env workers, advantages, packed update with the reference forward), run twice from the
      random-init policy: the first compiles, the second is the figure;
  (d) rollout throughput, `bench_rollout`'s arms (lock-step, overlapped env stepping, waves of half the slots,
      continuous refill on-policy and with staleness 1) at each env delay of --rollout_delays_ms, with the preset's
      shapes over the built-in tokenizer's vocabulary, once (the first kernel).

(a), (b) and (d) run on one device; (c) on the trainer's mesh over every device. Each part runs once per attention
kernel in --impls (`ModelConfig.attention_impl`; default xla and dot_product, plus cudnn on a GPU with bf16/f16 compute;
(c) takes the kernel through the run config's `model.attention_impl`, and --quick runs it with the first kernel
only); a part that fails records its error and the others go on. The model is the qwen2.5-1.5b preset with random
weights: f32 params (and Adam moments), bf16 compute on an accelerator, f32 on CPU unless --dtype says otherwise.
JSON goes to stdout (progress to stderr).

  python benchmarks/accelerator_suite.py                    # the accelerator run
  python benchmarks/accelerator_suite.py --quick            # CPU smoke run: tiny preset, tiny shapes, < 2 min
  python benchmarks/accelerator_suite.py --impls xla,cudnn --batch 16 --micro 4 --seq 2048 --out /tmp/suite.json
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from bench_foundation import code_version, interleaved_times, timing_entry
from bench_train_step import bench_train_step, matmul_params
from common import finish, logger

ROOT = Path(__file__).resolve().parent.parent
PARTS = ("train", "decode", "grpo", "rollout")
# Dense (no sparsity) bf16 peak of one JAX device, TFLOP/s, from the vendors' datasheets. Matched as a substring of
# `device_kind`, first hit wins, so variants come before their family (TPU v5e reports "TPU v5 lite", v5p "TPU v5").
PEAK_BF16_TFLOPS = (
    ("TPU v4", 275.0), ("TPU v5 lite", 197.0), ("TPU v5e", 197.0), ("TPU v5", 459.0),
    ("A100", 312.0), ("H100 PCIe", 756.0), ("H100 NVL", 835.0), ("H100", 989.0),
    ("H200 NVL", 835.0), ("H200", 989.0),
)


log = logger("accelerator_suite")


def parse_args(argv=None):
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--preset", default="qwen2.5-1.5b", help="model preset (random weights)")
  p.add_argument("--dtype", default="", help="compute dtype (default: bfloat16 on an accelerator, float32 on CPU)")
  p.add_argument("--impls", default="", help="comma-separated attention kernels (default: xla,dot_product[,cudnn])")
  p.add_argument("--grpo_impls", default="", help="kernels of the GRPO part (default: --impls; --quick: the first)")
  p.add_argument("--only", default=",".join(PARTS), help=f"comma-separated subset of {','.join(PARTS)}")
  p.add_argument("--batch", type=int, default=8, help="train step: sequences per step")
  p.add_argument("--micro", type=int, default=4, help="train step: micro-batch rows")
  p.add_argument("--seq", type=int, default=1024, help="train step: tokens per sequence")
  p.add_argument("--repeats", type=int, default=5, help="timed train steps and decode calls (median reported)")
  p.add_argument("--decode_batch", type=int, default=64)
  p.add_argument("--prompt_len", type=int, default=512)
  p.add_argument("--new_tokens", type=int, default=128)
  p.add_argument("--tasks", type=int, default=8, help="GRPO: tasks per iteration")
  p.add_argument("--group", type=int, default=8, help="GRPO: episodes per task")
  p.add_argument("--max_steps", type=int, default=4, help="GRPO: env steps per episode")
  p.add_argument("--response_tokens", type=int, default=32, help="GRPO: tokens per reply")
  p.add_argument("--rollout_delays_ms", default="0,50", help="rollout: env delays per step, comma-separated")
  p.add_argument("--rollout_repeats", type=int, default=2, help="rollout: timed calls per arm (median reported)")
  p.add_argument("--seed", type=int, default=0)
  p.add_argument("--quick", action="store_true",
                 help="CPU smoke run: tiny preset and shapes, 2 repeats, the GRPO part with the first kernel only")
  p.add_argument("--out", default=None, help="also write the JSON here")
  args = p.parse_args(argv)
  if args.quick:
    args.preset, args.batch, args.micro, args.seq, args.repeats = "tiny", 2, 2, 128, 2
    args.decode_batch, args.prompt_len, args.new_tokens = 2, 16, 16
    args.tasks, args.group, args.max_steps, args.response_tokens = 2, 2, 2, 8
    args.rollout_delays_ms, args.rollout_repeats = "0", 1
  args.only = _names(args.only)
  if set(args.only) - set(PARTS):
    p.error(f"--only: unknown parts {sorted(set(args.only) - set(PARTS))}")
  if args.batch % args.micro:
    p.error(f"--batch {args.batch} must be a multiple of --micro {args.micro}")
  return args


def _names(csv: str) -> list:
  return [s.strip() for s in csv.split(",") if s.strip()]


def device_info() -> dict:
  import jax
  device = jax.devices()[0]
  return {"backend": jax.default_backend(), "device_kind": device.device_kind, "device_count": jax.device_count()}


def default_impls(backend: str, dtype: str) -> list:
  """Every kernel that can run here: cuDNN's flash attention needs an NVIDIA GPU and bf16/f16 compute."""
  return ["xla", "dot_product"] + (["cudnn"] if backend == "gpu" and dtype in ("bfloat16", "float16") else [])


def measured_gemm_gflops(dtype: str, n: int) -> float:
  """Best of 5 n x n x n matmuls in `dtype` on the default device: the roof where no datasheet peak applies."""
  import jax
  import jax.numpy as jnp
  a = jnp.ones((n, n), dtype)
  mm = jax.jit(lambda x, y: x @ y)
  mm(a, a).block_until_ready()
  times = interleaved_times({"gemm": lambda: mm(a, a).block_until_ready()}, 5)["gemm"]
  return round(2 * n ** 3 / min(wall for wall, _ in times) / 1e9, 1)


def device_peak(device_kind: str, backend: str, dtype: str) -> dict:
  """Peak GFLOP/s of one device for MFU: the datasheet's dense bf16 figure for a known kind computing in bf16/f16,
  else a GEMM of the compute dtype measured now (8192-wide on an accelerator, 2048 on a CPU)."""
  if dtype in ("bfloat16", "float16"):
    for name, tflops in PEAK_BF16_TFLOPS:
      if name in device_kind:
        return {"gflops": tflops * 1e3, "source": f"datasheet dense bf16 peak of {name}"}
  n = 2048 if backend == "cpu" else 8192
  return {"gflops": measured_gemm_gflops(dtype, n), "source": f"measured {n}x{n}x{n} {dtype} GEMM, this run"}


# --- the three parts ----------------------------------------------------------------------------------------------

def measure_train_step(cfg, batch: int, seq: int, micro: int, repeats: int, peak_gflops: float, seed: int = 0) -> dict:
  """`bench_train_step`'s step and its forward-only scoring split; MFU = model FLOP/s / `peak_gflops`."""
  step, split = bench_train_step(argparse.Namespace(batch=batch, seq=seq, micro=micro, repeats=repeats, seed=seed),
                                 cfg, peak_gflops)
  step["peak_gflops"] = step.pop("peak_gflops_jax_sgemm")  # bench_train_step names its CPU roof; here it is ours
  return {**step, "scoring_vs_update": split}


def measure_decode(cfg, params, batch: int, prompt_len: int, new_tokens: int, repeats: int, seed: int = 0) -> dict:
  """Greedy `Sampler.generate` of `new_tokens` after random prompts, and of one token: both calls use the same cache
  capacity, so their difference is the decode steps alone (a step reads every weight and every cache slot). The
  difference is taken between the best times: of two medians, a load spike in the short call could even invert it."""
  import jax
  from agentopd_jax.batching.collate import bucket
  from agentopd_jax.sampling.sampler import Sampler, SamplingParams

  if new_tokens < 2:
    raise ValueError(f"decode: new_tokens must be >= 2 to separate decode from prefill, got {new_tokens}")
  sampler = Sampler(cfg, pad_id=0)
  prompts = np.random.default_rng(seed).integers(1, cfg.vocab_size, (batch, prompt_len)).tolist()
  cache = bucket(prompt_len + new_tokens, sampler.bucket)
  key = jax.random.key(seed)
  calls = {n: (lambda n=n: sampler.generate(params, prompts, key, SamplingParams(max_new_tokens=n, temperature=0.0),
                                            cache_size=cache))
           for n in (new_tokens, 1)}
  t0 = time.perf_counter()
  first = calls[new_tokens]()
  calls[1]()
  compile_s = time.perf_counter() - t0
  if int(first.lengths.min()) != new_tokens:
    raise RuntimeError(f"decode: a row stopped before {new_tokens} tokens: {first.lengths}")
  times = interleaved_times({"generate": calls[new_tokens], "prefill_plus_1": calls[1]}, repeats)
  full, one = timing_entry(times["generate"], batch * new_tokens), timing_entry(times["prefill_plus_1"], batch)
  step_s = (full["min_s"] - one["min_s"]) / (new_tokens - 1)
  weight_bytes = sum(x.nbytes for x in jax.tree.leaves(params))
  return {"batch": batch, "prompt_len": prompt_len, "new_tokens": new_tokens, "cache_size": cache,
          "first_calls_s_incl_compile": round(compile_s, 3), "generate": full, "prefill_plus_1_step": one,
          "decode_ms_per_step": round(step_s * 1e3, 3), "decode_tokens_per_s": round(batch / step_s, 1),
          "weight_stream_gb_per_s": round(weight_bytes / step_s / 1e9, 1),
          "note": "weight_stream_gb_per_s: parameter bytes (stored dtype) per decode step; the cache reads come on "
                  "top, so the memory system moves at least this much"}


def grpo_config(preset: str, dtype: str, impl: str, workdir: str, tasks: int, group: int, max_steps: int,
                response_tokens: int, seed: int = 0):
  """The CPU default ALFWorld run config (configs/alfworld.py) resized for one timed iteration: no SFT, a small
  generated game set, the paper's KL and entropy terms, the model section naming preset, dtypes and kernel."""
  from agentopd_jax.training.sweep import load_run_config

  c = load_run_config(str(ROOT / "configs" / "alfworld.py"), "accelerator_suite")
  c.seed, c.workdir, c.sft.steps = seed, workdir, 0
  c.model.preset, c.model.param_dtype, c.model.dtype, c.model.attention_impl = preset, "float32", dtype, impl
  c.env.generate_train, c.env.generate_valid = max(tasks, 8), 2  # a few seconds to generate, then cached
  c.validation.num_tasks, c.validation.attempts = 1, 1  # Run builds a validation engine; it is never played here
  c.grpo.tasks_per_iteration, c.grpo.group_size = tasks, group
  c.rollout.max_steps, c.rollout.max_response_tokens = max_steps, response_tokens
  c.loss.kl_coef, c.loss.entropy_coef = 0.01, 0.001
  c.logging.tensorboard = c.logging.plot = False
  return c


def measure_grpo_iteration(c, iterations: int = 2) -> dict:
  """`iterations` of the trainer's `Trainer.iteration` from the random-init policy; the last one is the figure."""
  from unittest import mock

  import jax
  import jax.numpy as jnp
  from agentopd_jax.training import assembly
  from agentopd_jax.training.train_step import init_state
  from agentopd_jax.training.trainer import Trainer

  # Assembly random-initialises only CPU-sized presets (training a 1.5B from scratch is a mistake there); timing
  # one iteration is not.
  with mock.patch.object(assembly, "RANDOM_INIT_PRESETS", (c.model.preset,)):
    trainer = Trainer(assembly.build_run(c))
  run = trainer.parts
  try:
    asked = {"dtype": c.model.dtype, "attention_impl": c.model.attention_impl}
    built = {k: getattr(run.model, k) for k in asked}
    if built != asked:
      raise ValueError(f"the run config's model section did not reach the model: asked {asked}, built {built} "
                       "(load_model_and_tokenizer must pass model.dtype and model.attention_impl on)")
    params = run.init_params
    state = init_state(params, run.optimizer, jax.tree.map(jnp.copy, params) if run.use_reference else None,
                       run.mesh, run.model)
    metrics = []
    for iteration in range(1, iterations + 1):
      state, m = trainer.iteration(state, iteration)
      metrics.append(m)
      log(f"GRPO iteration {iteration}: {m['timing_s/step']:.2f} s")
  finally:
    trainer.close()
  last = metrics[-1]
  split = {k.split("/")[1]: round(float(v), 3) for k, v in last.items() if k.startswith("timing_s/")}
  return {"env": c.env.name, "tasks": c.grpo.tasks_per_iteration, "group": c.grpo.group_size,
          "max_steps": c.rollout.max_steps, "response_tokens": c.rollout.max_response_tokens,
          "devices": int(run.mesh.size), "first_iteration_s_incl_compile": round(metrics[0]["timing_s/step"], 3),
          "iteration_s": split.pop("step"), "split_s": split,
          "batch": {k.split("/")[1]: last[k] for k in ("batch/samples", "batch/tokens", "batch/rows", "batch/updates")},
          "update_tokens_per_s": round(last["batch/tokens"] / last["timing_s/update_actor"], 1)}


def measure_rollout(cfg, tasks: int, group: int, max_steps: int, delays_ms, repeats: int, seed: int = 0) -> dict:
  """`bench_rollout.rollout_benchmark` on `cfg`'s shapes over the built-in tokenizer's vocabulary (random weights)."""
  import jax
  from bench_rollout import rollout_benchmark

  from agentopd_jax.envs.verl_agent.corpus import default_corpus
  from agentopd_jax.models import transformer
  from agentopd_jax.models.tokenizer import builtin_tokenizer

  tokenizer = builtin_tokenizer(default_corpus())
  cfg = cfg.replace(vocab_size=len(tokenizer))
  out = rollout_benchmark(cfg, transformer.init_params(cfg, jax.random.key(seed)), tokenizer, tasks, group, 0,
                          min(os.cpu_count() or 1, 16), max_steps, [float(d) for d in delays_ms], repeats)
  del out["sampler"]
  return out


# --- main ---------------------------------------------------------------------------------------------------------

def guarded(name: str, fn, *args, **kwargs) -> dict:
  """fn's result, or its error: one failing kernel or part (e.g. cuDNN refusing a shape) must not lose the rest."""
  t0 = time.perf_counter()
  try:
    out = fn(*args, **kwargs)
  except Exception as e:  # noqa: BLE001 - recorded in the JSON, the run goes on
    log(f"{name} failed: {e!r}")
    return {"error": f"{type(e).__name__}: {e}"}
  log(f"{name} done in {time.perf_counter() - t0:.1f} s")
  return out


def main(argv=None) -> dict:
  args = parse_args(argv)
  import jax

  from agentopd_jax.models import transformer
  from agentopd_jax.models.config import preset
  from agentopd_jax.storage import machine

  t_start = time.perf_counter()
  device = device_info()
  dtype = args.dtype or ("float32" if device["backend"] == "cpu" else "bfloat16")
  impls = _names(args.impls) or default_impls(device["backend"], dtype)
  grpo_impls = _names(args.grpo_impls) or (impls[:1] if args.quick else impls)
  if not set(grpo_impls) <= set(impls):
    raise ValueError(f"--grpo_impls {grpo_impls} must be among the kernels run, {impls}")
  base = preset(args.preset, dtype=dtype)
  peak = device_peak(device["device_kind"], device["backend"], dtype)
  log(f"{device}, compute {dtype}, kernels {impls}, peak {peak}")
  result = {
      "benchmark": "accelerator suite",
      "command": " ".join([os.path.basename(sys.executable)] + sys.argv),
      "machine": {**machine.describe(), **device, "platform": platform.platform(),
                  "load_avg_1_5_15_at_start": [round(x, 2) for x in os.getloadavg()]},
      "versions": {"python": platform.python_version(), "jax": jax.__version__, "numpy": np.__version__},
      "code": code_version(),
      "model": {"preset": args.preset, "num_params": base.num_params(), "matmul_params": matmul_params(base),
                "param_dtype": base.param_dtype, "dtype": dtype,
                "shape": {k: getattr(base, k) for k in ("vocab_size", "hidden_size", "intermediate_size", "num_layers",
                                                        "num_heads", "num_kv_heads", "head_dim", "tie_embeddings")}},
      "peak": peak,
      "impls": {},
  }
  for impl in impls:
    cfg = base.replace(attention_impl=impl)
    out = result["impls"][impl] = {}
    if "train" in args.only:
      out["train_step"] = guarded(f"{impl} train step", measure_train_step, cfg, args.batch, args.seq, args.micro,
                                  args.repeats, peak["gflops"], args.seed)
    if "decode" in args.only:
      params = transformer.init_params(base, jax.random.key(args.seed))  # held only here: the other parts own theirs
      out["decode"] = guarded(f"{impl} decode", measure_decode, cfg, params, args.decode_batch, args.prompt_len,
                              args.new_tokens, args.repeats, args.seed)
      del params
    if "grpo" in args.only and impl in grpo_impls:
      with tempfile.TemporaryDirectory(prefix="accelerator_suite_") as workdir:
        c = grpo_config(args.preset, dtype, impl, workdir, args.tasks, args.group, args.max_steps,
                        args.response_tokens, args.seed)
        out["grpo_iteration"] = guarded(f"{impl} GRPO iteration", measure_grpo_iteration, c)
  if "rollout" in args.only:
    result["rollout"] = guarded(f"{impls[0]} rollout", measure_rollout, base.replace(attention_impl=impls[0]),
                                args.tasks, args.group, args.max_steps, _names(args.rollout_delays_ms),
                                args.rollout_repeats, args.seed)
  pick = {"mfu": ("train_step", "mfu"), "train_step_s": ("train_step", "median_s"),
          "decode_tokens_per_s": ("decode", "decode_tokens_per_s"),
          "generate_tokens_per_s": ("decode", "generate", "tokens_per_s"),
          "grpo_iteration_s": ("grpo_iteration", "iteration_s")}

  def get(node, path):
    for key in path:
      node = node.get(key) if isinstance(node, dict) else None
    return node

  result["summary"] = {impl: {k: get(parts, path) for k, path in pick.items()}
                       for impl, parts in result["impls"].items()}
  return finish(result, t_start, args.out)


if __name__ == "__main__":
  main()
