"""OPID's advantage (methods.md §3.1, `gigpo/core_gigpo.py`): GRPO's episode advantage plus the log-prob shift of the
policy's own response when a hindsight skill is in its context.

  Δ^r_{i,t} = sg[log π_old(y_t | ĥ^r_i, y_<t) − log π_old(y_t | h_i, y_<t)] · m_{i,t} · 1[route r of sample i]
  A^OPID_{i,t} = A^ep_i · m_{i,t} + w_ep · Δ^ep_{i,t} + w_step · Δ^step_{i,t}

with r ∈ {ep, step}: ĥ^ep is the prompt with the episode skill inserted, ĥ^step with the critical-step skill
(`methods.opid.injection`). Both log-probs are π_old's, scored once per batch before the update, so Δ is a constant
advantage, not a loss with a gradient. The loss is then plain GRPO on A^OPID, which is why OPID is an advantage and
not an objective here. A^ep is `grpo_advantages` (verl-agent's cross-step `episode_norm_reward`).

These functions take completion-aligned arrays: row i holds sample i's completion tokens, right-padded ([N, L]).
"""
from __future__ import annotations

from typing import Callable, Dict, Optional, Sequence

import chex
import jax
import jax.numpy as jnp
import numpy as np


Totals = Callable[[Sequence[float]], Sequence[float]]


def _whole_batch(values: Sequence[float]) -> Sequence[float]:
  """The default `totals`: these rows are the whole batch."""
  return values


def skill_shift(teacher_logprobs: jnp.ndarray, old_logprobs: jnp.ndarray, mask: jnp.ndarray, routed: jnp.ndarray,
                normalize: bool = False, clip: Optional[float] = None, epsilon: float = 1e-6,
                totals: Optional[Totals] = None) -> jnp.ndarray:
  """One route's Δ [N, L] (`compute_teacher_token_advantage`): the detached shift on the routed samples' tokens.

    Δ = sg[log π_T − log π_old] · m · 1[routed]
    normalize: over the tokens with m > 0 of routed samples (the whole batch), Δ ← (Δ − μ)/(σ + ε) with the
      population σ, or Δ − μ when σ ≤ ε; other tokens keep their zeros.
    clip: Δ ← clamp(Δ, −clip, clip) afterwards (None: no clamp).
    totals: multi-host, where these rows are one process's share of the batch: sums a list of numbers over the
      processes, so μ and σ are the whole batch's (host values: not under jit).
  """
  chex.assert_rank([teacher_logprobs, old_logprobs, mask], 2)
  chex.assert_equal_shape([teacher_logprobs, old_logprobs, mask])
  chex.assert_rank(routed, 1)
  valid = (mask > 0) & (routed[:, None] > 0)
  delta = jax.lax.stop_gradient(teacher_logprobs - old_logprobs).astype(jnp.float32)
  delta = jnp.where(valid, delta, 0.0)
  if normalize:
    total = totals or _whole_batch
    n, summed = total([valid.sum(), delta.sum()])
    n = jnp.maximum(n, 1)
    mean = summed / n
    (squares,) = total([jnp.where(valid, jnp.square(delta - mean), 0.0).sum()])
    std = jnp.sqrt(squares / n)
    shifted = jnp.where(std > epsilon, (delta - mean) / (std + epsilon), delta - mean)
    delta = jnp.where(valid, shifted, delta)
  if clip is not None:
    delta = jnp.clip(delta, -clip, clip)
  return delta


def opid_advantages(episode_advantages: jnp.ndarray, mask: jnp.ndarray, old_logprobs: jnp.ndarray,
                    episode_teacher: jnp.ndarray, use_episode: jnp.ndarray, step_teacher: jnp.ndarray,
                    use_step: jnp.ndarray, w_episode: float, w_step: float, normalize: bool = False,
                    clip: Optional[float] = None, totals: Optional[Totals] = None) -> jnp.ndarray:
  """A^OPID [N, L] = A^ep · m + w_ep·Δ^ep + w_step·Δ^step (`compute_opid_advantage_components` with GiGPO's step
  weight at 0, as OPID's config forces). `episode_advantages` [N] per sample; the rest [N, L], `use_*` [N] 0/1 (the
  routing of `methods.opid.injection.route`); a route's teacher rows are ignored where it is not used. `totals`: see
  `skill_shift` (multi-host)."""
  chex.assert_rank(episode_advantages, 1)
  adv = episode_advantages.astype(jnp.float32)[:, None] * mask.astype(jnp.float32)
  for w, teacher, used in ((w_episode, episode_teacher, use_episode), (w_step, step_teacher, use_step)):
    if w:
      adv = adv + w * skill_shift(teacher, old_logprobs, mask, used, normalize, clip, totals=totals)
  return adv


def shift_metrics(mask: jnp.ndarray, old_logprobs: jnp.ndarray, episode_teacher: jnp.ndarray,
                  use_episode: jnp.ndarray, step_teacher: jnp.ndarray, use_step: jnp.ndarray,
                  totals: Optional[Totals] = None) -> Dict[str, float]:
  """Share of samples on each route and the raw Δ mean/std over each route's tokens (before weights, normalisation
  and clipping): `opid/route_{episode,step}` and `opid/delta_{episode,step}_{mean,std}`; with `totals` (multi-host)
  over every process's rows."""
  out = {}
  mask, old_logprobs = np.asarray(mask), np.asarray(old_logprobs)
  for name, teacher, used in (("episode", episode_teacher, use_episode), ("step", step_teacher, use_step)):
    used = np.asarray(used)
    valid = (mask > 0) & (used[:, None] > 0)
    delta = (np.asarray(teacher, np.float64) - old_logprobs)[valid]
    rows, routed, n, summed, squares = (totals or _whole_batch)(
        [mask.shape[0], used.sum(), delta.size, delta.sum(), np.square(delta).sum()])
    mean = summed / n if n else 0.0
    out[f"opid/route_{name}"] = float(routed) / max(rows, 1)
    out[f"opid/delta_{name}_mean"] = float(mean)
    out[f"opid/delta_{name}_std"] = float(np.sqrt(max(squares / n - mean**2, 0.0))) if n else 0.0
  return out
