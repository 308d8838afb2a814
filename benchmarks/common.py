"""Shared by the benchmark scripts: JSON output, and the machine's own roofline so every script judges its timings
against what this CPU measurably sustains in the same run (not a datasheet figure)."""
import json
import os
import sys
import time


def emit_json(result: dict, out: str | None) -> None:
  text = json.dumps(result, indent=2)
  print(text)
  if out:
    with open(out, "w") as f:
      f.write(text + "\n")


def logger(name: str):
  """A benchmark's progress line on stderr, `[name HH:MM:SS] msg`, so that stdout carries only its JSON."""
  def log(msg: str) -> None:
    print(f"[{name} {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)
  return log


def finish(result: dict, t_start: float, out: str | None) -> dict:
  """Stamps the load average at the end (other work on the machine shows there) and the whole wall time, then emits
  the JSON."""
  result["machine"]["load_avg_1_5_15_at_end"] = [round(x, 2) for x in os.getloadavg()]
  result["wall_s"] = round(time.perf_counter() - t_start, 1)
  emit_json(result, out)
  return result


def best_time(fn, n: int = 5, warm: bool = True) -> float:
  """The fastest of `n` timed calls of `fn` (after one untimed call when `warm`: compilation, caches)."""
  if warm:
    fn()
  times = []
  for _ in range(n):
    t0 = time.perf_counter()
    fn()
    times.append(time.perf_counter() - t0)
  return min(times)


def machine_roofline() -> dict:
  """What this CPU sustains: f32 GEMM throughput (JAX, and torch when it imports), the rate an 8-row f32 product
  streams a 128 MiB matrix (`jax_weight_stream_gb_per_s`: the shape of a batched decode step, so the GEMM kernel's
  rate, not the memory's) and the memory bandwidth itself (`memory_stream_gb_per_s`: a one-row product over the same
  bytes, which the kernel runs as a matrix-vector product bound by the bus alone). Used to judge how close each side
  is to the hardware. Imports are local so that scripts importing this module do not pay for JAX/torch until they
  call it."""
  import jax
  import jax.numpy as jnp

  m, k, n = 4096, 512, 4096
  a, b = jnp.ones((m, k), jnp.float32), jnp.ones((k, n), jnp.float32)
  mm = jax.jit(lambda a, b: a @ b)
  t_jax = best_time(lambda: mm(a, b).block_until_ready())
  w, x = jnp.ones((512, 65536), jnp.float32), jnp.ones((8, 512), jnp.float32)
  t_mv = best_time(lambda: mm(x, w).block_until_ready())
  out = {"jax_sgemm_gflops": round(2 * m * k * n / t_jax / 1e9, 1)}
  try:
    import torch
  except ImportError:
    torch = None
  if torch is not None:
    ta, tb = torch.ones(m, k), torch.ones(k, n)
    t_torch = best_time(lambda: ta @ tb)
    out["torch_sgemm_gflops"] = round(2 * m * k * n / t_torch / 1e9, 1)
  out["jax_weight_stream_gb_per_s"] = round(w.nbytes / t_mv / 1e9, 1)
  rows, x1 = jnp.ones((65536, 512), jnp.float32), jnp.ones((512,), jnp.float32)
  t_gemv = best_time(lambda: mm(rows, x1).block_until_ready())
  out["memory_stream_gb_per_s"] = round(rows.nbytes / t_gemv / 1e9, 1)
  return out
