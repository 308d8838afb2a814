"""Sharded forward, scoring and loading on a (data=2, fsdp=2, tensor=2) mesh of 8 fake CPU devices."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import NamedSharding, PartitionSpec as P

from agentopd_jax.batching.collate import ScoreBatch
from agentopd_jax.models import hf_io, transformer
from agentopd_jax.models.config import preset
from agentopd_jax.parallel import sharding
from agentopd_jax.scoring.fused import ScoreConfig, make_score_fn

CONFIG = preset("tiny", vocab_size=320, num_layers=2, hidden_size=64, intermediate_size=128, num_heads=4,
                num_kv_heads=2, head_dim=16, tie_embeddings=False)


@pytest.fixture(scope="module")
def mesh():
  assert jax.device_count() == 8, "tests/conftest.py must give 8 fake CPU devices"
  return sharding.make_mesh((2, 2, 2))


def _batch():
  b, t = 4, 20
  tokens = jax.random.randint(jax.random.key(9), (b, t), 0, CONFIG.vocab_size)
  seg = jnp.ones((b, t), jnp.int32).at[3, 12:].set(0)
  return ScoreBatch(tokens=tokens, segment_ids=seg, loss_mask=(seg > 0).astype(jnp.float32))


def test_params_are_really_sharded(mesh):
  shardings = transformer.param_shardings(CONFIG, mesh)
  assert shardings["layers"]["attn"]["q_kernel"].spec == P(None, "fsdp", "tensor", None)
  assert shardings["layers"]["mlp"]["down_kernel"].spec == P(None, "tensor", "fsdp")
  assert shardings["embedding"].spec == P("tensor", "fsdp")
  assert shardings["final_norm"]["scale"].spec == P(None)


def test_indivisible_axes_are_replicated(mesh):
  odd = CONFIG.replace(num_kv_heads=1, num_heads=3, vocab_size=321)
  shardings = transformer.param_shardings(odd, mesh)
  assert shardings["layers"]["attn"]["k_kernel"].spec == P(None, "fsdp", None, None)
  assert shardings["embedding"].spec == P(None, "fsdp")


def test_sharded_forward_and_scoring_equal_single_device(mesh):
  params = [transformer.init_params(CONFIG, jax.random.key(i)) for i in range(3)]
  batch = _batch()
  score_cfg = ScoreConfig(teacher="params", top_k=8, vocab_chunk=64)
  single = make_score_fn(CONFIG, score_cfg)(*params, batch)
  hidden_single, _ = transformer.forward(CONFIG, params[0], batch.tokens, None, batch.segment_ids)

  shardings = transformer.param_shardings(CONFIG, mesh)
  sharded_params = [jax.device_put(p, shardings) for p in params]
  sharded_batch = sharding.shard_batch(batch, mesh)
  assert len(sharded_params[0]["layers"]["mlp"]["up_kernel"].addressable_shards) == 8
  out = make_score_fn(CONFIG, score_cfg)(*sharded_params, sharded_batch)
  hidden, _ = jax.jit(lambda p, t, s: transformer.forward(CONFIG, p, t, None, s))(
      sharded_params[0], sharded_batch.tokens, sharded_batch.segment_ids)
  np.testing.assert_allclose(hidden, hidden_single, atol=1e-5)
  for name in ("policy_logprobs", "reference_logprobs", "teacher_logprobs", "policy_entropy",
               "policy_topk_logprobs", "teacher_topk_logprobs"):
    np.testing.assert_allclose(getattr(out, name), getattr(single, name), atol=1e-5, err_msg=name)
  np.testing.assert_array_equal(out.policy_topk_ids, single.policy_topk_ids)


def test_load_hf_onto_mesh(hf_checkpoints, mesh):
  _, path = hf_checkpoints["qwen2"]
  config, host = hf_io.load_hf(path)
  config_m, on_mesh = hf_io.load_hf(path, mesh=mesh)
  assert config_m == config
  q = on_mesh["layers"]["attn"]["q_kernel"]
  assert q.sharding.spec == P(None, "fsdp", "tensor", None)
  # Each device holds only its shard: a quarter of the q kernel on a 2x2 (fsdp x tensor) split.
  assert q.addressable_shards[0].data.size == q.size // 4
  jax.tree.map(lambda a, b: np.testing.assert_array_equal(np.asarray(a), np.asarray(b)), on_mesh, host)


def test_make_mesh_errors():
  with pytest.raises(ValueError, match="needs 12 devices"):
    sharding.make_mesh((3, 2, 2))
  with pytest.raises(ValueError, match="at most one -1"):
    sharding.make_mesh((-1, -1, 2))
  assert sharding.make_mesh((-1, 1, 2)).shape == {"data": 4, "fsdp": 1, "tensor": 2}


def test_sampler_on_mesh_equals_single_device(mesh):
  from agentopd_jax.sampling.sampler import Sampler, SamplingParams
  params = transformer.init_params(CONFIG, jax.random.key(0))
  prompts = [[1, 2, 3], [4, 5], [6, 7, 8, 9], [10]]
  sp = SamplingParams(max_new_tokens=8, temperature=1.0)
  single = Sampler(CONFIG).generate(params, prompts, jax.random.key(4), sp, cache_size=64)
  sharded_params = jax.device_put(params, transformer.param_shardings(CONFIG, mesh))
  sampler = Sampler(CONFIG, mesh=mesh)
  out = sampler.generate(sharded_params, prompts, jax.random.key(4), sp, cache_size=64)
  expected = NamedSharding(mesh, P(None, ("data", "fsdp"), "tensor", None, None))
  assert out.state.cache.k.sharding.is_equivalent_to(expected, 5)
  np.testing.assert_array_equal(out.tokens, single.tokens)
  np.testing.assert_allclose(out.logprobs, single.logprobs, atol=1e-5)
  more = sampler.continue_generation(sharded_params, out.state, [[11, 12]] * 4, jax.random.key(5), sp)
  assert more.state.cache.k.sharding.is_equivalent_to(expected, 5)
