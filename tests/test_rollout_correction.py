"""Rollout correction (`objectives/rollout_correction.py`): importance weights, rejection masks and mismatch metrics
against hand-computed values; their place in the batch and the loss; and the mismatch a bf16 sampler shows against
an f32 trainer, which an f32 sampler does not."""
import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agentopd_jax.batching.collate import collate
from agentopd_jax.batching.samples import Sample
from agentopd_jax.models import transformer
from agentopd_jax.models.config import preset
from agentopd_jax.objectives.losses import normalizer_for
from agentopd_jax.objectives.registry import LossParams, grpo_loss
from agentopd_jax.objectives.rollout_correction import RolloutCorrectionConfig, correct, is_weights, rejection_mask
from agentopd_jax.sampling.sampler import Sampler, SamplingParams
from agentopd_jax.scoring.fused import Scores
from agentopd_jax.scoring.teacher_signals import recompute_behaviour
from agentopd_jax.training.train_step import make_minibatches

OLD = [-1.0, -2.0, -0.5]   # log π_old of three generated tokens
ROLL = [-1.5, -1.0, -0.5]  # log π_rollout: log ρ = 0.5, -1.0, 0.0


def _sample(old, roll, mask=None, prompt=4, seed=0):
  n = len(old)
  rng = np.random.default_rng(seed)
  return Sample(prompt_ids=rng.integers(1, 50, prompt).tolist(), completion_ids=rng.integers(1, 50, n).tolist(),
                completion_mask=list(mask or [1] * n), behaviour_logprobs=list(old), rollout_logprobs=list(roll),
                group_id=0, problem_id="p", traj_id=0, step_index=0, action_valid=1.0)


def _arrays(*samples):
  n = max(len(s.completion_ids) for s in samples)
  pad = lambda xs: [list(x) + [0.0] * (n - len(x)) for x in xs]
  old = np.asarray(pad([s.behaviour_logprobs for s in samples]))
  roll = np.asarray(pad([s.rollout_logprobs for s in samples]))
  mask = np.asarray(pad([s.completion_mask for s in samples]), float)
  return old, roll, mask


def test_token_weights_truncated_at_c_and_icepop_band():
  old, roll, mask = _arrays(_sample(OLD, ROLL))
  w, raw = is_weights(old - roll, mask, "token", "1.5")
  np.testing.assert_allclose(raw[0], [math.exp(0.5), math.exp(-1.0), 1.0])
  np.testing.assert_allclose(w[0], [1.5, math.exp(-1.0), 1.0])           # TIS: min(ρ, C)
  w, _ = is_weights(old - roll, mask, "token", "0.5_1.5")
  np.testing.assert_allclose(w[0], [0.0, 0.0, 1.0])                      # IcePop: 0 outside [0.5, 1.5]


def test_sequence_weight_is_the_product_over_generated_tokens_only():
  old, roll, mask = _arrays(_sample(OLD + [-3.0], ROLL + [-0.1], mask=[1, 1, 1, 0]))  # the last token: observation
  w, _ = is_weights(old - roll, mask, "sequence", "2.0")
  np.testing.assert_allclose(w[0], [math.exp(-0.5)] * 3 + [0.0])
  w, _ = is_weights(-(old - roll), mask, "sequence", "1.2")
  np.testing.assert_allclose(w[0], [1.2] * 3 + [0.0])                    # exp(0.5) truncated at 1.2


def test_rejection_options_hand_computed():
  s1, s2 = _sample(OLD, ROLL), _sample([-1.0, -1.0], [-1.05, -0.95], seed=1)
  old, roll, mask = _arrays(s1, s2)
  lr = old - roll
  # token_k1 = -log ρ: s1's 0.5 → -0.5 and -1 → 1.0 leave [log 0.7, log 1.3]; s2's ±0.05 stay.
  keep, m = rejection_mask(lr, old, roll, mask, "token_k1", "0.7_1.3")
  np.testing.assert_array_equal(keep[0], [0, 0, 1])
  np.testing.assert_array_equal(keep[1, :2], [1, 1])
  assert m["rollout_rs_masked_fraction"] == pytest.approx(2 / 5)
  assert m["rollout_rs_seq_masked_fraction"] == pytest.approx(1 / 2)
  # seq_max_k2: s1's max ½(log ρ)² is 0.5 > 0.4, the whole sample goes; s2's 0.00125 stays.
  keep, _ = rejection_mask(lr, old, roll, mask, "seq_max_k2", "0.4")
  np.testing.assert_array_equal(keep[0], [0, 0, 0])
  np.testing.assert_array_equal(keep[1, :2], [1, 1])
  # seq_mean_k1: the geometric-mean ratio, k1 mean (−0.5 + 1 + 0)/3 = 1/6 ≤ log 1.2 = 0.18: kept; at "1.1" it is not.
  assert rejection_mask(lr, old, roll, mask, "seq_mean_k1", "1.2")[0][0].all()
  assert not rejection_mask(lr, old, roll, mask, "seq_mean_k1", "1.1")[0][0].any()
  # Two options: both must pass; thresholds one per option.
  keep, m = rejection_mask(lr, old, roll, mask, "seq_sum_k3,token_k2", "10,0.3")
  k3 = [math.exp(0.5) - 1.5, math.exp(-1.0) - 1 + 1.0, 0.0]
  assert sum(k3) < 10 and m["rollout_rs_seq_sum_k3_masked_fraction"] == 0.0
  np.testing.assert_array_equal(keep[0], [1, 0, 1])                       # token_k2: ½·1 > 0.3


def test_mismatch_metrics_hand_computed():
  _, _, metrics = correct([_sample(OLD, ROLL)], RolloutCorrectionConfig(is_level="token", is_threshold="2.0"))
  rho = np.exp([0.5, -1.0, 0.0])
  assert metrics["rollout_corr/kl"] == pytest.approx(np.mean([-0.5, 1.0, 0.0]))
  assert metrics["rollout_corr/k3_kl"] == pytest.approx(np.mean(rho - np.log(rho) - 1))
  assert metrics["rollout_corr/chi2_token"] == pytest.approx(np.mean(rho ** 2) - 1)
  assert metrics["rollout_corr/chi2_seq"] == pytest.approx(math.exp(2 * -0.5) - 1)
  assert metrics["rollout_corr/training_ppl"] == pytest.approx(math.exp(3.5 / 3))
  assert metrics["rollout_corr/rollout_ppl"] == pytest.approx(math.exp(3.0 / 3))
  assert metrics["rollout_corr/rollout_is_ratio_fraction_high"] == 0.0
  assert metrics["rollout_corr/rollout_is_ratio_fraction_low"] == pytest.approx(1 / 3)  # e^-1 < 1/2
  w = np.minimum(rho, 2.0)
  assert metrics["rollout_corr/rollout_is_mean"] == pytest.approx(w.mean())
  assert metrics["rollout_corr/rollout_is_eff_sample_size"] == pytest.approx(1 / np.mean((w / w.mean()) ** 2))


def test_correct_applies_rejection_to_masks_and_normalises_weights():
  samples = [_sample(OLD, ROLL), _sample([-1.0, -1.0], [-1.0, -1.0], seed=1)]
  cfg = RolloutCorrectionConfig(is_level="token", is_threshold="2.0", is_batch_normalize=True, rs="token_k1",
                                rs_threshold="0.7_1.3")
  out, weights, metrics = correct(samples, cfg)
  assert out[0].completion_mask == [0, 0, 1] and out[1].completion_mask == [1, 1]
  assert samples[0].completion_mask == [1, 1, 1]            # the inputs are not changed
  raw = np.concatenate([np.minimum(np.exp([0.5, -1.0, 0.0]), 2.0), [1.0, 1.0]])
  np.testing.assert_allclose(np.concatenate(weights), raw / raw.mean(), rtol=1e-6)
  assert metrics["rollout_corr/rollout_is_batch_norm_factor"] == pytest.approx(raw.mean())
  # Over processes the normaliser is the gathered totals: another process adds 5 tokens of weight 1.
  _, weights, _ = correct(samples, cfg, gather=lambda xs: np.asarray(xs) + [5.0, 5.0])
  np.testing.assert_allclose(np.concatenate(weights), raw / ((raw.sum() + 5) / 10), rtol=1e-6)


def test_off_by_default_and_bad_fields_name_themselves():
  assert not RolloutCorrectionConfig().enabled
  with pytest.raises(ValueError, match="rollout_correction.is_level"):
    RolloutCorrectionConfig(is_level="tok")
  with pytest.raises(ValueError, match="rollout_correction.is_threshold"):
    RolloutCorrectionConfig(is_level="token", is_threshold="2_1")
  with pytest.raises(ValueError, match="rollout_correction.rs: unknown option 'token_k4'"):
    RolloutCorrectionConfig(rs="token_k4", rs_threshold="2")
  with pytest.raises(ValueError, match="rollout_correction.rs_threshold for seq_max_k2"):
    RolloutCorrectionConfig(rs="seq_max_k2", rs_threshold="0.5_2")
  with pytest.raises(ValueError, match="rollout_correction.rs_threshold needs one bound"):
    RolloutCorrectionConfig(rs="token_k1,token_k2", rs_threshold="2,3,4")
  with pytest.raises(ValueError, match="no rollout_logprobs"):
    correct([dataclasses.replace(_sample(OLD, ROLL), rollout_logprobs=None)], RolloutCorrectionConfig(is_level="token"))


@pytest.mark.parametrize("pack_width", [0, 64])
def test_weights_reach_the_batch_at_the_generated_tokens_and_scale_the_surrogate(pack_width):
  samples = [_sample(OLD, ROLL, prompt=5), _sample([-0.2, -0.4], [-0.3, -0.1], prompt=3, seed=1)]
  _, weights, _ = correct(samples, RolloutCorrectionConfig(is_level="token"))
  batch = collate(samples, [1.0, -0.5], pad_to_multiple=8, is_weights=weights)
  for b, (s, w) in enumerate(zip(samples, weights)):
    start = len(s.prompt_ids)
    np.testing.assert_allclose(batch.rollout_is_weights[b, start:start + len(w)], w)
  assert batch.rollout_is_weights.sum() == pytest.approx(sum(w.sum() for w in weights))
  (mb,) = make_minibatches(samples, [1.0, -0.5], 2, 2, pack_width, is_weights=weights)
  assert mb.rollout_is_weights.sum() == pytest.approx(sum(w.sum() for w in weights))
  assert (mb.rollout_is_weights[mb.loss_mask == 0] == 0).all()
  # The loss: each token's dual-clipped surrogate times its weight, aggregated over the unweighted mask.
  flat = lambda x: jnp.asarray(x).reshape(-1, x.shape[-1])
  policy = flat(mb.old_logprobs) + 0.1 * flat(mb.loss_mask)               # ρ = e^0.1 on every loss token
  scores = Scores(policy_logprobs=policy)
  plain = dataclasses.replace(mb, rollout_is_weights=None)
  mask = flat(mb.loss_mask)
  norm = normalizer_for(mask)
  batch2 = jax.tree.map(flat, mb)
  loss, _ = grpo_loss(scores, batch2, LossParams(), norm)
  base, _ = grpo_loss(scores, jax.tree.map(flat, plain), LossParams(), norm)
  # ρ = e^0.1 lies inside [1 − ε, 1 + ε] and below the dual clip c: every token's surrogate is −A·ρ.
  per_token = -np.asarray(flat(mb.advantages)) * np.exp(0.1)
  expect = np.sum(per_token * np.asarray(flat(mb.rollout_is_weights)) * np.asarray(mask)) / np.asarray(mask).sum()
  assert float(loss) == pytest.approx(expect, rel=1e-5)
  assert float(base) == pytest.approx(np.sum(per_token * np.asarray(mask)) / np.asarray(mask).sum(), rel=1e-5)


def _tiny(dtype):
  return preset("tiny", vocab_size=96, num_layers=2, hidden_size=64, intermediate_size=128, num_heads=4,
                num_kv_heads=2, head_dim=16).replace(dtype=dtype, param_dtype=dtype)


@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])
def test_a_bf16_sampler_against_an_f32_trainer_shows_a_mismatch_an_f32_sampler_does_not(dtype):
  """The sampler's recorded log-probs against the f32 trainer's forward of the same weights (verl's decoupled
  mode): a bf16 sampler is off-policy by a measurable KL, an f32 one by float rounding only."""
  trainer_config = _tiny("float32")
  params = transformer.init_params(trainer_config, jax.random.key(0))
  sampler_config = _tiny(dtype)
  sampler_params = jax.tree.map(lambda x: x.astype(sampler_config.param_dtype), params)
  prompts = np.random.default_rng(0).integers(3, 96, (8, 12)).tolist()
  out = Sampler(sampler_config).generate(sampler_params, prompts, jax.random.key(1),
                                         SamplingParams(max_new_tokens=10, temperature=1.0))
  samples = []
  for j, prompt in enumerate(prompts):
    ids = out.row(j)
    samples.append(Sample(prompt_ids=prompt, completion_ids=ids, completion_mask=[1] * len(ids),
                          behaviour_logprobs=out.policy_logprobs[j, :len(ids)].tolist(),
                          rollout_logprobs=out.logprobs[j, :len(ids)].tolist(), group_id=0, problem_id=str(j),
                          traj_id=j, step_index=0, action_valid=1.0))
  recomputed, _ = recompute_behaviour(trainer_config, params, samples)
  _, weights, metrics = correct(recomputed, RolloutCorrectionConfig(is_level="token"))
  ratio = np.concatenate(weights)
  if dtype == "float32":
    assert abs(metrics["rollout_corr/kl"]) < 1e-6 and metrics["rollout_corr/k3_kl"] < 1e-10
    np.testing.assert_allclose(ratio, 1.0, atol=1e-5)
  else:  # measured: k3 3e-7 and max |w − 1| 2e-3 (f32: 5e-14 and 5e-7); the bounds leave room on both sides
    assert metrics["rollout_corr/k3_kl"] > 1e-8 and np.abs(ratio - 1).max() > 1e-4
    assert metrics["rollout_corr/rollout_ppl"] != pytest.approx(metrics["rollout_corr/training_ppl"], rel=1e-6)
