"""GRPO, the backbone every method runs on: step scores, group-normalised advantages and the group filter.

GRPO itself adds nothing to the loop (`Grpo` has no hooks); the functions here are the loop's advantage phase, which
every method shares: the episode reward minus the invalid-action penalty of each step sample
(`objectives.advantages.step_scores`), normalised over each group's step samples by the configured estimator
(`grpo.advantage`), and, with `grpo.filter_groups`, only the groups whose episodes earned different rewards.
"""
from __future__ import annotations

from typing import List, Sequence, Tuple

import jax.numpy as jnp
import numpy as np

from agentopd_jax.batching.samples import Sample
from agentopd_jax.methods.base import Method
from agentopd_jax.objectives.advantages import get_advantage_estimator, informative_groups, step_scores


class Grpo(Method):
  """GRPO: the objective "grpo" and no hooks; its variants are the env configs' CPU default and paper models."""
  name = "grpo"
  objective = "grpo"


def advantages(samples: Sequence[Sample], num_groups: int, estimator: str,
               invalid_penalty: float) -> Tuple[jnp.ndarray, List[float]]:
  """(step scores, advantages) of an iteration's step samples."""
  scores = step_scores(jnp.asarray([s.episode_reward for s in samples]),
                       jnp.asarray([s.action_valid for s in samples]), invalid_penalty)
  adv = get_advantage_estimator(estimator)(scores, jnp.asarray([s.group_id for s in samples]),
                                           jnp.ones(len(samples)), num_groups=num_groups)
  return scores, np.asarray(adv).tolist()


def informative_samples(samples: Sequence[Sample], advantages: Sequence[float],
                        num_groups: int) -> Tuple[List[Sample], List[float]]:
  """The samples (and their advantages) of groups whose episodes earned different rewards (`informative_groups`)."""
  if not samples:
    return [], []
  keep = np.asarray(informative_groups(jnp.asarray([s.episode_reward for s in samples]),
                                       jnp.asarray([s.group_id for s in samples]), num_groups))
  kept = [i for i, s in enumerate(samples) if keep[s.group_id]]
  return [samples[i] for i in kept], [advantages[i] for i in kept]
