"""Rotary position embeddings, computed the way transformers does (f32 frequencies, rotate-half layout).

Rope scalings (`ModelConfig.rope_scaling`) only change the inverse frequencies, and yarn also multiplies cos/sin by its
attention factor, so positions, the KV cache and packing are unaffected by them.
"""
from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np

from agentopd_jax.models.config import ModelConfig, RopeScaling


def inverse_frequencies(config: ModelConfig) -> np.ndarray:
  """[head_dim // 2] f32 inverse frequencies, scaled by `config.rope_scaling` (same arithmetic and dtype as HF, so
  positions up to 128k agree to f32 rounding)."""
  dim, scaling = config.head_dim, config.rope_scaling
  exponents = np.arange(0, dim, 2, dtype=np.int64).astype(np.float32) / dim
  base = np.float32(config.rope_theta) ** exponents
  inv = (1.0 / base).astype(np.float32)
  if scaling is None:
    return inv
  if scaling.rope_type == "linear":
    return (inv / np.float32(scaling.factor)).astype(np.float32)
  if scaling.rope_type == "llama3":
    return _llama3(inv, scaling)
  return _yarn(base, scaling, dim, config.rope_theta)


def _llama3(inv: np.ndarray, s: RopeScaling) -> np.ndarray:
  """Llama 3.1: long wavelengths divided by `factor`, short ones kept, the band between interpolated smoothly."""
  original = s.original_max_position_embeddings
  low_wavelen = original / s.low_freq_factor
  high_wavelen = original / s.high_freq_factor
  wavelen = (2 * math.pi / inv).astype(np.float32)
  scaled = np.where(wavelen > low_wavelen, inv / s.factor, inv).astype(np.float32)
  smooth = ((original / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor)).astype(np.float32)
  smoothed = ((1 - smooth) * scaled / s.factor + smooth * scaled).astype(np.float32)
  medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
  return np.where(medium, smoothed, scaled).astype(np.float32)


def _yarn(base: np.ndarray, s: RopeScaling, dim: int, theta: float) -> np.ndarray:
  """YaRN: interpolated (/ factor) frequencies below the `beta_slow` rotation count, original ones above
  `beta_fast`, a linear ramp between."""
  def correction_dim(rotations):
    return dim * math.log(s.original_max_position_embeddings / (rotations * 2 * math.pi)) / (2 * math.log(theta))

  low, high = correction_dim(s.beta_fast), correction_dim(s.beta_slow)
  if s.truncate:
    low, high = math.floor(low), math.ceil(high)
  low, high = max(low, 0), min(high, dim - 1)
  if low == high:
    high += 0.001  # as transformers: avoids a zero-width ramp
  ramp = np.clip((np.arange(dim // 2, dtype=np.float32) - low) / (high - low), 0, 1).astype(np.float32)
  keep = 1 - ramp  # weight of the original (extrapolated) frequencies
  return (1.0 / (np.float32(s.factor) * base) * (1 - keep) + 1.0 / base * keep).astype(np.float32)


def rope_angles(config: ModelConfig, positions: jnp.ndarray):
  """cos, sin of shape [B, T, head_dim // 2] (f32) for integer positions [B, T], times yarn's attention factor."""
  angles = positions.astype(jnp.float32)[..., None] * jnp.asarray(inverse_frequencies(config))
  scale = 1.0 if config.rope_scaling is None else config.rope_scaling.attention_factor
  return jnp.cos(angles) * scale, jnp.sin(angles) * scale


def apply_rope(x: jnp.ndarray, cos: jnp.ndarray, sin: jnp.ndarray) -> jnp.ndarray:
  """Rotates x [B, T, heads, head_dim] in HF's rotate-half layout (first half paired with second half)."""
  half = x.shape[-1] // 2
  x1, x2 = x[..., :half], x[..., half:]
  cos = cos[:, :, None, :].astype(x.dtype)
  sin = sin[:, :, None, :].astype(x.dtype)
  return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
