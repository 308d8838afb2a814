"""Vocab-chunked log-softmax statistics: the full [B, T, V] logits are never materialised.

One `lax.scan` walks the unembedding matrix in column chunks and keeps running statistics per position:
an online log-sum-exp, the target token's logit, the entropy accumulator, a running top-k, and the logits at any
caller-given ids. The scan body is rematerialised, so the backward pass recomputes one chunk of logits at a time
and memory stays O(B·T·chunk) instead of O(B·T·V).
"""
from __future__ import annotations

from typing import Optional

import chex
import jax
import jax.numpy as jnp

from agentopd_jax.models.matmul import matmul


@chex.dataclass
class TokenStats:
  """Per-position statistics of softmax(h @ w / temperature).

  logprobs: [B, T] log-prob of the target ids.  entropy: [B, T] (None if not asked).
  topk_ids / topk_logprobs: [B, T, k] the k most likely ids and their log-probs (None if k == 0).
  gathered_logprobs: [B, T, K'] log-probs at caller-given ids (None if none given).
  """
  logprobs: jnp.ndarray
  entropy: Optional[jnp.ndarray]
  topk_ids: Optional[jnp.ndarray]
  topk_logprobs: Optional[jnp.ndarray]
  gathered_logprobs: Optional[jnp.ndarray]


def token_stats(hidden: jnp.ndarray, w: jnp.ndarray, targets: jnp.ndarray, *, chunk: int = 8192, top_k: int = 0,
                entropy: bool = False, gather_ids: Optional[jnp.ndarray] = None, temperature: float = 1.0,
                compute_dtype=jnp.float32) -> TokenStats:
  """Statistics of the next-token distribution for hidden states [B, T, D] and unembedding w [D, V].

  log p(y) = z_y - logsumexp(z),  z = h·w / temperature;  entropy H = logsumexp(z) - Σ_v p_v z_v.
  """
  chex.assert_rank(hidden, 3)
  chex.assert_rank(w, 2)
  chex.assert_equal_shape_prefix([hidden, targets], 2)
  b, t, _ = hidden.shape
  vocab = w.shape[1]
  chunk = min(chunk, vocab)
  if top_k > chunk:
    raise ValueError(f"top_k ({top_k}) must not exceed the vocab chunk ({chunk})")
  n_chunks = -(-vocab // chunk)
  n_gather = 0 if gather_ids is None else gather_ids.shape[-1]
  h = hidden.astype(compute_dtype)
  neg_inf = jnp.float32(-jnp.inf)

  def body(carry, c):
    m, s, zsum, target_logit, top_vals, top_ids, gathered = carry
    # The last chunk is shifted left to stay in bounds; columns already seen are masked out.
    start = jnp.minimum(c * chunk, vocab - chunk)
    z = matmul(h, jax.lax.dynamic_slice_in_dim(w, start, chunk, axis=1)) / temperature  # f32 logits
    cols = start + jnp.arange(chunk)
    fresh = cols >= c * chunk
    z = jnp.where(fresh, z, neg_inf)

    m_new = jax.lax.stop_gradient(jnp.maximum(m, jnp.max(z, axis=-1)))
    rescale = jnp.exp(m - m_new)
    e = jnp.exp(z - m_new[..., None])
    s = s * rescale + jnp.sum(e, axis=-1)
    if entropy:
      zsum = zsum * rescale + jnp.sum(jnp.where(fresh, e * z, 0.0), axis=-1)

    def gather(ids):
      inside = (ids >= c * chunk) & (ids < start + chunk)
      local = jnp.clip(ids - start, 0, chunk - 1)
      return inside, jnp.take_along_axis(z, local, axis=-1)

    inside, val = gather(targets[..., None])
    target_logit = jnp.where(inside[..., 0], val[..., 0], target_logit)
    if top_k:
      vals_c, ids_c = jax.lax.top_k(z, top_k)
      merged_vals = jnp.concatenate([top_vals, vals_c], axis=-1)
      merged_ids = jnp.concatenate([top_ids, ids_c + start], axis=-1)
      top_vals, pos = jax.lax.top_k(merged_vals, top_k)
      top_ids = jnp.take_along_axis(merged_ids, pos, axis=-1)
    if n_gather:
      inside, val = gather(gather_ids)
      gathered = jnp.where(inside, val, gathered)
    return (m_new, s, zsum, target_logit, top_vals, top_ids, gathered), None

  init = (jnp.full((b, t), -1e30, jnp.float32), jnp.zeros((b, t), jnp.float32), jnp.zeros((b, t), jnp.float32),
          jnp.zeros((b, t), jnp.float32), jnp.full((b, t, top_k), neg_inf, jnp.float32),
          jnp.zeros((b, t, top_k), jnp.int32), jnp.zeros((b, t, n_gather), jnp.float32))
  (m, s, zsum, target_logit, top_vals, top_ids, gathered), _ = jax.lax.scan(
      jax.checkpoint(body), init, jnp.arange(n_chunks))
  lse = m + jnp.log(s)
  return TokenStats(
      logprobs=target_logit - lse,
      entropy=(lse - zsum / s) if entropy else None,
      topk_ids=top_ids if top_k else None,
      topk_logprobs=(top_vals - lse[..., None]) if top_k else None,
      gathered_logprobs=(gathered - lse[..., None]) if n_gather else None,
  )
