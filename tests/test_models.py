"""Parity of our Flax decoder with transformers (fp32, CPU) for Qwen2, Qwen3 and Llama 3, plus checkpoint I/O."""
import json
import os

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
import pytest
import torch
import transformers

from agentopd_jax.models import hf_io, transformer
from agentopd_jax.models.config import ModelConfig, preset, PRESETS
from agentopd_jax.sampling.sampler import Sampler, SamplingParams

from conftest import HF_FAMILIES

TOL = 1e-4


def _our_logits(config, params, tokens, segment_ids=None, positions=None):
  hidden, _ = transformer.forward(config, params, jnp.asarray(tokens),
                                  None if positions is None else jnp.asarray(positions),
                                  None if segment_ids is None else jnp.asarray(segment_ids))
  return np.asarray(transformer.logits_from_hidden(config, params, hidden))


@pytest.mark.parametrize("family", HF_FAMILIES)
def test_logits_match_transformers(hf_checkpoints, family):
  model, path = hf_checkpoints[family]
  config, params = hf_io.load_hf(path)
  assert config.family == family
  # 160 tokens: past Llama's original_max_position_embeddings=64, so llama3 rope scaling is exercised.
  tokens = np.random.RandomState(0).randint(0, config.vocab_size, (3, 160))
  with torch.no_grad():
    expected = model(torch.tensor(tokens)).logits.numpy()
  ours = _our_logits(config, params, tokens)
  assert np.abs(ours - expected).max() <= TOL


@pytest.mark.parametrize("family", HF_FAMILIES)
def test_gradients_match_transformers(hf_checkpoints, family):
  """The backward pass in f32 (projections through `matmul`'s custom VJP, causal attention through
  `blocked_attention`'s flash backward, two query blocks at T = 160) against torch autograd of the same weights:
  the gradient of a weighted sum of target-token log-probs, tensor by tensor, in HF's names and layouts."""
  model, path = hf_checkpoints[family]
  config, params = hf_io.load_hf(path)
  rng = np.random.RandomState(1)
  tokens = rng.randint(0, config.vocab_size, (2, 160))
  weight = rng.normal(size=(2, 159)).astype(np.float32)

  def ours(params):
    hidden, _ = transformer.forward(config, params, jnp.asarray(tokens))
    logp = jax.nn.log_softmax(transformer.logits_from_hidden(config, params, hidden)[:, :-1], axis=-1)
    return jnp.sum(jnp.take_along_axis(logp, jnp.asarray(tokens[:, 1:, None]), axis=-1)[..., 0] * weight)

  grads = hf_io.to_hf_tensors(config, jax.jit(jax.grad(ours))(params))
  model.zero_grad()
  logp = torch.log_softmax(model(torch.tensor(tokens)).logits[:, :-1].float(), dim=-1)
  torch.sum(logp.gather(-1, torch.tensor(tokens[:, 1:, None])).squeeze(-1) * torch.tensor(weight)).backward()
  theirs = {name: p.grad.numpy() for name, p in model.named_parameters()}
  assert set(grads) == set(theirs)
  for name, g in grads.items():
    scale = float(np.abs(theirs[name]).max())
    np.testing.assert_allclose(g, theirs[name], atol=1e-4 * scale, rtol=1e-3, err_msg=name)
  model.zero_grad(set_to_none=True)


@pytest.mark.parametrize("family", HF_FAMILIES)
def test_greedy_generation_matches_transformers(hf_checkpoints, family):
  model, path = hf_checkpoints[family]
  config, params = hf_io.load_hf(path)
  prompts = [[3, 17, 42, 99, 5, 8], [250, 1, 77], [9] * 11]
  out = Sampler(config).generate(params, prompts, jax.random.key(0),
                                 SamplingParams(max_new_tokens=32, temperature=0.0))
  for b, prompt in enumerate(prompts):
    with torch.no_grad():
      generated = model.generate(torch.tensor([prompt]), max_new_tokens=32, do_sample=False,
                                 eos_token_id=None, pad_token_id=0)
    assert out.row(b) == generated[0, len(prompt):].tolist()
    assert out.finish_reasons[b] == "length"


@pytest.mark.parametrize("family", HF_FAMILIES)
def test_padding_and_packing_invariance(hf_checkpoints, family):
  _, path = hf_checkpoints[family]
  config, params = hf_io.load_hf(path)
  rng = np.random.RandomState(1)
  a, b = rng.randint(0, config.vocab_size, 23), rng.randint(0, config.vocab_size, 14)
  ref_a, ref_b = _our_logits(config, params, a[None])[0], _our_logits(config, params, b[None])[0]

  width = 30
  right = np.zeros((2, width), np.int64)
  right_seg = np.zeros((2, width), np.int32)
  right[0, :23], right_seg[0, :23] = a, 1
  right[1, :14], right_seg[1, :14] = b, 1
  out = _our_logits(config, params, right, right_seg)
  np.testing.assert_allclose(out[0, :23], ref_a, atol=TOL)
  np.testing.assert_allclose(out[1, :14], ref_b, atol=TOL)

  left = np.zeros((2, width), np.int64)
  left_seg = np.zeros((2, width), np.int32)
  left[0, -23:], left_seg[0, -23:] = a, 1
  left[1, -14:], left_seg[1, -14:] = b, 1
  out = _our_logits(config, params, left, left_seg)
  np.testing.assert_allclose(out[0, -23:], ref_a, atol=TOL)
  np.testing.assert_allclose(out[1, -14:], ref_b, atol=TOL)

  packed = np.concatenate([a, b, [0, 0, 0]])[None]
  packed_seg = np.array([[1] * 23 + [2] * 14 + [0] * 3], np.int32)
  out = _our_logits(config, params, packed, packed_seg)
  np.testing.assert_allclose(out[0, :23], ref_a, atol=TOL)
  np.testing.assert_allclose(out[0, 23:37], ref_b, atol=TOL)


@pytest.mark.parametrize("family", HF_FAMILIES)
def test_read_positions_give_a_full_forwards_states_there(hf_checkpoints, family):
  """forward(read=...) runs the last layer at the read positions only; its states there are the full forward's,
  in packed rows, in rows that continue shared heads (cache_rows), and appended to a cache."""
  _, path = hf_checkpoints[family]
  config, params = hf_io.load_hf(path)
  rng = np.random.RandomState(2)
  tokens = jnp.asarray(rng.randint(0, config.vocab_size, (2, 24)))
  seg = jnp.asarray([[1] * 10 + [2] * 11 + [0] * 3, [1] * 24])
  read = jnp.asarray([[0, 9, 10, 20, 20, 23], [5, 6, 7, 21, 22, 23]])
  full, _ = transformer.forward(config, params, tokens, segment_ids=seg)
  got, cache = transformer.forward(config, params, tokens, segment_ids=seg, read=read)
  assert cache is None and got.shape == (2, 6, config.hidden_size)
  np.testing.assert_allclose(got, jnp.take_along_axis(full, read[..., None], axis=1), atol=TOL)

  heads = transformer.prefix_cache(config, params, tokens[:, :8], jnp.asarray([[1] * 8, [1] * 5 + [0] * 3]))
  rows = jnp.asarray([1, 0])
  positions = jnp.asarray([[5] * 24, [8] * 24]) + transformer.positions_from_segments(seg)
  kw = dict(positions=positions, segment_ids=seg, cache=heads, cache_rows=rows)
  full, _ = transformer.forward(config, params, tokens, **kw)
  got, _ = transformer.forward(config, params, tokens, **kw, read=read)
  np.testing.assert_allclose(got, jnp.take_along_axis(full, read[..., None], axis=1), atol=TOL)

  # A chunk appended to a cache with `read` writes the cache a whole chunk writes.
  cache = transformer.KVCache.init(config, 2, 32)
  _, want = transformer.forward(config, params, tokens, segment_ids=seg, cache=cache)
  _, got = transformer.forward(config, params, tokens, segment_ids=seg, cache=cache, read=read)
  for a, b in zip(jax.tree.leaves(want), jax.tree.leaves(got)):
    np.testing.assert_allclose(b, a, atol=TOL)


def test_positions_from_segments():
  seg = jnp.array([[0, 0, 1, 1, 1], [1, 1, 2, 2, 0], [3, 3, 3, 0, 0]])
  np.testing.assert_array_equal(transformer.positions_from_segments(seg),
                                [[0, 0, 0, 1, 2], [0, 1, 0, 1, 0], [0, 1, 2, 0, 0]])


@pytest.mark.parametrize("family", HF_FAMILIES)
def test_save_then_transformers_load_round_trip(hf_checkpoints, tmp_path, family):
  model, path = hf_checkpoints[family]
  config, params = hf_io.load_hf(path)
  # Perturb so the round trip cannot pass by re-reading the original file.
  params = jax.tree.map(lambda x: x * 1.5, params)
  out_dir = str(tmp_path / "saved")
  hf_io.save_hf(out_dir, config, params)
  reloaded = transformers.AutoModelForCausalLM.from_pretrained(out_dir).eval()
  tokens = np.random.RandomState(2).randint(0, config.vocab_size, (2, 40))
  with torch.no_grad():
    theirs = reloaded(torch.tensor(tokens)).logits.numpy()
  np.testing.assert_allclose(_our_logits(config, params, tokens), theirs, atol=TOL)
  # And back into JAX: identical arrays.
  config2, params2 = hf_io.load_hf(out_dir)
  assert config2 == config
  jax.tree.map(np.testing.assert_array_equal, params2, params)


def test_sharded_checkpoint_with_index_and_bfloat16(hf_checkpoints, tmp_path):
  _, path = hf_checkpoints["qwen2"]
  config, params = hf_io.load_hf(path)
  bf16 = config.replace(param_dtype="bfloat16", dtype="bfloat16")
  params_bf16 = jax.tree.map(lambda x: x.astype(jnp.bfloat16), params)
  out_dir = str(tmp_path / "sharded")
  hf_io.save_hf(out_dir, bf16, params_bf16, max_shard_bytes=40_000)
  files = sorted(os.listdir(out_dir))
  assert "model.safetensors.index.json" in files
  assert sum(f.endswith(".safetensors") for f in files) > 2
  with open(os.path.join(out_dir, "model.safetensors.index.json")) as f:
    assert len(json.load(f)["weight_map"]) == len(hf_io.to_hf_tensors(bf16, params_bf16))
  loaded_cfg, loaded = hf_io.load_hf(out_dir)
  assert loaded_cfg.param_dtype == "bfloat16" and loaded_cfg.dtype == "bfloat16"
  jax.tree.map(lambda a, b: np.testing.assert_array_equal(np.asarray(a), np.asarray(b)), loaded, params_bf16)
  assert loaded["embedding"].dtype == jnp.bfloat16
  # transformers reads the bf16 shards too.
  reloaded = transformers.AutoModelForCausalLM.from_pretrained(out_dir)
  assert reloaded.model.embed_tokens.weight.dtype == torch.bfloat16
  # Loading with an f32 override upcasts.
  cfg32, p32 = hf_io.load_hf(out_dir, param_dtype="float32")
  assert cfg32.dtype == "float32" and p32["embedding"].dtype == jnp.float32


def test_read_safetensors_is_memory_mapped_and_handles_bf16(tmp_path):
  from safetensors.flax import save_file
  arr = np.arange(12, dtype=np.float32).reshape(3, 4).astype(ml_dtypes.bfloat16)
  save_file({"x": jnp.asarray(arr), "y": jnp.arange(5, dtype=jnp.int32)}, str(tmp_path / "a.safetensors"))
  tensors = hf_io.read_safetensors(str(tmp_path / "a.safetensors"))
  assert isinstance(tensors["x"].base, np.memmap) or isinstance(tensors["x"], np.memmap)
  np.testing.assert_array_equal(tensors["x"].astype(np.float32), arr.astype(np.float32))
  np.testing.assert_array_equal(tensors["y"], np.arange(5))


def test_loader_errors_name_the_problem(hf_checkpoints, tmp_path):
  with pytest.raises(FileNotFoundError, match="does not exist"):
    hf_io.load_hf(str(tmp_path / "nope"))
  empty = tmp_path / "empty"
  empty.mkdir()
  (empty / "config.json").write_text(json.dumps(preset("tiny").to_hf_config()))
  with pytest.raises(FileNotFoundError, match="safetensors"):
    hf_io.load_hf(str(empty))
  # A config that disagrees with the weights.
  _, path = hf_checkpoints["qwen2"]
  bad = tmp_path / "bad"
  bad.mkdir()
  for name in os.listdir(path):
    os.link(os.path.join(path, name), bad / name) if name != "config.json" else None
  cfg = json.load(open(os.path.join(path, "config.json")))
  cfg["intermediate_size"] = 96
  (bad / "config.json").write_text(json.dumps(cfg))
  with pytest.raises(ValueError, match="mlp.gate_proj"):
    hf_io.load_hf(str(bad))


@pytest.mark.parametrize("name,expected_millions", [
    ("qwen2.5-0.5b", 494), ("qwen2.5-1.5b", 1544), ("qwen2.5-3b", 3086), ("qwen2.5-7b", 7616),
    ("qwen3-1.7b", 1720), ("qwen3-4b", 4022), ("llama-3.2-1b", 1236)])
def test_presets_have_public_parameter_counts(name, expected_millions):
  # Published totals from the model cards (embedding counted once when tied); 1% covers their rounding.
  assert abs(preset(name).num_params() / 1e6 - expected_millions) / expected_millions < 0.01


def test_presets_round_trip_through_hf_config():
  for name in PRESETS:
    cfg = preset(name)
    assert ModelConfig.from_hf_config(cfg.to_hf_config()) == cfg


def test_tiny_preset_is_cpu_sized():
  assert 1e6 <= preset("tiny").num_params() <= 5e6
  params = transformer.init_params(preset("tiny"), jax.random.key(0))
  assert sum(x.size for x in jax.tree.leaves(params)) == preset("tiny").num_params()


def test_bfloat16_compute_tracks_transformers_bfloat16(hf_checkpoints):
  model, path = hf_checkpoints["qwen3"]
  config, params = hf_io.load_hf(path, param_dtype="bfloat16")
  assert config.dtype == "bfloat16" and params["embedding"].dtype == jnp.bfloat16
  tokens = np.random.RandomState(3).randint(0, config.vocab_size, (2, 48))
  with torch.no_grad():
    theirs = model.to(torch.bfloat16)(torch.tensor(tokens)).logits.float().numpy()
    model.to(torch.float32)
  ours = _our_logits(config, params, tokens)
  assert ours.dtype == np.float32  # logits are always produced in f32
  # Both sides round to bf16 at different points; agreement is at bf16 resolution, not f32.
  assert np.abs(ours - theirs).max() < 0.05 * np.abs(theirs).max()
  assert np.mean(np.argmax(ours, -1) == np.argmax(theirs, -1)) > 0.95


# --- attention_impl="dot_product" (jax.nn.dot_product_attention) against our einsum path ---------------------------

def _logits_both_impls(config, fn, *args):
  """jit(fn)(config, *args) once per attention kernel (one compile each: every case shares the shapes)."""
  jitted = jax.jit(fn, static_argnums=0)
  return [np.asarray(jitted(config.replace(attention_impl=impl), *args)) for impl in ("xla", "dot_product")]


def _rows_logits(config, params, tokens, segment_ids):
  hidden, _ = transformer.forward(config, params, tokens, None, segment_ids)
  return transformer.logits_from_hidden(config, params, hidden)


def test_dot_product_attention_agrees_with_xla_path(hf_checkpoints):
  _, path = hf_checkpoints["qwen2"]
  config, params = hf_io.load_hf(path)
  assert config.num_heads > config.num_kv_heads  # GQA
  rng = np.random.RandomState(5)
  a, b, c = (rng.randint(1, config.vocab_size, n) for n in (9, 5, 11))
  tokens, seg = np.zeros((3, 2, 16), np.int32), np.zeros((3, 2, 16), np.int32)
  tokens[0], seg[0] = rng.randint(0, config.vocab_size, (2, 16)), 1  # unpadded
  tokens[1, 0, -9:], seg[1, 0, -9:] = a, 1  # left-padded
  tokens[1, 1, -11:], seg[1, 1, -11:] = c, 1
  tokens[2, 0, :14], seg[2, 0, :14] = np.concatenate([a, b]), [1] * 9 + [2] * 5  # packed, padded at the end
  tokens[2, 1, :16], seg[2, 1, :16] = np.concatenate([b, c]), [1] * 5 + [2] * 11
  for name, case in zip(("unpadded", "left_padded", "packed"), range(3)):
    xla, dot = _logits_both_impls(config, _rows_logits, params, tokens[case], seg[case])
    assert np.isfinite(dot).all(), name  # padding rows too: a NaN there would reach the gradients
    real = seg[case] != 0
    np.testing.assert_allclose(dot[real], xla[real], atol=1e-5, err_msg=name)


def _cache_steps(config, params, prompt, seg, chunk, token):
  """Left-padded prefill into an empty cache, a 3-token chunk over the filled cache, then one-token decode: the
  logits of every step (prefill padding zeroed)."""
  cache = transformer.KVCache.init(config, prompt.shape[0], 32)
  hidden, cache = transformer.forward(config, params, prompt, segment_ids=seg, cache=cache, cache_empty=True)
  out = [jnp.where(seg[..., None] != 0, transformer.logits_from_hidden(config, params, hidden), 0.0)]
  for new in (chunk, token):
    positions = cache.lengths[:, None] + jnp.arange(new.shape[1])[None, :]
    hidden, cache = transformer.forward(config, params, new, positions, jnp.ones(new.shape, jnp.int32), cache)
    out.append(transformer.logits_from_hidden(config, params, hidden))
  return jnp.concatenate(out, axis=1)


def test_dot_product_attention_agrees_with_xla_path_through_a_kv_cache(hf_checkpoints):
  _, path = hf_checkpoints["qwen2"]
  config, params = hf_io.load_hf(path)
  rng = np.random.RandomState(6)
  seg = np.ones((2, 12), np.int32)
  seg[1, :5] = 0
  xla, dot = _logits_both_impls(config, _cache_steps, params, rng.randint(1, config.vocab_size, (2, 12)), seg,
                                rng.randint(1, config.vocab_size, (2, 3)), rng.randint(1, config.vocab_size, (2, 1)))
  np.testing.assert_allclose(dot, xla, atol=1e-5)


def test_dot_product_attention_matches_transformers(hf_checkpoints):
  model, path = hf_checkpoints["qwen2"]
  config, params = hf_io.load_hf(path, attention_impl="dot_product")
  assert config.attention_impl == "dot_product"
  tokens = np.random.RandomState(0).randint(0, config.vocab_size, (3, 40))
  with torch.no_grad():
    expected = model(torch.tensor(tokens)).logits.numpy()
  assert np.abs(_our_logits(config, params, tokens) - expected).max() <= TOL
  prompts = [[3, 17, 42, 99, 5, 8], [250, 1, 77]]
  out = Sampler(config).generate(params, prompts, jax.random.key(0), SamplingParams(max_new_tokens=8, temperature=0.0))
  for b, prompt in enumerate(prompts):
    with torch.no_grad():
      generated = model.generate(torch.tensor([prompt]), max_new_tokens=8, do_sample=False, eos_token_id=None,
                                 pad_token_id=0)
    assert out.row(b) == generated[0, len(prompt):].tolist()


def test_attention_impl_is_a_runtime_choice_outside_config_json():
  cfg = preset("tiny", attention_impl="dot_product")
  assert "attention_impl" not in cfg.to_hf_config()
  assert ModelConfig.from_hf_config(cfg.to_hf_config(), attention_impl="dot_product") == cfg
  with pytest.raises(ValueError, match="attention_impl"):
    preset("tiny", attention_impl="flash")
