"""Decoder configuration: one dataclass for Qwen2/Qwen2.5, Qwen3 and Llama 3, read from a HF `config.json`.

The three families differ only in a few switches (qkv bias, q/k RMSNorm, rope scaling), so one decoder
covers them; `from_hf_config` maps the Hugging Face keys onto those switches and rejects what we do not
implement with an error that names the key.
"""
from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Optional

import jax.numpy as jnp

_FAMILIES = ("qwen2", "qwen3", "llama")


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
  # llama3 rope scaling: (factor, low_freq_factor, high_freq_factor, original_max_position_embeddings).
  rope_llama3: Optional[tuple] = None
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
  bos_token_id: Optional[int] = None
  eos_token_id: Optional[Any] = None
  pad_token_id: Optional[int] = None

  def __post_init__(self):
    if self.family not in _FAMILIES:
      raise ValueError(f"ModelConfig.family must be one of {_FAMILIES}, got {self.family!r}")
    if self.num_heads % self.num_kv_heads:
      raise ValueError(f"num_heads ({self.num_heads}) must be a multiple of num_kv_heads ({self.num_kv_heads})")
    for name in ("dtype", "param_dtype"):
      if getattr(self, name) not in ("float32", "bfloat16", "float16"):
        raise ValueError(f"ModelConfig.{name} must be float32, bfloat16 or float16, got {getattr(self, name)!r}")

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
  def from_hf_config(cls, hf: dict, **overrides) -> "ModelConfig":
    """Builds a config from a parsed HF `config.json` (transformers v4 or v5 key layout)."""
    model_type = hf.get("model_type")
    if model_type not in _FAMILIES:
      raise ValueError(f"config.json: model_type {model_type!r} is not supported (supported: {_FAMILIES})")
    if hf.get("use_sliding_window"):
      raise ValueError("config.json: use_sliding_window=true is not supported (full attention only)")
    if hf.get("mlp_bias"):
      raise ValueError("config.json: mlp_bias=true is not supported")
    if hf.get("hidden_act", "silu") != "silu":
      raise ValueError(f"config.json: hidden_act {hf.get('hidden_act')!r} is not supported (only silu)")
    # transformers v5 nests rope settings under `rope_parameters`; v4 uses `rope_theta` + `rope_scaling`.
    rope = dict(hf.get("rope_parameters") or {})
    if not rope:
      rope = dict(hf.get("rope_scaling") or {})
      rope.setdefault("rope_theta", hf.get("rope_theta", 10000.0))
    rope_type = rope.get("rope_type", rope.get("type", "default"))
    llama3 = None
    if rope_type == "llama3":
      llama3 = (float(rope["factor"]), float(rope["low_freq_factor"]), float(rope["high_freq_factor"]),
                int(rope["original_max_position_embeddings"]))
    elif rope_type != "default":
      raise ValueError(f"config.json: rope type {rope_type!r} is not supported (default, llama3)")
    heads = hf["num_attention_heads"]
    attention_bias = bool(hf.get("attention_bias", False))
    kw = dict(
        family=model_type,
        vocab_size=hf["vocab_size"],
        hidden_size=hf["hidden_size"],
        intermediate_size=hf["intermediate_size"],
        num_layers=hf["num_hidden_layers"],
        num_heads=heads,
        num_kv_heads=hf.get("num_key_value_heads") or heads,
        head_dim=hf.get("head_dim") or hf["hidden_size"] // heads,
        rope_theta=float(rope.get("rope_theta", 10000.0)),
        rope_llama3=llama3,
        rms_norm_eps=float(hf.get("rms_norm_eps", 1e-6)),
        # Qwen2 always has q/k/v biases (no config key); Llama uses `attention_bias` for q/k/v/o.
        qkv_bias=True if model_type == "qwen2" else attention_bias,
        o_bias=attention_bias if model_type == "llama" else False,
        qk_norm=model_type == "qwen3",
        tie_embeddings=bool(hf.get("tie_word_embeddings", False)),
        max_position_embeddings=int(hf.get("max_position_embeddings", 4096)),
        bos_token_id=hf.get("bos_token_id"),
        eos_token_id=hf.get("eos_token_id"),
        pad_token_id=hf.get("pad_token_id"),
    )
    if model_type == "qwen3" and attention_bias:
      kw["qkv_bias"] = kw["o_bias"] = True
    kw.update(overrides)
    return cls(**kw)

  @classmethod
  def from_hf_dir(cls, path: str, **overrides) -> "ModelConfig":
    cfg_path = os.path.join(path, "config.json")
    if not os.path.isfile(cfg_path):
      raise FileNotFoundError(f"no config.json in model folder {path!r}")
    with open(cfg_path) as f:
      return cls.from_hf_config(json.load(f), **overrides)

  def to_hf_config(self) -> dict:
    """The HF `config.json` dict (transformers v5 layout) that describes these weights."""
    arch = {"qwen2": "Qwen2ForCausalLM", "qwen3": "Qwen3ForCausalLM", "llama": "LlamaForCausalLM"}[self.family]
    rope = {"rope_type": "default", "rope_theta": self.rope_theta}
    if self.rope_llama3 is not None:
      factor, low, high, orig = self.rope_llama3
      rope.update(rope_type="llama3", factor=factor, low_freq_factor=low, high_freq_factor=high,
                  original_max_position_embeddings=orig)
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
# plus CPU-sized models. `tiny` pairs with the built-in tokenizer (vocab 2048).
PRESETS = {
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
                                        head_dim=64, rope_theta=500000.0, rope_llama3=(32.0, 1.0, 4.0, 8192),
                                        rms_norm_eps=1e-5, tie_embeddings=True, max_position_embeddings=131072,
                                        bos_token_id=128000, eos_token_id=128009),
}


def preset(name: str, **overrides) -> ModelConfig:
  if name not in PRESETS:
    raise ValueError(f"unknown model preset {name!r}; choose from {sorted(PRESETS)}")
  return PRESETS[name]().replace(**overrides)
