"""The low-precision compute path keeps every product on the native bf16 kernel: `models.matmul` (a custom VJP for
the projections and the unembedding) and `models.blocked_attention` (causal attention in query blocks with a
flash-style backward pass).

Two things are checked. The numbers: values and gradients agree with an f32 computation of the same operands
(blocked attention in f32 agrees with the einsum attention to float rounding). The kernels: in the compiled HLO of a
bf16 train step and a bf16 decode step on the CPU backend, every dot multiplies two bf16 operands. Plain autodiff
of a bf16 matmul fails that check (its backward products take the f32 cotangent), which the control test shows.
f32 takes the same functions (their f32 gradients against torch autograd: tests/test_models.py).
"""
import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agentopd_jax.batching.collate import TrainBatch
from agentopd_jax.models import config as model_config, transformer
from agentopd_jax.models.blocked_attention import blocked_attention
from agentopd_jax.models.matmul import copy_transpose_last2, matmul
from agentopd_jax.objectives.registry import LossCore, LossParams
from agentopd_jax.sampling.sampler import SamplingParams, Sampler
from agentopd_jax.training.train_step import OptimConfig, init_state, make_optimizer, make_train_step, split_minibatches

F32 = model_config.preset("tiny", vocab_size=256, hidden_size=64, intermediate_size=128, num_layers=2, num_heads=4,
                          num_kv_heads=2, head_dim=16)
BF16 = F32.replace(dtype="bfloat16")


def dot_operand_dtypes(hlo: str, min_outputs: int = 256):
  """(lhs dtype, rhs dtype) of every dot in optimised HLO text with at least `min_outputs` output elements, looked
  up in the dot's own computation. Smaller products (a decode step's score against its own one new key) are
  vector work, outside any GEMM kernel."""
  pairs = []
  for computation in re.split(r"\n(?=\S)", hlo):
    types = dict(re.findall(r"%([\w.\-]+) = (\w+)\[", computation))
    for shape, lhs, rhs in re.findall(r"= \w+\[([\d,]*)\]\{[^}]*\} dot\(%([\w.\-]+), %([\w.\-]+)\)", computation):
      if np.prod([int(d) for d in shape.split(",") if d]) >= min_outputs:
        pairs.append((types.get(lhs), types.get(rhs)))
  return pairs


def _bf16_grad_hlo(fn, *args) -> str:
  return jax.jit(jax.grad(fn, argnums=tuple(range(len(args))))).lower(*args).compile().as_text()


def test_copy_transpose_swaps_the_last_two_dims():
  a = jnp.arange(2 * 3 * 16 * 5, dtype=jnp.float32).reshape(2, 3, 16, 5)
  np.testing.assert_array_equal(copy_transpose_last2(a), np.swapaxes(np.asarray(a), -1, -2))
  odd = jnp.arange(7 * 4, dtype=jnp.bfloat16).reshape(7, 4)  # rows not a multiple of 8: the plain transpose
  np.testing.assert_array_equal(copy_transpose_last2(odd), np.asarray(odd).T)


@pytest.mark.parametrize("contract", [1, 2])
def test_matmul_values_and_gradients_match_f32(contract):
  rng = np.random.default_rng(contract)
  x = jnp.asarray(rng.normal(size=(4, 24, 8, 6) if contract == 2 else (4, 24, 48)), jnp.bfloat16)
  w = jnp.asarray(rng.normal(size=(8, 6, 40) if contract == 2 else (48, 40)), jnp.float32)
  c = jnp.asarray(rng.normal(size=(4, 24, 40)), jnp.float32)

  def ours(x, w):
    return jnp.sum(matmul(x, w, contract).astype(jnp.bfloat16).astype(jnp.float32) * c)

  def f32(x, w):  # the same bf16-rounded operands and rounded output, all in f32
    y = jnp.tensordot(x.astype(jnp.float32), w.astype(jnp.bfloat16).astype(jnp.float32), contract)
    return jnp.sum(y.astype(jnp.bfloat16).astype(jnp.float32) * c)

  out = matmul(x, w, contract)
  assert out.dtype == jnp.float32 and out.shape == (4, 24, 40)
  ref = jnp.tensordot(x.astype(jnp.float32), w.astype(jnp.bfloat16).astype(jnp.float32), contract)
  np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)  # exact products, f32 sums in another order
  (dx, dw), (rx, rw) = jax.grad(ours, (0, 1))(x, w), jax.grad(f32, (0, 1))(x, w)
  assert dx.dtype == jnp.bfloat16 and dw.dtype == jnp.float32  # the weight gradient is never rounded to bf16
  # Ours rounds the cotangent c (f32) to bf16 before the products: relative 2^-8 per element, so a few 1e-3.
  np.testing.assert_allclose(np.asarray(dx, np.float32), rx, rtol=2e-2, atol=2e-2 * float(jnp.max(jnp.abs(rx))))
  np.testing.assert_allclose(dw, rw, rtol=2e-2, atol=1e-2 * float(jnp.max(jnp.abs(rw))))


def test_matmul_rejects_mismatched_contraction():
  with pytest.raises(ValueError, match="last 1 dims"):
    matmul(jnp.zeros((2, 3), jnp.bfloat16), jnp.zeros((4, 5)))


def test_matmul_backward_products_are_bf16_while_plain_autodiff_is_not():
  rng = np.random.default_rng(0)
  x = jnp.asarray(rng.normal(size=(64, 48)), jnp.bfloat16)
  w = jnp.asarray(rng.normal(size=(48, 40)), jnp.float32)
  c = jnp.asarray(rng.normal(size=(64, 40)), jnp.float32)

  def plain(x, w):
    y = jnp.einsum("mk,kn->mn", x, w.astype(jnp.bfloat16), preferred_element_type=jnp.float32)
    return jnp.sum(y.astype(jnp.bfloat16).astype(jnp.float32) * c)

  def ours(x, w):
    return jnp.sum(matmul(x, w).astype(jnp.bfloat16).astype(jnp.float32) * c)

  plain_dots, our_dots = dot_operand_dtypes(_bf16_grad_hlo(plain, x, w)), dot_operand_dtypes(_bf16_grad_hlo(ours, x, w))
  assert any("f32" in pair for pair in plain_dots), plain_dots  # the control: the check sees the f32 fallback
  assert len(our_dots) == 2 and all(pair == ("bf16", "bf16") for pair in our_dots), our_dots


def _packed_mask(b, t, seed):
  """Causal ∧ same segment ∧ valid for rows packing two samples, one plain row and one mostly padding."""
  seg = np.zeros((b, t), np.int32)
  seg[0, :25], seg[0, 25:37] = 1, 2
  seg[1, :] = 1
  seg[2, :10] = 1
  idx = np.arange(t)
  valid = seg != 0
  mask = (idx[None, None, :] <= idx[None, :, None]) & (seg[:, None, :] == seg[:, :, None]) & valid[:, :, None]
  return jnp.asarray(mask), jnp.asarray(valid)[:, :, None, None]


@pytest.mark.parametrize("dtype, tol", [(jnp.float32, 1e-5), (jnp.bfloat16, 5e-2)])
def test_blocked_attention_matches_einsum_attention(dtype, tol):
  """T = 40 in blocks of 16 (the last one short), 4 query heads over 2 KV heads, packed rows and padding."""
  rng = np.random.default_rng(1)
  b, t, h, kv, hd = 3, 40, 4, 2, 16
  mask, valid = _packed_mask(b, t, 1)
  q = jnp.asarray(rng.normal(size=(b, t, h, hd)), dtype)
  k, v = (jnp.asarray(rng.normal(size=(b, t, kv, hd)), dtype) for _ in range(2))
  weight = jnp.asarray(rng.normal(size=(b, t, h, hd)), jnp.float32) * valid  # padding rows feed nothing

  def einsum_loss(q, k, v):
    return jnp.sum(transformer._xla_attention(q, k, v, mask, None, None).astype(jnp.float32) * weight)

  def blocked_loss(q, k, v):
    return jnp.sum(blocked_attention(q, k, v, mask, block=16).astype(jnp.float32) * weight)

  ref = transformer._xla_attention(q, k, v, mask, None, None).astype(jnp.float32) * valid
  out = blocked_attention(q, k, v, mask, block=16)
  assert out.dtype == dtype and out.shape == q.shape
  np.testing.assert_allclose(np.asarray(out, np.float32) * valid, ref, atol=tol)
  ours_grads = jax.jit(jax.grad(blocked_loss, (0, 1, 2)))(q, k, v)
  for ours, theirs in zip(ours_grads, jax.grad(einsum_loss, (0, 1, 2))(q, k, v)):
    scale = float(jnp.max(jnp.abs(theirs.astype(jnp.float32))))
    np.testing.assert_allclose(np.asarray(ours, np.float32), np.asarray(theirs, np.float32), atol=tol * scale)


@pytest.mark.parametrize("dtype, tol", [(jnp.float32, 1e-5), (jnp.bfloat16, 5e-2)])
@pytest.mark.parametrize("shared", [False, True])
def test_blocked_attention_over_a_cache_matches_einsum_attention(dtype, tol, shared):
  """A chunk that continues a cache of S = 20 slots (some empty): every query block also scores the cached keys, per
  segment or (a shared prefix) for every segment of the chunk; the flash backward's gradients (queries, the chunk's
  keys and values, and the cache's) match autodiff of the einsum attention."""
  rng = np.random.default_rng(2)
  b, t, s, h, kv, hd = 3, 40, 20, 4, 2, 16
  mask, valid = _packed_mask(b, t, 2)
  seg = np.asarray(jnp.any(mask, axis=-1)).astype(np.int32)  # valid rows
  seg[0, 25:37] = 2
  cache_seg = np.ones((b, s), np.int32)
  cache_seg[2, 15:] = 0  # empty slots
  seen = (cache_seg != 0)[:, None, :] if shared else cache_seg[:, None, :] == seg[:, :, None]
  cache_mask = jnp.asarray(seen & (seg != 0)[:, :, None])
  q = jnp.asarray(rng.normal(size=(b, t, h, hd)), dtype)
  k, v = (jnp.asarray(rng.normal(size=(b, t, kv, hd)), dtype) for _ in range(2))
  ck, cv = (jnp.asarray(rng.normal(size=(b, kv, s, hd)), dtype) for _ in range(2))
  ref = transformer._xla_attention(q, k, v, mask, (ck, cv), cache_mask).astype(jnp.float32) * valid
  out = blocked_attention(q, k, v, mask, block=16, cache=(ck, cv, cache_mask))
  assert out.dtype == dtype and out.shape == q.shape
  np.testing.assert_allclose(np.asarray(out, np.float32) * valid, ref, atol=tol)

  weight = jnp.asarray(rng.normal(size=q.shape), jnp.float32) * valid  # padding rows feed nothing
  def loss(attend):
    return lambda q, k, v, ck, cv: jnp.sum(attend(q, k, v, ck, cv).astype(jnp.float32) * weight)
  blocked = loss(lambda q, k, v, ck, cv: blocked_attention(q, k, v, mask, block=16, cache=(ck, cv, cache_mask)))
  einsum = loss(lambda q, k, v, ck, cv: transformer._xla_attention(q, k, v, mask, (ck, cv), cache_mask))
  got = jax.grad(blocked, argnums=range(5))(q, k, v, ck, cv)
  want = jax.grad(einsum, argnums=range(5))(q, k, v, ck, cv)
  for g, w in zip(got, want):
    assert g.dtype == dtype
    scale = float(jnp.max(jnp.abs(w.astype(jnp.float32))))
    np.testing.assert_allclose(np.asarray(g, np.float32), np.asarray(w, np.float32), atol=tol * scale)


def test_every_precision_takes_the_same_path():
  """f32 and bf16 alike run the projections through the custom VJP and unroll the layers of a call without a cache
  on the CPU backend (f32's gradients against torch autograd: tests/test_models.py)."""
  params = transformer.init_params(F32, jax.random.key(0))
  tokens = jnp.ones((2, 8), jnp.int32)
  for config in (F32, BF16):
    assert "custom_vjp_call" in str(jax.make_jaxpr(lambda p: transformer.forward(config, p, tokens)[0])(params))
    assert transformer._layer_unroll(config) == (config.num_layers if jax.default_backend() == "cpu" else 1)
  assert transformer._layer_unroll(BF16, cached=True) == transformer._layer_unroll(BF16)
  assert transformer._layer_unroll(F32, cached=True) == 1  # an f32 decode step keeps the loop
  assert transformer._layer_unroll(F32.replace(remat=True)) == 1  # and so does an f32 step with remat


def test_bf16_train_step_and_decode_multiply_only_bf16():
  """Forward, backward and the decode loop: no dot of the compiled programs takes an f32 operand."""
  rng = np.random.default_rng(0)
  rows, width = 8, 32
  seg = np.ones((rows, width), np.int32)
  mask = (np.arange(width)[None] >= 12).astype(np.float32) * np.ones((rows, 1), np.float32)
  batch = TrainBatch(tokens=rng.integers(3, 256, (rows, width)).astype(np.int32), segment_ids=seg,
                     positions=np.tile(np.arange(width, dtype=np.int32), (rows, 1)), loss_mask=mask,
                     advantages=mask.copy(), old_logprobs=np.zeros_like(mask))
  params = transformer.init_params(F32, jax.random.key(0))
  optimizer = make_optimizer(OptimConfig(learning_rate=1e-6))
  step = make_train_step(BF16, LossParams(core=LossCore(kl_coef=0.01, entropy_coef=0.001)), optimizer,
                         with_reference=True)
  state = init_state(params, optimizer, reference_params=params)
  hlo = step.lower(state, split_minibatches(batch, rows, rows // 2)[0]).compile().as_text()
  dots = dot_operand_dtypes(hlo)
  assert len(dots) >= 20 and all(pair == ("bf16", "bf16") for pair in dots), [p for p in dots if p != ("bf16",) * 2]

  # A chunk that continues a filled cache (a later turn's prefill, shared-prefix scoring) multiplies in bf16 too.
  cache = transformer.KVCache.init(BF16, rows, 16).replace(segment_ids=jnp.ones((rows, 16), jnp.int32),
                                                           lengths=jnp.full((rows,), 16, jnp.int32))
  continued = jax.jit(lambda p, c: transformer.forward(BF16, p, jnp.asarray(batch.tokens), jnp.asarray(batch.positions)
                                                       + 16, jnp.asarray(seg), c)[0])
  dots = dot_operand_dtypes(continued.lower(params, cache).compile().as_text())
  assert len(dots) >= 10 and all(pair == ("bf16", "bf16") for pair in dots), dots

  sampler = Sampler(BF16, pad_id=0)
  calls = []

  def recording(jitted):
    def call(*args, **kwargs):
      calls.append((jitted, jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), args), kwargs))
      return jitted(*args, **kwargs)
    return call

  sampler._append, sampler._decode = recording(sampler._append), recording(sampler._decode)
  out = sampler.generate(params, [[5, 6, 7, 8]] * 4, jax.random.key(1), SamplingParams(max_new_tokens=4))
  assert out.tokens.shape[0] == 4 and len(calls) == 2  # the prefill, then the decode loop
  for jitted, args, kwargs in calls:
    dots = dot_operand_dtypes(jitted.lower(*args, **kwargs).compile().as_text())
    assert dots and all(pair == ("bf16", "bf16") for pair in dots), dots


def test_decode_writes_a_bf16_cache_in_place(monkeypatch):
  """On CPU the sampler keeps a bf16 cache as its uint16 bit pattern (`transformer.storage_dtype`): the compiled
  decode loop then has no op that widens the [layers, B, kv, S, hd] cache to f32 (XLA:CPU has no bf16 scatter),
  and the tokens and log-probs are those of a cache kept in bf16, bit for bit."""
  params = transformer.init_params(F32, jax.random.key(0))
  prompts = [[5, 6, 7, 8, 9], [11, 12], [13] * 9]
  sampling = SamplingParams(max_new_tokens=6, temperature=1.0)
  assert transformer.storage_dtype(BF16) == jnp.uint16 and transformer.storage_dtype(F32) == jnp.float32

  sampler = Sampler(BF16, pad_id=0)
  calls = []
  decode = sampler._decode

  def recording(*args, **kwargs):
    calls.append((jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype), args), kwargs))
    return decode(*args, **kwargs)

  sampler._decode = recording
  out = sampler.generate(params, prompts, jax.random.key(1), sampling)
  args, kwargs = calls[0]
  cache = args[1].cache
  assert cache.k.dtype == jnp.uint16
  hlo = decode.lower(*args, **kwargs).compile().as_text()
  widened = f"f32[{','.join(map(str, cache.k.shape))}]"
  assert widened not in hlo

  monkeypatch.setattr(transformer, "storage_dtype", lambda config: config.compute_dtype)
  plain = Sampler(BF16, pad_id=0).generate(params, prompts, jax.random.key(1), sampling)
  np.testing.assert_array_equal(out.tokens, plain.tokens)
  np.testing.assert_array_equal(out.logprobs, plain.logprobs)
