"""GiGPO's two-level advantage (Feng et al. 2025, arXiv 2505.10978; verl-agent `gigpo/core_gigpo.py`), as pure
functions: the episode level is GRPO's, the step level groups the steps of one task group that answered the same env
state (an anchor state) and compares their discounted returns.

  Episode (Eq. 3):  s_i = R_episode − c·invalid_i over the step samples of each task group (every step counts, as
                    verl-agent's compute_mean_std_cross_steps); a group of one: mean 0, std 1.
  Step returns (Eq. 5):  R_t = r_t + γ·R_{t+1} along each trajectory, from the env's step rewards, before the
                    invalid-action penalty, which then hits its own step only: q_t = R_t − c·invalid_t.
  Anchor groups (Eq. 6):  within a task group, the steps whose raw observation (no prompt, no history) is equal; or,
                    in similarity mode, the first group whose first observation has difflib ratio ≥ threshold.
  Step (Eq. 7):     q_t normalised over its anchor group; a singleton group's step advantage is 0 (its mean is its
                    own value); std unbiased (ddof 1).
  Combined (Eq. 8): A = A_episode + ω·A_step, the same mode (mean_norm: x − μ; mean_std_norm: (x − μ)/(σ + 1e-6))
                    at both levels.
"""
from __future__ import annotations

import difflib
import functools
from typing import Dict, List, Sequence, Tuple

import chex
import jax
import jax.numpy as jnp
import numpy as np

from agentopd_jax.objectives.advantages import GRPO_MODES, grpo_advantages

EPSILON = 1e-6


def discounted_returns(rewards: Sequence[float], traj_ids: Sequence[int], step_index: Sequence[int],
                       gamma: float) -> np.ndarray:
  """R_t = r_t + γ·R_{t+1} per trajectory (`traj_ids`), steps ordered by `step_index`; [N] float32 in input order."""
  rewards, traj, step = (np.asarray(x) for x in (rewards, traj_ids, step_index))
  out = np.zeros(len(rewards), np.float64)
  for t in np.unique(traj):
    rows = np.flatnonzero(traj == t)
    running = 0.0
    for i in rows[np.argsort(step[rows], kind="stable")][::-1]:
      running = float(rewards[i]) + gamma * running
      out[i] = running
  return out.astype(np.float32)


def anchor_groups(group_ids: Sequence[int], anchors: Sequence[str], similarity: bool = False,
                  threshold: float = 0.95) -> np.ndarray:
  """[N] int step-group id: exact equality of the anchor observation within each task group, or (similarity mode,
  verl-agent's search-QA clustering) the first cluster of that task group, in row order, whose first member's text
  has `difflib.SequenceMatcher(None, a, b).ratio() >= threshold`."""
  ids = np.zeros(len(anchors), np.int32)
  clusters: Dict[Tuple[int, str], int] = {}
  firsts: Dict[int, List[Tuple[str, int]]] = {}
  for i, (g, text) in enumerate(zip(group_ids, anchors)):
    g = int(g)
    if not similarity:
      ids[i] = clusters.setdefault((g, text), len(clusters))
      continue
    found = next((cid for rep, cid in firsts.get(g, [])
                  if difflib.SequenceMatcher(None, rep, text).ratio() >= threshold), None)
    if found is None:
      found = len(clusters)
      clusters[(g, text)] = found
      firsts.setdefault(g, []).append((text, found))
    ids[i] = found
  return ids


def step_advantages(step_scores: jnp.ndarray, step_groups: jnp.ndarray, valid: jnp.ndarray, mode: str,
                    num_step_groups: int) -> jnp.ndarray:
  """Eq. 7: q_t − μ (mean_norm) or (q_t − μ)/(σ + ε) (mean_std_norm) over each anchor group of valid samples; 0 for a
  singleton group and for padding."""
  chex.assert_rank([step_scores, step_groups, valid], 1)
  if mode not in GRPO_MODES:
    raise ValueError(f"step_advantages: mode must be one of {GRPO_MODES}, got {mode!r}")
  q = step_scores.astype(jnp.float32)
  w = valid.astype(jnp.float32)
  total = functools.partial(jax.ops.segment_sum, segment_ids=step_groups, num_segments=num_step_groups)
  count = total(w)
  mean = total(w * q) / jnp.maximum(count, 1.0)
  std = jnp.sqrt(total(w * jnp.square(q - mean[step_groups])) / jnp.maximum(count - 1.0, 1.0))
  adv = q - mean[step_groups]
  if mode == "mean_std_norm":
    adv = adv / (std[step_groups] + EPSILON)
  return jax.lax.stop_gradient(jnp.where((w > 0) & (count[step_groups] > 1), adv, 0.0))


def gigpo_advantages(episode_scores: jnp.ndarray, step_scores: jnp.ndarray, group_ids: jnp.ndarray,
                     step_groups: jnp.ndarray, valid: jnp.ndarray, mode: str, omega: float, num_groups: int,
                     num_step_groups: int) -> jnp.ndarray:
  """Eq. 8: GRPO's episode advantage (`grpo_advantages`, same mode) + ω · the step advantage; [N] float32."""
  episode = grpo_advantages(episode_scores, group_ids, valid, mode=mode, epsilon=EPSILON, num_groups=num_groups)
  return episode + omega * step_advantages(step_scores, step_groups, valid, mode, num_step_groups)


def group_stats(step_groups: np.ndarray) -> Dict[str, float]:
  """The anchor groups' mean size and the share of singleton groups (why the step term vanishes in open-ended
  envs: every state unique)."""
  if not len(step_groups):
    return {"step_group_mean_size": 0.0, "step_group_singleton_ratio": 0.0}
  _, sizes = np.unique(step_groups, return_counts=True)
  return {"step_group_mean_size": float(sizes.mean()), "step_group_singleton_ratio": float(np.mean(sizes == 1))}
