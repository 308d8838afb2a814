"""Matmuls whose backward products get row-major operands, so that on the CPU backend they take the fast kernels.

`matmul(x, w)`: x [..., K] @ w [K, N] with both operands in x's dtype, accumulated and returned in f32.
Under plain autodiff a bf16 matmul's backward pass fails to do what the forward does. The cotangent arriving at the
f32 output is f32, so `dx = g · wᵀ` and `dw = xᵀ · g` mix f32 with bf16 and XLA runs them as f32 GEMMs. On the CPU
backend a bf16 × bf16 → f32 dot is fast only when its left operand contracts its last dimension (YNNPACK's
condition, `xla/backends/cpu/ynn_support.cc`): XLA folds the transpose of `xᵀ · g` into the dot and then falls
back to converting both operands to f32. On this project's CPU that fallback is 2–5× slower than the native
kernel (docs/benchmarks.md, bf16). In f32 the folded transpose costs a strided copy of the activations inside the
weight-gradient dot; made once in the forward pass as a row-major copy it is cheaper (docs/benchmarks.md).

The custom VJP here keeps every large product in x's dtype with f32 accumulation:
  dx = g_x · w_xᵀ           (the cotangent in x's dtype; the right operand contracts its last dimension: native)
  dw = (xᵀ)_copy · g_x      (x is transposed into a real copy first)
The weight gradient is returned in the weight's own dtype (the f32 master), never rounded to bf16; the input gradient
in x's dtype. In f32 the values are plain autodiff's up to the order of the f32 sums.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp


def copy_transpose_last2(a: jnp.ndarray) -> jnp.ndarray:
  """a with its last two dims swapped, as a row-major copy that XLA cannot fold back into the consuming dot.

  On the CPU backend a transpose feeding a dot is folded into its dimension numbers, which puts the contracted
  dimension first on the left and sends a bf16 dot down the f32 path. Routing the transpose through a view with
  one more dim (rows split in groups of 8, zero-padded to a multiple of 8 and cut back after) keeps it a separate
  copy: an M×K bf16 copy is cheap next to the 2·M·K·N-FLOP product. Other backends fold transposes into their own
  dot kernels, so they get the plain transpose."""
  *lead, m, k = a.shape

  def cpu(a):
    pad = -m % 8
    if pad:
      a = jnp.pad(a, [(0, 0)] * len(lead) + [(0, pad), (0, 0)])
    n = len(lead)
    split = a.reshape(*lead, (m + pad) // 8, 8, k)
    return jnp.transpose(split, (*range(n), n + 2, n, n + 1)).reshape(*lead, k, m + pad)[..., :m]

  return jax.lax.platform_dependent(a, cpu=cpu, default=lambda a: jnp.swapaxes(a, -1, -2))


def _dot(a, b, contract_b: int):
  """a [M, K] · b contracted on b's dim `contract_b`, in their dtype (bf16 or f32), f32 out."""
  return jax.lax.dot_general(a, b, (((1,), (contract_b,)), ((), ())), preferred_element_type=jnp.float32)


# Products with at most this many rows (a decode step's batch) stream bf16 weights as the left operand on CPU.
FEW_ROWS = 64


def by_rows(x: jnp.ndarray, w_rows: jnp.ndarray) -> jnp.ndarray:
  """x [M, K] · w_rowsᵀ for weights stored as rows w_rows [N, K] (a tied embedding, a transposed kernel): [M, N] in
  f32, both operands in x's dtype.

  Below f32 with few rows (M ≤ FEW_ROWS, on the CPU backend) it runs as (w_rows · xᵀ)ᵀ: the weights are the left
  operand, contracting their last dimension, streamed once through the kernel, and the few rows of x are the right
  one. In x · w order the CPU's bf16 kernel packs all of w at every call: 8 rows against the small preset's
  weights then stream them at 8.9 GB/s, in this order at 11.3 (docs/benchmarks.md). f32 keeps x · w, which its
  kernel runs twice as fast as this order."""
  w_rows = w_rows.astype(x.dtype)
  if _streams_rows(x):
    return _dot(w_rows, x, 1).T
  return _dot(x, w_rows, 1)


def _streams_rows(x) -> bool:
  return x.shape[0] <= FEW_ROWS and x.dtype != jnp.float32 and jax.default_backend() == "cpu"


@jax.custom_vjp
def _matmul_2d(x, w):
  if _streams_rows(x):
    # In the decode loop the transposed copy of w does not depend on the step: XLA hoists it out of the loop.
    return by_rows(x, copy_transpose_last2(w.astype(x.dtype)))
  return _dot(x, w.astype(x.dtype), 0)


def _fwd(x, w):
  # The backward pass needs x only as xᵀ: copy it transposed here, once, while x is at hand in its dtype (saving x
  # itself lets XLA keep the f32 value it was rounded from and redo the rounding inside a slow strided copy).
  return _dot(x, w.astype(x.dtype), 0), (jax.lax.optimization_barrier(copy_transpose_last2(x)), w)


def _bwd(res, g):
  x_t, w = res
  g = g.astype(x_t.dtype)  # the callers round the output to x.dtype right after the product: this loses nothing
  dx = _dot(g, w.astype(x_t.dtype), 1).astype(x_t.dtype)
  # The barrier keeps a transpose of dw downstream (a tied embedding's) from being folded into this
  # dot, which would put its contracted dimension first on the left again.
  dw = jax.lax.optimization_barrier(_dot(x_t, g, 0))
  return dx, dw.astype(w.dtype)


_matmul_2d.defvjp(_fwd, _bwd)


def matmul(x: jnp.ndarray, w: jnp.ndarray, contract: int = 1) -> jnp.ndarray:
  """x [..., K₁..K_c] · w [K₁..K_c, N...] -> [..., N...] in f32, both operands in x's dtype.

  `contract` is how many trailing dims of x (= leading dims of w) are summed over. w may be stored in another
  dtype (f32 masters); it is cast to x's dtype for the product and its gradient comes back in its own dtype, through
  the custom VJP above."""
  lead, kdims = x.shape[:x.ndim - contract], x.shape[x.ndim - contract:]
  if tuple(w.shape[:contract]) != tuple(kdims):
    raise ValueError(f"matmul: x's last {contract} dims {kdims} must equal w's first {w.shape[:contract]}")
  ndims = w.shape[contract:]
  k = 1
  for d in kdims:
    k *= d
  out = _matmul_2d(x.reshape(-1, k), w.reshape(k, -1))
  return out.reshape(*lead, *ndims)
