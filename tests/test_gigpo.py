"""GiGPO (`objectives/gigpo.py`, `methods/gigpo.py`) against hand-computed groups and advantages: discounted step
returns with the invalid-action penalty on its own step only, anchor groups by equality and by similarity, singleton
step groups at 0, both modes, ω, and the method's hook on a rollout's step samples."""
import difflib
import math
import types

import jax.numpy as jnp
import numpy as np
import pytest

from agentopd_jax.batching.samples import Sample
from agentopd_jax.methods.base import Iteration
from agentopd_jax.methods.gigpo import ENV_PRESETS, Gigpo, GigpoConfig
from agentopd_jax.objectives.gigpo import (anchor_groups, discounted_returns, gigpo_advantages, group_stats,
                                           step_advantages)


def test_discounted_returns_walk_each_trajectory_backwards():
  # Two trajectories, rows out of order: traj 0 wins at its step 2 (reward 10), traj 1 gets 1 at step 0 and 2 at 1.
  rewards = [0.0, 10.0, 0.0, 2.0, 1.0]
  traj = [0, 0, 0, 1, 1]
  step = [1, 2, 0, 1, 0]
  out = discounted_returns(rewards, traj, step, 0.95)
  np.testing.assert_allclose(out, [9.5, 10.0, 9.025, 2.0, 1.0 + 0.95 * 2.0], rtol=1e-6)


def test_anchor_groups_by_equality_within_each_task_group_only():
  ids = anchor_groups([0, 0, 0, 1, 1], ["a", "b", "a", "a", "a"])
  assert ids[0] == ids[2] and ids[1] != ids[0]
  assert ids[3] == ids[4] and ids[3] != ids[0]    # the same text in another task group is another state


def test_anchor_groups_by_similarity_join_the_first_close_cluster():
  texts = ["you see a red apple on the table", "you see a red apple on the tablE", "nothing here", "you see a red"]
  ids = anchor_groups([0, 0, 0, 0], texts, similarity=True, threshold=0.9)
  assert ids[0] == ids[1] and len({ids[0], ids[2], ids[3]}) == 3
  ratio = lambda a, b: difflib.SequenceMatcher(None, a, b).ratio()  # noqa: E731
  assert ratio(texts[0], texts[1]) >= 0.9 > ratio(texts[0], texts[3])


def test_step_advantage_singletons_are_zero_and_groups_normalise():
  q = jnp.asarray([1.0, 3.0, 5.0, 7.0, 0.0])
  groups = jnp.asarray([0, 0, 1, 2, 3])     # group 0 of two, three singletons (the last one padding)
  valid = jnp.asarray([1.0, 1.0, 1.0, 1.0, 0.0])
  np.testing.assert_allclose(step_advantages(q, groups, valid, "mean_norm", 4), [-1.0, 1.0, 0.0, 0.0, 0.0])
  std = math.sqrt(2.0)                       # ddof 1 of {1, 3}
  np.testing.assert_allclose(step_advantages(q, groups, valid, "mean_std_norm", 4),
                             [-1 / (std + 1e-6), 1 / (std + 1e-6), 0.0, 0.0, 0.0], rtol=1e-6)


def test_combined_advantage_is_episode_plus_omega_step():
  episode = jnp.asarray([10.0, 10.0, 0.0, -0.1])   # one task group: two steps of a win, two of a loss (one invalid)
  step = jnp.asarray([9.5, 10.0, 0.0, -0.1])
  groups = jnp.zeros(4, jnp.int32)
  anchors = jnp.asarray([0, 1, 0, 1])              # steps 0 of both share a state, steps 1 too
  valid = jnp.ones(4)
  out = gigpo_advantages(episode, step, groups, anchors, valid, "mean_norm", 0.5, 1, 2)
  mean_e = np.mean([10.0, 10.0, 0.0, -0.1])
  a_step = [9.5 - 4.75, 10.0 - 4.95, 0.0 - 4.75, -0.1 - 4.95]
  np.testing.assert_allclose(out, np.asarray([10.0, 10.0, 0.0, -0.1]) - mean_e + 0.5 * np.asarray(a_step), rtol=1e-6)


def _sample(traj, step, group, obs, reward=0.0, valid=1.0, episode=0.0):
  return Sample(prompt_ids=[1, 2], completion_ids=[3], completion_mask=[1], behaviour_logprobs=[-0.5], group_id=group,
                problem_id=f"p{group}", traj_id=traj, step_index=step, action_valid=valid, episode_reward=episode,
                step_reward=reward, observation=obs)


def test_the_method_computes_both_levels_from_step_samples():
  """Two episodes of one task from the same first state: episode 0 wins in two steps (10 at step 1), episode 1 makes
  an invalid move and does not win. The penalty (0.1) hits the invalid step only, after discounting."""
  samples = [_sample(0, 0, 0, "start", episode=10.0), _sample(0, 1, 0, "room", reward=10.0, episode=10.0),
             _sample(1, 0, 0, "start", valid=0.0), _sample(1, 1, 0, "hall")]
  method = Gigpo(GigpoConfig(gamma=0.95, step_advantage_w=1.0, mode="mean_norm"))
  method.start(types.SimpleNamespace(layout="step", env_cfg=types.SimpleNamespace(invalid_penalty=0.1)))
  signals = method.signals(Iteration(iteration=1, key=None, tasks=[], envs=[], groups=[], first_episode=0,
                                     params=None, samples=samples))
  episode = np.asarray([10.0, 10.0, -0.1, 0.0])
  # Step scores: returns 9.5, 10, 0, 0, then the invalid step's penalty: 9.5, 10, -0.1, 0.
  a_step = [(9.5 - (9.5 - 0.1) / 2), 0.0, (-0.1 - (9.5 - 0.1) / 2), 0.0]   # "start" pairs; "room", "hall" alone
  np.testing.assert_allclose(signals.advantages, episode - episode.mean() + np.asarray(a_step), rtol=1e-5)
  assert signals.metrics["gigpo/step_group_mean_size"] == pytest.approx(4 / 3)
  assert signals.metrics["gigpo/step_group_singleton_ratio"] == pytest.approx(2 / 3)


def test_config_errors_name_the_field_and_presets_follow_the_scripts():
  with pytest.raises(ValueError, match="gigpo.mode"):
    GigpoConfig(mode="std")
  with pytest.raises(ValueError, match="gigpo.gamma"):
    GigpoConfig(gamma=1.5)
  with pytest.raises(ValueError, match="rollout.layout must be 'step'"):
    Gigpo(GigpoConfig()).start(types.SimpleNamespace(layout="trajectory", env_cfg=None))
  assert ENV_PRESETS["search"] == dict(mode="mean_std_norm", enable_similarity=True, similarity_thresh=0.9)
  assert group_stats(np.asarray([0, 0, 1])) == {"step_group_mean_size": 1.5, "step_group_singleton_ratio": 0.5}


def test_variants_resolve_for_every_env():
  from agentopd_jax.training.config import from_config_dict
  from agentopd_jax.training import presets
  for env, mode in (("alfworld", "mean_std_norm"), ("webshop", "mean_norm"), ("search", "mean_std_norm")):
    c = Gigpo.preset(presets.cpu_base(env), paper=False)
    cfg = from_config_dict(c)
    assert cfg.method == "gigpo" and cfg.gigpo.mode == mode and cfg.gigpo.gamma == 0.95
  assert cfg.gigpo.enable_similarity and cfg.gigpo.similarity_thresh == 0.9
