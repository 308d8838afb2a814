"""Decoder configuration: one dataclass for Qwen2/Qwen2.5, Qwen3 and Llama 3, read from a HF `config.json`.

The three families differ only in a few switches (qkv bias, q/k RMSNorm, rope scaling), so one decoder covers them.
`from_hf_config` reads `config.json` key by key as transformers 5 does (its config classes' defaults, its rope
standardisation): every key that changes transformers' forward or cached generation for these architectures is
mapped onto our switches or refused with one error that names it; keys that change neither (token ids, init
ranges, dropout, cache and output flags, generation defaults, keys unknown to these architectures) are ignored, as
transformers ignores them. `tests/test_hf_config.py` checks the table key by key against transformers.
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
from typing import Any, Optional, Tuple

import jax.numpy as jnp

_FAMILIES = ("qwen2", "qwen3", "llama")
_DTYPES = ("float32", "bfloat16", "float16")
ATTENTION_IMPLS = ("xla", "dot_product", "cudnn")
# config.json's shape keys; num_key_value_heads and head_dim may also be null (derived from the others).
_SIZE_KEYS = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
              "num_key_value_heads", "head_dim", "max_position_embeddings")

# transformers 5's config-class defaults for the keys we read: a key missing from config.json takes these values.
_QWEN = dict(vocab_size=151936, hidden_size=4096, intermediate_size=22016, num_hidden_layers=32,
             num_attention_heads=32, num_key_value_heads=32, max_position_embeddings=32768,
             use_sliding_window=False, sliding_window=4096, max_window_layers=28)
_HF_DEFAULTS = {
    "qwen2": _QWEN,
    "qwen3": dict(_QWEN, head_dim=128),
    "llama": dict(vocab_size=32000, hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                  num_attention_heads=32, max_position_embeddings=2048, bos_token_id=1, eos_token_id=2),
}


@dataclasses.dataclass(frozen=True)
class RopeScaling:
  """A rope scaling of transformers' `rope_parameters`, resolved to the numbers its forward uses.

  linear: frequencies / factor. llama3: Llama 3.1's band-wise interpolation. yarn: YaRN's ramp between
  interpolated and original frequencies, cos/sin multiplied by `attention_factor`.
  """
  rope_type: str
  factor: float
  original_max_position_embeddings: int = 0  # llama3, yarn
  low_freq_factor: float = 1.0  # llama3
  high_freq_factor: float = 4.0  # llama3
  beta_fast: float = 32.0  # yarn
  beta_slow: float = 1.0  # yarn
  truncate: bool = True  # yarn
  attention_factor: float = 1.0  # yarn

  def to_hf(self) -> dict:
    return {"rope_type": self.rope_type, **{k: getattr(self, k) for k in _ROPE_KEYS[self.rope_type]}}


_ROPE_KEYS = {
    "linear": ("factor",),
    "llama3": ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"),
    "yarn": ("factor", "original_max_position_embeddings", "beta_fast", "beta_slow", "truncate", "attention_factor"),
}


@dataclasses.dataclass(frozen=True)
class ModelConfig:
  family: str
  vocab_size: int
  hidden_size: int
  intermediate_size: int
  num_layers: int
  num_heads: int
  num_kv_heads: int
  head_dim: int
  rope_theta: float = 10000.0
  rope_scaling: Optional[RopeScaling] = None  # None: plain rope
  rms_norm_eps: float = 1e-6
  qkv_bias: bool = False
  o_bias: bool = False
  qk_norm: bool = False
  tie_embeddings: bool = False
  max_position_embeddings: int = 4096
  # Numerics: params are stored in `param_dtype`, matmuls run in `dtype`; softmax/log-softmax always in f32.
  dtype: str = "float32"
  param_dtype: str = "float32"
  # Rematerialise each decoder layer in the backward pass (memory for compute); off for small models.
  remat: bool = False
  # Attention kernel, a runtime choice like `remat` (not written to config.json): "xla", our einsum path;
  # "dot_product", `jax.nn.dot_product_attention` with the kernel left to JAX (its XLA reference as of jax 0.10);
  # "cudnn", the same call forced onto cuDNN flash attention (NVIDIA GPUs, bf16/f16 compute only).
  attention_impl: str = "xla"
  bos_token_id: Optional[int] = None
  eos_token_id: Optional[Any] = None  # config.json's: an int or a tuple of ints
  pad_token_id: Optional[int] = None
  # Sampling's default stop ids: the EOS ids a model folder names (`from_hf_dir`); none for presets.
  stop_token_ids: Tuple[int, ...] = ()

  def __post_init__(self):
    if self.family not in _FAMILIES:
      raise ValueError(f"ModelConfig.family must be one of {_FAMILIES}, got {self.family!r}")
    if self.num_heads % self.num_kv_heads:
      raise ValueError(f"num_heads ({self.num_heads}) must be a multiple of num_kv_heads ({self.num_kv_heads})")
    for name in ("dtype", "param_dtype"):
      if getattr(self, name) not in _DTYPES:
        raise ValueError(f"ModelConfig.{name} must be float32, bfloat16 or float16, got {getattr(self, name)!r}")
    if self.attention_impl not in ATTENTION_IMPLS:
      raise ValueError(f"ModelConfig.attention_impl must be one of {ATTENTION_IMPLS}, got {self.attention_impl!r}")

  @property
  def compute_dtype(self):
    return jnp.dtype(self.dtype)

  @property
  def weight_dtype(self):
    return jnp.dtype(self.param_dtype)

  def replace(self, **kw) -> "ModelConfig":
    return dataclasses.replace(self, **kw)

  def num_params(self) -> int:
    d, f, h, kv, hd = self.hidden_size, self.intermediate_size, self.num_heads, self.num_kv_heads, self.head_dim
    attn = d * h * hd * 2 + d * kv * hd * 2
    attn += (h * hd + 2 * kv * hd) * self.qkv_bias + d * self.o_bias + 2 * hd * self.qk_norm
    layer = attn + 3 * d * f + 2 * d
    embed = self.vocab_size * d * (1 if self.tie_embeddings else 2)
    return self.num_layers * layer + embed + d

  # --- Hugging Face interop -------------------------------------------------------------------------------

  @classmethod
  def from_hf_config(cls, hf: dict, default_dtype: str = "float32", **overrides) -> "ModelConfig":
    """Builds a config from a parsed HF `config.json` (transformers v4 or v5 key layout).

    Params and compute take config.json's `dtype` (else its legacy `torch_dtype`, else `default_dtype`, which
    `load_hf` sets to the safetensors' dtype): the rule of transformers' `from_pretrained(dtype="auto")`. Overrides
    win; a `param_dtype` override also sets the compute `dtype` unless that is overridden too.
    """
    model_type = hf.get("model_type")
    if model_type not in _FAMILIES:
      raise ValueError(f"config.json: model_type {model_type!r} is not supported (supported: {_FAMILIES})")
    hf = {**_HF_DEFAULTS[model_type], **hf}
    if not hf.get("is_causal", True):
      raise ValueError("config.json: is_causal=false (bidirectional attention) is not supported")
    for key, what in (("quantization_config", "quantized weights"), ("per_layer_config", "per-layer overrides")):
      if hf.get(key):
        raise ValueError(f"config.json: {key} ({what}) is not supported")
    if model_type == "llama" and hf.get("mlp_bias"):  # Qwen2/Qwen3 MLPs have no biases whatever the key says
      raise ValueError("config.json: mlp_bias=true is not supported")
    if hf.get("hidden_act", "silu") not in ("silu", "swish"):
      raise ValueError(f"config.json: hidden_act {hf['hidden_act']!r} is not supported (only silu, alias swish)")
    _check_full_attention(hf, model_type)
    stored_dtype = hf.get("dtype") or hf.get("torch_dtype")
    if stored_dtype not in (None, *_DTYPES):
      raise ValueError(f"config.json: dtype {stored_dtype!r} is not supported ({', '.join(_DTYPES)})")
    weights_dtype = stored_dtype or default_dtype
    for key in _SIZE_KEYS:  # a string or float here would fail deep in shape arithmetic, naming no key
      value = hf.get(key)
      if not (type(value) is int and value > 0 or value is None and key in ("num_key_value_heads", "head_dim")):
        raise ValueError(f"config.json: {key} must be a positive integer, got {value!r}")
    heads = hf["num_attention_heads"]
    head_dim = hf.get("head_dim") or hf["hidden_size"] // heads
    rope_theta, rope_scaling = _rope_from_hf(hf, head_dim)
    # Qwen2 always has q/k/v biases and no o bias; Llama and Qwen3 put `attention_bias` on q/k/v/o.
    attention_bias = model_type != "qwen2" and bool(hf.get("attention_bias"))
    eos = hf.get("eos_token_id")
    kw = dict(
        family=model_type,
        vocab_size=hf["vocab_size"],
        hidden_size=hf["hidden_size"],
        intermediate_size=hf["intermediate_size"],
        num_layers=hf["num_hidden_layers"],
        num_heads=heads,
        num_kv_heads=hf.get("num_key_value_heads") or heads,
        head_dim=head_dim,
        rope_theta=rope_theta,
        rope_scaling=rope_scaling,
        rms_norm_eps=float(hf.get("rms_norm_eps", 1e-6)),
        qkv_bias=model_type == "qwen2" or attention_bias,
        o_bias=attention_bias,
        qk_norm=model_type == "qwen3",
        tie_embeddings=bool(hf.get("tie_word_embeddings", False)),
        max_position_embeddings=int(hf["max_position_embeddings"]),
        param_dtype=weights_dtype,
        dtype=overrides.get("param_dtype", weights_dtype),
        bos_token_id=hf.get("bos_token_id"),
        eos_token_id=tuple(eos) if isinstance(eos, list) else eos,  # hashable: configs are jit-static
        pad_token_id=hf.get("pad_token_id"),
    )
    kw.update(overrides)
    return cls(**kw)

  @classmethod
  def from_hf_dir(cls, path: str, **kwargs) -> "ModelConfig":
    """`from_hf_config` of a model folder's config.json, with `stop_token_ids` read from the folder.

    The stop ids are generation_config.json's `eos_token_id` (an int or a list) when the folder has that file, else
    config.json's: the EOS ids transformers' `generate` stops on by default.
    """
    hf = _read_json(os.path.join(path, "config.json"))
    if hf is None:
      raise FileNotFoundError(f"no config.json in model folder {path!r}")
    config = cls.from_hf_config(hf, **kwargs)
    generation = _read_json(os.path.join(path, "generation_config.json"))
    eos = config.eos_token_id if generation is None else generation.get("eos_token_id")
    return config.replace(stop_token_ids=token_ids(eos))

  def to_hf_config(self) -> dict:
    """The HF `config.json` dict (transformers v5 layout) that describes these weights."""
    arch = {"qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM", "llama": "LlamaForCausalLM"}[self.family]
    rope = {"rope_type": "default", "rope_theta": self.rope_theta}
    if self.rope_scaling is not None:
      rope.update(self.rope_scaling.to_hf())
    hf = {
        "architectures": [arch],
        "model_type": self.family,
        "vocab_size": self.vocab_size,
        "hidden_size": self.hidden_size,
        "intermediate_size": self.intermediate_size,
        "num_hidden_layers": self.num_layers,
        "num_attention_heads": self.num_heads,
        "num_key_value_heads": self.num_kv_heads,
        "head_dim": self.head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": self.max_position_embeddings,
        "rms_norm_eps": self.rms_norm_eps,
        "rope_parameters": rope,
        "tie_word_embeddings": self.tie_embeddings,
        "dtype": self.param_dtype,
        "bos_token_id": self.bos_token_id,
        "eos_token_id": self.eos_token_id,
        "pad_token_id": self.pad_token_id,
    }
    if self.family == "llama":
      hf.update(attention_bias=self.qkv_bias, mlp_bias=False)
    if self.family == "qwen3":
      hf.update(attention_bias=self.qkv_bias)
    if self.family in ("qwen2", "qwen3"):
      hf.update(use_sliding_window=False, sliding_window=None)
    return hf


def _rope_from_hf(hf: dict, head_dim: int) -> Tuple[float, Optional[RopeScaling]]:
  """(rope_theta, scaling) as transformers 5 standardises them.

  `rope_scaling` (the v4 name) wins over `rope_parameters`; a top-level `rope_theta` or `partial_rotary_factor` only
  fills what that dict lacks; `original_max_position_embeddings` is the top-level key, else the dict's, else
  `max_position_embeddings`. dynamic and longrope are refused: their frequencies follow the length of the sequence
  being run, which neither a KV cache nor packed rows can do.
  """
  rope = dict(hf.get("rope_scaling") or hf.get("rope_parameters") or {})
  if any(isinstance(v, dict) for v in rope.values()):
    raise ValueError(f"config.json: rope_parameters nested per layer type ({sorted(rope)}) is not supported")
  theta = float(rope.get("rope_theta", hf.get("rope_theta", 10000.0)))
  rope_type = rope.get("rope_type", rope.get("type", "default"))
  if rope_type == "default":  # transformers' default rope reads neither a factor nor partial_rotary_factor
    return theta, None
  if rope_type not in _ROPE_KEYS:
    raise ValueError(f"config.json: rope type {rope_type!r} is not supported (default, {', '.join(_ROPE_KEYS)})")
  partial = rope.get("partial_rotary_factor", hf.get("partial_rotary_factor"))
  if partial is not None and int(head_dim * partial) != head_dim:
    raise ValueError(f"config.json: partial_rotary_factor={partial} with rope type {rope_type!r} is not supported "
                     "(transformers' cos/sin would not fit the head either)")

  def need(key):
    if rope.get(key) is None:
      raise ValueError(f"config.json: rope type {rope_type!r} needs rope_parameters.{key}")
    return float(rope[key])

  original = int(hf.get("original_max_position_embeddings") or rope.get("original_max_position_embeddings")
                 or hf["max_position_embeddings"])
  if rope_type == "linear":
    return theta, RopeScaling("linear", need("factor"))
  if rope_type == "llama3":
    return theta, RopeScaling("llama3", need("factor"), original, need("low_freq_factor"), need("high_freq_factor"))
  factor = rope.get("factor")
  factor = float(hf["max_position_embeddings"] / original if factor is None else factor)
  attention = rope.get("attention_factor")
  if attention is None:
    mscale, mscale_all_dim = rope.get("mscale"), rope.get("mscale_all_dim")
    attention = (_yarn_mscale(factor, mscale) / _yarn_mscale(factor, mscale_all_dim) if mscale and mscale_all_dim
                 else _yarn_mscale(factor))
  return theta, RopeScaling("yarn", factor, original, beta_fast=float(rope.get("beta_fast") or 32),
                            beta_slow=float(rope.get("beta_slow") or 1), truncate=bool(rope.get("truncate", True)),
                            attention_factor=float(attention))


def _yarn_mscale(factor: float, mscale: float = 1.0) -> float:
  return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0


def _check_full_attention(hf: dict, model_type: str) -> None:
  """Refuses configs under which transformers lets some layer see only a window of keys (we attend to all).

  Qwen2/Qwen3 derive `layer_types` from `use_sliding_window`, `sliding_window` and `max_window_layers` when
  config.json has none. Llama's forward ignores `sliding_window` and `attention_chunk_size`, but its KV cache then
  keeps only that window, so its generations change.
  """
  if model_type == "llama":
    for key in ("sliding_window", "attention_chunk_size"):
      if hf.get(key) is not None:
        raise ValueError(f"config.json: {key}={hf[key]} is not supported for llama (transformers' KV cache would "
                         "keep only a window of keys; full attention only)")
  elif hf.get("layer_types") is None and hf["use_sliding_window"] and hf["sliding_window"] is not None:
    first, layers = hf["max_window_layers"], hf["num_hidden_layers"]
    if first < layers:
      raise ValueError(f"config.json: use_sliding_window=true with max_window_layers={first} gives layers "
                       f"{first}..{layers - 1} a sliding window of {hf['sliding_window']}; not supported "
                       "(full attention only)")
  windowed = sorted({t for t in hf.get("layer_types") or () if t not in ("full_attention", "attention")})
  if windowed:
    raise ValueError(f"config.json: layer_types {windowed} are not supported (full attention only)")


def _read_json(path: str) -> Optional[dict]:
  """The JSON object in file `path`, None when there is no such file. A file that holds no JSON object is an error
  naming it: json's own message gives only a line and column, and a list or string would fail later on `.get`."""
  if not os.path.isfile(path):
    return None
  with open(path) as f:
    try:
      value = json.load(f)
    except ValueError as e:  # JSONDecodeError, UnicodeDecodeError
      raise ValueError(f"{path}: not valid JSON ({e})") from e
  if not isinstance(value, dict):
    raise ValueError(f"{path}: expected a JSON object, got {type(value).__name__}")
  return value


def token_ids(value) -> Tuple[int, ...]:
  """An HF `eos_token_id`-like field (None, an int or a list) as a tuple of ids."""
  if value is None:
    return ()
  return tuple(int(v) for v in value) if isinstance(value, (list, tuple)) else (int(value),)


def _qwen2(**kw):
  base = dict(family="qwen2", vocab_size=151936, rope_theta=1e6, rms_norm_eps=1e-6, qkv_bias=True,
              tie_embeddings=True, max_position_embeddings=32768, eos_token_id=151645, pad_token_id=151643)
  base.update(kw)
  return ModelConfig(**base)


def _qwen3(**kw):
  base = dict(family="qwen3", vocab_size=151936, head_dim=128, rope_theta=1e6, rms_norm_eps=1e-6, qk_norm=True,
              tie_embeddings=True, max_position_embeddings=40960, eos_token_id=151645, pad_token_id=151643)
  base.update(kw)
  return ModelConfig(**base)


# Shapes of the public checkpoints (for random-init benchmarks and as a check when loading real weights),
# plus CPU-sized models. `tiny` pairs with the built-in tokenizer (vocab 2048); `nano` too, at a fifteenth of its
# compute: the model of the end-to-end tests, whose runs check plumbing, resumption and agreement, not learning.
PRESETS = {
    "nano": lambda: ModelConfig(family="qwen2", vocab_size=2048, hidden_size=64, intermediate_size=176,
                                num_layers=2, num_heads=4, num_kv_heads=2, head_dim=16, rope_theta=1e4,
                                qkv_bias=True, tie_embeddings=True, max_position_embeddings=4096),
    "tiny": lambda: ModelConfig(family="qwen2", vocab_size=2048, hidden_size=256, intermediate_size=704,
                                num_layers=4, num_heads=4, num_kv_heads=2, head_dim=64, rope_theta=1e4,
                                qkv_bias=True, tie_embeddings=True, max_position_embeddings=4096),
    # ~36 M params: the mid-size model of the CPU benchmarks.
    "small": lambda: ModelConfig(family="qwen2", vocab_size=32000, hidden_size=512, intermediate_size=1536,
                                 num_layers=8, num_heads=8, num_kv_heads=2, head_dim=64, rope_theta=1e6,
                                 qkv_bias=True, tie_embeddings=True, max_position_embeddings=8192),
    "qwen2.5-0.5b": lambda: _qwen2(hidden_size=896, intermediate_size=4864, num_layers=24, num_heads=14,
                                   num_kv_heads=2, head_dim=64),
    "qwen2.5-1.5b": lambda: _qwen2(hidden_size=1536, intermediate_size=8960, num_layers=28, num_heads=12,
                                   num_kv_heads=2, head_dim=128),
    "qwen2.5-3b": lambda: _qwen2(hidden_size=2048, intermediate_size=11008, num_layers=36, num_heads=16,
                                 num_kv_heads=2, head_dim=128),
    "qwen2.5-7b": lambda: _qwen2(vocab_size=152064, hidden_size=3584, intermediate_size=18944, num_layers=28,
                                 num_heads=28, num_kv_heads=4, head_dim=128, tie_embeddings=False,
                                 max_position_embeddings=131072),
    "qwen3-1.7b": lambda: _qwen3(hidden_size=2048, intermediate_size=6144, num_layers=28, num_heads=16,
                                 num_kv_heads=8),
    "qwen3-4b": lambda: _qwen3(hidden_size=2560, intermediate_size=9728, num_layers=36, num_heads=32,
                               num_kv_heads=8),
    "llama-3.2-1b": lambda: ModelConfig(family="llama", vocab_size=128256, hidden_size=2048,
                                        intermediate_size=8192, num_layers=16, num_heads=32, num_kv_heads=8,
                                        head_dim=64, rope_theta=500000.0, rope_scaling=RopeScaling(
                                            "llama3", factor=32.0, original_max_position_embeddings=8192),
                                        rms_norm_eps=1e-5, tie_embeddings=True, max_position_embeddings=131072,
                                        bos_token_id=128000, eos_token_id=128009),
}


def preset(name: str, **overrides) -> ModelConfig:
  if name not in PRESETS:
    raise ValueError(f"unknown model preset {name!r}; choose from {sorted(PRESETS)}")
  return PRESETS[name]().replace(**overrides)
