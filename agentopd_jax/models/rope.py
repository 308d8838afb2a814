"""Rotary position embeddings, computed the way transformers does (f32 frequencies, rotate-half layout)."""
from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np

from agentopd_jax.models.config import ModelConfig


def inverse_frequencies(config: ModelConfig) -> np.ndarray:
  """[head_dim // 2] f32 inverse frequencies, with llama3 long-context scaling when configured."""
  dim = config.head_dim
  # Same arithmetic and dtype as HF so positions up to 128k agree to f32 rounding.
  inv = (1.0 / (np.float32(config.rope_theta) ** (np.arange(0, dim, 2, dtype=np.int64).astype(np.float32) / dim)))
  inv = inv.astype(np.float32)
  if config.rope_llama3 is None:
    return inv
  factor, low_ff, high_ff, original = config.rope_llama3
  low_wavelen = original / low_ff
  high_wavelen = original / high_ff
  wavelen = (2 * math.pi / inv).astype(np.float32)
  scaled = np.where(wavelen > low_wavelen, inv / factor, inv).astype(np.float32)
  smooth = ((original / wavelen - low_ff) / (high_ff - low_ff)).astype(np.float32)
  smoothed = ((1 - smooth) * scaled / factor + smooth * scaled).astype(np.float32)
  medium = ~(wavelen < high_wavelen) & ~(wavelen > low_wavelen)
  return np.where(medium, smoothed, scaled).astype(np.float32)


def rope_angles(inv_freq: np.ndarray, positions: jnp.ndarray):
  """cos, sin of shape [B, T, head_dim // 2] for integer positions [B, T]."""
  angles = positions.astype(jnp.float32)[..., None] * jnp.asarray(inv_freq)
  return jnp.cos(angles), jnp.sin(angles)


def apply_rope(x: jnp.ndarray, cos: jnp.ndarray, sin: jnp.ndarray) -> jnp.ndarray:
  """Rotates x [B, T, heads, head_dim] in HF's rotate-half layout (first half paired with second half)."""
  half = x.shape[-1] // 2
  x1, x2 = x[..., :half], x[..., half:]
  cos = cos[:, :, None, :].astype(x.dtype)
  sin = sin[:, :, None, :].astype(x.dtype)
  return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)
