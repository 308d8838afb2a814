"""Objectives: hand-computed advantages, PPO dual clip, KL kinds, aggregation exactness, and the objective registry."""
import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import assert_loss_sums_over_rows
from agentopd_jax.batching.collate import TrainBatch
from agentopd_jax.objectives import (AGG_MODES, LossCore, LossParams, Normalizer, agg_loss, broadcast_to_tokens,
                                     get_advantage_estimator, get_objective, grpo_advantages, kl_penalty,
                                     informative_groups, normalizer_for, ppo_dual_clip_loss, register_objective, sft_nll,
                                     step_scores)
from agentopd_jax.objectives.losses import clamp
from agentopd_jax.scoring.fused import ScoreConfig, Scores

E = math.e


# ---------------------------------------------------------------- advantages


def test_step_scores_subtracts_invalid_penalty():
  # s = R − 0.1·(1 − valid): 10 − 0.1 = 9.9 on the invalid step, untouched elsewhere.
  s = step_scores(jnp.array([10.0, 10.0, 0.0]), jnp.array([1, 0, 0]), 0.1)
  np.testing.assert_allclose(s, [10.0, 9.9, -0.1], rtol=1e-6)


def _worked_example():
  """Group 0: trajectory a (3 steps, reward 10, step 2 invalid) + trajectory b (2 steps, reward 0) = 5 step samples.
  Group 1: two one-step trajectories, rewards 10 and 0. Group 2: a lone sample, reward 10. Then 2 padding rows."""
  rewards = jnp.array([10, 10, 10, 0, 0, 10, 0, 10, 100, -100], jnp.float32)
  action_valid = jnp.array([1, 0, 1, 1, 1, 1, 1, 1, 1, 1])
  groups = jnp.array([0, 0, 0, 0, 0, 1, 1, 2, 0, 1])
  valid = jnp.array([1, 1, 1, 1, 1, 1, 1, 1, 0, 0])
  return step_scores(rewards, action_valid, 0.1), groups, valid


def test_grpo_worked_example_mean_std_norm():
  scores, groups, valid = _worked_example()
  adv = grpo_advantages(scores, groups, valid, num_groups=3)
  # Group 0: s = [10, 9.9, 10, 0, 0];  μ = 29.9 / 5 = 5.98
  #   deviations 4.02, 3.92, 4.02, −5.98, −5.98;  squares 16.1604 + 15.3664 + 16.1604 + 35.7604 + 35.7604 = 119.208
  #   unbiased σ = sqrt(119.208 / 4) = sqrt(29.802) = 5.4591208
  sigma0 = math.sqrt(29.802) + 1e-6
  # Group 1: s = [10, 0]; μ = 5; σ = sqrt((25 + 25) / 1) = 7.0710678 → A = ±5 / 7.0710678 = ±0.70710678
  sigma1 = math.sqrt(50.0) + 1e-6
  # Group 2: one sample → μ = 0, σ = 1 → A = 10 / (1 + 1e-6)
  expected = [4.02 / sigma0, 3.92 / sigma0, 4.02 / sigma0, -5.98 / sigma0, -5.98 / sigma0,
              5 / sigma1, -5 / sigma1, 10 / (1 + 1e-6), 0.0, 0.0]
  np.testing.assert_allclose(adv, expected, rtol=1e-5, atol=1e-6)
  np.testing.assert_allclose(adv[:3], [0.7363822, 0.7180641, 0.7363822], rtol=1e-5)


def test_grpo_worked_example_mean_norm():
  scores, groups, valid = _worked_example()
  adv = grpo_advantages(scores, groups, valid, mode="mean_norm", num_groups=3)
  # A = s − μ: group 0 μ = 5.98, group 1 μ = 5, lone sample μ = 0; padding 0.
  np.testing.assert_allclose(adv, [4.02, 3.92, 4.02, -5.98, -5.98, 5, -5, 10, 0, 0], rtol=1e-5, atol=1e-5)


def test_grpo_padding_does_not_change_statistics():
  scores, groups, valid = _worked_example()
  real = grpo_advantages(scores[:8], groups[:8], valid[:8], num_groups=3)
  padded = grpo_advantages(scores, groups, valid, num_groups=3)
  np.testing.assert_array_equal(padded[:8], real)
  np.testing.assert_array_equal(padded[8:], 0.0)


def test_grpo_singleton_and_constant_groups():
  # A lone valid sample (its group-mate is padding) keeps its raw score: μ = 0, σ = 1.
  adv = grpo_advantages(jnp.array([3.0, 7.0]), jnp.array([0, 0]), jnp.array([1, 0]), num_groups=1)
  np.testing.assert_allclose(adv, [3.0 / (1 + 1e-6), 0.0], rtol=1e-6)
  # Equal scores: σ = 0 → A = 0 / ε = 0 (no NaN).
  adv = grpo_advantages(jnp.full((3,), 10.0), jnp.zeros(3, jnp.int32), jnp.ones(3))
  np.testing.assert_array_equal(adv, 0.0)


def test_informative_groups_worked_example():
  # Group 0: steps of a won (10) and a lost (0) episode -> kept. Group 1: all lost. Group 2: all won. Group 3: a lone
  # sample. Group 4: no samples. Group 5: WebShop-style partial scores 3 and 7 -> kept.
  rewards = jnp.array([10, 10, 0, 0, 0, 0, 10, 10, 10, 3, 7, 7])
  groups = jnp.array([0, 0, 0, 1, 1, 1, 2, 2, 3, 5, 5, 5])
  np.testing.assert_array_equal(informative_groups(rewards, groups, 6), [True, False, False, False, False, True])


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.sampled_from([0.0, 2.5, 10.0])), min_size=1, max_size=20))
def test_informative_groups_property(rows):
  groups, rewards = zip(*rows)
  kept = informative_groups(jnp.array(rewards), jnp.array(groups), 4)
  for g in range(4):
    assert bool(kept[g]) == (len({r for gi, r in rows if gi == g}) > 1)


def test_trainer_keeps_the_samples_of_informative_groups_only():
  from agentopd_jax.batching.samples import Sample
  from agentopd_jax.methods.grpo import informative_samples

  def sample(group, reward):
    return Sample(prompt_ids=[1], completion_ids=[2], completion_mask=[1], behaviour_logprobs=[0.0], group_id=group,
                  problem_id=f"p{group}", traj_id=0, step_index=0, action_valid=1.0, episode_reward=reward,
                  won=reward > 0)

  samples = [sample(0, 10.0), sample(1, 0.0), sample(0, 0.0), sample(2, 10.0), sample(0, 0.0)]
  kept, adv = informative_samples(samples, [1.0, 2.0, 3.0, 4.0, 5.0], num_groups=3)
  assert kept == [samples[0], samples[2], samples[4]] and adv == [1.0, 3.0, 5.0]
  assert informative_samples([], [], num_groups=3) == ([], [])


@pytest.mark.parametrize("estimator", ["grpo", "grpo_mean_norm"])
def test_the_trainers_advantage_phase_equals_the_eager_functions_and_compiles_once_per_bucket(estimator):
  """`methods.grpo.advantages` pads the samples axis to a bucket (one program for 65..128 samples): the values are
  the eager `step_scores` and estimator's on the real samples, bit for bit."""
  from agentopd_jax import cache
  from agentopd_jax.batching.samples import Sample
  from agentopd_jax.methods import grpo

  rng = np.random.default_rng(0)

  def samples(n, groups):
    return [Sample(prompt_ids=[1], completion_ids=[2], completion_mask=[1], behaviour_logprobs=[0.0],
                   group_id=int(rng.integers(groups)), problem_id="p", traj_id=i, step_index=0,
                   action_valid=float(rng.integers(2)), episode_reward=float(10 * rng.integers(2)), won=False)
            for i in range(n)]

  grpo.advantages(samples(70, 5), 5, estimator, 0.1)  # compiles the bucket's program
  for n in (70, 101, 128):
    batch = samples(n, 5)
    before = cache.compile_counter()["programs"]
    scores, adv = grpo.advantages(batch, 5, estimator, 0.1)
    assert cache.compile_counter()["programs"] == before  # 101 and 128 samples reuse the program of 70
    eager_scores = step_scores(jnp.asarray([s.episode_reward for s in batch], jnp.float32),
                               jnp.asarray([s.action_valid for s in batch], jnp.float32), 0.1)
    eager = get_advantage_estimator(estimator)(eager_scores, jnp.asarray([s.group_id for s in batch]),
                                               jnp.ones(n), num_groups=5)
    np.testing.assert_array_equal(scores, np.asarray(eager_scores))
    np.testing.assert_array_equal(np.asarray(adv, np.float32), np.asarray(eager))


def test_grpo_jit_with_static_num_groups_and_errors():
  scores, groups, valid = _worked_example()
  fn = jax.jit(grpo_advantages, static_argnames=("mode", "num_groups"))
  np.testing.assert_allclose(fn(scores, groups, valid, num_groups=3), grpo_advantages(scores, groups, valid),
                             rtol=1e-6)
  with pytest.raises(ValueError, match="num_groups"):
    jax.jit(grpo_advantages)(scores, groups, valid)
  with pytest.raises(ValueError, match="mean_std_norm"):
    grpo_advantages(scores, groups, valid, mode="std")


def test_advantage_registry_and_broadcast():
  scores, groups, valid = _worked_example()
  np.testing.assert_array_equal(get_advantage_estimator("grpo")(scores, groups, valid, num_groups=3),
                                grpo_advantages(scores, groups, valid, num_groups=3))
  np.testing.assert_array_equal(get_advantage_estimator("grpo_mean_norm")(scores, groups, valid, num_groups=3),
                                grpo_advantages(scores, groups, valid, mode="mean_norm", num_groups=3))
  with pytest.raises(ValueError, match="grpo_mean_norm"):
    get_advantage_estimator("gigpo")
  mask = jnp.array([[0, 1, 1], [0, 0, 1]], jnp.float32)
  np.testing.assert_array_equal(broadcast_to_tokens(jnp.array([2.0, -1.0]), mask), [[0, 2, 2], [0, 0, -1]])


@settings(max_examples=40, deadline=None)
# No scores near float32's smallest normal: XLA on CPU flushes subnormal results (s / (1 + ε)) to zero, which says
# nothing about GRPO.
@given(st.lists(st.tuples(st.floats(-10, 10, width=32).filter(lambda x: x == 0 or abs(x) > 1e-30), st.integers(0, 3),
                          st.booleans()), min_size=12, max_size=12))
def test_grpo_mean_std_norm_is_centred_per_group(rows):
  scores = jnp.array([r[0] for r in rows], jnp.float32)
  groups = jnp.array([r[1] for r in rows], jnp.int32)
  valid = jnp.array([r[2] for r in rows], jnp.float32)
  adv = np.asarray(grpo_advantages(scores, groups, valid, num_groups=4))
  s, g, v = np.asarray(scores, np.float64), np.asarray(groups), np.asarray(valid) > 0
  assert np.all(adv[~v] == 0)
  for k in range(4):
    members = v & (g == k)
    if members.sum() >= 2:
      sd = s[members].std(ddof=1)
      assert abs(adv[members].mean()) < 1e-4 * max(1.0, 1.0 / (sd + 1e-6))   # centred
      np.testing.assert_allclose(adv[members], (s[members] - s[members].mean()) / (sd + 1e-6), rtol=1e-3,
                                 atol=1e-3 * max(1.0, 1.0 / (sd + 1e-6)))
    elif members.sum() == 1:
      np.testing.assert_allclose(adv[members], s[members] / (1 + 1e-6), rtol=1e-5)


# ---------------------------------------------------------------- aggregation


def test_agg_modes_hand_values():
  v = jnp.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]])
  m = jnp.array([[1, 1, 0], [1, 0, 0], [0, 0, 0]], jnp.float32)   # the third sample has no loss tokens
  norm = normalizer_for(m, horizon=4)
  assert float(norm.tokens) == 3.0 and float(norm.sequences) == 3.0 and norm.horizon == 4.0
  # token-mean: (1 + 2 + 4) / 3 = 7/3
  np.testing.assert_allclose(agg_loss(v, m, "token-mean", norm), 7 / 3, rtol=1e-6)
  # verl's seq-means average over every row, the one without loss tokens too:
  # seq-mean-token-mean: ((1 + 2)/2 + 4/1 + 0) / 3 = 5.5 / 3
  np.testing.assert_allclose(agg_loss(v, m, "seq-mean-token-mean", norm), 5.5 / 3, rtol=1e-6)
  # seq-mean-token-sum: (3 + 4 + 0) / 3 = 7/3
  np.testing.assert_allclose(agg_loss(v, m, "seq-mean-token-sum", norm), 7 / 3, rtol=1e-6)
  # seq-mean-token-sum-norm: (3 + 4) / L = 7/4, no mean over rows
  np.testing.assert_allclose(agg_loss(v, m, "seq-mean-token-sum-norm", norm), 7 / 4, rtol=1e-6)
  # A padding row (segment ids all 0) holds no sample: it is no row of verl's batch.
  padded = normalizer_for(m, jnp.array([[1, 1, 1], [1, 1, 0], [0, 0, 0]]))
  assert float(padded.sequences) == 2.0
  np.testing.assert_allclose(agg_loss(v, m, "seq-mean-token-sum", padded), 3.5, rtol=1e-6)
  with pytest.raises(ValueError, match="token-mean"):
    agg_loss(v, m, "sum", norm)


def test_seq_mean_token_sum_norm_needs_its_constant():
  with pytest.raises(ValueError, match="loss_scale_factor"):
    agg_loss(jnp.ones((1, 2)), jnp.ones((1, 2)), "seq-mean-token-sum-norm", normalizer_for(jnp.ones((1, 2))))
  with pytest.raises(ValueError, match="loss.loss_scale_factor"):
    LossCore(loss_agg_mode="seq-mean-token-sum-norm")
  for bad in (-1, 2.5, True):
    with pytest.raises(ValueError, match="loss.loss_scale_factor"):
      LossCore(loss_scale_factor=bad)
  assert LossCore(loss_agg_mode="seq-mean-token-sum-norm", loss_scale_factor=512).loss_scale_factor == 512


def test_normalizer_guards_empty_mask():
  norm = normalizer_for(jnp.zeros((2, 4)), horizon=4)
  assert float(norm.tokens) == 1.0 and float(norm.sequences) == 2.0
  assert float(normalizer_for(jnp.zeros((2, 4)), jnp.zeros((2, 4), jnp.int32)).sequences) == 1.0
  for mode in AGG_MODES:
    assert float(agg_loss(jnp.ones((2, 4)), jnp.zeros((2, 4)), mode, norm)) == 0.0


@pytest.mark.parametrize("mode", AGG_MODES)
def test_agg_is_exact_under_micro_batch_accumulation(mode):
  rng = np.random.default_rng(0)
  v = jnp.asarray(rng.normal(size=(5, 7)), jnp.float32)
  lengths = np.array([6, 1, 0, 4, 3])                       # one row with no loss tokens
  m = jnp.asarray((np.arange(7)[None] < lengths[:, None]).astype(np.float32))
  norm = normalizer_for(m, horizon=7)                       # over the whole mini-batch
  whole = agg_loss(v, m, mode, norm)
  parts = agg_loss(v[:1], m[:1], mode, norm) + agg_loss(v[1:], m[1:], mode, norm)   # 6 tokens | 8 tokens
  np.testing.assert_allclose(parts, whole, rtol=1e-6)
  # Dividing each micro-batch by its own count (verl's micro-batch average) would not be exact:
  own = 0.5 * (agg_loss(v[:1], m[:1], mode, normalizer_for(m[:1], horizon=7))
               + agg_loss(v[1:], m[1:], mode, normalizer_for(m[1:], horizon=7)))
  assert not np.isclose(own, whole)


# ---------------------------------------------------------------- PPO dual clip


def test_ppo_dual_clip_every_branch():
  # ε_low = ε_high = 0.2, c = 3. Columns: log-ratio, A.
  d = np.array([0.5, 0.5, -0.5, -0.5, 1.5, 30.0, 30.0, 0.1, 0.3])
  a = np.array([1.0, -1.0, 1.0, -1.0, -1.0, 1.0, -2.0, 1.0, 0.0])
  old = np.full_like(d, -2.0)
  mask = np.ones_like(d)
  mask[-1] = 0.0
  t = ppo_dual_clip_loss(jnp.asarray(old + d)[None], jnp.asarray(old)[None], jnp.asarray(a)[None],
                         jnp.asarray(mask)[None], 0.2, 0.2, 3.0)
  r5, rm5, r15 = math.exp(0.5), math.exp(-0.5), math.exp(1.5)   # 1.6487, 0.6065, 4.4817
  expected = [
      -1.2,              # ρ=1.6487, A=+1: pg1=−1.6487, pg2=−1.2 → max = −1.2 (ε-clipped)
      r5,                # ρ=1.6487, A=−1: pg1=1.6487, pg2=1.2 → 1.6487; min(1.6487, 3) = 1.6487
      -rm5,              # ρ=0.6065, A=+1: pg1=−0.6065, pg2=−0.8 → −0.6065 (unclipped)
      0.8,               # ρ=0.6065, A=−1: pg1=0.6065, pg2=0.8 → 0.8 (ε-clipped); < 3
      3.0,               # ρ=4.4817, A=−1: pg1=4.4817, pg2=1.2 → 4.4817; min(4.4817, 3) = 3 (dual clip)
      -1.2,              # log-ratio 30 clamped to 20, A=+1: max(−e^20, −1.2) = −1.2
      6.0,               # ρ=e^20, A=−2: max(2e^20, 2.4) = 2e^20; min(2e^20, 2·3) = 6 (dual clip)
      -math.exp(0.1),    # ρ=1.1052 inside [0.8, 1.2], A=+1: −1.1052
      0.0,               # off the mask
  ]
  np.testing.assert_allclose(t.loss[0], expected, rtol=1e-5)
  np.testing.assert_array_equal(t.clipped[0], [1, 0, 0, 1, 0, 1, 0, 0, 0])        # pg2 > pg1
  np.testing.assert_array_equal(t.dual_clipped[0], [0, 0, 0, 0, 1, 0, 1, 0, 0])   # A < 0 and L_clip > −A·c
  np.testing.assert_allclose(t.approx_kl[0], [-0.5, -0.5, 0.5, 0.5, -1.5, -20, -20, -0.1, 0], rtol=1e-5, atol=1e-6)
  assert r15 > 3.0


def test_ppo_gradients_and_validation():
  old = jnp.array([[-1.0, -1.0, -1.0]])
  adv = jnp.array([[1.0, 1.0, -1.0]])
  mask = jnp.ones((1, 3))

  def total(lp):
    return jnp.sum(ppo_dual_clip_loss(lp, old, adv, mask, 0.2, 0.2, 3.0).loss)
  # Token 0 ρ = 1 (unclipped): d(−A·ρ)/dlogp = −ρ·A = −1. Token 1 ρ = e^0.5 > 1.2, A > 0: clipped → 0.
  # Token 2 ρ = e^1.5, A < 0: dual-clipped to the constant 3 → 0.
  g = jax.grad(total)(old + jnp.array([[0.0, 0.5, 1.5]]))
  np.testing.assert_allclose(g, [[-1.0, 0.0, 0.0]], atol=1e-6)
  with pytest.raises(ValueError, match="clip_c"):
    ppo_dual_clip_loss(old, old, adv, mask, 0.2, 0.2, 1.0)


def test_clamp_passes_the_whole_gradient_on_its_bounds_as_torch_clamp():
  x = jnp.array([0.5, 0.8, 1.0, 1.2, 1.5])
  np.testing.assert_array_equal(clamp(x, 0.8, 1.2), jnp.array([0.8, 0.8, 1.0, 1.2, 1.2]))
  np.testing.assert_array_equal(jax.grad(lambda x: jnp.sum(clamp(x, 0.8, 1.2)))(x), [0, 1, 1, 1, 0])
  np.testing.assert_array_equal(jax.grad(lambda x: jnp.sum(clamp(x, hi=1.0)))(x), [1, 1, 1, 0, 0])
  np.testing.assert_array_equal(jax.grad(lambda x: jnp.sum(clamp(x, lo=1.0)))(x), [0, 0, 1, 1, 1])


def test_ppo_gradient_with_the_ratio_on_the_clip_bound():
  # ε_low = ε_high = 0, θ = π_old: ρ = 1 sits on both bounds of clip(ρ, 1, 1), and pg1 = pg2 = −A·ρ. verl's
  # torch.clamp passes the whole gradient at the bound and torch.maximum splits it between the equal pg1 and pg2, so
  # d/dlogp = ½(−A·ρ) + ½(−A·ρ·1) = −A: 1 for A = −1, −2 for A = 2 (jnp.clip would give ½ at each bound: −0.625·A).
  old = jnp.array([[-1.0, -2.0]])
  adv = jnp.array([[-1.0, 2.0]])
  g = jax.grad(lambda lp: jnp.sum(ppo_dual_clip_loss(lp, old, adv, jnp.ones((1, 2)), 0.0, 0.0, 3.0).loss))(old)
  np.testing.assert_allclose(g, [[1.0, -2.0]], rtol=1e-6)


# ---------------------------------------------------------------- KL, NLL


def test_kl_kinds_hand_values():
  lp = jnp.array([-1.0, -2.0, -2.0, -1.0, -30.0, 0.0])
  ref = jnp.array([-2.0, -1.0, 1.0, -16.0, 0.0, -30.0])
  # log π_θ − log π_ref = [1, −1, −3, 15, −30, 30]
  np.testing.assert_allclose(kl_penalty(lp, ref, "kl"), [1, -1, -3, 15, -30, 30], rtol=1e-6)
  np.testing.assert_array_equal(kl_penalty(lp, ref, "k1"), kl_penalty(lp, ref, "kl"))
  np.testing.assert_allclose(kl_penalty(lp, ref, "abs"), [1, 1, 3, 15, 30, 30], rtol=1e-6)
  np.testing.assert_allclose(kl_penalty(lp, ref, "mse"), [0.5, 0.5, 4.5, 112.5, 450, 450], rtol=1e-6)
  np.testing.assert_array_equal(kl_penalty(lp, ref, "k2"), kl_penalty(lp, ref, "mse"))
  # k3: δ = ref − lp = [−1, 1, 3, −15, 30→20, −30→−20]
  #   e^−1 + 1 − 1 = 0.3678794;  e − 1 − 1 = 0.7182818;  e^3 − 4 = 16.0855 → clamp 10;
  #   e^−15 + 15 − 1 ≈ 14 → 10;  e^20 − 21 → 10;  e^−20 + 20 − 1 ≈ 19 → 10
  expected_k3 = [math.exp(-1), E - 2, 10, 10, 10, 10]
  np.testing.assert_allclose(kl_penalty(lp, ref, "low_var_kl"), expected_k3, rtol=1e-6)
  np.testing.assert_array_equal(kl_penalty(lp, ref, "k3"), kl_penalty(lp, ref, "low_var_kl"))
  np.testing.assert_allclose(kl_penalty(jnp.array([-0.5]), jnp.array([-0.5]), "k3"), [0.0], atol=1e-7)
  with pytest.raises(ValueError, match="low_var_kl"):
    kl_penalty(lp, ref, "full")


def test_k3_inner_clamp_keeps_gradients_finite():
  # Without the ±20 clamp of δ, e^200 overflows in float32 and the clamped k3 has a 0·inf = NaN gradient.
  g = jax.grad(lambda lp: jnp.sum(kl_penalty(lp, jnp.zeros(2), "k3")))(jnp.array([-200.0, -0.5]))
  assert np.all(np.isfinite(g))
  # d k3 / d logp = 1 − e^δ with δ = 0.5: 1 − 1.6487 = −0.6487
  np.testing.assert_allclose(g, [0.0, 1 - math.exp(0.5)], rtol=1e-5)


def test_sft_nll():
  np.testing.assert_allclose(sft_nll(jnp.array([[-0.5, -2.0]]), jnp.array([[0.0, 1.0]])), [[0.0, 2.0]])


def test_weighted_mask_applies_each_weight_once():
  # Up-weighted replies (SFT `reply_weight`): weights [0, 1, 4] on NLLs [0.5, 2, 1] -> (1·2 + 4·1) / (1 + 4) = 1.2.
  logprobs, weights = jnp.array([[-0.5, -2.0, -1.0]]), jnp.array([[0.0, 1.0, 4.0]])
  np.testing.assert_allclose(sft_nll(logprobs, weights), [[0.0, 2.0, 1.0]])
  np.testing.assert_allclose(agg_loss(sft_nll(logprobs, weights), weights, "token-mean", normalizer_for(weights)), 1.2,
                             rtol=1e-6)
  # The PPO terms are likewise zeroed off the mask, not weighted: with ρ = 1 and A = 1 every token's loss is −1.
  terms = ppo_dual_clip_loss(logprobs, logprobs, jnp.ones((1, 3)), weights, 0.2, 0.2, 3.0)
  np.testing.assert_allclose(terms.loss, [[0.0, -1.0, -1.0]])


# ---------------------------------------------------------------- registry


def _tiny_batch():
  """Two rows, T = 4; row 0 has loss tokens at 1..3, row 1 at 1..2 (position 0 is never a loss position)."""
  mask = jnp.array([[0, 1, 1, 1], [0, 1, 1, 0]], jnp.float32)
  old = jnp.array([[0, -1.0, -2.0, -0.5], [0, -1.5, -1.0, 0]]) * mask
  logp = old + jnp.array([[0, 0.5, -0.1, 0.0], [0, 0.05, 1.5, 0]]) * mask
  ref = old + jnp.array([[0, 1.0, -1.0, 0.2], [0, 0.0, 0.3, 0]]) * mask
  entropy = jnp.array([[0, 1.0, 2.0, 0.5], [0, 1.5, 0.25, 0]]) * mask
  adv = broadcast_to_tokens(jnp.array([1.0, -1.0]), mask)
  zeros = jnp.zeros((2, 4), jnp.int32)
  batch = TrainBatch(tokens=zeros, segment_ids=(mask > 0).astype(jnp.int32).at[:, 0].set(1), positions=zeros,
                     loss_mask=mask, advantages=adv, old_logprobs=old)
  scores = Scores(policy_logprobs=logp, policy_entropy=entropy, reference_logprobs=ref)
  return scores, batch


def _hand_grpo(params):
  """The same loss assembled token by token (token-mean over the 5 loss tokens)."""
  cfg = params.core
  # Row 0 (A = +1): log-ratios 0.5, −0.1, 0.0 → ρ = 1.6487 (clipped to 1.2), 0.9048, 1.0
  #   losses −1.2, −0.904837, −1.0; clipped flags 1, 0, 0
  # Row 1 (A = −1): log-ratios 0.05, 1.5 → ρ = 1.05127, 4.48169
  #   losses 1.05127, min(4.48169, 3) = 3 (dual clip); flags clipped 0, 0; dual 0, 1
  pg = (-1.2 - math.exp(-0.1) - 1.0 + math.exp(0.05) + 3.0) / 5
  ent = (1.0 + 2.0 + 0.5 + 1.5 + 0.25) / 5
  # k3 with δ = ref − logp = [0.5, −0.9, 0.2, −0.05, −1.2]
  deltas = [0.5, -0.9, 0.2, -0.05, -1.2]
  kl = sum(math.exp(x) - x - 1 for x in deltas) / 5
  drift = (0.5 + 0.1 + 0.0 + 0.05 + 1.5) / 5
  ppo_kl = (-0.5 + 0.1 - 0.0 - 0.05 - 1.5) / 5
  loss = cfg.pg_loss_coef * pg - cfg.entropy_coef * ent + cfg.kl_coef * kl
  return dict(loss=loss, pg_loss=pg, entropy=ent, kl=kl, logprob_drift=drift, ppo_kl=ppo_kl, pg_clipfrac=1 / 5,
              pg_clipfrac_lower=1 / 5)


def test_grpo_loss_matches_hand_assembly_under_jit():
  cfg = LossParams(core=LossCore(kl_coef=0.05, entropy_coef=0.01))
  scores, batch = _tiny_batch()
  obj = get_objective("grpo")
  loss_fn = jax.jit(obj.loss, static_argnums=2)
  loss, metrics = loss_fn(scores, batch, cfg, normalizer_for(batch.loss_mask))
  hand = _hand_grpo(cfg)
  assert set(metrics) == set(hand)
  for name, value in hand.items():
    np.testing.assert_allclose(metrics[name], value, rtol=1e-5, atol=1e-7, err_msg=name)
  np.testing.assert_allclose(loss, hand["loss"], rtol=1e-5)


def test_grpo_loss_sums_over_micro_batches():
  cfg = LossParams(core=LossCore(kl_coef=0.05, entropy_coef=0.01, loss_agg_mode="seq-mean-token-mean"))
  scores, batch = _tiny_batch()
  obj = get_objective("grpo")
  assert_loss_sums_over_rows(obj, scores, batch, cfg, normalizer_for(batch.loss_mask))


def test_grpo_without_kl_or_entropy_branches():
  scores, batch = _tiny_batch()
  norm = normalizer_for(batch.loss_mask)
  obj = get_objective("grpo")
  _, metrics = obj.loss(scores.replace(reference_logprobs=None), batch, LossParams(), norm)
  assert "kl" not in metrics and "entropy" in metrics
  loss, metrics = obj.loss(scores.replace(policy_entropy=None), batch, LossParams(), norm)
  assert "entropy" not in metrics
  np.testing.assert_allclose(loss, _hand_grpo(LossParams())["pg_loss"], rtol=1e-5)
  with pytest.raises(ValueError, match="reference_logprobs"):
    obj.loss(scores.replace(reference_logprobs=None), batch, LossParams(core=LossCore(kl_coef=0.1)), norm)
  with pytest.raises(ValueError, match="policy_entropy"):
    obj.loss(scores.replace(policy_entropy=None), batch, LossParams(core=LossCore(entropy_coef=0.1)), norm)


def test_score_config_branches():
  grpo = get_objective("grpo")
  sc = grpo.score_config(LossParams())
  assert (sc.policy, sc.reference, sc.teacher, sc.top_k, sc.entropy) == (True, False, "none", 0, True)
  assert grpo.score_config(LossParams(core=LossCore(kl_coef=0.01))).reference
  base = ScoreConfig(vocab_chunk=128, temperature=0.7)
  sc = grpo.score_config(LossParams(core=LossCore(kl_coef=0.01)), base)
  assert (sc.vocab_chunk, sc.temperature, sc.reference, sc.top_k) == (128, 0.7, True, 0)
  sft = get_objective("sft").score_config(LossParams("sft"))
  assert (sft.policy, sft.reference, sft.teacher, sft.top_k) == (True, False, "none", 0)


def test_sft_objective():
  scores, batch = _tiny_batch()
  cfg = LossParams("sft")
  loss, metrics = jax.jit(get_objective("sft").loss, static_argnums=2)(scores, batch, cfg,
                                                                        normalizer_for(batch.loss_mask))
  # logp on the loss tokens: row 0: −0.5, −2.1, −0.5; row 1: −1.45, 0.5 → NLL token-mean = (0.5+2.1+0.5+1.45−0.5)/5
  np.testing.assert_allclose(loss, (0.5 + 2.1 + 0.5 + 1.45 - 0.5) / 5, rtol=1e-5)
  assert set(metrics) == {"nll", "entropy", "loss"}
  with pytest.raises(ValueError, match="sft"):
    get_objective("sft").score_config(LossParams("sft", LossCore(kl_coef=0.1)))


def test_registry_names_and_config_validation():
  with pytest.raises(ValueError, match="grpo"):
    get_objective("opid")
  with pytest.raises(ValueError, match="objective"):
    LossParams("opid")
  with pytest.raises(ValueError, match="objective 'grpo' reads no method config group"):
    LossParams("grpo", method=LossCore())
  with pytest.raises(ValueError, match="already registered"):
    register_objective("grpo", get_objective("grpo"))
  for field, bad in [("clip_ratio_low", 1.0), ("clip_ratio_high", -0.1), ("clip_ratio_c", 1.0), ("kl_coef", -1.0),
                     ("kl_type", "full"), ("loss_agg_mode", "sum"), ("pg_loss_coef", -1.0),
                     ("entropy_coef", float("nan"))]:
    with pytest.raises(ValueError, match=f"^loss.{field}"):
      LossCore(**{field: bad})
  cfg = LossParams()
  assert hash(cfg) == hash(LossParams()) and dataclasses.replace(cfg, core=LossCore(kl_coef=0.1)) != cfg


def test_registering_a_new_objective():
  """The extension path later methods use: reuse grpo_loss, add a term, declare extra branches."""
  from agentopd_jax.objectives import OBJECTIVES, Objective, grpo_branches, grpo_loss

  def aux_loss(scores, batch, params, norm):
    loss, metrics = grpo_loss(scores, batch, params, norm)
    aux = agg_loss(scores.teacher_logprobs - scores.policy_logprobs, batch.loss_mask, params.core.loss_agg_mode, norm)
    return loss + 0.5 * aux, dict(metrics, aux=aux)

  obj = Objective(name="test_aux", loss_fn=aux_loss, branches=lambda c: dict(grpo_branches(c), teacher="params"))
  register_objective("test_aux", obj)
  try:
    cfg = LossParams("test_aux")
    assert get_objective("test_aux").score_config(cfg).teacher == "params"
    scores, batch = _tiny_batch()
    scores = scores.replace(teacher_logprobs=scores.policy_logprobs + batch.loss_mask)
    loss, metrics = jax.jit(obj.loss, static_argnums=2)(scores, batch, cfg, normalizer_for(batch.loss_mask))
    np.testing.assert_allclose(metrics["aux"], 1.0, rtol=1e-6)
    np.testing.assert_allclose(loss, _hand_grpo(cfg)["loss"] + 0.5, rtol=1e-5)
  finally:
    del OBJECTIVES["test_aux"]


def test_normalizer_is_a_pytree():
  norm = Normalizer(tokens=jnp.float32(3.0), sequences=jnp.float32(2.0), horizon=512.0)
  assert len(jax.tree.leaves(norm)) == 2                   # the horizon is static
