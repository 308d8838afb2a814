"""OPID's advantage (`methods.opid.advantage`): hand-computed Δ, normalisation, clipping, routing and the weighted sum.

The same functions were checked against the authors' `compute_teacher_token_advantage` (jinyangwu/OPID,
gigpo/core_gigpo.py) on 300 random batches, normalised and clipped or not; these values are worked by hand.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agentopd_jax.methods.opid.advantage import opid_advantages, shift_metrics, skill_shift

MASK = jnp.array([[1., 1., 0.], [1., 1., 1.], [0., 1., 1.]])
OLD = jnp.array([[-1.0, -2.0, -9.0], [-0.5, -0.5, -0.5], [-9.0, -3.0, -1.0]])
TEACHER = jnp.array([[-0.5, -2.5, 5.0], [-0.5, 0.5, -1.5], [7.0, -1.0, -1.0]])
# teacher − old: [[0.5, −0.5, (14)], [0, 1, −1], [(16), 2, 0]]; parenthesised entries are off the mask.


def test_shift_is_the_detached_gap_on_routed_tokens():
  got = skill_shift(TEACHER, OLD, MASK, jnp.array([1., 0., 1.]))
  np.testing.assert_allclose(got, [[0.5, -0.5, 0], [0, 0, 0], [0, 2.0, 0]])
  grad = jax.grad(lambda t: skill_shift(t, OLD, MASK, jnp.ones(3)).sum())(TEACHER)
  assert not np.asarray(grad).any()  # a constant advantage: no gradient reaches either log-prob


def test_normalised_over_the_routed_tokens_with_the_population_std():
  # routed tokens of rows 0 and 2: 0.5, −0.5, 2, 0 -> μ = 0.5, population σ² = (0 + 1 + 2.25 + 0.25)/4 = 0.875.
  got = np.asarray(skill_shift(TEACHER, OLD, MASK, jnp.array([1., 0., 1.]), normalize=True))
  s = np.sqrt(0.875) + 1e-6
  np.testing.assert_allclose(got, [[0, -1 / s, 0], [0, 0, 0], [0, 1.5 / s, -0.5 / s]], rtol=1e-5, atol=1e-7)


def test_constant_shift_is_only_centred_and_clip_bounds_it():
  teacher = OLD + 0.25
  got = skill_shift(teacher, OLD, MASK, jnp.ones(3), normalize=True)
  np.testing.assert_allclose(got, np.zeros((3, 3)), atol=1e-6)  # σ = 0 ≤ ε: Δ − μ, no division
  np.testing.assert_allclose(skill_shift(TEACHER, OLD, MASK, jnp.ones(3), clip=0.6),
                             [[0.5, -0.5, 0], [0, 0.6, -0.6], [0, 0.6, 0]])


def test_advantage_is_episode_plus_weighted_routes():
  episode = jnp.array([1.0, -0.5, 0.0])
  use_ep, use_step = jnp.array([1., 1., 0.]), jnp.array([0., 0., 1.])
  step_teacher = OLD + 4.0  # row 2's tokens shift by 4, rows 0 and 1 are not on the step route
  got = opid_advantages(episode, MASK, OLD, TEACHER, use_ep, step_teacher, use_step, w_episode=0.1, w_step=0.01)
  want = [[1.0 + 0.05, 1.0 - 0.05, 0], [-0.5, -0.5 + 0.1, -0.5 - 0.1], [0, 0.04, 0.04]]
  np.testing.assert_allclose(got, want, rtol=1e-6)
  plain = opid_advantages(episode, MASK, OLD, TEACHER, use_ep, step_teacher, use_step, w_episode=0.0, w_step=0.0)
  np.testing.assert_allclose(plain, np.asarray(episode)[:, None] * np.asarray(MASK))  # w = 0: GRPO's advantage


@pytest.mark.parametrize("normalize", [False, True])
def test_unrouted_teacher_rows_are_ignored(normalize):
  use = jnp.array([1., 0., 1.])
  garbage = TEACHER.at[1].set(1e6)
  np.testing.assert_allclose(skill_shift(garbage, OLD, MASK, use, normalize),
                             skill_shift(TEACHER, OLD, MASK, use, normalize))


def test_shift_metrics_by_route():
  m = shift_metrics(MASK, OLD, TEACHER, jnp.array([1., 1., 0.]), OLD + 4.0, jnp.array([0., 0., 1.]))
  assert m["opid/route_episode"] == pytest.approx(2 / 3) and m["opid/route_step"] == pytest.approx(1 / 3)
  deltas = np.array([0.5, -0.5, 0, 1, -1])
  assert m["opid/delta_episode_mean"] == pytest.approx(deltas.mean())
  assert m["opid/delta_episode_std"] == pytest.approx(deltas.std())
  assert (m["opid/delta_step_mean"], m["opid/delta_step_std"]) == (pytest.approx(4.0), pytest.approx(0.0))
