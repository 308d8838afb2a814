"""Outcome advantages: verl-agent GRPO with group statistics over *samples* (cross-step), as one jittable function.

Why samples and not trajectories: in the step-wise layout (OPID, SDAR) every env step of an episode is its own
training sample and verl-agent's `compute_grpo_outcome_advantage(compute_mean_std_cross_steps=True)` takes the group
mean/std over all step-samples of the group, so a trajectory of length L counts L times and each step carries its own
invalid-action penalty. In the whole-trajectory layout (Agentic-OPD) a sample *is* a trajectory, and the same
function gives standard episode-level GRPO. Padding samples (the batch is padded to a fixed shape) are excluded from
the statistics with a `valid` weight rather than by slicing, so shapes stay static under jit.
"""
from __future__ import annotations

import functools
from typing import Callable, Dict, Optional

import chex
import jax
import jax.numpy as jnp
import numpy as np

GRPO_MODES = ("mean_norm", "mean_std_norm")


def step_scores(episode_rewards: jnp.ndarray, action_valid: jnp.ndarray, invalid_penalty: float) -> jnp.ndarray:
  """Per-sample score s = R − c·(1 − valid) (verl-agent `apply_invalid_action_penalty`), all [N]."""
  chex.assert_rank([episode_rewards, action_valid], 1)
  chex.assert_equal_shape([episode_rewards, action_valid])
  rewards = episode_rewards.astype(jnp.float32)
  return rewards - invalid_penalty * (1.0 - action_valid.astype(jnp.float32))


def grpo_advantages(scores: jnp.ndarray, group_ids: jnp.ndarray, valid: jnp.ndarray, mode: str = "mean_std_norm",
                    epsilon: float = 1e-6, num_groups: Optional[int] = None) -> jnp.ndarray:
  """GRPO outcome advantage per sample, statistics over the valid samples of each group.

    μ_g = mean_{i ∈ g} s_i,   σ_g = sqrt(Σ_{i ∈ g} (s_i − μ_g)² / (n_g − 1))   (unbiased, ddof=1, like torch.std)
    n_g == 1:  μ_g = 0, σ_g = 1   (verl: a lone sample keeps its raw score)
    mean_norm:      A_i = s_i − μ_g
    mean_std_norm:  A_i = (s_i − μ_g) / (σ_g + ε)

  Args:
    scores: [N] per-sample scores (already including the invalid-action penalty; see `step_scores`).
    group_ids: [N] int group of each sample, in [0, num_groups) (ids outside are dropped by `segment_sum`).
    valid: [N] 0/1: 1 on real samples. Padding samples get A = 0 and do not enter μ, σ or n.
    mode: "mean_std_norm" (verl `norm_adv_by_std_in_grpo=True`) or "mean_norm" (Dr.GRPO style).
    num_groups: number of groups; must be given (static) under jit, else max(group_ids) + 1 is read on the host.
  Returns:
    [N] float32 advantages; broadcast them over response tokens with `broadcast_to_tokens`.
  """
  chex.assert_rank([scores, group_ids, valid], 1)
  chex.assert_equal_shape([scores, group_ids, valid])
  if mode not in GRPO_MODES:
    raise ValueError(f"grpo_advantages: mode must be one of {GRPO_MODES}, got {mode!r}")
  if num_groups is None:
    if isinstance(group_ids, jax.core.Tracer):
      raise ValueError("grpo_advantages: pass a static num_groups when tracing (jit/vmap)")
    num_groups = int(np.max(np.asarray(group_ids))) + 1 if group_ids.shape[0] else 1
  s = scores.astype(jnp.float32)
  w = valid.astype(jnp.float32)
  g = group_ids.astype(jnp.int32)
  group_sum = functools.partial(jax.ops.segment_sum, segment_ids=g, num_segments=num_groups)
  count = group_sum(w)
  mean = group_sum(w * s) / jnp.maximum(count, 1.0)
  # Two-pass variance: deviations from the group's own mean, so large rewards do not cancel catastrophically.
  var = group_sum(w * jnp.square(s - mean[g])) / jnp.maximum(count - 1.0, 1.0)
  several = count > 1
  mean = jnp.where(several, mean, 0.0)
  std = jnp.where(several, jnp.sqrt(var), 1.0)
  adv = s - mean[g]
  if mode == "mean_std_norm":
    adv = adv / (std[g] + epsilon)
  return jax.lax.stop_gradient(jnp.where(w > 0, adv, 0.0))


def broadcast_to_tokens(advantages: jnp.ndarray, loss_mask: jnp.ndarray) -> jnp.ndarray:
  """A_{i,t} = A_i · m_{i,t}: one advantage per sample spread over its loss tokens, [N] × [N, T] → [N, T]."""
  chex.assert_rank(advantages, 1)
  chex.assert_rank(loss_mask, 2)
  chex.assert_equal_shape_prefix([advantages, loss_mask], 1)
  return advantages.astype(jnp.float32)[:, None] * loss_mask.astype(jnp.float32)


def informative_groups(episode_rewards: jnp.ndarray, group_ids: jnp.ndarray, num_groups: int) -> jnp.ndarray:
  """[G] bool: groups whose episodes did not all earn the same reward — DAPO's dynamic sampling (Yu et al., 2025)
  trains only on these, since a group whose episodes share one outcome carries no outcome signal:

    keep_g  ⇔  max_{i ∈ g} R_i > min_{i ∈ g} R_i        (ALFWorld, R = 10·won: the group has a win and a loss)

  With mean_std_norm, an all-lost group's advantages are only the invalid-action penalty divided by its tiny std:
  unit-size pushes towards whatever the failing episodes did. Dropping such groups also saves their update compute.

  Args:
    episode_rewards: [N] the episode reward of each sample (before the per-step invalid-action penalty).
    group_ids: [N] int group of each sample, in [0, num_groups). Groups without samples are not kept.
  """
  chex.assert_rank([episode_rewards, group_ids], 1)
  chex.assert_equal_shape([episode_rewards, group_ids])
  r = episode_rewards.astype(jnp.float32)
  high = jax.ops.segment_max(r, group_ids, num_segments=num_groups)
  low = jax.ops.segment_min(r, group_ids, num_segments=num_groups)
  return high > low


# Estimators chosen by name in the config (`grpo.advantage`); each maps (scores, group_ids, valid, *, epsilon,
# num_groups) -> [N]. OPID's add-on (methods.opid) shifts either one per token with its hindsight skills.
ADVANTAGE_ESTIMATORS: Dict[str, Callable[..., jnp.ndarray]] = {
    "grpo": functools.partial(grpo_advantages, mode="mean_std_norm"),
    "grpo_mean_norm": functools.partial(grpo_advantages, mode="mean_norm"),
}


def get_advantage_estimator(name: str) -> Callable[..., jnp.ndarray]:
  """The estimator registered as `name`; a ValueError lists the choices."""
  if name not in ADVANTAGE_ESTIMATORS:
    raise ValueError(f"unknown advantage estimator {name!r}; choices: {sorted(ADVANTAGE_ESTIMATORS)}")
  return ADVANTAGE_ESTIMATORS[name]
