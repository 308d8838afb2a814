"""`ModelConfig.from_hf_config` against transformers 5, key by key, and what `load_hf` takes from a model folder
besides config.json's architecture: the default stop ids (generation_config.json) and the params' dtype.

Every config.json key that changes transformers' forward (or its cached generation) for Qwen2, Qwen3 or Llama is
SUPPORTED (a tiny random model with that key set gives our logits = transformers' logits) or REFUSED (one ValueError
naming the key; transformers' output does change with it, or transformers cannot run it). Keys that change neither
are IGNORED: transformers' logits and greedy generation stay the base model's, and so does our config.
"""
import copy
import json
import os

import jax.numpy as jnp
import numpy as np
import pytest
import torch
import transformers

from agentopd_jax.models import hf_io, transformer
from agentopd_jax.models.config import ModelConfig, RopeScaling

TOL = 1e-4
ABSENT = object()  # a key missing from config.json
TOKENS = np.random.RandomState(0).randint(0, 512, (2, 96))
_ARCH = {"qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM", "llama": "LlamaForCausalLM"}
_BASE = dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=512,
             rope_parameters={"rope_type": "default", "rope_theta": 10000.0})


def _raw(family, **keys):
  """A config.json dict: the tiny base of `family` with `keys` set (ABSENT deletes a key, also inside a dict)."""
  raw = {"model_type": family, "architectures": [_ARCH[family]], **_BASE}
  if family == "qwen3":
    raw["head_dim"] = 32
  raw.update(keys)

  def strip(d):
    return {k: strip(v) if isinstance(v, dict) else v for k, v in d.items() if v is not ABSENT}
  return strip(raw)


def _hf_model(tmp_path, raw):
  """transformers' model for config.json `raw` (parsed by `from_pretrained`'s path), norms and biases perturbed."""
  folder = tmp_path / "hf_config"
  folder.mkdir(exist_ok=True)
  (folder / "config.json").write_text(json.dumps(raw))
  torch.manual_seed(0)
  model = transformers.AutoModelForCausalLM.from_config(transformers.AutoConfig.from_pretrained(folder)).eval()
  with torch.no_grad():
    for name, p in model.named_parameters():
      if "norm" in name or "bias" in name:
        p.add_(0.1 * torch.randn_like(p))
  return model


def _hf_outputs(model):
  """Logits of TOKENS and a greedy continuation decoded with transformers' KV cache."""
  with torch.no_grad():
    logits = model(torch.tensor(TOKENS)).logits.numpy()
    generated = model.generate(torch.tensor(TOKENS[:1, :24]), max_new_tokens=24, do_sample=False,
                               eos_token_id=None, pad_token_id=0, return_dict_in_generate=False)[0, 24:].tolist()
  return logits, generated


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
  """These models are tiny: one thread is faster, and far faster when the cores are shared."""
  threads = torch.get_num_threads()
  torch.set_num_threads(1)
  yield
  torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def hf_base(tmp_path_factory):
  """family -> (transformers base model, its outputs), built once."""
  cache = {}

  def get(family):
    if family not in cache:
      model = _hf_model(tmp_path_factory.mktemp(f"base_{family}"), _raw(family))
      cache[family] = model, _hf_outputs(model)
    return cache[family]
  return get


def _forward_view(config):
  """The config without the fields our forward never reads (token ids, the position limit)."""
  return config.replace(bos_token_id=None, eos_token_id=None, pad_token_id=None, max_position_embeddings=0)


def _ids(rows):
  def show(v):
    if v is ABSENT:
      return "absent"
    if isinstance(v, dict):
      return next((t for t in (v.get("rope_type"), v.get("type")) if isinstance(t, str)), "dict")
    return v
  return ["-".join([r[0]] + [f"{k}={show(v)}" for k, v in r[1].items()]) for r in rows]


_YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32, "rope_theta": 10000.0}
_LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
           "original_max_position_embeddings": 32, "rope_theta": 500000.0}

SUPPORTED = [
    ("qwen2", dict(rope_parameters=ABSENT, rope_theta=500.0)),  # v4 layout: top-level rope_theta
    ("qwen2", dict(rope_parameters={"rope_type": "linear", "factor": 4.0, "rope_theta": 10000.0})),
    ("qwen2", dict(rope_parameters={**_YARN, "rope_type": ABSENT, "type": "yarn"})),  # v4 "type" alias
    ("qwen3", dict(rope_parameters={**_YARN, "factor": 8.0, "attention_factor": 1.3, "beta_fast": 16,
                                    "beta_slow": 2, "truncate": False})),
    # factor None: max_position_embeddings / original; attention factor from mscale / mscale_all_dim.
    ("llama", dict(rope_parameters={**_YARN, "factor": None, "mscale": 2.0, "mscale_all_dim": 1.0})),
    ("llama", dict(rope_parameters={**_LLAMA3, "original_max_position_embeddings": ABSENT},
                   max_position_embeddings=48)),
    # rope_scaling (v4 name) wins over rope_parameters; a top-level original_max_position_embeddings over its own.
    ("llama", dict(rope_scaling={**_LLAMA3, "original_max_position_embeddings": 256},
                   original_max_position_embeddings=24)),
    ("qwen2", dict(rope_scaling={"type": "linear", "factor": 2.0})),
    ("qwen2", dict(head_dim=32)),
    ("qwen3", dict(head_dim=ABSENT)),  # Qwen3Config's default, 128
    ("llama", dict(head_dim=32)),
    ("llama", dict(num_key_value_heads=ABSENT)),  # LlamaConfig: = num_attention_heads
    ("llama", dict(attention_bias=True)),
    ("qwen3", dict(attention_bias=True)),
    ("qwen2", dict(tie_word_embeddings=True)),
    ("llama", dict(rms_norm_eps=1e-2)),
]


@pytest.mark.parametrize("family,keys", SUPPORTED, ids=_ids(SUPPORTED))
def test_supported_key_matches_transformers(tmp_path, family, keys):
  raw = _raw(family, **keys)
  model = _hf_model(tmp_path, raw)
  folder = tmp_path / "model"
  model.save_pretrained(folder)
  (folder / "config.json").write_text(json.dumps(raw))  # the raw keys, not transformers' re-serialisation
  config, params = hf_io.load_hf(str(folder))
  assert _forward_view(config) != _forward_view(ModelConfig.from_hf_config(_raw(family)))  # the key did something
  hidden, _ = transformer.forward(config, params, jnp.asarray(TOKENS))
  ours = np.asarray(transformer.logits_from_hidden(config, params, hidden))
  expected = _hf_outputs(model)[0]
  assert np.abs(ours - expected).max() <= TOL
  # What save_hf writes for this config reads back the same, here and in transformers.
  written = config.to_hf_config()
  assert ModelConfig.from_hf_config(written) == config.replace(stop_token_ids=())
  reread = _hf_model(tmp_path, written)
  reread.load_state_dict(model.state_dict())
  with torch.no_grad():
    np.testing.assert_allclose(reread(torch.tensor(TOKENS)).logits.numpy(), expected, atol=1e-6)


IGNORED = [
    ("qwen2", dict(attention_bias=True)),  # Qwen2: q/k/v biases always, o never
    ("qwen2", dict(mlp_bias=True)),
    ("qwen3", dict(mlp_bias=True)),
    ("llama", dict(pretraining_tp=4)),
    ("llama", dict(initializer_range=0.5)),
    ("qwen2", dict(attention_dropout=0.5)),  # eval: dropout off (we never apply it)
    ("qwen2", dict(use_sliding_window=True, sliding_window=16)),  # max_window_layers=28 >= 2 layers: all full
    ("qwen2", dict(sliding_window=16, max_window_layers=0)),  # use_sliding_window false
    ("qwen3", dict(layer_types=["full_attention"] * 2, use_sliding_window=True, sliding_window=16,
                   max_window_layers=0)),
    ("qwen2", dict(layer_types=["attention", "attention"])),  # legacy name of full_attention
    ("qwen2", dict(attention_chunk_size=16)),  # Qwen's layer_types decide its cache
    ("llama", dict(sliding_window=None)),
    ("llama", dict(layer_types=["full_attention"] * 2)),
    ("qwen2", dict(hidden_act="swish")),
    ("qwen2", dict(partial_rotary_factor=0.5)),  # the default rope rotates the whole head
    ("llama", dict(rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5,
                                    "factor": 8.0})),
    ("qwen2", dict(rope_parameters={"type": "default", "rope_theta": 10000.0})),
    ("qwen2", dict(rope_theta=500.0)),  # rope_parameters' rope_theta wins
    ("qwen2", dict(max_position_embeddings=64)),
    ("llama", dict(head_dim=None)),
    ("qwen2", dict(bos_token_id=5, eos_token_id=[1, 2], pad_token_id=3)),
    ("qwen2", dict(use_cache=False)),
    ("qwen2", dict(chunk_size_feed_forward=4)),
    ("qwen2", dict(attn_implementation="eager")),
    ("qwen2", dict(output_hidden_states=True)),
    ("qwen2", dict(temperature=0.1, max_length=3)),  # generation defaults: transformers drops them
    ("llama", dict(transformers_version="4.40.0", some_unknown_key=1)),
]


@pytest.mark.parametrize("family,keys", IGNORED, ids=_ids(IGNORED))
def test_ignored_key_changes_neither_side(tmp_path, hf_base, family, keys):
  base_model, (base_logits, base_generated) = hf_base(family)
  model = _hf_model(tmp_path, _raw(family, **keys))
  model.load_state_dict(base_model.state_dict())
  logits, generated = _hf_outputs(model)
  np.testing.assert_allclose(logits, base_logits, atol=1e-5)
  assert generated == base_generated
  assert (_forward_view(ModelConfig.from_hf_config(_raw(family, **keys)))
          == _forward_view(ModelConfig.from_hf_config(_raw(family))))


REFUSED = [
    ("qwen2", dict(use_sliding_window=True, sliding_window=16, max_window_layers=1), "use_sliding_window"),
    ("qwen3", dict(layer_types=["full_attention", "sliding_attention"], use_sliding_window=True, sliding_window=16),
     "layer_types"),
    ("qwen2", dict(layer_types=["full_attention", "sliding_attention"]), "layer_types"),  # transformers fails
    ("llama", dict(sliding_window=16), "sliding_window"),  # same forward, windowed KV cache in generate
    ("llama", dict(attention_chunk_size=16), "attention_chunk_size"),
    ("llama", dict(layer_types=["full_attention", "sliding_attention"]), "layer_types"),
    ("qwen2", dict(is_causal=False), "is_causal"),
    ("llama", dict(is_causal=False), "is_causal"),
    ("llama", dict(mlp_bias=True), "mlp_bias"),
    ("qwen2", dict(hidden_act="gelu"), "hidden_act"),
    ("qwen2", dict(max_position_embeddings=32, rope_parameters={"rope_type": "dynamic", "factor": 2.0,
                                                                "rope_theta": 10000.0}), "rope type 'dynamic'"),
    ("qwen3", dict(max_position_embeddings=64, rope_parameters={
        "rope_type": "longrope", "short_factor": [1.0] * 16, "long_factor": [2.0] * 16,
        "original_max_position_embeddings": 32, "rope_theta": 10000.0}), "rope type 'longrope'"),
    ("llama", dict(rope_parameters={"rope_type": "proportional", "partial_rotary_factor": 0.5,
                                    "rope_theta": 10000.0}), "rope type 'proportional'"),
    ("qwen2", dict(rope_parameters={"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0,
                                    "partial_rotary_factor": 0.5}), "partial_rotary_factor"),  # transformers fails
    ("qwen2", dict(rope_parameters={"full_attention": {"rope_type": "linear", "factor": 2.0}}), "rope_parameters"),
    ("llama", dict(per_layer_config={"1": {"intermediate_size": 64}}), "per_layer_config"),
]


@pytest.mark.parametrize("family,keys,error", REFUSED, ids=_ids(REFUSED))
def test_refused_key_raises_one_clear_error(tmp_path, hf_base, family, keys, error):
  raw = _raw(family, **keys)
  with pytest.raises(ValueError, match=error):
    ModelConfig.from_hf_config(raw)
  # Refusing (not ignoring) is needed: transformers' outputs change with the key, or it cannot run it at all.
  base_model, (base_logits, base_generated) = hf_base(family)
  try:
    model = _hf_model(tmp_path, raw)
    model.load_state_dict(base_model.state_dict())
    logits, generated = _hf_outputs(model)
  except Exception:  # noqa: BLE001 (any failure to build, load or run counts)
    return
  assert np.abs(logits - base_logits).max() > 1e-4 or generated != base_generated


def test_config_json_we_cannot_read_is_refused():
  with pytest.raises(ValueError, match="model_type"):
    ModelConfig.from_hf_config(_raw("qwen2", model_type="gpt2"))
  # Loading keys (transformers quantizes at from_pretrained, or loads the weights in that dtype).
  with pytest.raises(ValueError, match="quantization_config"):
    ModelConfig.from_hf_config(_raw("qwen2", quantization_config={"quant_method": "fp8"}))
  with pytest.raises(ValueError, match="dtype 'float64'"):
    ModelConfig.from_hf_config(_raw("qwen2", torch_dtype="float64"))


@pytest.mark.parametrize("family", ["qwen2", "qwen3", "llama"])
def test_absent_keys_take_transformers_defaults(family):
  theirs = transformers.AutoConfig.for_model(family)
  ours = ModelConfig.from_hf_config({"model_type": family})
  assert (ours.vocab_size, ours.hidden_size, ours.intermediate_size, ours.num_layers, ours.num_heads,
          ours.num_kv_heads, ours.head_dim, ours.max_position_embeddings) == (
      theirs.vocab_size, theirs.hidden_size, theirs.intermediate_size, theirs.num_hidden_layers,
      theirs.num_attention_heads, theirs.num_key_value_heads,
      getattr(theirs, "head_dim", None) or theirs.hidden_size // theirs.num_attention_heads,
      theirs.max_position_embeddings)
  assert ours.rms_norm_eps == theirs.rms_norm_eps and ours.tie_embeddings == theirs.tie_word_embeddings
  assert ours.rope_theta == theirs.rope_parameters["rope_theta"] and ours.rope_scaling is None
  assert (ours.bos_token_id, ours.eos_token_id, ours.pad_token_id) == (
      theirs.bos_token_id, theirs.eos_token_id, theirs.pad_token_id)


def test_v4_rope_scaling_layout_is_read():
  v4 = {k: v for k, v in _raw("llama").items() if k != "rope_parameters"}
  v4.update(rope_theta=500000.0, rope_scaling={"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                                               "high_freq_factor": 4.0, "original_max_position_embeddings": 8192})
  config = ModelConfig.from_hf_config(v4)
  assert config.rope_theta == 500000.0
  assert config.rope_scaling == RopeScaling("llama3", 32.0, 8192, 1.0, 4.0)


# --- the folder around config.json ----------------------------------------------------------------------------


def _folder_copy(src, dst, **config_keys):
  """`src` hard-linked into `dst` (no generation_config.json), config.json with `config_keys` set."""
  dst.mkdir()
  for name in os.listdir(src):
    if name not in ("config.json", "generation_config.json"):
      os.link(os.path.join(src, name), dst / name)
  with open(os.path.join(src, "config.json")) as f:
    cfg = json.load(f)
  cfg.update(config_keys)
  (dst / "config.json").write_text(json.dumps(cfg))
  return dst


@pytest.mark.parametrize("generation,expected", [
    ({"eos_token_id": [7, 9]}, (7, 9)),
    ({"eos_token_id": 5, "temperature": 0.7}, (5,)),
    ({"temperature": 0.7}, ()),  # the file names no EOS: generate stops on none
    (None, (1, 2)),  # no file: config.json's eos_token_id, as transformers' generate
], ids=["list", "int", "file-without-eos", "no-file"])
def test_generation_config_eos_ids_become_default_stop_ids(hf_checkpoints, tmp_path, generation, expected):
  folder = _folder_copy(hf_checkpoints["qwen2"][1], tmp_path / "m", eos_token_id=[1, 2])
  if generation is not None:
    (folder / "generation_config.json").write_text(json.dumps(generation))
  config, params = hf_io.load_hf(str(folder))
  assert config.stop_token_ids == expected == _transformers_eos_ids(folder)
  assert config.eos_token_id == (1, 2)  # a list in config.json, kept hashable: configs are jit-static
  hash(config)
  # save_hf writes them back where load_hf, and transformers, read them.
  hf_io.save_hf(str(tmp_path / "saved"), config, params)
  assert hf_io.load_hf(str(tmp_path / "saved"))[0] == config
  assert _transformers_eos_ids(tmp_path / "saved") == expected


def _transformers_eos_ids(folder):
  eos = transformers.AutoModelForCausalLM.from_pretrained(folder).generation_config.eos_token_id
  return tuple([eos] if isinstance(eos, int) else eos or ())


DTYPE_CASES = [
    ("float32", {}),
    ("float32", {"torch_dtype": "bfloat16"}),
    ("float32", {"dtype": "bfloat16"}),
    ("float32", {"dtype": "float16", "torch_dtype": "bfloat16"}),  # dtype wins over the legacy torch_dtype
    ("float32", {"dtype": None, "torch_dtype": "bfloat16"}),
    ("bfloat16", {"dtype": None}),  # no dtype named: the file's
    ("bfloat16", {"dtype": "float32"}),
]


@pytest.mark.parametrize("file_dtype,config_keys", DTYPE_CASES,
                         ids=[f"file={f}-" + "-".join(f"{k}={v}" for k, v in c.items()) for f, c in DTYPE_CASES])
def test_params_take_transformers_load_dtype(hf_checkpoints, tmp_path, file_dtype, config_keys):
  """Params get config.json's `dtype`, else `torch_dtype`, else the file's dtype (transformers' dtype="auto"),
  values cast as transformers casts them; a `param_dtype` override wins and sets compute too."""
  model, _ = hf_checkpoints["llama"]
  source = tmp_path / "source"
  copy.deepcopy(model).to(getattr(torch, file_dtype)).save_pretrained(source)  # the shared model stays float32
  folder = _folder_copy(source, tmp_path / "m", **config_keys)
  theirs = transformers.AutoModelForCausalLM.from_pretrained(folder)
  expected = str(theirs.model.embed_tokens.weight.dtype).removeprefix("torch.")
  config, params = hf_io.load_hf(str(folder))
  assert config.param_dtype == config.dtype == expected
  assert params["embedding"].dtype == jnp.dtype(expected)
  np.testing.assert_array_equal(np.asarray(params["embedding"], np.float32),
                                theirs.model.embed_tokens.weight.float().detach().numpy())
  config32, params32 = hf_io.load_hf(str(folder), param_dtype="float32")
  assert config32.param_dtype == config32.dtype == "float32" and params32["embedding"].dtype == jnp.float32
