"""GRPO, the backbone every method runs on: step scores, group-normalised advantages and the group filter.

GRPO itself adds nothing to the loop (`Grpo` has no hooks); the functions here are the loop's advantage phase, which
every method shares: the episode reward minus the invalid-action penalty of each step sample
(`objectives.advantages.step_scores`), normalised over each group's step samples by the configured estimator
(`grpo.advantage`), and, with `grpo.filter_groups`, only the groups whose episodes earned different rewards.
"""
from __future__ import annotations

import functools
from typing import List, Sequence, Tuple

import jax
import numpy as np

from agentopd_jax.batching.collate import bucket
from agentopd_jax.batching.samples import Sample
from agentopd_jax.methods.base import Method
from agentopd_jax.objectives.advantages import get_advantage_estimator, informative_groups, step_scores


class Grpo(Method):
  """GRPO: the objective "grpo" and no hooks; its variants are the env configs' CPU default and paper models."""
  name = "grpo"
  objective = "grpo"


PAD_SAMPLES = 64  # least bucket of the samples axis of the advantage phase (`bucket`)


@functools.lru_cache(maxsize=None)
def _phase(estimator: str, num_groups: int, invalid_penalty: float):
  """jit: padded (episode rewards, action valid, group ids, real) -> (step scores, advantages, informative groups)."""

  def run(rewards, action_valid, group_ids, real):
    scores = step_scores(rewards, action_valid, invalid_penalty)
    adv = get_advantage_estimator(estimator)(scores, group_ids, real, num_groups=num_groups)
    return scores, adv, informative_groups(rewards, group_ids, num_groups)

  return jax.jit(run)


def _padded(samples: Sequence[Sample], num_groups: int):
  """The phase's inputs over a bucket of the samples axis: padding is not real and belongs to no group (the group
  sums drop ids out of range), so an iteration's sample count compiles no new program, as eager ops on [N] would."""
  n = len(samples)
  size = bucket(max(n, 1), PAD_SAMPLES)
  pad = lambda values, fill, dtype: np.asarray(list(values) + [fill] * (size - n), dtype)  # noqa: E731
  return (pad((s.episode_reward for s in samples), 0.0, np.float32),
          pad((s.action_valid for s in samples), 1.0, np.float32),
          pad((s.group_id for s in samples), num_groups, np.int32), pad([1.0] * n, 0.0, np.float32))


def advantages(samples: Sequence[Sample], num_groups: int, estimator: str,
               invalid_penalty: float) -> Tuple[np.ndarray, List[float]]:
  """(step scores, advantages) of an iteration's step samples."""
  scores, adv, _ = _phase(estimator, num_groups, float(invalid_penalty))(*_padded(samples, num_groups))
  return np.asarray(scores)[:len(samples)], np.asarray(adv)[:len(samples)].tolist()


def informative_samples(samples: Sequence[Sample], advantages: Sequence[float],
                        num_groups: int) -> Tuple[List[Sample], List[float]]:
  """The samples (and their advantages) of groups whose episodes earned different rewards (`informative_groups`)."""
  if not samples:
    return [], []
  keep = np.asarray(_phase("grpo", num_groups, 0.0)(*_padded(samples, num_groups))[2])
  kept = [i for i, s in enumerate(samples) if keep[s.group_id]]
  return [samples[i] for i in kept], [advantages[i] for i in kept]
