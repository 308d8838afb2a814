"""LoRA on our parameter pytrees (`models/lora.py`): PEFT's initialisation and scaling, a hand-computed merge, and
Hugging Face PEFT loading our exported adapters onto the tiny random HF base with the logits of our merged model."""
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from agentopd_jax.models import hf_io, lora, transformer
from agentopd_jax.models.lora import LoraConfig

TOL = 1e-4


def _random_adapters(params, cfg, seed=0):
  """Adapters with b drawn too, so that they change the model."""
  adapters = lora.init_adapters(params, cfg, jax.random.key(seed))
  keys = iter(jax.random.split(jax.random.key(seed + 1), len(adapters)))
  return {t: {"a": ad["a"], "b": 0.05 * jax.random.normal(next(keys), ad["b"].shape)} for t, ad in adapters.items()}


def _logits(config, params, tokens):
  hidden, _ = transformer.forward(config, params, jnp.asarray(tokens))
  return np.asarray(transformer.logits_from_hidden(config, params, hidden))


def test_fresh_adapters_leave_the_base_and_follow_peft_init(hf_checkpoints):
  _, path = hf_checkpoints["qwen2"]
  config, params = hf_io.load_hf(path)
  cfg = LoraConfig(rank=8, alpha=16.0)
  adapters = lora.init_adapters(params, cfg, jax.random.key(0))
  assert set(adapters) == set(lora.TARGETS)
  d, h, kv, hd = config.hidden_size, config.num_heads, config.num_kv_heads, config.head_dim
  ff = config.intermediate_size
  shapes = {"q": (d, h * hd), "k": (d, kv * hd), "v": (d, kv * hd), "o": (h * hd, d), "gate": (d, ff), "up": (d, ff),
            "down": (ff, d)}
  for t, (fan_in, fan_out) in shapes.items():
    a, b = adapters[t]["a"], adapters[t]["b"]
    assert a.shape == (config.num_layers, fan_in, 8) and b.shape == (config.num_layers, 8, fan_out)
    assert float(jnp.abs(a).max()) <= 1 / np.sqrt(fan_in) and float(jnp.abs(a).max()) > 0.5 / np.sqrt(fan_in)
    assert not np.any(np.asarray(b))
  merged = lora.merge(params, adapters, cfg)
  assert all(np.array_equal(x, y) for x, y in zip(jax.tree.leaves(params), jax.tree.leaves(merged)))
  assert cfg.scale == 2.0 and LoraConfig(rank=16, alpha=16.0, rslora=True).scale == 4.0


def test_merge_adds_the_scaled_product_by_hand():
  params = {"layers": {"attn": {"o_kernel": jnp.ones((1, 2, 1, 3))}}}  # [L, h, hd, d]: in = 2, out = 3
  a = jnp.asarray([[[1.0], [2.0]]])        # [1, 2, r=1]
  b = jnp.asarray([[[1.0, 0.0, -1.0]]])    # [1, 1, 3]
  merged = lora.merge(params, {"o": {"a": a, "b": b}}, LoraConfig(rank=1, alpha=2.0, targets=("o",)))
  expected = 1.0 + 2.0 * np.asarray([[1.0, 0.0, -1.0], [2.0, 0.0, -2.0]]).reshape(1, 2, 1, 3)
  np.testing.assert_array_equal(np.asarray(merged["layers"]["attn"]["o_kernel"]), expected)
  assert np.asarray(params["layers"]["attn"]["o_kernel"]).max() == 1.0  # the base is left alone


@pytest.mark.parametrize("rslora", [False, True])
def test_peft_loads_our_adapters_onto_the_hf_base_with_our_merged_logits(hf_checkpoints, tmp_path, rslora):
  peft = pytest.importorskip("peft")
  model, path = hf_checkpoints["qwen2"]
  base = type(model).from_pretrained(path).eval()  # PEFT wraps and freezes its base: not the session's shared model
  config, params = hf_io.load_hf(path)
  cfg = LoraConfig(rank=4, alpha=8.0, rslora=rslora, targets=("q", "k", "v", "o", "gate", "up", "down"))
  adapters = _random_adapters(params, cfg)
  lora.export_peft(str(tmp_path), config, adapters, cfg, base_model=path)
  written = json.load(open(os.path.join(tmp_path, lora.ADAPTER_CONFIG)))
  assert written["r"] == 4 and written["lora_alpha"] == 8.0 and written["use_rslora"] == rslora
  tokens = np.random.RandomState(0).randint(0, config.vocab_size, (2, 24))
  ours = _logits(config, lora.merge(params, adapters, cfg), tokens)
  assert np.abs(ours - _logits(config, params, tokens)).max() > 1e-2  # the adapters matter
  adapted = peft.PeftModel.from_pretrained(base, str(tmp_path)).eval()
  with torch.no_grad():
    theirs = adapted(torch.tensor(tokens)).logits.numpy()
  assert np.abs(ours - theirs).max() <= TOL
  back, back_cfg = lora.import_peft(str(tmp_path), config, params)
  assert back_cfg == cfg
  for t in cfg.targets:
    np.testing.assert_array_equal(np.asarray(back[t]["a"]), np.asarray(adapters[t]["a"]))
    np.testing.assert_array_equal(np.asarray(back[t]["b"]), np.asarray(adapters[t]["b"]))


def test_bad_lora_config_and_adapter_files_are_named(hf_checkpoints, tmp_path):
  with pytest.raises(ValueError, match="lora.rank must be an integer >= 0"):
    LoraConfig(rank=-1)
  with pytest.raises(ValueError, match="lora.alpha must be > 0"):
    LoraConfig(rank=4, alpha=0.0)
  with pytest.raises(ValueError, match="lora.targets must be distinct names"):
    LoraConfig(rank=4, targets=("q", "lm_head"))
  _, path = hf_checkpoints["qwen2"]
  config, params = hf_io.load_hf(path)
  with pytest.raises(FileNotFoundError, match="adapter_config.json"):
    lora.import_peft(str(tmp_path), config, params)
  cfg = LoraConfig(rank=2, targets=("q",))
  lora.export_peft(str(tmp_path), config, lora.init_adapters(params, cfg, jax.random.key(0)), cfg)
  written = json.load(open(os.path.join(tmp_path, lora.ADAPTER_CONFIG)))
  json.dump(dict(written, target_modules=["q_proj", "v_proj"]), open(os.path.join(tmp_path, lora.ADAPTER_CONFIG), "w"))
  with pytest.raises(ValueError, match=r"no tensor base_model\.model\.model\.layers\.0\.self_attn\.v_proj\.lora_A"):
    lora.import_peft(str(tmp_path), config, params)
  json.dump(dict(written, use_dora=True), open(os.path.join(tmp_path, lora.ADAPTER_CONFIG), "w"))
  with pytest.raises(ValueError, match="use_dora must be false"):
    lora.import_peft(str(tmp_path), config, params)


def test_a_model_section_with_a_peft_adapter_loads_the_merged_model(hf_checkpoints, tmp_path):
  """`model.adapter`: a PEFT folder trained on `model.path`'s base (verl's `lora_adapter_path`) is merged at load."""
  from agentopd_jax.envs.verl_agent.corpus import default_corpus
  from agentopd_jax.models.loading import ModelSpec, load_model_and_tokenizer
  from agentopd_jax.models.tokenizer import builtin_tokenizer
  from agentopd_jax.parallel.sharding import make_mesh

  _, path = hf_checkpoints["qwen2"]
  config, params = hf_io.load_hf(path)
  cfg = LoraConfig(rank=2, alpha=4.0, targets=("q", "down"))
  adapters = _random_adapters(params, cfg)
  lora.export_peft(str(tmp_path / "adapter"), config, adapters, cfg)
  builtin_tokenizer(default_corpus(), vocab_size=300).save_pretrained(str(tmp_path / "tok"))
  mesh = make_mesh((8, 1, 1))
  spec = ModelSpec(path=path, adapter=str(tmp_path / "adapter"))
  _, loaded, _ = load_model_and_tokenizer(spec, str(tmp_path / "tok"), 0, mesh)
  for x, y in zip(jax.tree.leaves(lora.merge(params, adapters, cfg)), jax.tree.leaves(loaded)):
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
  with pytest.raises(ValueError, match="model.adapter='a' needs model.path"):
    load_model_and_tokenizer(ModelSpec(adapter="a"), str(tmp_path / "tok"), 0, mesh)
