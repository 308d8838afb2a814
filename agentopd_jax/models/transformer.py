"""One Flax decoder for Qwen2/Qwen2.5, Qwen3 and Llama 3.

Every call appends a chunk of tokens: without a cache the chunk is the whole (possibly padded or packed)
batch; with a `KVCache` the chunk's keys and values are written at each row's own write pointer, so prefill,
one-token decode and multi-turn continuation are the same code path. Padding is expressed by segment id 0 and
attention only connects tokens of the same non-zero segment, which makes left/right padding and packing give the
same logits as unpadded rows. Attention runs through our einsum path or `jax.nn.dot_product_attention` (cuDNN flash
attention on a GPU), as `ModelConfig.attention_impl` says; both give the same logits.

Parameters carry logical axis names (see `parallel.sharding`); layers are stacked on a leading `layers` axis and
run with `nn.scan`, so compile time does not grow with depth (on the CPU backend the scan is unrolled:
`_layer_unroll`). The projections go through `matmul` and the attention of a chunk (anything but a one-token decode
step) through `blocked_attention`, in every precision: in bf16 they keep every product, backward passes included,
on the native bf16 kernel; in f32 too they skip the scores above the causal diagonal, keep no [T, T] probabilities
for the backward pass and give the weight gradients row-major operands (docs/benchmarks.md: the f32 update step
1.45x faster on CPU).
"""
from __future__ import annotations

import functools
from typing import Optional, Tuple

import flax.linen as nn
import flax.struct
import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec as P

from agentopd_jax.models import matmul
from agentopd_jax.models.blocked_attention import blocked_attention
from agentopd_jax.models.config import ModelConfig
from agentopd_jax.parallel import sharding as sharding_lib
from agentopd_jax.models.rope import apply_rope, rope_angles

_init = nn.initializers.normal(stddev=0.02)


def _param(module: nn.Module, name: str, shape, axes, init=_init):
  return module.param(name, nn.with_logical_partitioning(init, axes), shape, module.config.weight_dtype)


@flax.struct.dataclass
class KVCache:
  """Per-row key/value cache.

  k, v: [layers, B, kv_heads, S, head_dim] (heads before slots so attention reads them without a transpose), in the
  compute dtype or stored as its bit pattern (`storage_dtype`); segment_ids: [B, S] (0 = empty slot); lengths: [B]
  write pointer, which is also the number of valid tokens in the row (valid slots are always the prefix [0, lengths)).
  """
  k: jnp.ndarray
  v: jnp.ndarray
  segment_ids: jnp.ndarray
  lengths: jnp.ndarray

  @property
  def capacity(self) -> int:
    return self.k.shape[3]

  @classmethod
  def init(cls, config: ModelConfig, batch: int, capacity: int, dtype=None) -> "KVCache":
    shape = (config.num_layers, batch, config.num_kv_heads, capacity, config.head_dim)
    dtype = config.compute_dtype if dtype is None else dtype
    return cls(k=jnp.zeros(shape, dtype), v=jnp.zeros(shape, dtype),
               segment_ids=jnp.zeros((batch, capacity), jnp.int32), lengths=jnp.zeros((batch,), jnp.int32))


def storage_dtype(config: ModelConfig):
  """The dtype a cache that is written step after step (the sampler's) keeps its keys and values in: on the CPU
  backend below f32, the uint16 bit pattern of the compute dtype, else the compute dtype itself.

  Why: XLA:CPU has no bf16 scatter. Writing one decode step's keys into a bf16 cache widens the whole cache to f32
  and back, which for 32 rows of ~1 k slots was most of the step's time; a uint16 scatter is done in place, and
  attention reads each layer's slots through a bitcast."""
  dt = jnp.dtype(config.compute_dtype)
  return jnp.uint16 if dt.itemsize == 2 and jax.default_backend() == "cpu" else dt


def to_storage(x, dtype):
  """Keys or values in the compute dtype as a cache of `dtype` stores them (`storage_dtype`)."""
  if dtype == jnp.uint16 and x.dtype != jnp.uint16:
    return jax.lax.bitcast_convert_type(x, jnp.uint16)
  return x.astype(dtype)


def _from_storage(x, dt):
  return jax.lax.bitcast_convert_type(x, dt) if x.dtype == jnp.uint16 else x


def _chunk_slots(starts: jnp.ndarray, valid: jnp.ndarray, capacity: int) -> jnp.ndarray:
  """Cache slot of every chunk token: starts[b] + i where valid, else `capacity` (out of range, dropped).

  Dropping padding (rather than writing zeros) keeps the invariant that slots past a row's length were never
  touched, and an out-of-range write is discarded instead of being clamped onto live slots.
  """
  return jnp.where(valid, starts[:, None] + jnp.arange(valid.shape[1])[None, :], capacity)


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


def _xla_attention(q, k, v, chunk_mask, layer_cache, cache_mask):
  """Our einsum path: query heads grouped per KV head (GQA without repeating K/V), the cache block read in its own
  [B, kv, S, hd] layout (no copy per decode step), one softmax over both blocks. q [B, T, H, hd] -> [B, T, H, hd]."""
  dt = q.dtype
  b, t, h, hd = q.shape
  kv = k.shape[2]
  qg = q.reshape(b, t, kv, h // kv, hd) * jnp.asarray(hd ** -0.5, dt)
  neg = jnp.finfo(jnp.float32).min
  blocks = [(jnp.swapaxes(k, 1, 2), jnp.swapaxes(v, 1, 2), chunk_mask)]
  if layer_cache is not None:
    blocks.insert(0, (layer_cache[0], layer_cache[1], cache_mask))
  scores = [jnp.where(m[:, None, None], jnp.einsum("btkgd,bksd->bkgts", qg, kb.astype(dt),
                                                   preferred_element_type=jnp.float32), neg)
            for kb, _, m in blocks]
  top = functools.reduce(jnp.maximum, [jnp.max(sc, axis=-1, keepdims=True) for sc in scores])
  probs = [jnp.exp(sc - top) for sc in scores]
  denom = sum(jnp.sum(p, axis=-1) for p in probs)  # [b, kv, g, t]
  out = sum(jnp.einsum("bkgts,bksd->bkgtd", p.astype(dt), vb.astype(dt), preferred_element_type=jnp.float32)
            for p, (_, vb, _) in zip(probs, blocks))
  out = (out / denom[..., None]).astype(dt)
  return jnp.transpose(out, (0, 3, 1, 2, 4)).reshape(b, t, h, hd)


def _dot_product_attention(q, k, v, chunk_mask, layer_cache, cache_mask, implementation):
  """`jax.nn.dot_product_attention` (cuDNN flash attention when implementation="cudnn") over the keys
  [cache block ++ chunk], with one boolean mask [B, 1, T, S + T] for causality, segments and padding.

  The cache is concatenated (a copy per step: the kernel takes one key sequence). Without a cache `is_causal` is
  also set: the mask already implies it, but it lets cuDNN skip the blocks above the diagonal.
  """
  mask = chunk_mask
  if layer_cache is not None:
    k = jnp.concatenate([jnp.swapaxes(layer_cache[0], 1, 2).astype(k.dtype), k], axis=1)
    v = jnp.concatenate([jnp.swapaxes(layer_cache[1], 1, 2).astype(v.dtype), v], axis=1)
    mask = jnp.concatenate([cache_mask, chunk_mask], axis=-1)
  return jax.nn.dot_product_attention(q, k, v, mask=mask[:, None], is_causal=layer_cache is None,
                                      implementation=implementation)


def _project(equation: str, x, kernel, dt):
  """x · kernel in the compute dtype `dt`, accumulated and returned in f32 by the matmul, then rounded to `dt`: what a
  bf16 matmul in torch computes. Through `matmul.matmul`, whose custom VJP keeps the backward pass in bf16 on the
  native bf16 kernel too (XLA's CPU backend runs a bf16 x bf16 dot fast only with an f32 result and its contracted
  dimension last on the left; on GPU/TPU the rounding fuses into the matmul)."""
  lhs, rhs = equation.split("->")[0].split(",")
  return matmul.matmul(x.astype(dt), kernel, contract=len(set(lhs) & set(rhs))).astype(dt)


def _dense(module: nn.Module, equation: str, x, name: str, shape, axes, dt):
  """`_project` through the kernel `name`, plus its LoRA term where the params carry one (`lora.attach`): the
  kernel's input axes flattened times `{name}_lora_a` [in, r] (already scaled) times `{name}_lora_b` [r, out]. The
  adapter stays a separate low-rank product, so the gradient of a LoRA update reaches a and b without ever forming a
  full-size weight gradient, and a small update is not rounded away into a bf16 kernel."""
  y = _project(equation, x, _param(module, name, shape, axes), dt)
  if not module.has_variable("params", f"{name}_lora_a"):
    return y
  a, b = module.get_variable("params", f"{name}_lora_a"), module.get_variable("params", f"{name}_lora_b")
  lhs, rhs = equation.split("->")[0].split(",")
  flat = x.reshape(x.shape[:x.ndim - len(set(lhs) & set(rhs))] + (-1,)).astype(dt)
  low = matmul.matmul(flat, a.astype(dt), contract=1).astype(dt)
  return y + matmul.matmul(low, b.astype(dt), contract=1).astype(dt).reshape(y.shape)


class Attention(nn.Module):
  config: ModelConfig

  @nn.compact
  def __call__(self, x, cos, sin, chunk_mask, layer_cache, cache_mask, cache_rows=None, read=None):
    """Attention of the chunk x [B, T, D] over (cached keys, then the chunk's own keys).

    The cache block is only read here; the chunk's new (k, v) are returned and written into the cache once for all
    layers by the caller, so a decode step never copies the cache. One softmax spans both blocks. `cache_rows` [B]:
    the cache holds shared prefixes and row b reads prefix cache_rows[b] (gathered here, one layer at a time).
    `read` [B, K]: only the queries at these chunk positions are computed (keys and values still at every position);
    the output is [B, K, D].
    """
    c = self.config
    dt = c.compute_dtype
    if cache_rows is not None:
      pick = jnp.maximum(cache_rows, 0)
      layer_cache = (jnp.take(layer_cache[0], pick, axis=0), jnp.take(layer_cache[1], pick, axis=0))
    if layer_cache is not None:
      layer_cache = (_from_storage(layer_cache[0], dt), _from_storage(layer_cache[1], dt))
    d, h, kv, hd = c.hidden_size, c.num_heads, c.num_kv_heads, c.head_dim
    x_q = x if read is None else _at(x, read)
    q = _dense(self, "btd,dhk->bthk", x_q, "q_kernel", (d, h, hd), ("embed", "q_heads", "head_dim"), dt)
    k = _dense(self, "btd,dhk->bthk", x, "k_kernel", (d, kv, hd), ("embed", "kv_heads", "head_dim"), dt)
    v = _dense(self, "btd,dhk->bthk", x, "v_kernel", (d, kv, hd), ("embed", "kv_heads", "head_dim"), dt)
    if c.qkv_bias:
      zeros = nn.initializers.zeros
      q = q + _param(self, "q_bias", (h, hd), ("q_heads", "head_dim"), zeros).astype(dt)
      k = k + _param(self, "k_bias", (kv, hd), ("kv_heads", "head_dim"), zeros).astype(dt)
      v = v + _param(self, "v_bias", (kv, hd), ("kv_heads", "head_dim"), zeros).astype(dt)
    if c.qk_norm:
      q = RMSNorm(c, axis_name="head_dim", name="q_norm")(q)
      k = RMSNorm(c, axis_name="head_dim", name="k_norm")(k)
    q = apply_rope(q, cos, sin) if read is None else apply_rope(q, _at(cos, read), _at(sin, read))
    k = apply_rope(k, cos, sin)

    if read is not None:
      # A few queries per row: the einsum path over their rows of the masks.
      out = _xla_attention(q, k, v, _at(chunk_mask, read), layer_cache,
                           None if cache_mask is None else _at(cache_mask, read))
    elif c.attention_impl == "xla" and (layer_cache is None or q.shape[1] > 1):
      # A chunk (not a one-token decode step): no scores above the diagonal, flash backward.
      cached = None if layer_cache is None else (layer_cache[0], layer_cache[1], cache_mask)
      out = blocked_attention(q, k, v, chunk_mask, cache=cached)
    elif c.attention_impl == "xla":
      out = _xla_attention(q, k, v, chunk_mask, layer_cache, cache_mask)
    else:
      out = _dot_product_attention(q, k, v, chunk_mask, layer_cache, cache_mask,
                                   None if c.attention_impl == "dot_product" else "cudnn")
    o = _dense(self, "bthk,hkd->btd", out, "o_kernel", (h, hd, d), ("q_heads", "head_dim", "embed"), dt)
    if c.o_bias:
      o = o + _param(self, "o_bias", (d,), ("embed",), nn.initializers.zeros).astype(dt)
    return o, (k, v)


class MLP(nn.Module):
  config: ModelConfig

  @nn.compact
  def __call__(self, x):
    c = self.config
    dt = c.compute_dtype
    d, f = c.hidden_size, c.intermediate_size
    gate = _dense(self, "btd,df->btf", x, "gate_kernel", (d, f), ("embed", "mlp"), dt)
    up = _dense(self, "btd,df->btf", x, "up_kernel", (d, f), ("embed", "mlp"), dt)
    return _dense(self, "btf,fd->btd", nn.silu(gate) * up, "down_kernel", (f, d), ("mlp", "embed"), dt)


class DecoderLayer(nn.Module):
  config: ModelConfig

  @nn.compact
  def __call__(self, x, layer_cache, cos, sin, chunk_mask, cache_mask, cache_rows, read=None):
    attn_out, new_kv = Attention(self.config, name="attn")(
        RMSNorm(self.config, name="input_norm")(x), cos, sin, chunk_mask, layer_cache, cache_mask, cache_rows, read)
    x = (x if read is None else _at(x, read)) + attn_out
    x = x + MLP(self.config, name="mlp")(RMSNorm(self.config, name="post_attn_norm")(x))
    return x, new_kv


def _at(x, read):
  """x [B, T, ...] at the positions read [B, K] of each row: [B, K, ...]."""
  return jnp.take_along_axis(x, read.reshape(read.shape + (1,) * (x.ndim - 2)), axis=1)


def _read_layers(c: ModelConfig, params, x, layer_caches, cos, sin, chunk_mask, cache_mask, cache_rows, read):
  """The layer stack when only the final hidden states at `read` [B, K] are wanted: every layer but the last over
  all positions (their keys and values feed the next layer), the last with queries, residual and MLP at `read`
  only; and every layer's keys and values [L, B, T, kv, hd]. For a scorer that reads a few completion tokens per row,
  or a prefill that reads none, this drops most of the last layer's work. Each layer's weights and cache are indexed
  out of the stacks inside the loop, as `nn.scan` does, so no copy of the stacked weights is made."""
  def layer(x, i, where=None):
    p, lc = jax.tree.map(lambda a: jax.lax.dynamic_index_in_dim(a, i, keepdims=False), (params, layer_caches))
    return DecoderLayer(c, parent=None).apply({"params": p}, x, lc, cos, sin, chunk_mask, cache_mask, cache_rows,
                                              where)

  if c.remat:
    layer = jax.checkpoint(layer, prevent_cse=False)
  x, kv = jax.lax.scan(layer, x, jnp.arange(c.num_layers - 1), unroll=_layer_unroll(c, layer_caches is not None))
  x, last_kv = layer(x, c.num_layers - 1, read)
  return x, jax.tree.map(lambda a, b: jnp.concatenate([a, b[None]]), kv, last_kv)


def _layer_unroll(c: ModelConfig, cached: bool = False) -> int:
  """How many layers one step of the layer scan runs: on the CPU backend all of them below f32, and in f32 for a
  call without a KV cache (training, scoring) without remat; else 1.

  The scan stacks each layer's saved activations into [layers, ...] buffers with dynamic-update-slices and slices
  each layer's weights out of the stacks. XLA:CPU has no bf16 dynamic-update-slice: it widens the whole stack to f32
  and back at every layer, which made those copies a fifth of a bf16 update of the tiny model; in f32 the copies cost
  the tiny model's update step about 7 % (docs/benchmarks.md). Unrolled, the layers keep separate buffers. f32 keeps
  the loop for a decode step over a cache (unrolled, 32 rows of the small preset took 42 ms a step against 30) and
  under remat (unrolled, XLA kept more layers' recomputed activations live: docs/planning.md). Accelerators keep the
  rolled loop, whose compile time does not grow with depth."""
  if jax.default_backend() != "cpu" or (c.compute_dtype == jnp.float32 and (cached or c.remat)):
    return 1
  return c.num_layers


class Decoder(nn.Module):
  """tokens [B, T] -> final-normed hidden states [B, T, D] (and the updated cache when one is given).

  positions: [B, T] rotary positions; segment_ids: [B, T] with 0 for padding. Unembed with `unembed_weight`.
  cache_empty: static promise that `cache` holds no tokens yet, so attention need not read it.
  Without `cache_rows` a chunk token sees only the cached slots of its own segment.
  cache_rows: [B]: the cache holds P rows of shared prefixes and row b continues cache row cache_rows[b]
  (-1: none), each layer gathering its rows' keys and values as it reads them (no [layers, B, ...] copy of the
  cache, which the backward pass of the update would keep). Such a call returns no cache.
  cache_segments: [B] with cache_rows: the prefix of row b is segment cache_segments[b] of its cache row (prefixes
  packed several to a row); None: every filled slot of the cache row.
  read: [B, K] positions; the hidden states are returned at these only ([B, K, D]) and the last layer computes
  nothing else there (`_read_layers`).
  """
  config: ModelConfig

  @nn.compact
  def __call__(self, tokens, positions, segment_ids, cache: Optional[KVCache] = None, cache_empty: bool = False,
               cache_rows=None, cache_segments=None, read=None
               ) -> Tuple[jnp.ndarray, Optional[KVCache]]:
    c = self.config
    embedding = _param(self, "embedding", (c.vocab_size, c.hidden_size), ("vocab", "embed"))
    x = jnp.take(embedding, tokens, axis=0).astype(c.compute_dtype)
    cos, sin = rope_angles(c, positions)

    t = tokens.shape[1]
    valid = segment_ids != 0
    # Within the chunk: causal, same non-zero segment. [B, Tq, Tk]
    idx = jnp.arange(t)
    chunk_mask = ((idx[None, None, :] <= idx[None, :, None])
                  & (segment_ids[:, None, :] == segment_ids[:, :, None]) & valid[:, :, None])
    if cache is None or cache_empty:
      # Nothing cached to attend to (a first prefill): skip the cache block entirely.
      layer_caches = cache_mask = None
    else:
      # Every cached slot precedes the chunk, so only segment matching applies (empty slots are segment 0).
      layer_caches = (cache.k, cache.v)
      if cache_rows is not None:
        slots = cache.segment_ids[jnp.maximum(cache_rows, 0)]
        mine = slots != 0 if cache_segments is None else slots == cache_segments[:, None]
        seen = (mine & (cache_rows >= 0)[:, None])[:, None, :]
      else:
        seen = cache.segment_ids[:, None, :] == segment_ids[:, :, None]
      cache_mask = seen & valid[:, :, None]

    layer = DecoderLayer
    if c.remat:
      layer = nn.remat(layer, prevent_cse=False)
    stack = nn.scan(layer, variable_axes={"params": 0}, split_rngs={"params": True},
                    in_axes=(0, nn.broadcast, nn.broadcast, nn.broadcast, nn.broadcast, nn.broadcast),
                    length=c.num_layers, metadata_params={nn.PARTITION_NAME: "layers"},
                    unroll=_layer_unroll(c, cached=layer_caches is not None))
    if read is None:
      x, (new_k, new_v) = stack(c, name="layers")(x, layer_caches, cos, sin, chunk_mask, cache_mask, cache_rows)
    else:
      x, (new_k, new_v) = _read_layers(c, self.variables["params"]["layers"], x, layer_caches, cos, sin, chunk_mask,
                                       cache_mask, cache_rows, read)
    x = RMSNorm(c, name="final_norm")(x)
    if not c.tie_embeddings:
      _param(self, "lm_head", (c.hidden_size, c.vocab_size), ("embed", "vocab"))
    if cache is None or cache_rows is not None:
      return x, None
    # One scatter per buffer for all layers; inside the decode while_loop XLA updates it in place.
    slots = _chunk_slots(cache.lengths, valid, cache.capacity)
    rows = jnp.arange(tokens.shape[0])[:, None]
    # new_k: [L, B, T, kv, hd]; indexing dims (B, S) of [L, B, kv, S, hd] puts (B, T) first: [B, T, L, kv, hd].
    new_cache = KVCache(
        k=cache.k.at[:, rows, :, slots].set(to_storage(jnp.transpose(new_k, (1, 2, 0, 3, 4)), cache.k.dtype),
                                            mode="drop"),
        v=cache.v.at[:, rows, :, slots].set(to_storage(jnp.transpose(new_v, (1, 2, 0, 3, 4)), cache.v.dtype),
                                            mode="drop"),
        segment_ids=cache.segment_ids.at[rows, slots].set(segment_ids, mode="drop"),
        lengths=cache.lengths + jnp.sum(valid, axis=1).astype(jnp.int32))
    return x, new_cache


def prefix_cache(config: ModelConfig, params, tokens: jnp.ndarray, segment_ids: jnp.ndarray) -> KVCache:
  """The KV cache of shared prompt heads packed in rows `tokens` [P, W] (`segment_ids`: 1, 2, ... per head, 0 on
  padding), each head at positions from 0: what rows continue with `forward(cache_rows=...)`."""
  cache = KVCache.init(config, tokens.shape[0], tokens.shape[1])
  return forward(config, params, tokens, None, segment_ids, cache, cache_empty=True)[1]


def unembed_weight(config: ModelConfig, params) -> jnp.ndarray:
  """[D, V] output projection (the transposed embedding when tied)."""
  if config.tie_embeddings:
    return params["embedding"].T
  return params["lm_head"]


def unembed_rows(config: ModelConfig, params) -> jnp.ndarray:
  """[V, D] output projection as rows in the compute dtype (the embedding itself when tied, a transposed copy of the
  head else): what `matmul.by_rows` streams in a decode step."""
  dt = config.compute_dtype
  if config.tie_embeddings:
    return params["embedding"].astype(dt)
  return matmul.copy_transpose_last2(params["lm_head"].astype(dt))


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


@functools.lru_cache(maxsize=16)
def _jitted_init(config: ModelConfig):
  """One compiled initialiser per config (a fresh `jax.jit` of a new lambda would recompile at every call). Its dummy
  tokens are numpy: built with jnp while a caller's jit traces `init_params`, they would be that trace's tracers,
  kept by the cache and leaked into every later call."""
  tokens = np.zeros((1, 1), np.int32)
  return jax.jit(lambda key: nn.meta.unbox(Decoder(config).init(key, tokens, tokens, np.ones_like(tokens))))


def init_params(config: ModelConfig, rng: jax.Array):
  """Random parameters (unboxed plain pytree) for `config`."""
  return _jitted_init(config)(rng)["params"]


@functools.lru_cache(maxsize=16)
def _abstract_variables(config: ModelConfig):
  """The boxed variables' shapes, traced once per config: a run asks for them for its shardings, its restore targets
  and every step it builds, and each trace of the model's init costs a second. Numpy tokens, as `_jitted_init`'s."""
  tokens = np.zeros((1, 1), np.int32)
  return jax.eval_shape(lambda: Decoder(config).init(jax.random.key(0), tokens, tokens, np.ones_like(tokens)))


def logical_axes(config: ModelConfig):
  """Pytree (same structure as params) of logical-axis PartitionSpecs, without allocating anything."""
  return nn.get_partition_spec(_abstract_variables(config))["params"]


def abstract_params(config: ModelConfig):
  """ShapeDtypeStructs of the params (for loaders and checkpoint restore targets)."""
  return nn.meta.unbox(_abstract_variables(config))["params"]


def sharded_abstract_params(config: ModelConfig, mesh):
  """The params' shapes and dtypes with their mesh shardings: what a checkpoint is restored onto."""
  return jax.tree.map(lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),
                      abstract_params(config), param_shardings(config, mesh))


def cache_shardings(cache: KVCache, mesh) -> KVCache:
  """NamedShardings for a KV cache on `mesh`: batch over data x fsdp, KV heads over tensor."""
  def named(axes, x):
    return NamedSharding(mesh, sharding_lib.logical_to_spec(P(*axes), x.shape, mesh))
  kv_axes = ("layers", "batch", "kv_heads", None, "head_dim")
  return KVCache(k=named(kv_axes, cache.k), v=named(kv_axes, cache.v),
                 segment_ids=named(("batch", None), cache.segment_ids), lengths=named(("batch",), cache.lengths))


def param_shardings(config: ModelConfig, mesh, rules=None):
  """NamedShardings of the params on `mesh` via the logical-axis rules (see `parallel.sharding`)."""
  return sharding_lib.param_shardings(logical_axes(config), abstract_params(config), mesh, rules)


def forward(config: ModelConfig, params, tokens, positions=None, segment_ids=None, cache=None, cache_empty=False,
            cache_rows=None, cache_segments=None, read=None):
  """Functional entry point: returns (hidden [B, T, D] or at `read` [B, K, D], new cache or None)."""
  if segment_ids is None:
    segment_ids = jnp.ones_like(tokens)
  if positions is None:
    positions = positions_from_segments(segment_ids)
  return Decoder(config).apply({"params": params}, tokens, positions, segment_ids, cache, cache_empty, cache_rows,
                               cache_segments, read)
