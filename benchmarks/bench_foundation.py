#!/usr/bin/env python
"""Foundation benchmark: our JAX stack vs transformers/PyTorch, same model, same batch, one run.

  P1  fused policy + reference + teacher scoring (one jitted step)   vs  three HF forwards + log_softmax/gather
  P2  `Sampler.generate` (KV cache, while_loop decode)                vs  HF `generate(use_cache=True)`
  P3  20-turn episode with `Sampler.continue_generation`              vs  `Sampler.generate` on the full history
      every turn (re-prefill), our sampler both ways

Both sides use the same weights: each random HF `Qwen2ForCausalLM` is saved with `save_pretrained` and loaded
into JAX with `hf_io.load_hf`, in float32. Everything is warmed up (compiled) before timing; compile time is
reported separately; the figure is the median over `--repeats`. Results are printed as JSON on stdout (progress
goes to stderr); `--out FILE` also writes them to a file.

`--dtype bfloat16` runs both sides in bf16, as training would: torch holds each model `.to(torch.bfloat16)` (params
stored and computed in bf16, its usual bf16 inference); ours keeps the params in float32 (the f32 master weights
the trainer scores and samples with) and computes in bf16 (`ModelConfig.dtype`: each matmul casts its weight, the
softmax, log-softmax and RMSNorm statistics stay f32). P2 also times our sampler on a bf16 copy of the params
(`ours_sampler_bf16_params`): decoding streams every weight once per token, so f32 storage costs twice the bytes.
The float32 contenders (P1: ours and torch; P2: ours) join the same round-robin, so `ratio_vs_float32` compares
bf16 with f32 under the same load, which separate runs on a shared machine cannot. P1 also reports the log-prob
error of each side's bf16 scoring against its own float32 scoring of the same weights, and the roofline gains
bf16 GEMM figures (`bf16_roofline`).

  python benchmarks/bench_foundation.py                 # defaults (~7 minutes on a quiet 2-core CPU)
  python benchmarks/bench_foundation.py --quick         # smoke test, < 1 minute (tiny preset, small shapes)
  python benchmarks/bench_foundation.py --only p1,p3 --repeats 5 --out /tmp/foundation.json
  python benchmarks/bench_foundation.py --dtype bfloat16 --out /tmp/foundation_bf16.json
"""
from __future__ import annotations

import argparse
import copy
import os
import platform
import statistics
import sys
import tempfile
import time

from common import finish, logger, machine_roofline
from typing import Callable, List

import numpy as np

TARGETS = {"p1": 2.0, "p2": 3.0, "p3": 3.0}


log = logger("bench_foundation")


def parse_args(argv=None):
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--preset", default="small", help="model preset from agentopd_jax.models.config (default small)")
  p.add_argument("--only", default="p1,p2,p3", help="comma-separated subset of p1,p2,p3")
  p.add_argument("--repeats", type=int, default=3, help="timed repeats for P1/P2 (median reported)")
  p.add_argument("--p3-repeats", type=int, default=2,
                 help="timed episodes per P3 arm after the warm-up one (median total, per-turn medians)")
  p.add_argument("--seed", type=int, default=0)
  p.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32",
                 help="compute dtype of both sides (module docstring: what each side stores its params in)")
  p.add_argument("--threads", type=int, default=os.cpu_count(), help="torch intra-op threads (default: all cores; XLA:CPU always uses all cores)")
  p.add_argument("--p1-batch", type=int, default=8)
  p.add_argument("--p1-len", type=int, default=512)
  p.add_argument("--p2-batch", type=int, default=8)
  p.add_argument("--p2-prompt", type=int, default=64)
  p.add_argument("--p2-new", type=int, default=128)
  p.add_argument("--p2-sampling", action="store_true",
                 help="P2: sample at temperature 1 (no top-k/top-p) on both sides instead of greedy")
  p.add_argument("--p3-batch", type=int, default=4)
  p.add_argument("--p3-prompt", type=int, default=128)
  p.add_argument("--p3-turns", type=int, default=20)
  p.add_argument("--p3-obs", type=int, default=32, help="observation tokens appended each turn")
  p.add_argument("--p3-new", type=int, default=32, help="tokens generated each turn")
  p.add_argument("--no-breakdown", action="store_true", help="skip the per-piece timings (profile)")
  p.add_argument("--quick", action="store_true",
                 help="smoke test: tiny preset, small shapes, 1 repeat (finishes in < 1 minute)")
  p.add_argument("--out", default=None, help="also write the JSON here")
  args = p.parse_args(argv)
  if args.quick:
    args.preset = "tiny"
    args.repeats, args.p3_repeats = 1, 1
    args.p1_batch, args.p1_len = 2, 64
    args.p2_batch, args.p2_prompt, args.p2_new = 2, 16, 16
    args.p3_batch, args.p3_prompt, args.p3_turns, args.p3_obs, args.p3_new = 2, 16, 4, 8, 8
  args.only = {s.strip().lower() for s in args.only.split(",") if s.strip()}
  bad = args.only - {"p1", "p2", "p3"}
  if bad:
    p.error(f"--only: unknown parts {sorted(bad)}")
  return args


# --- shared helpers ----------------------------------------------------------------------------------------------

# Lowering to StableHLO + XLA compilation. Python tracing is left out: its events nest (inner traces are counted
# inside outer ones), so summing them would overstate it; the warm-up wall time includes it anyway.
_COMPILE_EVENTS = ("/jax/core/compile/jaxpr_to_mlir_module_duration", "/jax/core/compile/backend_compile_duration")
_compile_total = [0.0]


def install_compile_timer() -> None:
  """Sums JAX's own lowering + XLA-compile durations, so compile time is measured, not estimated."""
  import jax

  def listener(name, duration, **_):
    if name in _COMPILE_EVENTS:
      _compile_total[0] += duration
  jax.monitoring.register_event_duration_secs_listener(listener)


def compile_seconds() -> float:
  return _compile_total[0]


def median_time(fn: Callable[[], object], repeats: int) -> tuple:
  """(median seconds, all seconds) of `fn()`; fn must block until its result is ready."""
  times = []
  for _ in range(max(1, repeats)):
    t0 = time.perf_counter()
    fn()
    times.append(time.perf_counter() - t0)
  return statistics.median(times), times


def interleaved_times(fns: dict, repeats: int) -> dict:
  """Times each callable `repeats` times, round-robin (A B C A B C ...), so that load from other processes on a
  shared machine hits every contender alike. Returns {name: [(wall seconds, process CPU s / wall s), ...]}."""
  times = {name: [] for name in fns}
  for _ in range(max(1, repeats)):
    for name, fn in fns.items():
      c0, t0 = time.process_time(), time.perf_counter()
      fn()
      wall = time.perf_counter() - t0
      times[name].append((wall, (time.process_time() - c0) / wall))
  return times


def timing_entry(times: list, work: float, unit: str = "tokens_per_s") -> dict:
  """times: [(wall seconds, process CPU seconds / wall seconds), ...] from `interleaved_times`.

  cpu_util is how many cores the process kept busy; well below the core count while timing a compute-bound
  step means other processes were competing for the CPU.
  """
  walls = [w for w, _ in times]
  med = statistics.median(walls)
  return {"median_s": round(med, 4), "min_s": round(min(walls), 4), "times_s": [round(x, 4) for x in walls],
          "cpu_util": [round(u, 2) for _, u in times],
          unit: round(work / med, 1), f"best_{unit}": round(work / min(walls), 1)}


def ratio_entry(ours: dict, theirs: dict, target: float | None = None, key: str = "tokens_per_s") -> dict:
  """ours/theirs on the medians (the reported figure) and on the best runs (a check against load spikes); with the
  benchmark's `target` for it, whether that is met."""
  r = ours[key] / theirs[key]
  best = ours[f"best_{key}"] / theirs[f"best_{key}"]
  entry = {"ratio": round(r, 3), "ratio_best_of_repeats": round(best, 3)}
  if target is not None:
    entry.update(target=target, met=bool(r >= target))
  return entry


def bf16_roofline() -> dict:
  """bf16 GEMM throughput of both libraries on `machine_roofline`'s f32 GEMM shape (4096x512x4096), so bf16 timings
  are judged against what each side's bf16 matmul sustains here (on a CPU without native bf16 GEMMs it can be below
  the f32 roof)."""
  import jax
  import jax.numpy as jnp
  import torch

  m, k, n = 4096, 512, 4096
  flop = 2 * m * k * n
  a, b = jnp.ones((m, k), jnp.bfloat16), jnp.ones((k, n), jnp.bfloat16)
  mm = jax.jit(lambda a, b: jnp.dot(a, b, preferred_element_type=jnp.float32))  # our matmuls' form
  ta, tb = torch.ones(m, k, dtype=torch.bfloat16), torch.ones(k, n, dtype=torch.bfloat16)

  def best_gflops(fn, n=5):
    fn()  # compiles / warms up
    return round(flop / min(median_time(fn, 1)[0] for _ in range(n)) / 1e9, 1)

  return {"jax_bf16_gemm_gflops": best_gflops(lambda: mm(a, b).block_until_ready()),
          "torch_bf16_gemm_gflops": best_gflops(lambda: ta @ tb)}


def logprob_error(ours, reference) -> dict:
  """max and mean |ours - reference| over every scored target."""
  err = np.abs(np.asarray(ours, np.float64) - np.asarray(reference, np.float64))
  return {"max": float(err.max()), "mean": float(err.mean())}


def build_models(preset_name: str, n_models: int, seed: int, workdir: str):
  """n random HF Qwen2ForCausalLM models (fp32) and the same weights loaded into JAX (fp32 params and compute)."""
  import torch
  import transformers
  from agentopd_jax.models.config import preset
  from agentopd_jax.models.hf_io import load_hf

  cfg = preset(preset_name, dtype="float32", param_dtype="float32")
  hf_dict = cfg.to_hf_config()
  dropped = []
  while True:  # drop whatever this transformers version refuses, and say so
    try:
      hf_config = transformers.Qwen2Config(**hf_dict)
      break
    except TypeError as e:
      key = next((k for k in hf_dict if repr(k) in str(e) or k in str(e)), None)
      if key is None:
        raise
      dropped.append(key)
      hf_dict.pop(key)
  hf_config.dtype = "float32"
  torch_models, jax_params = [], []
  jcfg = None
  for i in range(n_models):
    torch.manual_seed(seed + i)
    model = transformers.Qwen2ForCausalLM(hf_config).to(torch.float32).eval()
    path = os.path.join(workdir, f"model{i}")
    model.save_pretrained(path)
    jcfg, params = load_hf(path, param_dtype="float32", dtype="float32")
    torch_models.append(model)
    jax_params.append(params)
  return jcfg, torch_models, jax_params, dropped


# --- P1: scoring ------------------------------------------------------------------------------------------------

def bench_p1(args, cfg, torch_models, jax_params, torch_f32_models=None) -> dict:
  """`torch_f32_models`: with a bf16 `cfg`, the float32 originals of the bf16 `torch_models` (timed alongside, and the
  reference of the log-prob error)."""
  import jax
  import jax.numpy as jnp
  import torch
  from agentopd_jax.batching.collate import ScoreBatch
  from agentopd_jax.models import transformer
  from agentopd_jax.scoring.fused import ScoreConfig, make_score_fn

  b, t = args.p1_batch, args.p1_len
  rng = np.random.default_rng(args.seed + 1)
  tokens_np = rng.integers(1, cfg.vocab_size, size=(b, t), dtype=np.int32)
  batch = ScoreBatch(tokens=jnp.asarray(tokens_np), segment_ids=jnp.ones((b, t), jnp.int32),
                     loss_mask=jnp.ones((b, t), jnp.int32))
  pol, ref, tea = jax_params
  n_tok = b * t
  # Matmul FLOPs of one step (3 models), identical work on both sides: decoder weights, the unembedding and
  # full (unmasked-square) attention scores and values, which both implementations compute.
  d, f, h, kv, hd, L = (cfg.hidden_size, cfg.intermediate_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim,
                        cfg.num_layers)
  per_model = (2 * n_tok * L * (2 * d * h * hd + 2 * d * kv * hd + 3 * d * f) + 2 * n_tok * d * cfg.vocab_size
               + L * 4 * b * h * t * t * hd)
  gflop = 3 * per_model / 1e9
  out = {"batch": b, "seq_len": t, "tokens_per_step": n_tok, "gflop_per_step_3_models": round(gflop, 1)}

  lean = ScoreConfig(policy=True, reference=True, teacher="params", top_k=0, entropy=False)
  variants = {
      "ours_fused_lean": (cfg, lean),
      "ours_fused_full": (cfg, ScoreConfig(policy=True, reference=True, teacher="params", top_k=16, entropy=True)),
  }
  if cfg.dtype != "float32":  # the float32 step in the same round-robin: bf16 vs f32 under the same load
    variants["ours_fused_lean_float32"] = (cfg.replace(dtype="float32"), lean)
  fns, first = {}, {}
  for name, (model_cfg, sc) in variants.items():
    fn = make_score_fn(model_cfg, sc)
    t0 = time.perf_counter()
    compiled = fn.lower(pol, ref, tea, batch).compile()
    compile_s = time.perf_counter() - t0
    first[name] = jax.block_until_ready(compiled(pol, ref, tea, batch))  # first run (allocations) not timed
    fns[name] = lambda compiled=compiled: jax.block_until_ready(compiled(pol, ref, tea, batch))
    out[name] = {"score_config": {"top_k": sc.top_k, "entropy": sc.entropy, "vocab_chunk": sc.vocab_chunk},
                 "compile_s": round(compile_s, 3)}
    log(f"P1 compiled {name} in {compile_s:.1f} s")
  lean_scores = first["ours_fused_lean"]

  tokens_t = torch.from_numpy(tokens_np.astype(np.int64))
  attn = torch.ones_like(tokens_t)

  def torch_score(models=torch_models):
    res = []
    with torch.no_grad():
      for m in models:
        logits = m(input_ids=tokens_t, attention_mask=attn).logits
        lp = torch.log_softmax(logits[:, :-1].float(), dim=-1).gather(-1, tokens_t[:, 1:, None]).squeeze(-1)
        res.append(lp)
        del logits
    return res

  torch_contenders = {"torch_3x_forward": torch_models}
  if cfg.dtype != "float32":
    torch_contenders["torch_3x_forward_float32"] = torch_f32_models
  torch_lps = {}
  for name, models in torch_contenders.items():
    t0 = time.perf_counter()
    torch_lps[name] = torch_score(models)  # warm-up
    out[name] = {"warmup_s": round(time.perf_counter() - t0, 3)}
    fns[name] = lambda models=models: torch_score(models)
  times = interleaved_times(fns, args.repeats)
  for name, ts in times.items():
    out[name].update(timing_entry(ts, n_tok))
    out[name]["achieved_gflops"] = round(gflop / out[name]["median_s"], 1)
    log(f"P1 {name}: median {out[name]['median_s']:.3f} s/step, {out[name]['tokens_per_s']:.0f} tok/s")

  # Sanity: our log-probs (targets 1..T-1) against torch's, per model.
  ours = [np.asarray(lean_scores.policy_logprobs)[:, 1:], np.asarray(lean_scores.reference_logprobs)[:, 1:],
          np.asarray(lean_scores.teacher_logprobs)[:, 1:]]
  out["sanity_max_abs_logprob_diff"] = {
      name: float(np.max(np.abs(o - lp.numpy()))) for name, o, lp in zip(("policy", "reference", "teacher"),
                                                                          ours, torch_lps["torch_3x_forward"])}
  if cfg.dtype != "float32":
    # Each side's rounding: its bf16 log-probs against its own float32 log-probs of the same weights and tokens.
    f32 = first["ours_fused_lean_float32"]
    ours_f32 = [np.asarray(f32.policy_logprobs)[:, 1:], np.asarray(f32.reference_logprobs)[:, 1:],
                np.asarray(f32.teacher_logprobs)[:, 1:]]
    out["logprob_error_vs_float32"] = {
        "what": f"{cfg.dtype} vs float32 log-probs of each side, all {b} x {t - 1} targets of the 3 models",
        "ours": logprob_error(np.stack(ours), np.stack(ours_f32)),
        "torch": logprob_error(*(np.stack([lp.numpy() for lp in torch_lps[name]])
                                 for name in ("torch_3x_forward", "torch_3x_forward_float32")))}
    log(f"P1 log-prob error vs float32: {out['logprob_error_vs_float32']}")
    out["ratio_vs_float32"] = {
        "ours": ratio_entry(out["ours_fused_lean"], out["ours_fused_lean_float32"]),
        "torch": ratio_entry(out["torch_3x_forward"], out["torch_3x_forward_float32"]),
        "ours_vs_torch_float32": ratio_entry(out["ours_fused_lean"], out["torch_3x_forward_float32"])}
  out["ratio_lean_vs_torch"] = ratio_entry(out["ours_fused_lean"], out["torch_3x_forward"], TARGETS["p1"])
  out["ratio_full_vs_torch"] = ratio_entry(out["ours_fused_full"], out["torch_3x_forward"], TARGETS["p1"])

  if not args.no_breakdown:
    # Where the time goes, one model: decoder body vs the unembedding + log-softmax statistics.
    from agentopd_jax.scoring.chunked import token_stats
    toks, seg = batch.tokens, batch.segment_ids
    body = jax.jit(lambda p: transformer.forward(cfg, p, toks, None, seg)[0])
    h = jax.block_until_ready(body(pol))
    w = transformer.unembed_weight(cfg, pol)
    dt = cfg.compute_dtype
    stats_lean = jax.jit(lambda h, w: token_stats(h[:, :-1], w, toks[:, 1:], chunk=8192, compute_dtype=dt).logprobs)
    stats_full = jax.jit(lambda h, w: token_stats(h[:, :-1], w, toks[:, 1:], chunk=8192, top_k=16, entropy=True,
                                                  compute_dtype=dt).logprobs)
    jax.block_until_ready(stats_lean(h, w))
    jax.block_until_ready(stats_full(h, w))
    m = torch_models[0]
    with torch.no_grad():
      hid = m.model(input_ids=tokens_t, attention_mask=attn).last_hidden_state

    def torch_body():
      with torch.no_grad():
        return m.model(input_ids=tokens_t, attention_mask=attn).last_hidden_state

    def torch_head():
      with torch.no_grad():
        logits = m.lm_head(hid)
        return torch.log_softmax(logits[:, :-1].float(), -1).gather(-1, tokens_t[:, 1:, None])
    torch_head()
    bd_times = interleaved_times({
        "ours_decoder_body_s": lambda: jax.block_until_ready(body(pol)),
        "ours_token_stats_lean_s": lambda: jax.block_until_ready(stats_lean(h, w)),
        "ours_token_stats_full_s": lambda: jax.block_until_ready(stats_full(h, w)),
        "torch_decoder_body_s": torch_body,
        "torch_lm_head_logsoftmax_gather_s": torch_head,
    }, args.repeats)
    bd = {k: statistics.median(w for w, _ in v) for k, v in bd_times.items()}
    out["breakdown_one_model"] = {k: round(v, 4) for k, v in bd.items()}
    log(f"P1 breakdown (one model): {out['breakdown_one_model']}")
  return out


# --- P2: sampling -----------------------------------------------------------------------------------------------

def bench_p2(args, cfg, torch_model, params) -> dict:
  import jax
  import torch
  from agentopd_jax.sampling.sampler import Sampler, SamplingParams

  b, plen, n_new = args.p2_batch, args.p2_prompt, args.p2_new
  rng = np.random.default_rng(args.seed + 2)
  prompts_np = rng.integers(1, cfg.vocab_size, size=(b, plen), dtype=np.int32)
  prompts = prompts_np.tolist()
  greedy = not args.p2_sampling
  sp = SamplingParams(max_new_tokens=n_new, temperature=0.0 if greedy else 1.0, top_k=0, top_p=1.0)
  sampler = Sampler(cfg, pad_id=0)
  key = jax.random.key(args.seed)
  out = {"batch": b, "prompt_len": plen, "max_new_tokens": n_new, "decoding": "greedy" if greedy else "sample_t1",
         "generated_tokens_per_call": b * n_new}

  t0, c0 = time.perf_counter(), compile_seconds()
  ours = sampler.generate(params, prompts, key, sp)  # compiles prefill + decode
  out["ours_sampler"] = {"first_call_s_incl_compile": round(time.perf_counter() - t0, 3),
                         "compile_s": round(compile_seconds() - c0, 3)}
  assert int(ours.lengths.min()) == n_new, f"a row stopped early: {ours.lengths}"

  input_ids = torch.from_numpy(prompts_np.astype(np.int64))
  attn = torch.ones_like(input_ids)
  gen_kw = dict(max_new_tokens=n_new, min_new_tokens=n_new, use_cache=True, eos_token_id=None, pad_token_id=0)
  gen_kw.update(dict(do_sample=False) if greedy else dict(do_sample=True, temperature=1.0, top_k=0, top_p=1.0))

  def hf_generate():
    with torch.no_grad():
      return torch_model.generate(input_ids=input_ids, attention_mask=attn, **gen_kw)

  t0 = time.perf_counter()
  theirs = hf_generate()
  out["hf_generate"] = {"warmup_s": round(time.perf_counter() - t0, 3)}
  assert theirs.shape == (b, plen + n_new), theirs.shape
  contenders = {"ours_sampler": lambda: sampler.generate(params, prompts, key, sp),  # host arrays: already synced
                "hf_generate": hf_generate}
  if cfg.dtype != "float32":
    # The same sampler on a bf16 copy of the params (half the bytes streamed per token), and the float32 run's
    # sampler in the same round-robin (bf16 vs f32 under the same load).
    cfg16 = cfg.replace(param_dtype=cfg.dtype)
    others = {"ours_sampler_bf16_params": (cfg16, jax.tree.map(lambda x: x.astype(cfg16.weight_dtype), params)),
              "ours_sampler_float32": (cfg.replace(dtype="float32"), params)}
    for name, (other_cfg, other_params) in others.items():
      other = Sampler(other_cfg, pad_id=0)
      t0, c0 = time.perf_counter(), compile_seconds()
      other.generate(other_params, prompts, key, sp)
      out[name] = {"first_call_s_incl_compile": round(time.perf_counter() - t0, 3),
                   "compile_s": round(compile_seconds() - c0, 3)}
      contenders[name] = lambda s_=other, p_=other_params: s_.generate(p_, prompts, key, sp)
  times = interleaved_times(contenders, args.repeats)
  for name, ts in times.items():
    out[name].update(timing_entry(ts, b * n_new))
    log(f"P2 {name}: median {out[name]['median_s']:.3f} s, {out[name]['tokens_per_s']:.0f} tok/s")
  out["ratio"] = ratio_entry(out["ours_sampler"], out["hf_generate"], TARGETS["p2"])
  if cfg.dtype != "float32":
    out["ratio_bf16_params"] = ratio_entry(out["ours_sampler_bf16_params"], out["hf_generate"], TARGETS["p2"])
    out["ratio_vs_float32"] = {name: ratio_entry(out[name], out["ours_sampler_float32"])
                               for name in ("ours_sampler", "ours_sampler_bf16_params")}
  med, med_t = out["ours_sampler"]["median_s"], out["hf_generate"]["median_s"]

  if greedy:
    hf_new = theirs[:, plen:].numpy()
    same = hf_new == ours.tokens
    first_div = [int(np.argmin(r)) if not r.all() else None for r in same]
    out["sanity_greedy_agreement"] = {"token_match_fraction": float(same.mean()),
                                      "rows_identical": int(same.all(axis=1).sum()), "rows": b,
                                      "first_divergence_per_row": first_div}
  if not args.no_breakdown:
    # Prefill + one decode step vs the full call: per-step decode cost.
    sp1 = SamplingParams(max_new_tokens=1, temperature=sp.temperature)
    sampler.generate(params, prompts, key, sp1)
    t1, _ = median_time(lambda: sampler.generate(params, prompts, key, sp1), args.repeats)
    out["breakdown"] = {"ours_prefill_plus_1_step_s": round(t1, 4),
                        "ours_decode_ms_per_step": round(1e3 * (med - t1) / max(1, n_new - 1), 3),
                        "hf_ms_per_new_token_step": round(1e3 * med_t / n_new, 3)}
    log(f"P2 breakdown: {out['breakdown']}")
  return out


# --- P3: multi-turn continuation vs re-prefill ------------------------------------------------------------------

def _linear_fit(ys: List[float]) -> dict:
  xs = np.arange(1, len(ys) + 1, dtype=np.float64)
  if len(ys) < 2:
    return {"slope_s_per_turn": 0.0, "intercept_s": float(ys[0]) if ys else 0.0}
  slope, intercept = np.polyfit(xs, np.asarray(ys), 1)
  return {"slope_s_per_turn": round(float(slope), 5), "intercept_s": round(float(intercept), 5)}


def bench_p3(args, cfg, params) -> dict:
  import jax
  from agentopd_jax.batching.collate import bucket
  from agentopd_jax.sampling.sampler import Sampler, SamplingParams

  b, plen, turns, n_obs, n_new = args.p3_batch, args.p3_prompt, args.p3_turns, args.p3_obs, args.p3_new
  rng = np.random.default_rng(args.seed + 3)
  prompt = rng.integers(1, cfg.vocab_size, size=(b, plen), dtype=np.int32)
  obs = rng.integers(1, cfg.vocab_size, size=(turns, b, n_obs), dtype=np.int32)
  sp = SamplingParams(max_new_tokens=n_new, temperature=0.0)  # greedy: both arms must produce the same tokens
  sampler = Sampler(cfg, pad_id=0)
  cache_size = bucket(plen + turns * (n_obs + n_new), sampler.bucket)
  key = jax.random.key(args.seed)

  def continuation_episode():
    """Turn 1: generate(prompt + obs_1); turn k > 1: continue_generation(obs_k). One cache throughout."""
    per_turn, gens = [], []
    t0 = time.perf_counter()
    o = sampler.generate(params, [list(prompt[r]) + list(obs[0, r]) for r in range(b)], key, sp,
                         cache_size=cache_size)
    per_turn.append(time.perf_counter() - t0)
    gens.append(o.tokens)
    state = o.state
    for k in range(1, turns):
      t0 = time.perf_counter()
      o = sampler.continue_generation(params, state, obs[k].tolist(), key, sp)
      per_turn.append(time.perf_counter() - t0)
      gens.append(o.tokens)
      state = o.state
    jax.block_until_ready(state)
    return per_turn, gens

  def reprefill_episode():
    """Turn k: generate(prompt + obs_1 + gen_1 + ... + obs_k) from an empty cache."""
    per_turn, gens = [], []
    history = [list(map(int, prompt[r])) for r in range(b)]
    for k in range(turns):
      for r in range(b):
        history[r].extend(int(x) for x in obs[k, r])
      t0 = time.perf_counter()
      o = sampler.generate(params, history, key, sp)
      per_turn.append(time.perf_counter() - t0)
      gens.append(o.tokens)
      for r in range(b):
        history[r].extend(int(x) for x in o.tokens[r])
    return per_turn, gens

  out = {"batch": b, "prompt_len": plen, "turns": turns, "obs_tokens_per_turn": n_obs, "new_tokens_per_turn": n_new,
         "decoding": "greedy", "continuation_cache_size": cache_size,
         "final_history_len": plen + turns * (n_obs + n_new)}
  arms = {"continuation": continuation_episode, "reprefill": reprefill_episode}
  warm, compile_s = {}, {}
  for name, episode in arms.items():
    t0, c0 = time.perf_counter(), compile_seconds()
    episode()  # warm-up: compiles every shape this arm uses
    warm[name] = time.perf_counter() - t0
    compile_s[name] = compile_seconds() - c0
    log(f"P3 {name}: warm-up episode {warm[name]:.1f} s, of which compile {compile_s[name]:.1f} s")
  runs = {name: [] for name in arms}
  for _ in range(max(1, args.p3_repeats)):  # arms alternate, like the other parts
    for name, episode in arms.items():
      c0, t0 = time.process_time(), time.perf_counter()
      per_turn, gens = episode()
      wall = time.perf_counter() - t0
      runs[name].append((wall, per_turn, gens, (time.process_time() - c0) / wall))
  results = {}
  for name in arms:
    totals = [r[0] for r in runs[name]]
    total = statistics.median(totals)
    per_turn = [statistics.median(r[1][k] for r in runs[name]) for k in range(turns)]  # per-turn medians
    results[name] = runs[name][0][2]
    out[name] = {"warmup_episode_s_incl_compile": round(warm[name], 3),
                 "compile_s": round(compile_s[name], 3),
                 "total_s": round(total, 4), "min_total_s": round(min(totals), 4),
                 "episode_times_s": [round(x, 4) for x in totals],
                 "cpu_util": [round(r[3], 2) for r in runs[name]],
                 "per_turn_s": [round(x, 4) for x in per_turn],
                 "turn1_s": round(per_turn[0], 4), f"turn{turns}_s": round(per_turn[-1], 4),
                 "mean_turn_2_to_end_s": round(float(np.mean(per_turn[1:])) if turns > 1 else per_turn[0], 4),
                 "last_turn_over_first_turn": round(per_turn[-1] / per_turn[0], 3),
                 "linear_fit_per_turn": _linear_fit(per_turn),
                 "cumulative_s": [round(float(x), 4) for x in np.cumsum(per_turn)],
                 "generated_tokens_per_s": round(b * n_new * turns / total, 1)}
    log(f"P3 {name}: total {total:.2f} s, turn 1 {per_turn[0]:.3f} s, turn {turns} {per_turn[-1]:.3f} s")
  same = np.concatenate(results["continuation"], 1) == np.concatenate(results["reprefill"], 1)
  out["sanity_arms_agree"] = {"token_match_fraction": float(same.mean()), "rows_identical": int(same.all(1).sum()),
                              "rows": b}
  if not args.no_breakdown:
    # A decode step attends over (and moves) the whole static cache, so its cost follows the cache *capacity*,
    # not the tokens in it: time the same turn-1 call with the smallest cache and with the episode's cache.
    first = [list(prompt[r]) + list(obs[0, r]) for r in range(b)]
    sp1 = SamplingParams(max_new_tokens=1, temperature=0.0)
    bd = {}
    for label, size in (("min_cache", None), ("episode_cache", cache_size)):
      cap = size or bucket(plen + n_obs + n_new, sampler.bucket)
      fns = {n: (lambda s_=s_: sampler.generate(params, first, key, s_, cache_size=size)) for n, s_ in
             (("one", sp1), ("full", sp))}
      for fn in fns.values():
        fn()
      t = interleaved_times(fns, 3)
      t_one, t_full = (min(w for w, _ in t[n]) for n in ("one", "full"))
      bd[label] = {"cache_capacity": cap, "prefill_plus_1_step_s": round(t_one, 4),
                   "decode_ms_per_step": round(1e3 * (t_full - t_one) / max(1, n_new - 1), 3)}
    out["breakdown_turn1_vs_cache_capacity"] = bd
    log(f"P3 breakdown: {bd}")

  r = out["reprefill"]["total_s"] / out["continuation"]["total_s"]
  r_best = out["reprefill"]["min_total_s"] / out["continuation"]["min_total_s"]
  out["ratio"] = {"ratio": round(r, 3), "ratio_best_of_repeats": round(r_best, 3), "target": TARGETS["p3"],
                  "met": bool(r >= TARGETS["p3"]), "definition": "reprefill total time / continuation total time"}
  return out


def code_version() -> dict:
  """The commit the package was benchmarked at, and whether its files differed from it."""
  import subprocess
  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  try:
    head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=root, capture_output=True, text=True,
                          check=True).stdout.strip()
    dirty = subprocess.run(["git", "status", "--porcelain", "--", "agentopd_jax"], cwd=root, capture_output=True,
                           text=True, check=True).stdout.strip()
    return {"commit": head, "package_modified_since_commit": bool(dirty)}
  except (OSError, subprocess.CalledProcessError):
    return {"commit": None}


# --- main -------------------------------------------------------------------------------------------------------

def main(argv=None) -> dict:
  args = parse_args(argv)
  import jax
  import torch
  import transformers

  from agentopd_jax.storage import machine

  torch.set_num_threads(args.threads)
  install_compile_timer()
  t_start = time.perf_counter()
  result = {
      "benchmark": "foundation",
      "command": " ".join([os.path.basename(sys.executable)] + sys.argv),
      "machine": {**machine.describe(), "platform": platform.platform(), "torch_threads": torch.get_num_threads(),
                  # The machine may be shared: a load above the core count means other processes competed.
                  "load_avg_1_5_15_at_start": [round(x, 2) for x in os.getloadavg()]},
      "versions": {"python": platform.python_version(), "jax": jax.__version__, "torch": torch.__version__,
                   "transformers": transformers.__version__, "numpy": np.__version__},
      "code": code_version(),
      "targets": TARGETS,
  }
  result["machine"]["roofline"] = machine_roofline()
  log(f"roofline: {result['machine']['roofline']}")
  if args.dtype != "float32":
    result["machine"]["roofline"].update(bf16_roofline())
    log(f"bf16 roofline: {result['machine']['roofline']}")
  n_models = 3 if "p1" in args.only else 1
  with tempfile.TemporaryDirectory(prefix="bench_foundation_") as workdir:
    t0 = time.perf_counter()
    cfg, torch_models, jax_params, dropped = build_models(args.preset, n_models, args.seed, workdir)
    log(f"built {n_models} model(s) of preset {args.preset!r} ({cfg.num_params() / 1e6:.1f} M params) "
        f"in {time.perf_counter() - t0:.1f} s")
  cfg = cfg.replace(dtype=args.dtype)  # our params stay float32 (the master weights); compute follows --dtype
  torch_f32_models = None
  if args.dtype != "float32":  # torch's bf16: params stored and computed in bf16; P1 also times the f32 originals
    torch_f32_models = torch_models
    torch_models = [copy.deepcopy(m).to(getattr(torch, args.dtype)) for m in torch_f32_models]
  result["model"] = {"preset": args.preset, "num_params": cfg.num_params(), "dtype": args.dtype,
                     "params_stored": {"ours": cfg.param_dtype, "torch": args.dtype},
                     "hf_config_keys_dropped": dropped,
                     "shape": {k: getattr(cfg, k) for k in ("vocab_size", "hidden_size", "intermediate_size",
                                                             "num_layers", "num_heads", "num_kv_heads", "head_dim")}}
  if "p1" in args.only:
    result["p1_scoring"] = bench_p1(args, cfg, torch_models, jax_params, torch_f32_models)
  if "p2" in args.only:
    result["p2_sampling"] = bench_p2(args, cfg, torch_models[0], jax_params[0])
  if "p3" in args.only:
    result["p3_multiturn"] = bench_p3(args, cfg, jax_params[0])
  summary = {}
  for part, key in (("p1_scoring", "ratio_lean_vs_torch"), ("p2_sampling", "ratio"), ("p3_multiturn", "ratio")):
    if part in result:
      summary[part] = result[part][key]
  if "p1_scoring" in result:
    summary["p1_scoring_full_featured"] = result["p1_scoring"]["ratio_full_vs_torch"]
    if "logprob_error_vs_float32" in result["p1_scoring"]:
      summary["p1_logprob_error_vs_float32"] = result["p1_scoring"]["logprob_error_vs_float32"]
  for part in ("p1_scoring", "p2_sampling"):
    if "ratio_vs_float32" in result.get(part, {}):
      summary[f"{part}_vs_float32"] = result[part]["ratio_vs_float32"]
  if "ratio_bf16_params" in result.get("p2_sampling", {}):
    summary["p2_sampling_bf16_params"] = result["p2_sampling"]["ratio_bf16_params"]
  # On a shared machine other processes can steal cores mid-run; flag parts where a timed run kept fewer than
  # 70% of the cores busy (every contender here is multi-threaded and compute/bandwidth bound).
  def utils(node):
    if isinstance(node, dict):
      for k, v in node.items():
        if k == "cpu_util":
          yield from v
        else:
          yield from utils(v)
  floor = 0.7 * (os.cpu_count() or 1)
  summary["contention_suspected"] = {part: bool(any(u < floor for u in utils(result[part])))
                                     for part in ("p1_scoring", "p2_sampling", "p3_multiturn") if part in result}
  if args.quick:  # the --quick shapes are too small to keep every core busy, so the check means nothing there
    summary["contention_suspected"] = "not checked in --quick mode"
  result["summary"] = summary
  return finish(result, t_start, args.out)


if __name__ == "__main__":
  main()
