#!/usr/bin/env python
"""Train-step benchmark: model-FLOP utilisation (MFU) of one GRPO update, and where a training iteration's time goes.

1. MFU of the jitted train step (`training.train_step.make_train_step`) on one synthetic mini-batch of B rows x T
   tokens (loss mask on the last 3/4 of each row, like a response after its prompt), GRPO with the KL and entropy
   terms on (kl_coef=0.01, entropy_coef=0.001, the paper setting), so the frozen reference forward runs inside the
   loss too. Model FLOPs per step, N = B*T tokens, P = matmul weights of one model:

     P = L*(2*d*H*hd + 2*d*KV*hd + 3*d*F) + d*V     (q,o + k,v + MLP per layer, plus the unembedding; a tied
                                                     embedding counts once, as the unembedding; the embedding
                                                     lookup, norms and biases are not matmuls and are left out)
     A = 4*L*T*H*hd                                 (attention forward per token: Q.K^T and P.V, 2 FLOPs per MAC,
                                                     full T x T square, *not* halved for causality: the PaLM
                                                     paper's convention, and also what our kernel computes)
     model FLOPs = policy fwd+bwd (6*P + 3*A)*N  +  reference fwd (2*P + A)*N  =  (8*P + 4*A)*N

   The optimizer update (O(P) element-wise) is not counted. MFU = model FLOP/s / the JAX f32 GEMM peak measured in
   the same run (`common.machine_roofline`). Two "hardware" counts come with it, which also include what the model
   FLOPs leave out (the recompute of the rematerialised vocab-chunk scan in the backward pass, the padded last
   vocab chunk): `hfu` from the matmul FLOPs of the traced step (`jaxpr_matmul_flops`), and `hfu_xla` from XLA's
   `cost_analysis()["flops"]`, which counts every while-loop body once, not times its trip count; the layer scan
   is such a loop, so XLA's figure undercounts by about the layer count and is kept only as a lower bound.
   The same batch is also scored forward-only (policy + reference log-probs, `scoring.fused.make_score_fn`), round-
   robin with the step, to split an update into its scoring part and the rest (backward + optimizer).

   `--dtype bfloat16` is the mixed-precision step: params and Adam moments stay float32 (the master weights), the
   matmuls run in bf16, softmax/log-softmax and the loss in f32. There is no torch train-step baseline. MFU and HFU
   are then taken against the JAX bf16 GEMM peak measured in the same run (`peak_gflops_jax_bf16_gemm`), what bf16
   matmuls can reach here; `mfu_vs_f32_gemm` puts the same FLOP rate over the f32 peak, comparable with a float32
   run. The JSON also records the log-prob error of the step's bf16 scoring against float32 scoring of the same
   params and batch.

2. Per-iteration time split of a training run, from its `logs/metrics.jsonl` (train-phase records): mean env /
   generate / advantage / update seconds and shares over iterations 2.., and the first iteration (which includes
   compilation) separately. Skipped with a note when the file does not exist.

  python benchmarks/bench_train_step.py                   # small preset (~36 M params), B=8, T=512, 5 repeats
  python benchmarks/bench_train_step.py --quick           # smoke test, < 1 minute (tiny preset, B=2, T=128)
  python benchmarks/bench_train_step.py --batch 16 --micro 4 --run_dir runs/alfworld_cpu --out /tmp/train_step.json
  python benchmarks/bench_train_step.py --dtype bfloat16 --out /tmp/train_step_bf16.json
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np
from bench_foundation import bf16_roofline, code_version, interleaved_times, logprob_error, timing_entry
from common import finish, logger, machine_roofline

TARGET_MFU = 0.40
TIME_PARTS = {"env": "timing_s/env", "generate": "timing_s/gen", "advantage": "timing_s/adv",
              "update": "timing_s/update_actor"}  # the parts' logged keys


log = logger("bench_train_step")


def parse_args(argv=None):
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--preset", default="small", help="model preset from agentopd_jax.models.config (default small)")
  p.add_argument("--batch", type=int, default=8, help="sequences per mini-batch (one optimizer step)")
  p.add_argument("--seq", type=int, default=512, help="tokens per sequence")
  p.add_argument("--micro", type=int, default=None, help="micro-batch size (default: --batch, one micro-batch)")
  p.add_argument("--repeats", type=int, default=5, help="timed steps (median reported)")
  p.add_argument("--run_dir", default="runs/alfworld_cpu", help="training run whose logs/metrics.jsonl is split")
  p.add_argument("--seed", type=int, default=0)
  p.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32",
                 help="compute dtype (params and Adam moments stay float32)")
  p.add_argument("--quick", action="store_true", help="smoke test: tiny preset, B=2, T=128, 2 repeats")
  p.add_argument("--out", default=None, help="also write the JSON here")
  args = p.parse_args(argv)
  if args.quick:
    args.preset, args.batch, args.seq, args.repeats = "tiny", 2, 128, 2
    args.micro = None
  args.micro = args.micro or args.batch
  if args.batch % args.micro:
    p.error(f"--batch {args.batch} must be a multiple of --micro {args.micro}")
  return args


# --- FLOPs ------------------------------------------------------------------------------------------------------

def matmul_params(cfg) -> int:
  """P: weights that take part in a matmul, per model (see the module docstring)."""
  d, f, h, kv, hd = cfg.hidden_size, cfg.intermediate_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
  return cfg.num_layers * (2 * d * h * hd + 2 * d * kv * hd + 3 * d * f) + d * cfg.vocab_size


def model_flops(cfg, batch: int, seq: int) -> dict:
  n = batch * seq
  p = matmul_params(cfg)
  attn_fwd = 4 * cfg.num_layers * seq * cfg.num_heads * cfg.head_dim * n
  policy = 6 * p * n + 3 * attn_fwd
  reference = 2 * p * n + attn_fwd
  return {"matmul_params": p, "tokens": n, "policy_fwd_bwd": policy, "reference_fwd": reference,
          "train_step": policy + reference, "scoring_fwd_policy_and_reference": 2 * (2 * p * n + attn_fwd)}


def xla_flops(compiled):
  """XLA's FLOP count of a compiled executable, or None where the backend does not report one."""
  try:
    cost = compiled.cost_analysis()
  except Exception as e:  # noqa: BLE001 - cost analysis is best-effort and backend-dependent
    log(f"cost_analysis unavailable: {e!r}")
    return None
  if isinstance(cost, (list, tuple)):
    cost = cost[0] if cost else None
  flops = (cost or {}).get("flops")
  return float(flops) if flops is not None and flops > 0 else None


def jaxpr_matmul_flops(fn, *args) -> dict:
  """Matmul FLOPs the traced program really executes: 2 * out elements * contracted size of every dot_general,
  with scan bodies multiplied by their length (XLA's cost analysis counts a while-loop body once, so it misses the
  layer, vocab-chunk and micro-batch loops). Counts the remat recompute and the masked/padded work; element-wise
  ops are left out. A while loop (unknown trip count) is counted once and reported."""
  import jax
  whiles = [0]

  def subjaxprs(value):
    if hasattr(value, "eqns"):
      yield value
    elif hasattr(value, "jaxpr") and hasattr(value.jaxpr, "eqns"):
      yield value.jaxpr
    elif isinstance(value, (tuple, list)):
      for v in value:
        yield from subjaxprs(v)

  def count(jaxpr) -> float:
    total = 0.0
    for eqn in jaxpr.eqns:
      if eqn.primitive.name == "dot_general":
        (contract, _), _ = eqn.params["dimension_numbers"]
        lhs, out = eqn.invars[0].aval, eqn.outvars[0].aval
        total += 2.0 * float(np.prod(out.shape)) * float(np.prod([lhs.shape[i] for i in contract]))
        continue
      subs = [count(j) for v in eqn.params.values() for j in subjaxprs(v)]
      if not subs:
        continue
      if eqn.primitive.name == "cond":
        total += max(subs)
      else:
        whiles[0] += eqn.primitive.name == "while"
        total += sum(subs) * (eqn.params["length"] if eqn.primitive.name == "scan" else 1)
    return total

  flops = count(jax.make_jaxpr(fn)(*args).jaxpr)
  return {"flops": flops, "while_loops_counted_once": whiles[0]}


# --- 1: train step ----------------------------------------------------------------------------------------------

def synthetic_batch(cfg, b: int, t: int, seed: int):
  """Host arrays of a TrainBatch: random tokens, loss on the last 3/4 of each row (the first quarter is prompt),
  +/-1 advantages over the mask; old log-probs are filled in from the policy's own scores by the caller."""
  from agentopd_jax.batching.collate import TrainBatch
  rng = np.random.default_rng(seed)
  mask = np.zeros((b, t), np.float32)
  mask[:, t // 4:] = 1.0
  adv = np.where(rng.random(b) < 0.5, -1.0, 1.0).astype(np.float32)[:, None] * mask
  return TrainBatch(tokens=rng.integers(1, cfg.vocab_size, size=(b, t), dtype=np.int32),
                    segment_ids=np.ones((b, t), np.int32), positions=np.tile(np.arange(t, dtype=np.int32), (b, 1)),
                    loss_mask=mask, advantages=adv, old_logprobs=np.zeros((b, t), np.float32))


def bench_train_step(args, cfg, peak_gflops: float, logprob_error_vs_f32: bool = False) -> tuple:
  """(step entry, scoring split) for `cfg` on args.batch x args.seq. `logprob_error_vs_f32`: when `cfg` computes in
  another dtype, also score the batch in float32 (one more compile) and record the log-prob error."""
  import jax
  import jax.numpy as jnp

  from agentopd_jax.models import transformer
  from agentopd_jax.objectives.registry import LossCore, LossParams
  from agentopd_jax.scoring.fused import ScoreConfig, make_score_fn
  from agentopd_jax.training import train_step as ts

  b, t, m = args.batch, args.seq, args.micro
  params = transformer.init_params(cfg, jax.random.key(args.seed))
  score_params = (params, jax.tree.map(jnp.copy, params))  # the step donates its state: scoring gets its own copy
  loss_cfg = LossParams(core=LossCore(kl_coef=0.01, entropy_coef=0.001))
  optimizer = ts.make_optimizer(ts.OptimConfig(learning_rate=1e-6))
  batch = synthetic_batch(cfg, b, t, args.seed + 1)

  # Forward-only fused scoring of the same B x T batch: what the loss computes before its backward pass.
  score_fn = make_score_fn(cfg, ScoreConfig(reference=True, top_k=0))
  t0 = time.perf_counter()
  score_compiled = score_fn.lower(*score_params, None, batch.score_batch()).compile()
  score_compile_s = time.perf_counter() - t0
  hw_score = jaxpr_matmul_flops(score_fn, *score_params, None, batch.score_batch())
  scores = jax.block_until_ready(score_compiled(*score_params, None, batch.score_batch()))
  error = None
  if logprob_error_vs_f32 and cfg.dtype != "float32":
    f32 = make_score_fn(cfg.replace(dtype="float32"), ScoreConfig(reference=True, top_k=0))(
        *score_params, None, batch.score_batch())
    scored = np.asarray(batch.loss_mask, bool)  # the loss tokens (scores are zero elsewhere)
    error = {"what": f"{cfg.dtype} vs float32 scoring of the same params, policy and reference log-probs on the "
                     f"{int(scored.sum())} loss tokens",
             **logprob_error(np.stack([np.asarray(scores.policy_logprobs)[scored],
                                       np.asarray(scores.reference_logprobs)[scored]]),
                             np.stack([np.asarray(f32.policy_logprobs)[scored],
                                       np.asarray(f32.reference_logprobs)[scored]]))}
    log(f"log-prob error vs float32: {error}")
  batch = batch.replace(old_logprobs=np.asarray(scores.policy_logprobs))  # on-policy: ratio 1, as on a first mini-batch
  log(f"scoring compiled in {score_compile_s:.1f} s")

  (minibatch,) = ts.split_minibatches(batch, b, m)
  minibatch = jax.device_put(minibatch)
  state = ts.init_state(jax.tree.map(jnp.copy, params), optimizer, reference_params=jax.tree.map(jnp.copy, params))
  step = ts.make_train_step(cfg, loss_cfg, optimizer, with_reference=True)
  t0 = time.perf_counter()
  step_compiled = step.lower(state, minibatch).compile()
  step_compile_s = time.perf_counter() - t0
  hw_step = jaxpr_matmul_flops(step, state, minibatch)  # traced before the first call donates `state`
  log(f"train step compiled in {step_compile_s:.1f} s")
  holder = {}
  holder["state"], _ = jax.block_until_ready(step_compiled(state, minibatch, None))  # first run (allocations)

  def run_step():
    holder["state"], out = step_compiled(holder["state"], minibatch, None)
    jax.block_until_ready((holder["state"], out))
    holder["metrics"] = out

  times = interleaved_times({
      "train_step": run_step,
      "scoring": lambda: jax.block_until_ready(score_compiled(*score_params, None, batch.score_batch())),
  }, args.repeats)
  n_tok = b * t
  flops = model_flops(cfg, b, t)
  step_entry = timing_entry(times["train_step"], n_tok)
  score_entry = timing_entry(times["scoring"], n_tok)
  step_s, score_s = step_entry["median_s"], score_entry["median_s"]
  xla_step, xla_score = xla_flops(step_compiled), xla_flops(score_compiled)
  model_gflops_s = flops["train_step"] / step_s / 1e9
  mfu = model_gflops_s / peak_gflops
  last = {k: float(v) for k, v in holder["metrics"].items()}
  out = {
      "batch": b, "seq_len": t, "micro_batch": m, "micro_batches": b // m, "tokens_per_step": n_tok,
      "loss_tokens_per_step": int(batch.loss_mask.sum()),
      "loss_config": {"objective": loss_cfg.objective, "kl_coef": loss_cfg.core.kl_coef,
                      "entropy_coef": loss_cfg.core.entropy_coef, "loss_agg_mode": loss_cfg.core.loss_agg_mode},
      "compile_s": round(step_compile_s, 3),
      **step_entry,
      "model_flops": {
          "formula": "(6P + 3A)N policy fwd+bwd + (2P + A)N reference fwd; P = L(2dH*hd + 2d*KV*hd + 3dF) + dV, "
                     "A = 4*L*T*H*hd (attention, full square, not halved for causality, as in PaLM), N = B*T",
          **{k: v for k, v in flops.items() if k != "scoring_fwd_policy_and_reference"}},
      "model_gflop_per_step": round(flops["train_step"] / 1e9, 2),
      "hardware_matmul_gflop_per_step": round(hw_step["flops"] / 1e9, 2),
      "hardware_over_model_flops": round(hw_step["flops"] / flops["train_step"], 3),
      "hardware_count": "dot_general FLOPs of the traced step, scan bodies times their length (includes the "
                        "vocab-chunk remat recompute, the padded last vocab chunk and masked work); while loops "
                        f"counted once: {hw_step['while_loops_counted_once']}",
      "xla_gflop_per_step": None if xla_step is None else round(xla_step / 1e9, 2),
      "xla_count_note": "XLA cost_analysis()['flops'] counts each while-loop body once, not times its trip count; "
                        "the layer scan, the vocab-chunk scan and the micro-batch scan are while loops, so this "
                        "undercounts (roughly by the layer count) and hfu_xla is a lower bound",
      "model_gflops_per_s": round(model_gflops_s, 1),
      "peak_gflops_jax_sgemm": peak_gflops,
      "mfu": round(mfu, 4),
      "hfu": round(hw_step["flops"] / step_s / 1e9 / peak_gflops, 4),
      "hfu_xla": None if xla_step is None else round(xla_step / step_s / 1e9 / peak_gflops, 4),
      "target_mfu": TARGET_MFU, "target_met": bool(mfu >= TARGET_MFU),
      "sanity": {"loss": last.get("loss"), "kl": last.get("kl"), "skipped": last.get("skipped"),
                 "grad_norm": last.get("grad_norm")},
  }
  if error is not None:
    out["logprob_error_vs_float32"] = error
  score_gflop = flops["scoring_fwd_policy_and_reference"] / 1e9
  split = {
      "what": "the same B x T batch, forward-only fused scoring (policy + reference log-probs, entropy) vs the full "
              "train step, timed round-robin; the rest of an update is the policy backward and the optimizer",
      "score_config": {"reference": True, "top_k": 0, "entropy": True},
      "compile_s": round(score_compile_s, 3),
      **score_entry,
      "model_gflop": round(score_gflop, 2),
      "hardware_matmul_gflop": round(hw_score["flops"] / 1e9, 2),
      "xla_gflop": None if xla_score is None else round(xla_score / 1e9, 2),
      "mfu": round(score_gflop / score_s / peak_gflops, 4),
      "scoring_s": score_s, "update_s": step_s,
      "scoring_share_of_update": round(score_s / step_s, 3),
  }
  log(f"train step: median {step_s:.3f} s, {model_gflops_s:.1f} model GFLOP/s, MFU {mfu:.1%}; "
      f"scoring {score_s:.3f} s ({score_s / step_s:.0%} of the step)")
  return out, split


# --- 2: iteration time split ------------------------------------------------------------------------------------

def iteration_split(run_dir: str) -> dict:
  from agentopd_jax.storage.logs import METRICS_FILE, read_metrics
  path = Path(run_dir)
  if not path.is_absolute() and not (path / "logs" / METRICS_FILE).exists():
    path = Path(__file__).resolve().parent.parent / run_dir  # also accept a path relative to the repo root
  metrics_file = path / "logs" / METRICS_FILE
  if not metrics_file.exists():
    return {"skipped": f"no {run_dir}/logs/{METRICS_FILE}: train a run first (e.g. experiments/train.py) or pass "
                       f"--run_dir"}
  by_step = {}
  for r in read_metrics(path / "logs"):
    if r.get("phase") == "train" and r.get("timing_s/step") is not None:
      by_step[r["step"]] = r  # a resumed run may repeat a step: the last record wins
  records = [by_step[s] for s in sorted(by_step)]
  if not records:
    return {"skipped": f"{metrics_file} has no train-phase records with timing_s/step"}

  def parts(rs) -> dict:
    mean = {k: float(np.mean([r.get(key) or 0.0 for r in rs])) for k, key in TIME_PARTS.items()}
    total = float(np.mean([r["timing_s/step"] for r in rs]))
    mean["other"] = total - sum(mean.values())  # rollout bookkeeping outside env and generate, collation, logging
    return {"iteration_s": round(total, 3), **{f"{k}_s": round(v, 3) for k, v in mean.items()},
            "share": {k: round(v / total, 3) for k, v in mean.items()}}

  def batch_shape(rs) -> dict:
    return {k.split("/")[1]: round(float(np.mean([r[k] for r in rs])), 1)
            for k in ("batch/rows", "batch/width", "batch/updates") if all(k in r for r in rs)}

  out = {"metrics_file": str(metrics_file), "iterations": len(records),
         "first_iteration": {"step": records[0]["step"], **parts(records[:1])}}
  if len(records) > 1:
    rest = records[1:]
    out["mean_excluding_first"] = {"steps": [rest[0]["step"], rest[-1]["step"]], **parts(rest),
                                   "batch_mean": batch_shape(rest)}
  else:
    out["mean_excluding_first"] = None
  out["note"] = ("update_s includes the fused scoring (policy, and reference when the run's kl_coef > 0: computed "
                 "inside the loss); scoring_vs_update gives the scoring share of an update. The first record after "
                 "a resume also includes compilation.")
  return out


# --- main -------------------------------------------------------------------------------------------------------

def main(argv=None) -> dict:
  args = parse_args(argv)
  import jax

  from agentopd_jax.models.config import preset

  t_start = time.perf_counter()
  cfg = preset(args.preset, dtype=args.dtype)  # params stay float32
  result = {
      "benchmark": "train step MFU + iteration time split",
      "command": " ".join([os.path.basename(sys.executable)] + sys.argv),
      "machine": {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
                  "cpu_count": os.cpu_count(), "jax_devices": [str(d) for d in jax.devices()],
                  "load_avg_1_5_15_at_start": [round(x, 2) for x in os.getloadavg()]},
      "versions": {"python": platform.python_version(), "jax": jax.__version__, "numpy": np.__version__},
      "code": code_version(),
      "model": {"preset": args.preset, "num_params": cfg.num_params(), "matmul_params": matmul_params(cfg),
                "dtype": cfg.dtype, "param_dtype": cfg.param_dtype, "remat": cfg.remat,
                "shape": {k: getattr(cfg, k) for k in ("vocab_size", "hidden_size", "intermediate_size", "num_layers",
                                                        "num_heads", "num_kv_heads", "head_dim", "tie_embeddings")}},
  }
  result["machine"]["roofline"] = machine_roofline()
  log(f"roofline: {result['machine']['roofline']}")
  if cfg.dtype != "float32":
    result["machine"]["roofline"].update(bf16_roofline())
    log(f"bf16 roofline: {result['machine']['roofline']}")
  roof = result["machine"]["roofline"]
  peak = roof["jax_sgemm_gflops"] if cfg.dtype == "float32" else roof["jax_bf16_gemm_gflops"]
  result["train_step"], result["scoring_vs_update"] = bench_train_step(args, cfg, peak, logprob_error_vs_f32=True)
  if cfg.dtype != "float32":  # the peak passed in was the bf16 GEMM's: name it so, and add the f32-peak view
    step_res = result["train_step"]
    step_res["peak_gflops_jax_bf16_gemm"] = step_res.pop("peak_gflops_jax_sgemm")
    step_res["mfu_vs_f32_gemm"] = round(step_res["model_gflops_per_s"] / roof["jax_sgemm_gflops"], 4)
  result["iteration_split"] = iteration_split(args.run_dir)
  floor = 0.7 * (os.cpu_count() or 1)
  utils = result["train_step"]["cpu_util"] + result["scoring_vs_update"]["cpu_util"]
  step_res = result["train_step"]
  result["summary"] = {
      "mfu": step_res["mfu"], "hfu": step_res["hfu"], "hfu_xla": step_res["hfu_xla"], "target_mfu": TARGET_MFU,
      "target_met": step_res["target_met"], "compute_dtype": cfg.dtype,
      "mfu_vs_f32_gemm": step_res.get("mfu_vs_f32_gemm"),
      "step_median_s": step_res["median_s"], "tokens_per_s": step_res["tokens_per_s"],
      "scoring_share_of_update": result["scoring_vs_update"]["scoring_share_of_update"],
      "logprob_error_vs_float32": step_res.get("logprob_error_vs_float32"),
      # Every timed call is compute bound and multi-threaded: fewer busy cores than 70% of the machine means other
      # processes competed. Meaningless for the --quick shapes, which are too small to fill the cores.
      "contention_suspected": "not checked in --quick mode" if args.quick else bool(any(u < floor for u in utils)),
  }
  return finish(result, t_start, args.out)


if __name__ == "__main__":
  main()
