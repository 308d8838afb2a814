"""Causal attention over a whole chunk in query blocks, with a flash-style backward pass.

For a chunk without a KV cache (training, scoring, a first prefill) the einsum attention of `transformer` builds
the full [B, kv, g, T, T] score tensor, keeps its probabilities for the backward pass and transposes f32 copies of
it there. For the tiny CPU model that elementwise and copy work, not the matmuls, is most of an update. A chunk that
continues a cache (a later turn's prefill, a shared prompt prefix in scoring or in the update) scores the cached
keys as a block before its own, and its backward pass returns their gradients too. Here:

* Query block i (rows [i·Q, (i+1)·Q)) only scores keys [0, (i+1)·Q): the blocks above the causal diagonal are
  never computed (for T = 512 and Q = 128 that is 10 of 16 blocks).
* The forward keeps only the output and the per-row log-sum-exp; the backward recomputes each block's
  probabilities from them (FlashAttention's recurrence: dS = P ∘ (dP − rowsum(dO ∘ O))).
* Every product is in the compute dtype with f32 accumulation, its contracted dimension last on the left (in bf16
  the CPU's native kernel, `matmul`): the left operands of Pᵀ·dO and dSᵀ·Q are copied transposed, never a
  product's output (XLA would fold a transposed output back into the dot and leave it without a kernel).

Numerics match `transformer._xla_attention` (f32 scores, softmax and accumulation; probabilities rounded to the
compute dtype before the P·V product); only summation order differs. Rows without any visible key (padding)
average the values their block sees, as the einsum path averages all of them: such rows feed nothing.
"""
from __future__ import annotations

import functools
from typing import List, Tuple

import jax
import jax.numpy as jnp

from agentopd_jax.models.matmul import copy_transpose_last2

_NEG = float(jnp.finfo(jnp.float32).min)
BLOCK = 128  # query rows per block


def _bounds(t: int, block: int) -> List[Tuple[int, int]]:
  return [(s, min(s + block, t)) for s in range(0, t, block)]


def _bdot(a, b, contract_b: int):
  """Batched over the two leading dims: a [B, K, M, C] · b contracted on b's matrix dim `contract_b`; f32 out."""
  return jax.lax.dot_general(a, b, (((3,), (2 + contract_b,)), ((0, 1), (0, 1))), preferred_element_type=jnp.float32)


def _block_scores(q, k, mask, lo, hi, g, before=0):
  """Masked f32 scores of query rows [lo, hi) against keys [0, before + hi) (`before` cached keys precede the
  chunk's): [B, kv, g, hi−lo, before + hi]."""
  s = _bdot(q[:, :, :, lo:hi].reshape(q.shape[0], q.shape[1], g * (hi - lo), q.shape[-1]), k[:, :, :before + hi], 1)
  s = s.reshape(q.shape[0], q.shape[1], g, hi - lo, before + hi)
  return jnp.where(mask[:, None, None, lo:hi, :before + hi], s, _NEG)


def _forward(q, k, v, mask, block, before=0):
  b, kv, g, t, hd = q.shape
  outs, lses = [], []
  for lo, hi in _bounds(t, block):
    s = _block_scores(q, k, mask, lo, hi, g, before)
    m = jnp.max(s, axis=-1, keepdims=True)
    p = jnp.exp(s - m)
    l = jnp.sum(p, axis=-1, keepdims=True)
    o = _bdot(p.astype(q.dtype).reshape(b, kv, g * (hi - lo), before + hi), v[:, :, :before + hi], 0)
    o = o.reshape(b, kv, g, hi - lo, hd)
    outs.append((o / l).astype(q.dtype))
    lses.append(m + jnp.log(l))
  return jnp.concatenate(outs, axis=3), jnp.concatenate(lses, axis=3)


@functools.partial(jax.custom_vjp, nondiff_argnums=(4, 5))
def _attention(q, k, v, mask, block, before):
  """Keys and values [B, kv, before + T, hd]: `before` cached ones, then the chunk's; mask [B, T, before + T]."""
  return _forward(q, k, v, mask, block, before)[0]


def _fwd(q, k, v, mask, block, before):
  o, lse = _forward(q, k, v, mask, block, before)
  return o, (q, k, v, mask, o, lse)


def _bwd(block, before, res, do):
  q, k, v, mask, o, lse = res
  b, kv, g, t, hd = q.shape
  dt = q.dtype
  do = do.astype(dt)
  delta = jnp.sum(do.astype(jnp.float32) * o.astype(jnp.float32), axis=-1, keepdims=True)  # rowsum(dO ∘ O)
  dqs = []
  dk = jnp.zeros((b, kv, before + t, hd), jnp.float32)  # each block adds to keys [0, before + hi)
  dv = jnp.zeros((b, kv, before + t, hd), jnp.float32)
  for lo, hi in _bounds(t, block):
    n, seen = g * (hi - lo), before + hi
    p = jnp.exp(_block_scores(q, k, mask, lo, hi, g, before) - lse[:, :, :, lo:hi])  # [b, kv, g, n/g, seen]
    do_i = do[:, :, :, lo:hi].reshape(b, kv, n, hd)
    dv = dv.at[:, :, :seen].add(_bdot(copy_transpose_last2(p.astype(dt).reshape(b, kv, n, seen)), do_i, 0))  # Pᵀ·dO
    dp = _bdot(do_i, v[:, :, :seen], 1).reshape(p.shape)                                                      # dO·Vᵀ
    ds = (p * (dp - delta[:, :, :, lo:hi])).astype(dt).reshape(b, kv, n, seen)
    dqs.append(_bdot(ds, k[:, :, :seen], 0).reshape(b, kv, g, hi - lo, hd))                                   # dS·K
    dk = dk.at[:, :, :seen].add(_bdot(copy_transpose_last2(ds), q[:, :, :, lo:hi].reshape(b, kv, n, hd), 0))  # dSᵀ·Q
  # The barrier keeps the callers' layout transposes of the gradients out of the products (see `matmul`).
  dq, dk, dv = jax.lax.optimization_barrier((jnp.concatenate(dqs, axis=3), dk, dv))
  return dq.astype(dt), dk.astype(k.dtype), dv.astype(v.dtype), None


_attention.defvjp(_fwd, _bwd)


def _heads_first(x):
  """[B, T, kv, hd] -> [B, kv, T, hd] as a real copy. A plain transpose can become a layout change that the last
  query block's products (which read all of k and v, unsliced) take as operands in a layout without a native bf16
  kernel; through a split T axis (zero-padded to a multiple of 8, cut back after) it stays a copy, as in
  `matmul.copy_transpose_last2`."""
  b, t, kv, hd = x.shape
  pad = -t % 8
  x = jnp.pad(x, ((0, 0), (0, pad), (0, 0), (0, 0))) if pad else x
  split = jnp.transpose(x.reshape(b, (t + pad) // 8, 8, kv, hd), (0, 3, 1, 2, 4))
  return split.reshape(b, kv, t + pad, hd)[:, :, :t]


def blocked_attention(q, k, v, mask, block: int = BLOCK, cache=None):
  """softmax(q·kᵀ/√d + mask)·v for a chunk. q [B, T, H, hd], k/v [B, T, kv, hd] (GQA: H = kv·g), mask [B, T, T]
  bool (causal ∧ same segment ∧ valid: every allowed key of row t is at or before t) -> [B, T, H, hd] in q's dtype.

  `cache`: (k, v [B, kv, S, hd], mask [B, T, S]), keys that precede the whole chunk (a KV cache being continued by a
  chunk of several tokens, a shared prompt prefix): every query block also scores them, and the backward pass
  returns the cache's gradients (the update's shared prefixes are trained through them)."""
  b, t, h, hd = q.shape
  kv = k.shape[2]
  qg = jnp.transpose(q.reshape(b, t, kv, h // kv, hd) * jnp.asarray(hd ** -0.5, q.dtype), (0, 2, 3, 1, 4))
  if cache is None:
    out = _attention(qg, _heads_first(k), _heads_first(v), mask, block, 0)  # [b, kv, g, t, hd]
  else:
    ck, cv, cmask = cache
    keys = jnp.concatenate([ck.astype(k.dtype), _heads_first(k)], axis=2)
    values = jnp.concatenate([cv.astype(v.dtype), _heads_first(v)], axis=2)
    out = _attention(qg, keys, values, jnp.concatenate([cmask, mask], axis=-1), block, ck.shape[2])
  return jnp.transpose(out, (0, 3, 1, 2, 4)).reshape(b, t, h, hd)
