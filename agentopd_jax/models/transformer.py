"""One Flax decoder for Qwen2/Qwen2.5, Qwen3 and Llama 3.

Every call appends a chunk of tokens: without a cache the chunk is the whole (possibly padded or packed)
batch; with a `KVCache` the chunk's keys and values are written at each row's own write pointer, so prefill,
one-token decode and multi-turn continuation are the same code path. Padding is expressed by segment id 0 and
attention only connects tokens of the same non-zero segment, which makes left/right padding and packing give the
same logits as unpadded rows.

Parameters carry logical axis names (see `parallel.sharding`); layers are stacked on a leading `layers` axis and
run with `nn.scan`, so compile time does not grow with depth.
"""
from __future__ import annotations

from typing import Optional, Tuple

import flax.linen as nn
import flax.struct
import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P

from agentopd_jax.models.config import ModelConfig
from agentopd_jax.parallel import sharding as sharding_lib
from agentopd_jax.models.rope import apply_rope, inverse_frequencies, rope_angles

_init = nn.initializers.normal(stddev=0.02)


def _param(module: nn.Module, name: str, shape, axes, init=_init):
  return module.param(name, nn.with_logical_partitioning(init, axes), shape, module.config.weight_dtype)


@flax.struct.dataclass
class KVCache:
  """Per-row key/value cache.

  k, v: [layers, B, S, kv_heads, head_dim]; segment_ids: [B, S] (0 = empty slot); lengths: [B] write pointer,
  which is also the number of valid tokens in the row (valid slots are always the prefix [0, lengths)).
  """
  k: jnp.ndarray
  v: jnp.ndarray
  segment_ids: jnp.ndarray
  lengths: jnp.ndarray

  @property
  def capacity(self) -> int:
    return self.k.shape[2]

  @classmethod
  def init(cls, config: ModelConfig, batch: int, capacity: int) -> "KVCache":
    shape = (config.num_layers, batch, capacity, config.num_kv_heads, config.head_dim)
    return cls(k=jnp.zeros(shape, config.compute_dtype), v=jnp.zeros(shape, config.compute_dtype),
               segment_ids=jnp.zeros((batch, capacity), jnp.int32), lengths=jnp.zeros((batch,), jnp.int32))


def _write_rows(buffer: jnp.ndarray, chunk: jnp.ndarray, starts: jnp.ndarray, valid: jnp.ndarray) -> jnp.ndarray:
  """buffer[b, starts[b] + i] = chunk[b, i] where valid[b, i]; padding is dropped, never written.

  Dropping (rather than writing zeros) keeps the invariant that slots past a row's length were never touched,
  and an out-of-range write is discarded instead of being clamped onto live slots.
  """
  b, t = chunk.shape[:2]
  slots = jnp.where(valid, starts[:, None] + jnp.arange(t)[None, :], buffer.shape[1])
  return buffer.at[jnp.arange(b)[:, None], slots].set(chunk.astype(buffer.dtype), mode="drop")


class RMSNorm(nn.Module):
  config: ModelConfig
  axis_name: str = "norm"

  @nn.compact
  def __call__(self, x):
    scale = _param(self, "scale", (x.shape[-1],), (self.axis_name,), nn.initializers.ones)
    x32 = x.astype(jnp.float32)
    normed = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + self.config.rms_norm_eps)
    # HF casts back to the input dtype before scaling; do the same so bf16 matches.
    return scale.astype(x.dtype) * normed.astype(x.dtype)


class Attention(nn.Module):
  config: ModelConfig

  @nn.compact
  def __call__(self, x, cos, sin, mask, layer_cache, write_starts, write_valid):
    c = self.config
    dt = c.compute_dtype
    d, h, kv, hd = c.hidden_size, c.num_heads, c.num_kv_heads, c.head_dim
    q = jnp.einsum("btd,dhk->bthk", x, _param(self, "q_kernel", (d, h, hd), ("embed", "q_heads", "head_dim")).astype(dt))
    k = jnp.einsum("btd,dhk->bthk", x, _param(self, "k_kernel", (d, kv, hd), ("embed", "kv_heads", "head_dim")).astype(dt))
    v = jnp.einsum("btd,dhk->bthk", x, _param(self, "v_kernel", (d, kv, hd), ("embed", "kv_heads", "head_dim")).astype(dt))
    if c.qkv_bias:
      zeros = nn.initializers.zeros
      q = q + _param(self, "q_bias", (h, hd), ("q_heads", "head_dim"), zeros).astype(dt)
      k = k + _param(self, "k_bias", (kv, hd), ("kv_heads", "head_dim"), zeros).astype(dt)
      v = v + _param(self, "v_bias", (kv, hd), ("kv_heads", "head_dim"), zeros).astype(dt)
    if c.qk_norm:
      q = RMSNorm(c, axis_name="head_dim", name="q_norm")(q)
      k = RMSNorm(c, axis_name="head_dim", name="k_norm")(k)
    q = apply_rope(q, cos, sin)
    k = apply_rope(k, cos, sin)

    if layer_cache is not None:
      k_all = _write_rows(layer_cache[0], k, write_starts, write_valid)
      v_all = _write_rows(layer_cache[1], v, write_starts, write_valid)
      new_layer_cache = (k_all, v_all)
    else:
      k_all, v_all, new_layer_cache = k, v, None

    b, t = q.shape[:2]
    group = h // kv
    qg = q.reshape(b, t, kv, group, hd)
    scores = jnp.einsum("btkgd,bskd->bkgts", qg, k_all.astype(dt), preferred_element_type=jnp.float32)
    scores = scores * (hd ** -0.5)
    scores = jnp.where(mask[:, None, None], scores, jnp.finfo(jnp.float32).min)
    probs = jax.nn.softmax(scores, axis=-1).astype(dt)
    out = jnp.einsum("bkgts,bskd->btkgd", probs, v_all.astype(dt)).reshape(b, t, h, hd)
    o = jnp.einsum("bthk,hkd->btd", out, _param(self, "o_kernel", (h, hd, d), ("q_heads", "head_dim", "embed")).astype(dt))
    if c.o_bias:
      o = o + _param(self, "o_bias", (d,), ("embed",), nn.initializers.zeros).astype(dt)
    return o, new_layer_cache


class MLP(nn.Module):
  config: ModelConfig

  @nn.compact
  def __call__(self, x):
    c = self.config
    dt = c.compute_dtype
    gate = x @ _param(self, "gate_kernel", (c.hidden_size, c.intermediate_size), ("embed", "mlp")).astype(dt)
    up = x @ _param(self, "up_kernel", (c.hidden_size, c.intermediate_size), ("embed", "mlp")).astype(dt)
    down = _param(self, "down_kernel", (c.intermediate_size, c.hidden_size), ("mlp", "embed")).astype(dt)
    return (nn.silu(gate) * up) @ down


class DecoderLayer(nn.Module):
  config: ModelConfig

  @nn.compact
  def __call__(self, x, layer_cache, cos, sin, mask, write_starts, write_valid):
    attn_out, new_cache = Attention(self.config, name="attn")(
        RMSNorm(self.config, name="input_norm")(x), cos, sin, mask, layer_cache, write_starts, write_valid)
    x = x + attn_out
    x = x + MLP(self.config, name="mlp")(RMSNorm(self.config, name="post_attn_norm")(x))
    return x, new_cache


class Decoder(nn.Module):
  """tokens [B, T] -> final-normed hidden states [B, T, D] (and the updated cache when one is given).

  positions: [B, T] rotary positions; segment_ids: [B, T] with 0 for padding. Unembed with `unembed_weight`.
  """
  config: ModelConfig

  @nn.compact
  def __call__(self, tokens, positions, segment_ids, cache: Optional[KVCache] = None
               ) -> Tuple[jnp.ndarray, Optional[KVCache]]:
    c = self.config
    embedding = _param(self, "embedding", (c.vocab_size, c.hidden_size), ("vocab", "embed"))
    x = jnp.take(embedding, tokens, axis=0).astype(c.compute_dtype)
    cos, sin = rope_angles(inverse_frequencies(c), positions)

    t = tokens.shape[1]
    if cache is None:
      q_idx = k_idx = jnp.arange(t)[None, :]
      k_seg, write_starts, layer_caches = segment_ids, None, None
    else:
      write_starts = cache.lengths
      k_seg = _write_rows(cache.segment_ids, segment_ids, write_starts, segment_ids != 0)
      q_idx = write_starts[:, None] + jnp.arange(t)[None, :]
      k_idx = jnp.arange(cache.capacity)[None, :]
      layer_caches = (cache.k, cache.v)
    # [B, Tq, Tk]: causal by slot order, same non-zero segment.
    mask = ((k_idx[:, None, :] <= q_idx[:, :, None])
            & (k_seg[:, None, :] == segment_ids[:, :, None]) & (segment_ids[:, :, None] != 0))

    layer = DecoderLayer
    if c.remat:
      layer = nn.remat(layer, prevent_cse=False)
    stack = nn.scan(layer, variable_axes={"params": 0}, split_rngs={"params": True},
                    in_axes=(0, nn.broadcast, nn.broadcast, nn.broadcast, nn.broadcast, nn.broadcast),
                    length=c.num_layers, metadata_params={nn.PARTITION_NAME: "layers"})
    x, new_layer_caches = stack(c, name="layers")(x, layer_caches, cos, sin, mask, write_starts, segment_ids != 0)
    x = RMSNorm(c, name="final_norm")(x)
    if not c.tie_embeddings:
      _param(self, "lm_head", (c.hidden_size, c.vocab_size), ("embed", "vocab"))
    if cache is None:
      return x, None
    new_cache = KVCache(k=new_layer_caches[0], v=new_layer_caches[1], segment_ids=k_seg,
                        lengths=cache.lengths + jnp.sum(segment_ids != 0, axis=1).astype(jnp.int32))
    return x, new_cache


def unembed_weight(config: ModelConfig, params) -> jnp.ndarray:
  """[D, V] output projection (the transposed embedding when tied)."""
  if config.tie_embeddings:
    return params["embedding"].T
  return params["lm_head"]


def logits_from_hidden(config: ModelConfig, params, hidden: jnp.ndarray) -> jnp.ndarray:
  """Full f32 logits [..., V]; for scoring long sequences use the vocab-chunked path in `scoring`."""
  w = unembed_weight(config, params).astype(config.compute_dtype)
  return jnp.einsum("...d,dv->...v", hidden.astype(config.compute_dtype), w, preferred_element_type=jnp.float32)


def positions_from_segments(segment_ids: jnp.ndarray) -> jnp.ndarray:
  """Rotary positions that restart at 0 for every segment; padding (segment 0) gets position 0.

  Works for right padding, left padding and packed rows alike.
  """
  t = segment_ids.shape[-1]
  idx = jnp.arange(t)
  prev = jnp.concatenate([jnp.full_like(segment_ids[..., :1], -1), segment_ids[..., :-1]], axis=-1)
  starts = jax.lax.cummax(jnp.where(segment_ids != prev, idx, 0), axis=segment_ids.ndim - 1)
  return jnp.where(segment_ids != 0, idx - starts, 0).astype(jnp.int32)


def init_params(config: ModelConfig, rng: jax.Array):
  """Random parameters (unboxed plain pytree) for `config`."""
  tokens = jnp.zeros((1, 1), jnp.int32)
  init = jax.jit(lambda key: nn.meta.unbox(Decoder(config).init(key, tokens, tokens, jnp.ones_like(tokens))))
  return init(rng)["params"]


def _abstract_variables(config: ModelConfig):
  tokens = jnp.zeros((1, 1), jnp.int32)
  return jax.eval_shape(lambda: Decoder(config).init(jax.random.key(0), tokens, tokens, jnp.ones_like(tokens)))


def logical_axes(config: ModelConfig):
  """Pytree (same structure as params) of logical-axis PartitionSpecs, without allocating anything."""
  return nn.get_partition_spec(_abstract_variables(config))["params"]


def abstract_params(config: ModelConfig):
  """ShapeDtypeStructs of the params (for loaders and checkpoint restore targets)."""
  return nn.meta.unbox(_abstract_variables(config))["params"]


def cache_shardings(cache: KVCache, mesh) -> KVCache:
  """NamedShardings for a KV cache on `mesh`: batch over data x fsdp, KV heads over tensor."""
  def named(axes, x):
    return NamedSharding(mesh, sharding_lib.logical_to_spec(P(*axes), x.shape, mesh))
  kv_axes = ("layers", "batch", None, "kv_heads", "head_dim")
  return KVCache(k=named(kv_axes, cache.k), v=named(kv_axes, cache.v),
                 segment_ids=named(("batch", None), cache.segment_ids), lengths=named(("batch",), cache.lengths))


def param_shardings(config: ModelConfig, mesh, rules=None):
  """NamedShardings of the params on `mesh` via the logical-axis rules (see `parallel.sharding`)."""
  return sharding_lib.param_shardings(logical_axes(config), abstract_params(config), mesh, rules)


def forward(config: ModelConfig, params, tokens, positions=None, segment_ids=None, cache=None):
  """Functional entry point: returns (hidden [B, T, D], new cache or None)."""
  if segment_ids is None:
    segment_ids = jnp.ones_like(tokens)
  if positions is None:
    positions = positions_from_segments(segment_ids)
  return Decoder(config).apply({"params": params}, tokens, positions, segment_ids, cache)
