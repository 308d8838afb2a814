"""SDAR and its baselines (methods.sdar.losses): hand-computed gates, divergences, RLSD advantages and λ schedule,
Skill-SD, the registered objectives (values, gradient flow, micro-batch sums), Objective fields, the checks of the
`sdar`, `rlsd` and `skill_sd` config groups."""
import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import assert_loss_sums_over_rows
from agentopd_jax.batching.collate import TrainBatch
from agentopd_jax.methods.sdar.losses import (reverse_kl_score, rlsd_advantages, rlsd_lambda, sampled_reverse_kl,
                                             sdar_gate, sdar_loss, skill_sd_per_token, topk_forward_kl, topk_jsd,
                                             topk_reverse_kl)
from agentopd_jax.methods.sdar.config import RlsdConfig, SdarConfig, SkillSdConfig
from agentopd_jax.objectives import (OBJECTIVES, LossCore, LossParams, broadcast_to_tokens, get_objective,
                                     normalizer_for)
from agentopd_jax.scoring.fused import ScoreConfig, Scores

LN = math.log
SELF_DISTILL = ("sdar", "grpo_opsd", "opsd", "rlsd", "skill_sd")

# ---------------------------------------------------------------- the shared example
# Two rows, T = 4; loss tokens (0, 1..3) and (1, 1..2); A = +1 on row 0, −1 on row 1. θ = π_old, so every PPO ratio
# is 1 and the PG loss is −A per token: (−1 − 1 − 1 + 1 + 1) / 5 = −0.2.
# Teacher gaps Δ = log π_T − log π_θ are chosen so that the gate σ(5Δ) = x / (1 + x) for Δ = ln(x) / 5:
#   (0,1) ln3/5 → 3/4,  (0,2) −ln3/5 → 1/4,  (0,3) 0 → 1/2,  (1,1) ln9/5 → 9/10,  (1,2) −ln4/5 → 1/5
# Student entropies h likewise: σ(5h) = (0,1) 3/4, (0,2) 1/2, (0,3) 4/5, (1,1) 9/10, (1,2) 3/4.
MASK = [[0, 1, 1, 1], [0, 1, 1, 0]]
GAP = [[0, LN(3) / 5, -LN(3) / 5, 0], [0, LN(9) / 5, -LN(4) / 5, 0]]
ENTROPY = [[0, LN(3) / 5, 0, LN(4) / 5], [0, LN(9) / 5, LN(3) / 5, 0]]
G_GAP = [[0, 3 / 4, 1 / 4, 1 / 2], [0, 9 / 10, 1 / 5, 0]]
G_ENTROPY = [[0, 3 / 4, 1 / 2, 4 / 5], [0, 9 / 10, 3 / 4, 0]]
# soft-OR 1 − (1 − g_gap)(1 − g_ent): 1 − ¼·¼ = 15/16, 1 − ¾·½ = 5/8, 1 − ½·⅕ = 9/10, 1 − 0.1·0.1 = 0.99, 1 − ⅘·¼ = 4/5
G_SOFT_OR = [[0, 15 / 16, 5 / 8, 9 / 10], [0, 0.99, 4 / 5, 0]]
# Top-2 raw probabilities at the teacher's ids (not normalised: the tail mass is elsewhere), teacher | policy:
#   (0,1) .6 .2 → ¾ ¼     | .25 .25 → ½ ½
#   (0,2) .3 .3 → ½ ½     | .4 .1   → .8 .2
#   (0,3) .5 .2           | .5 .2   (identical)
#   (1,1) .1 .1 → ½ ½     | .3 .3 → ½ ½   (agree up to the tail mass)
#   (1,2) .2 .6 → ¼ ¾     | .6 .2 → ¾ ¼
T_TOP = [[[1, 1], [.6, .2], [.3, .3], [.5, .2]], [[1, 1], [.1, .1], [.2, .6], [1, 1]]]
S_TOP = [[[1, 1], [.25, .25], [.4, .1], [.5, .2]], [[1, 1], [.3, .3], [.6, .2], [1, 1]]]
# KL(p̃_T ‖ q̃_θ) = Σ p (ln p − ln q):
#   (0,1) ¾ ln 1.5 + ¼ ln ½ = 0.304099 − 0.173287 = 0.130812;   (0,2) ½ ln(.5/.8) + ½ ln(.5/.2) = ½ ln 1.5625 = 0.223144
#   (1,2) ¼ ln(1/3) + ¾ ln 3 = ½ ln 3 = 0.549306;               (0,3), (1,1): 0
FKL = [[0, .75 * LN(1.5) + .25 * LN(.5), .5 * LN(.625) + .5 * LN(2.5), 0], [0, 0, .5 * LN(3), 0]]
# JSD = ½ KL(p ‖ M) + ½ KL(q ‖ M), M = (p + q) / 2:
#   (0,1) M = .625 .375: ½(¾ ln 1.2 + ¼ ln(2/3)) + ½(½ ln .8 + ½ ln(4/3)) = ½ 0.035375 + ½ 0.032269 = 0.033822
#   (0,2) M = .65 .35:   ½(½ ln(.5/.65) + ½ ln(.5/.35)) + ½(.8 ln(.8/.65) + .2 ln(.2/.35)) = ½ 0.047155 + ½ 0.054188
#                        = 0.050672
#   (1,2) M = ½ ½:       both halves equal ¼ ln ½ + ¾ ln 1.5 = 0.130812
# KL(q̃_θ ‖ p̃_T) = Σ q (ln q − ln p):
#   (0,1) ½ ln(½/¾) + ½ ln(½/¼) = ½ ln(4/3) = 0.143841;   (0,2) .8 ln 1.6 + .2 ln .4 = 0.376003 − 0.183258 = 0.192745
#   (1,2) ¾ ln 3 + ¼ ln(1/3) = ½ ln 3 = 0.549306;           (0,3), (1,1): 0
RKL = [[0, .5 * LN(4 / 3), .8 * LN(1.6) + .2 * LN(.4), 0], [0, 0, .5 * LN(3), 0]]
JSD = [[0, .5 * (.75 * LN(1.2) + .25 * LN(2 / 3)) + .5 * (.5 * LN(.8) + .5 * LN(4 / 3)),
        .5 * (.5 * LN(.5 / .65) + .5 * LN(.5 / .35)) + .5 * (.8 * LN(.8 / .65) + .2 * LN(.2 / .35)), 0],
       [0, 0, .25 * LN(.5) + .75 * LN(1.5), 0]]


def _batch(teacher_topk=False):
  mask = jnp.array(MASK, jnp.float32)
  old = jnp.array([[0, -1.0, -2.0, -0.5], [0, -1.5, -1.0, 0]]) * mask
  teacher = old + jnp.array(GAP)
  scores = Scores(policy_logprobs=old, policy_entropy=jnp.array(ENTROPY) * mask,
                  policy_gathered_logprobs=jnp.log(jnp.array(S_TOP)) * mask[..., None] if teacher_topk else None)
  zeros = jnp.zeros((2, 4), jnp.int32)
  batch = TrainBatch(tokens=zeros, segment_ids=(mask > 0).astype(jnp.int32).at[:, 0].set(1), positions=zeros,
                     loss_mask=mask, advantages=broadcast_to_tokens(jnp.array([1.0, -1.0]), mask), old_logprobs=old,
                     teacher_logprobs=teacher,
                     teacher_topk_ids=jnp.ones((2, 4, 2), jnp.int32) if teacher_topk else None,
                     teacher_topk_logprobs=jnp.log(jnp.array(T_TOP)) * mask[..., None] if teacher_topk else None)
  return scores, batch


def _run(cfg, scores, batch):
  return jax.jit(get_objective(cfg.objective).loss, static_argnums=2)(scores, batch, cfg,
                                                                      normalizer_for(batch.loss_mask))


def _gated_sum(gate, per_token):
  return sum(g * x for grow, xrow in zip(gate, per_token) for g, x in zip(grow, xrow))


# ---------------------------------------------------------------- gates and divergences


def test_gates_hand_values_and_stop_gradient():
  gap, entropy = jnp.array(GAP), jnp.array(ENTROPY)
  mask = jnp.array(MASK, jnp.float32)
  for kind, expected in [("gap", G_GAP), ("entropy", G_ENTROPY), ("soft_or", G_SOFT_OR)]:
    np.testing.assert_allclose(sdar_gate(gap, entropy, 5.0, kind) * mask, expected, rtol=1e-5, err_msg=kind)
    g = jax.grad(lambda d, h: jnp.sum(sdar_gate(d, h, 5.0, kind)), argnums=(0, 1))(gap, entropy)
    np.testing.assert_array_equal(g[0], 0.0)
    np.testing.assert_array_equal(g[1], 0.0)
  np.testing.assert_array_equal(sdar_gate(gap, None, 0.0, "gap"), 0.5)            # β = 0: ungated, g ≡ ½
  with pytest.raises(ValueError, match="policy_entropy"):
    sdar_gate(gap, None, 5.0, "entropy")
  with pytest.raises(ValueError, match="kind"):
    sdar_gate(gap, entropy, 5.0, "max")


def test_sampled_reverse_kl_hand_value_and_gradient():
  teacher = jnp.array([[0.0, -1.0, -3.0], [-0.5, -2.0, 7.0]])
  policy = jnp.array([[0.0, -2.0, -1.0], [-0.5, -2.5, -9.0]])
  mask = jnp.array([[0, 1, 1], [0, 1, 0]], jnp.float32)
  # ℓ = log π_T − log π_θ on the mask: −1 + 2 = 1, −3 + 1 = −2, −2 + 2.5 = 0.5; 0 elsewhere.
  np.testing.assert_allclose(sampled_reverse_kl(teacher, policy, mask), [[0, 1, -2], [0, 0.5, 0]])
  g_policy, g_teacher = jax.grad(lambda p, t: jnp.sum(sampled_reverse_kl(t, p, mask)), argnums=(0, 1))(policy, teacher)
  np.testing.assert_array_equal(g_policy, -mask)
  np.testing.assert_array_equal(g_teacher, 0.0)


def test_reverse_kl_score_hand_value_and_gradient():
  teacher = jnp.array([[0.0, -1.0, -3.0], [-0.5, -2.0, 7.0]])
  policy = jnp.array([[0.0, -2.0, -1.0], [-0.5, -2.5, -9.0]])
  mask = jnp.array([[0, 1, 1], [0, 1, 0]], jnp.float32)
  # ℓ = −(log π_T − log π_θ)·log π_θ on the mask: −(1)(−2) = 2, −(−2)(−1) = −2, −(0.5)(−2.5) = 1.25; 0 elsewhere.
  np.testing.assert_allclose(reverse_kl_score(teacher, policy, mask), [[0, 2, -2], [0, 1.25, 0]])
  # ∂ℓ/∂log π_θ = −(log π_T − log π_θ), the gap held constant: −1, 2 | −0.5; nothing reaches the teacher.
  g_policy, g_teacher = jax.grad(lambda p, t: jnp.sum(reverse_kl_score(t, p, mask)), argnums=(0, 1))(policy, teacher)
  np.testing.assert_array_equal(g_policy, [[0, -1, 2], [0, -0.5, 0]])
  np.testing.assert_array_equal(g_teacher, 0.0)


def _expected_gradient(per_token, logits, teacher_logprobs):
  """E_{y~π_θ}[∇_logits ℓ(y)] by exact enumeration of a categorical π_θ = softmax(logits) over V ids: each id y is
  a one-token sample whose loss is weighted by sg[π_θ(y)]."""
  def surrogate(z):
    logp = jax.nn.log_softmax(z)
    losses = per_token(teacher_logprobs[None, :], logp[None, :], jnp.ones((1, logp.size)))[0]
    return jnp.sum(jax.lax.stop_gradient(jnp.exp(logp)) * losses)
  return jax.grad(surrogate)(logits)


def test_sampled_divergences_expected_gradients_by_enumeration():
  """E[∇ℓ] over y ~ π_θ: the sampled reverse-KL gradient gives ∇KL(π_θ ‖ π_T); the released code's term gives 0."""
  logits = jnp.array([0.3, -1.2, 2.0, 0.0, -0.4])
  teacher = jax.nn.log_softmax(jnp.array([1.0, 0.5, -1.0, 0.2, 0.0]))

  def kl(z):
    logp = jax.nn.log_softmax(z)
    return jnp.sum(jnp.exp(logp) * (logp - teacher))
  exact = jax.grad(kl)(logits)
  assert np.abs(exact).max() > 0.1
  np.testing.assert_allclose(_expected_gradient(reverse_kl_score, logits, teacher), exact, atol=1e-6)
  np.testing.assert_allclose(_expected_gradient(sampled_reverse_kl, logits, teacher), 0.0, atol=1e-6)
  # A gradient step along it lowers the KL: the term pulls the student toward the teacher.
  assert kl(logits - 0.1 * exact) < kl(logits)


def test_topk_reverse_kl_on_the_whole_vocabulary_is_the_reverse_kl():
  logits = jnp.array([[[0.3, -1.2, 2.0, 0.0, -0.4]]])
  teacher = jax.nn.log_softmax(jnp.array([[[1.0, 0.5, -1.0, 0.2, 0.0]]]))
  mask = jnp.ones((1, 1))

  def kl(z):
    logp = jax.nn.log_softmax(z)
    return jnp.sum(jnp.exp(logp) * (logp - teacher))
  topk = lambda z: jnp.sum(topk_reverse_kl(jax.nn.log_softmax(z), teacher, mask))
  np.testing.assert_allclose(topk(logits), kl(logits), rtol=1e-6)
  np.testing.assert_allclose(jax.grad(topk)(logits), jax.grad(kl)(logits), atol=1e-6)


def test_topk_divergences_hand_values():
  mask = jnp.array(MASK, jnp.float32)
  student, teacher = jnp.log(jnp.array(S_TOP)), jnp.log(jnp.array(T_TOP))
  np.testing.assert_allclose(RKL[0][1:3] + RKL[1][2:3], [0.143841, 0.192745, 0.549306], atol=1e-6)
  np.testing.assert_allclose(topk_reverse_kl(student, teacher, mask), RKL, rtol=1e-5, atol=1e-7)
  np.testing.assert_allclose(FKL[0][1:3] + FKL[1][2:3], [0.130812, 0.223144, 0.549306], atol=1e-6)
  np.testing.assert_allclose(JSD[0][1:3] + JSD[1][2:3], [0.033822, 0.050672, 0.130812], atol=1e-6)
  np.testing.assert_allclose(topk_forward_kl(student, teacher, mask), FKL, rtol=1e-5, atol=1e-7)
  np.testing.assert_allclose(topk_jsd(student, teacher, mask), JSD, rtol=1e-5, atol=1e-7)
  # A k = 3 support: teacher .5 .25 .25 | policy .2 .2 .1 → q̃ = .4 .4 .2:
  #   KL = ½ ln 1.25 + ¼ ln .625 + ¼ ln 1.25 = 0.049857
  fkl = topk_forward_kl(jnp.log(jnp.array([[[.2, .2, .1]]])), jnp.log(jnp.array([[[.5, .25, .25]]])), jnp.ones((1, 1)))
  np.testing.assert_allclose(fkl, [[.75 * LN(1.25) + .25 * LN(.625)]], rtol=1e-5)
  np.testing.assert_allclose(fkl, [[0.049857]], atol=1e-6)


def test_topk_divergence_gradients_and_masked_garbage():
  mask = jnp.array(MASK, jnp.float32)
  student, teacher = jnp.log(jnp.array(S_TOP)), jnp.log(jnp.array(T_TOP))
  # ∂KL(p̃ ‖ q̃)/∂log π_θ(v_j) = q̃_j − p̃_j: (0,1) ½ − ¾, ½ − ¼; (0,2) .8 − ½, .2 − ½; (1,2) ¾ − ¼, ¼ − ¾; else 0.
  g = jax.grad(lambda s: jnp.sum(topk_forward_kl(s, teacher, mask)))(student)
  expected = np.zeros((2, 4, 2))
  expected[0, 1], expected[0, 2], expected[1, 2] = [-.25, .25], [.3, -.3], [.5, -.5]
  np.testing.assert_allclose(g, expected, atol=1e-6)
  # ∂KL(q̃ ‖ p̃)/∂log π_θ(v_j) = q̃_j (ln q̃_j − ln p̃_j − KL): (0,1) ½(ln ⅔ − ½ ln 4/3), ½(ln 2 − ½ ln 4/3);
  # (0,2) .8(ln 1.6 − 0.192745), .2(ln .4 − 0.192745); (1,2) ¾(ln 3 − ½ ln 3), ¼(−ln 3 − ½ ln 3).
  g = jax.grad(lambda s: jnp.sum(topk_reverse_kl(s, teacher, mask)))(student)
  expected = np.zeros((2, 4, 2))
  expected[0, 1] = [.5 * (LN(2 / 3) - RKL[0][1]), .5 * (LN(2) - RKL[0][1])]
  expected[0, 2] = [.8 * (LN(1.6) - RKL[0][2]), .2 * (LN(.4) - RKL[0][2])]
  expected[1, 2] = [.75 * (LN(3) - RKL[1][2]), .25 * (-LN(3) - RKL[1][2])]
  np.testing.assert_allclose(g, expected, atol=1e-6)
  for divergence in (topk_forward_kl, topk_reverse_kl, topk_jsd):
    g_teacher = jax.grad(lambda t: jnp.sum(divergence(student, t, mask)))(teacher)
    np.testing.assert_array_equal(g_teacher, 0.0)
    # Off-mask positions may hold anything (±inf, NaN): no NaN in values or gradients.
    garbage = student.at[0, 0].set(jnp.array([-jnp.inf, jnp.nan])).at[1, 3].set(jnp.array([jnp.inf, 0.0]))
    assert np.all(np.isfinite(divergence(garbage, garbage, mask)))
    assert np.all(np.isfinite(jax.grad(lambda s: jnp.sum(divergence(s, teacher, mask)))(garbage)))


# ---------------------------------------------------------------- the sdar objective


def test_sdar_default_hand_value_and_metrics():
  scores, batch = _batch()
  loss, metrics = _run(LossParams("sdar"), scores, batch)
  # ℓ = Δ (θ = current): L_SDAR = Σ g·Δ / 5 = [¾ ln3/5 − ¼ ln3/5 + 0 + 0.9 ln9/5 − 0.2 ln4/5] / 5 = 0.089982
  sdar = (3 / 4 * LN(3) / 5 - 1 / 4 * LN(3) / 5 + 9 / 10 * LN(9) / 5 - 1 / 5 * LN(4) / 5) / 5
  np.testing.assert_allclose(sdar, 0.089982, atol=1e-6)
  np.testing.assert_allclose(metrics["sdar/loss"], sdar, rtol=1e-5)
  np.testing.assert_allclose(loss, -0.2 + 0.01 * sdar, rtol=1e-5)
  np.testing.assert_allclose(metrics["pg_loss"], -0.2, rtol=1e-6)
  np.testing.assert_allclose(metrics["sdar/gate_mean"], (.75 + .25 + .5 + .9 + .2) / 5, rtol=1e-6)
  np.testing.assert_allclose(metrics["sdar/gate_active_ratio"], 2 / 5, rtol=1e-6)        # ¾ and 0.9 (½ is not > ½)
  np.testing.assert_allclose(metrics["sdar/teacher_gap_mean"], LN(9 / 4) / 25, rtol=1e-5)  # (ln 9 − ln 4)/5 / 5
  assert {"sdar/loss", "sdar/gate_mean", "sdar/gate_active_ratio", "sdar/teacher_gap_mean", "pg_loss", "entropy",
          "loss"} <= set(metrics)
  # λ and the GRPO coefficients act as in the formula.
  cfg = LossParams("sdar", LossCore(pg_loss_coef=0.5, entropy_coef=0.01), method=SdarConfig(coef=0.1))
  entropy = (LN(3) + LN(4) + LN(9) + LN(3)) / 5 / 5
  np.testing.assert_allclose(_run(cfg, scores, batch)[0], 0.5 * -0.2 - 0.01 * entropy + 0.1 * sdar, rtol=1e-5)


@pytest.mark.parametrize("gate, weights", [("entropy", G_ENTROPY), ("soft_or", G_SOFT_OR)])
def test_sdar_gate_ablations_hand_values(gate, weights):
  scores, batch = _batch()
  _, metrics = _run(LossParams("sdar", method=SdarConfig(gate=gate)), scores, batch)
  # entropy: [¾ ln3/5 − ½ ln3/5 + ⅘·0 + 0.9 ln9/5 − ¾ ln4/5] / 5 = 0.048497
  # soft_or: [15/16 ln3/5 − ⅝ ln3/5 + 0.9·0 + 0.99 ln9/5 − ⅘ ln4/5] / 5 = 0.056381
  hand = {"entropy": (3 / 4 * LN(3) - 1 / 2 * LN(3) + 9 / 10 * LN(9) - 3 / 4 * LN(4)) / 25,
          "soft_or": (15 / 16 * LN(3) - 5 / 8 * LN(3) + 0.99 * LN(9) - 4 / 5 * LN(4)) / 25}[gate]
  np.testing.assert_allclose(hand, {"entropy": 0.048497, "soft_or": 0.056381}[gate], atol=1e-6)
  np.testing.assert_allclose(metrics["sdar/loss"], hand, rtol=1e-5)
  np.testing.assert_allclose(metrics["sdar/loss"], _gated_sum(weights, GAP) / 5, rtol=1e-5)
  np.testing.assert_allclose(metrics["sdar/gate_mean"], sum(map(sum, weights)) / 5, rtol=1e-6)


@pytest.mark.parametrize("divergence, per_token", [("topk_forward_kl", FKL), ("topk_reverse_kl", RKL),
                                                     ("topk_jsd", JSD)])
def test_sdar_topk_divergences_through_the_objective(divergence, per_token):
  scores, batch = _batch(teacher_topk=True)
  cfg = LossParams("sdar", method=SdarConfig(divergence=divergence, top_k=2))
  loss, metrics = _run(cfg, scores, batch)
  # Gap gate ¾ ¼ ½ | 0.9 ⅕ on the divergences: forward KL (¾·0.130812 + ¼·0.223144 + ⅕·0.549306) / 5 = 0.052751
  sdar = _gated_sum(G_GAP, per_token) / 5
  if divergence == "topk_forward_kl":
    np.testing.assert_allclose(sdar, 0.052751, atol=1e-6)
  np.testing.assert_allclose(metrics["sdar/loss"], sdar, rtol=1e-5)
  np.testing.assert_allclose(loss, -0.2 + 0.01 * sdar, rtol=1e-5)
  # The student only gets gradients, and only through the gathered log-probs (the gate is stop-gradient).
  norm = normalizer_for(batch.loss_mask)
  obj = get_objective("sdar")
  no_pg = dataclasses.replace(cfg, core=LossCore(pg_loss_coef=0.0))
  grads = jax.grad(lambda s: obj.loss(s, batch, no_pg, norm)[0])(scores)
  np.testing.assert_array_equal(grads.policy_logprobs, 0.0)
  np.testing.assert_array_equal(grads.policy_entropy, 0.0)
  assert np.abs(grads.policy_gathered_logprobs).sum() > 0


@pytest.mark.parametrize("gate, weights", [("gap", G_GAP), ("entropy", G_ENTROPY), ("soft_or", G_SOFT_OR)])
def test_sdar_gradient_is_the_gated_nll(gate, weights):
  """d L_SDAR / d log π_θ = −g_t·m_t / N_tokens exactly: nothing through the gate (its Δ or h) or the teacher."""
  scores, batch = _batch()
  cfg = LossParams("sdar", LossCore(pg_loss_coef=0.0), method=SdarConfig(gate=gate, coef=1.0))
  norm = normalizer_for(batch.loss_mask)

  def loss_of(logprobs, entropy, teacher):
    return sdar_loss(scores.replace(policy_logprobs=logprobs, policy_entropy=entropy),
                     batch.replace(teacher_logprobs=teacher), cfg, norm)[0]
  g_lp, g_ent, g_teacher = jax.grad(loss_of, argnums=(0, 1, 2))(scores.policy_logprobs, scores.policy_entropy,
                                                                 batch.teacher_logprobs)
  np.testing.assert_allclose(g_lp, -np.array(weights) / 5, rtol=1e-6)
  np.testing.assert_array_equal(g_ent, 0.0)
  np.testing.assert_array_equal(g_teacher, 0.0)


def test_grpo_opsd_is_sdar_with_a_half_gate():
  scores, batch = _batch()
  loss, metrics = _run(LossParams("grpo_opsd"), scores, batch)
  # g ≡ ½: L_SDAR = ½ Σ Δ / 5 = ½ (ln 9 − ln 4) / 25 = 0.016219
  np.testing.assert_allclose(metrics["sdar/loss"], 0.5 * LN(9 / 4) / 25, rtol=1e-5)
  np.testing.assert_allclose(loss, -0.2 + 0.01 * 0.5 * LN(9 / 4) / 25, rtol=1e-5)
  np.testing.assert_allclose(metrics["sdar/gate_mean"], 0.5, rtol=1e-6)
  np.testing.assert_allclose(metrics["sdar/gate_active_ratio"], 0.0)
  loss_beta0, metrics_beta0 = _run(LossParams("sdar", method=SdarConfig(gate_beta=0.0)), scores, batch)
  assert float(loss) == float(loss_beta0)
  assert all(float(metrics[k]) == float(metrics_beta0[k]) for k in metrics)
  with pytest.raises(ValueError, match="sdar.gate must be 'gap'"):
    get_objective("grpo_opsd").score_config(LossParams("grpo_opsd", method=SdarConfig(gate="soft_or")))


def test_grpo_opsd_rkl_pulls_with_the_gap():
  """GRPO+OPSD-RKL: g ≡ ½ on ℓ = −Δ·log π_θ; its gradient −½·Δ_t/N (the authors' form: −½/N on every token)."""
  scores, batch = _batch()
  cfg = LossParams("grpo_opsd_rkl", method=SdarConfig(divergence="reverse_kl_score"))
  loss, metrics = _run(cfg, scores, batch)
  # ½ Σ −Δ·log π_θ / 5 = ½ (ln3/5·1 − ln3/5·2 + 0 + ln9/5·1.5 − ln4/5·1) / 5 = ½ (2 ln 3 − ln 4) / 25 = 0.016219
  np.testing.assert_allclose(metrics["sdar/loss"], 0.5 * (2 * LN(3) - LN(4)) / 25, rtol=1e-5)
  np.testing.assert_allclose(loss, -0.2 + 0.01 * 0.5 * (2 * LN(3) - LN(4)) / 25, rtol=1e-5)
  np.testing.assert_allclose(metrics["sdar/gate_mean"], 0.5, rtol=1e-6)
  norm = normalizer_for(batch.loss_mask)
  no_pg = dataclasses.replace(cfg, core=LossCore(pg_loss_coef=0.0))
  for name, expected in (("grpo_opsd_rkl", -0.01 * 0.5 * np.array(GAP) * np.array(MASK) / 5),
                         ("grpo_opsd", -0.01 * 0.5 * np.array(MASK) / 5)):
    params = no_pg if name == "grpo_opsd_rkl" else LossParams("grpo_opsd", LossCore(pg_loss_coef=0.0))
    g = jax.grad(lambda lp: get_objective(name).loss(scores.replace(policy_logprobs=lp), batch, params, norm)[0])(
        scores.policy_logprobs)
    np.testing.assert_allclose(g, expected, rtol=1e-6, atol=1e-9, err_msg=name)
  # The same divergence in SDAR and OPSD: the gate on it.
  _, sdar_metrics = _run(LossParams("sdar", method=SdarConfig(divergence="reverse_kl_score")), scores, batch)
  lp = np.array([[0, -1.0, -2.0, -0.5], [0, -1.5, -1.0, 0]])
  np.testing.assert_allclose(sdar_metrics["sdar/loss"], _gated_sum(G_GAP, -np.array(GAP) * lp) / 5, rtol=1e-5)
  with pytest.raises(ValueError, match="sdar.divergence must be 'reverse_kl_score'"):
    get_objective("grpo_opsd_rkl").score_config(LossParams("grpo_opsd_rkl"))
  assert get_objective("grpo_opsd_rkl").teacher_top_k(cfg) == 0


def test_grpo_opsd_rkl_preset_sets_its_divergence():
  from agentopd_jax.training import presets
  c = presets.select_variant("grpo_opsd_rkl", "configs/alfworld.py", lambda: presets.cpu_base("alfworld"),
                             lambda v: None)
  assert (c.method, c.sdar.divergence, c.sdar.gate_beta, c.teacher.context) == (
      "grpo_opsd_rkl", "reverse_kl_score", 5.0, "skills")


def test_opsd_has_no_policy_gradient_term():
  scores, batch = _batch()
  cfg = LossParams("opsd")
  loss, metrics = _run(cfg, scores, batch)
  sdar = (3 / 4 * LN(3) / 5 - 1 / 4 * LN(3) / 5 + 9 / 10 * LN(9) / 5 - 1 / 5 * LN(4) / 5) / 5
  np.testing.assert_allclose(loss, 0.01 * sdar, rtol=1e-5)
  # The advantages do not reach the loss or its gradient (−λ·g·m/N only).
  flipped = batch.replace(advantages=-3.0 * batch.advantages)
  assert float(_run(cfg, scores, flipped)[0]) == float(loss)
  norm = normalizer_for(batch.loss_mask)
  g = jax.grad(lambda lp: get_objective("opsd").loss(scores.replace(policy_logprobs=lp), flipped, cfg, norm)[0])(
      scores.policy_logprobs)
  np.testing.assert_allclose(g, -0.01 * np.array(G_GAP) / 5, rtol=1e-6)


# ---------------------------------------------------------------- RLSD


def test_rlsd_advantages_hand_values():
  # λ = ½, ε_w = 0.2. Row 0: A = 2, Δ = ln 1.1, ln 2, −ln 2 → w = 1.1, 2 → 1.2 (clip), ½ → 0.8 (clip)
  #   Â = 2(½ + ½w) = 2.1, 2.2, 1.8.
  # Row 1: A = −1, same Δ magnitudes → w = exp(−Δ): Δ = ln 1.1 → 1/1.1 = 0.909091; Δ = −ln 2 → 2 → 1.2; Δ = ln 2 → 0.8
  #   Â = −(½ + ½w) = −0.954545, −1.1, −0.9   (a failure's teacher-endorsed token is penalised less).
  # Row 2: A = 0 → 0 whatever Δ. Off-mask (column 0, and row 2 beyond column 1) → 0.
  mask = np.array([[0, 1, 1, 1], [0, 1, 1, 1], [0, 1, 0, 0]], np.float32)
  adv = np.array([[0, 2, 2, 2], [0, -1, -1, -1], [0, 0, 0, 0]], np.float32)
  old = np.array([[0, -1.0, -2.0, -0.5], [0, -1.5, -1.0, -3.0], [0, -0.2, 0, 0]], np.float32)
  delta = np.array([[5.0, LN(1.1), LN(2), -LN(2)], [5.0, LN(1.1), -LN(2), LN(2)], [0, LN(2), 0, 0]], np.float32)
  segments = (mask > 0).astype(np.int32)
  out = rlsd_advantages(adv, old + delta, old, mask, segments, 0.5, 0.2)
  assert isinstance(out, np.ndarray) and out.dtype == np.float32
  np.testing.assert_allclose(out, [[0, 2.1, 2.2, 1.8], [0, -(0.5 + 0.5 / 1.1), -1.1, -0.9], [0, 0, 0, 0]], rtol=1e-6)
  np.testing.assert_allclose(out[1, 1], -0.954545, atol=1e-6)
  np.testing.assert_allclose(rlsd_advantages(adv, old + delta, old, mask, segments, 0.0, 0.2), adv)   # λ = 0: GRPO
  # λ = 1: A·w alone: 2.2, 2.4, 1.6 | −0.909091, −1.2, −0.8
  np.testing.assert_allclose(rlsd_advantages(adv, old + delta, old, mask, segments, 1.0, 0.2),
                             [[0, 2.2, 2.4, 1.6], [0, -1 / 1.1, -1.2, -0.8], [0, 0, 0, 0]], rtol=1e-6)


def test_rlsd_takes_each_samples_advantage_at_its_first_loss_token():
  # As the reference (A_seq = advantages[first valid token]), whatever the advantages do further along the sample
  # (OPID's token-level shift). λ = ½, ε_w = 0.2, Δ = ln 2 everywhere (w = 1.2 if A > 0, 0.8 if A < 0).
  # Row 0, one sample: A = 2 at its first loss token (column 1) → Â = 2(½ + ½·1.2) = 2.2 on every token, although
  #   the given advantages there are 2, −1, 0.5 (per token: 2.2, −0.9, 0.55).
  # Row 1, two packed samples: segment 1 (columns 0-2, loss from 1) A = −1 → Â = −(½ + ½·0.8) = −0.9;
  #   segment 2 (columns 3-5, loss from 4) A = 3 → Â = 3.3, though its last token says −3. Column 6 is padding.
  mask = np.array([[0, 1, 1, 1, 0, 0, 0], [0, 1, 1, 0, 1, 1, 0]], np.float32)
  segments = np.array([[1, 1, 1, 1, 0, 0, 0], [1, 1, 1, 2, 2, 2, 0]], np.int32)
  adv = np.array([[0, 2, -1, 0.5, 0, 0, 0], [0, -1, 4, 0, 3, -3, 0]], np.float32)
  old = np.full(mask.shape, -1.0, np.float32)
  out = rlsd_advantages(adv, old + LN(2), old, mask, segments, 0.5, 0.2)
  np.testing.assert_allclose(out, [[0, 2.2, 2.2, 2.2, 0, 0, 0], [0, -0.9, -0.9, 0, 3.3, 3.3, 0]], rtol=1e-6)
  # Leading dimensions (a mini-batch's [A, m, T]) are rows too.
  np.testing.assert_allclose(rlsd_advantages(adv[:, None], old[:, None] + LN(2), old[:, None], mask[:, None],
                                             segments[:, None], 0.5, 0.2), out[:, None], rtol=1e-6)


def test_rlsd_lambda_schedule():
  cfg = RlsdConfig()             # λ_0 = 0.5, W = 50, the authors' schedule
  # λ_i = 0.5·max(0, 1 − i/50): i = 1 → 0.49; 25 → 0.25; 26 → 0.24; 49 → 0.01; 50 → 0; 200 → 0.
  for i, lam in [(1, 0.49), (25, 0.25), (26, 0.24), (49, 0.01), (50, 0.0), (200, 0.0)]:
    assert rlsd_lambda(cfg, i) == pytest.approx(lam, abs=1e-12), i
  assert rlsd_lambda(RlsdConfig(start_lambda=0.3, warmdown_steps=4), 2) == pytest.approx(0.15)
  # "from_lambda0": the same line one iteration later, λ_0 at iteration 1: 0.5·max(0, 1 − (i − 1)/50).
  late = RlsdConfig(schedule="from_lambda0")
  for i, lam in [(1, 0.5), (26, 0.25), (50, 0.01), (51, 0.0)]:
    assert rlsd_lambda(late, i) == pytest.approx(lam, abs=1e-12), i
  for bad in (0, -1, 1.5):
    with pytest.raises(ValueError, match="iteration"):
      rlsd_lambda(cfg, bad)


def test_rlsd_prepare_reweights_host_side_and_the_loss_is_grpo():
  scores, batch = _batch()
  host = jax.tree.map(np.asarray, batch)
  obj = get_objective("rlsd")
  cfg = LossParams("rlsd")
  prepared = obj.prepare(host, LossParams("rlsd", method=RlsdConfig(schedule="from_lambda0")), 1)   # λ = λ_0 = ½
  assert isinstance(prepared.advantages, np.ndarray)
  # λ = ½, Δ = log π_T − log π_old = GAP (θ = old here). Row 0 (A = 1): w = clip(e^Δ): e^{ln3/5} = 3^0.2 = 1.245731
  # → 1.2; e^{−ln3/5} = 0.802742; 1 → Â = ½ + ½w = 1.1, 0.901371, 1. Row 1 (A = −1): w = clip(e^{−Δ}):
  # 9^−0.2 = 0.644394 → 0.8; 4^0.2 = 1.319508 → 1.2 → Â = −0.9, −1.1.
  expected = [[0, 1.1, 0.5 + 0.5 * 3 ** -0.2, 1.0], [0, -0.9, -1.1, 0]]
  np.testing.assert_allclose(prepared.advantages, expected, rtol=1e-6)
  np.testing.assert_array_equal(host.advantages, np.asarray(batch.advantages))     # the input is not modified
  # The loss is GRPO's on the reweighted advantages.
  loss, _ = _run(cfg, scores, jax.tree.map(jnp.asarray, prepared))
  np.testing.assert_allclose(loss, -(1.1 + 0.5 + 0.5 * 3 ** -0.2 + 1.0 - 0.9 - 1.1) / 5, rtol=1e-5)
  # The default schedule at iteration 25 of W = 50: λ = ½·(1 − 25/50) = ¼, so Â = A(¾ + ¼w): row 0 0.75 + 0.3 =
  # 1.05, 0.75 + 0.25·3^−0.2, 1; row 1 −(0.75 + 0.2) = −0.95, −(0.75 + 0.3) = −1.05. From iteration W on, GRPO's own.
  np.testing.assert_allclose(obj.prepare(host, cfg, 25).advantages,
                             [[0, 1.05, 0.75 + 0.25 * 3 ** -0.2, 1.0], [0, -0.95, -1.05, 0]], rtol=1e-6)
  np.testing.assert_allclose(obj.prepare(host, cfg, 50).advantages, host.advantages)
  with pytest.raises(ValueError, match="batch.teacher_logprobs"):
    obj.prepare(host.replace(teacher_logprobs=None), cfg, 1)


# ---------------------------------------------------------------- Skill-SD and Skill-GRPO


def _skill_sd_example():
  """θ = old except (0,1), where log π_θ − log π_old = ln 2 (ρ_on = 2); ℓ = log π_θ − log π_T per token:
  (0,1) ln 2, (0,2) −ln 2, (0,3) 0, (1,1) ln 2, (1,2) −ln 2."""
  scores, batch = _batch()
  mask = batch.loss_mask
  logp = batch.old_logprobs + jnp.array([[0, LN(2), 0, 0], [0, 0, 0, 0]]) * mask
  ell = jnp.array([[0, LN(2), -LN(2), 0], [0, LN(2), -LN(2), 0]]) * mask
  return scores.replace(policy_logprobs=logp), batch.replace(teacher_logprobs=logp - ell)


def test_skill_sd_hand_value_and_gradient():
  scores, batch = _skill_sd_example()
  # k3 = e^{−ℓ} − 1 + ℓ: ℓ = ln 2 → ½ − 1 + ln 2 = 0.193147; ℓ = −ln 2 → 2 − 1 − ln 2 = 0.306853; ℓ = 0 → 0.
  # ρ·k3 = 2·0.193147, 0.306853, 0 | 0.193147, 0.306853 → Σ = 1.193147 → token-mean 0.238629
  sdl = (2 * (0.5 - 1 + LN(2)) + 2 * (2 - 1 - LN(2)) + (0.5 - 1 + LN(2))) / 5
  np.testing.assert_allclose(sdl, 0.238629, atol=1e-6)
  # PPO: (0,1) ρ = 2 > 1.2 with A = 1 → −1.2; the others −1, −1 | +1, +1 → (−1.2) / 5 = −0.24
  cfg = LossParams("skill_sd")
  loss, metrics = _run(cfg, scores, batch)
  np.testing.assert_allclose(metrics["skillsd/loss"], sdl, rtol=1e-5)
  np.testing.assert_allclose(metrics["pg_loss"], -0.24, rtol=1e-5)
  np.testing.assert_allclose(loss, -0.24 + 0.001 * sdl, rtol=1e-5)
  # ρ_on carries gradient: d(ρ·k3)/d log π_θ = ρ·k3 + ρ(1 − e^{−ℓ}) = ρ·ℓ:  2 ln 2, −ln 2, 0 | ln 2, −ln 2
  # (a detached ρ would give ρ(1 − e^{−ℓ}) = 1 at (0,1) instead of 2 ln 2 = 1.386294). Nothing to the teacher.
  norm = normalizer_for(batch.loss_mask)
  obj = get_objective("skill_sd")
  cfg = LossParams("skill_sd", LossCore(pg_loss_coef=0.0), method=SkillSdConfig(coef=1.0))
  g_lp, g_teacher = jax.grad(
      lambda lp, t: obj.loss(scores.replace(policy_logprobs=lp), batch.replace(teacher_logprobs=t), cfg, norm)[0],
      argnums=(0, 1))(scores.policy_logprobs, batch.teacher_logprobs)
  np.testing.assert_allclose(g_lp, np.array([[0, 2 * LN(2), -LN(2), 0], [0, LN(2), -LN(2), 0]]) / 5, rtol=1e-5,
                             atol=1e-7)
  np.testing.assert_array_equal(g_teacher, 0.0)


def test_skill_sd_clamps():
  one = jnp.ones((1, 1))
  # ℓ = −30: e^{min(30, 20)} − 1 − 30; the clamped exp passes no gradient, so d/d log π_θ = k3·ρ' + ρ·1 = k3 + 1.
  lp, teacher, old = jnp.array([[-31.0]]), jnp.array([[-1.0]]), jnp.array([[-31.0]])
  k3 = math.exp(20) - 31
  np.testing.assert_allclose(skill_sd_per_token(lp, teacher, old, one), [[k3]], rtol=1e-6)
  np.testing.assert_allclose(jax.grad(lambda x: jnp.sum(skill_sd_per_token(x, teacher, old, one)))(lp), [[k3 + 1]],
                             rtol=1e-6)
  # log ρ = 12 → clamped to 10: ρ = e^10 passes no gradient; ℓ = ln 2 → value e^10·(½ − 1 + ln 2), grad e^10·½.
  lp, teacher, old = jnp.array([[-1.0]]), jnp.array([[-1.0 - LN(2)]]), jnp.array([[-13.0]])
  np.testing.assert_allclose(skill_sd_per_token(lp, teacher, old, one), [[math.exp(10) * (LN(2) - 0.5)]], rtol=1e-5)
  np.testing.assert_allclose(jax.grad(lambda x: jnp.sum(skill_sd_per_token(x, teacher, old, one)))(lp),
                             [[math.exp(10) * 0.5]], rtol=1e-5)


def test_skill_sd_gradient_at_the_clamp_bounds_is_torchs():
  """The reference's torch.clamp(max=...) passes the whole gradient when its input equals the bound."""
  one = jnp.ones((1, 1))
  # log ρ = log π_θ − log π_old = −1 − (−11) = 10, on the bound: ρ = e^10 keeps dρ/dlogp = ρ. ℓ = −1 − (−2) = 1,
  # k3 = e^−1 − 1 + 1 = e^−1, dk3/dlogp = 1 − e^−1. d(ρ·k3)/dlogp = ρ·k3 + ρ(1 − e^−1) = e^10
  # (half of dρ, as jnp.minimum gives at a tie, would be e^10·(1 − ½e^−1)).
  lp, teacher, old = jnp.array([[-1.0]]), jnp.array([[-2.0]]), jnp.array([[-11.0]])
  np.testing.assert_allclose(jax.grad(lambda x: jnp.sum(skill_sd_per_token(x, teacher, old, one)))(lp),
                             [[math.exp(10)]], rtol=1e-5)
  # −ℓ = −(−21 − (−1)) = 20, on the bound; ρ = 1 (θ = π_old). k3 = e^20 − 1 − 20, dk3/dlogp = 1 − e^20, so
  # d(ρ·k3)/dlogp = k3 + (1 − e^20) = −20 (half of d e^{−ℓ}: ½e^20 − 20). Float64: the e^20 terms cancel.
  with jax.enable_x64(True):
    lp, teacher = jnp.array([[-21.0]]), jnp.array([[-1.0]])
    np.testing.assert_allclose(jax.grad(lambda x: jnp.sum(skill_sd_per_token(x, teacher, lp, one)))(lp),
                               [[-20.0]], rtol=1e-9)


def test_skill_grpo_trains_with_grpos_objective():
  """Skill-GRPO's skills are in the student's prompt (its method's hooks); its loss is GRPO's."""
  from agentopd_jax.methods import METHODS
  assert METHODS["skill_grpo"].objective == "grpo" and "skill_grpo" not in OBJECTIVES


# ---------------------------------------------------------------- registry: fields, branches, checks


def test_objective_fields_per_objective():
  top_k = {name: OBJECTIVES[name].teacher_top_k for name in OBJECTIVES}
  assert top_k["grpo"] is None and top_k["sft"] is None and top_k["agentic_opd"] is None
  for name in ("sdar", "grpo_opsd", "opsd"):
    assert top_k[name](LossParams(name)) == 0
    assert top_k[name](LossParams(name, method=SdarConfig(divergence="topk_jsd", top_k=8))) == 8
    assert top_k[name](LossParams(name, method=SdarConfig(divergence="topk_forward_kl"))) == 16
    assert top_k[name](LossParams(name, method=SdarConfig(divergence="topk_reverse_kl", top_k=4))) == 4
    assert top_k[name](LossParams(name, method=SdarConfig(divergence="reverse_kl_score"))) == 0
  assert top_k["rlsd"](LossParams("rlsd")) == 0
  assert top_k["skill_sd"](LossParams("skill_sd")) == 0
  assert [n for n in OBJECTIVES if OBJECTIVES[n].prepare is not None] == ["rlsd"]
  groups = {name: OBJECTIVES[name].group for name in SELF_DISTILL}
  assert groups == {"sdar": SdarConfig, "grpo_opsd": SdarConfig, "opsd": SdarConfig, "rlsd": RlsdConfig,
                    "skill_sd": SkillSdConfig}


@pytest.mark.parametrize("name", SELF_DISTILL)
def test_branches_are_grpos(name):
  obj = get_objective(name)
  sc = obj.score_config(LossParams(name), ScoreConfig(vocab_chunk=128, temperature=0.7))
  assert (sc.policy, sc.reference, sc.teacher, sc.top_k, sc.entropy) == (True, False, "none", 0, True)
  assert (sc.vocab_chunk, sc.temperature) == (128, 0.7)
  assert obj.score_config(LossParams(name, LossCore(kl_coef=0.01))).reference


def test_missing_teacher_signals_raise_one_clear_error():
  scores, batch = _batch(teacher_topk=True)
  norm = normalizer_for(batch.loss_mask)
  for name in ("sdar", "grpo_opsd", "opsd", "skill_sd"):
    with pytest.raises(ValueError, match="batch.teacher_logprobs"):
      get_objective(name).loss(scores, batch.replace(teacher_logprobs=None), LossParams(name), norm)
  cfg = LossParams("sdar", method=SdarConfig(divergence="topk_jsd", top_k=2))
  obj = get_objective("sdar")
  with pytest.raises(ValueError, match="batch.teacher_topk_ids"):
    obj.loss(scores, batch.replace(teacher_topk_ids=None), cfg, norm)
  with pytest.raises(ValueError, match="batch.teacher_topk_logprobs"):
    obj.loss(scores, batch.replace(teacher_topk_logprobs=None), cfg, norm)
  with pytest.raises(ValueError, match="policy_gathered_logprobs"):
    obj.loss(scores.replace(policy_gathered_logprobs=None), batch, cfg, norm)
  with pytest.raises(ValueError, match="sdar.top_k=4"):
    obj.loss(scores, batch, LossParams("sdar", method=SdarConfig(divergence="topk_jsd", top_k=4)), norm)
  with pytest.raises(ValueError, match="policy_entropy"):
    obj.loss(scores.replace(policy_entropy=None), batch, LossParams("sdar", method=SdarConfig(gate="entropy")), norm)


@pytest.mark.parametrize("group, field, bad", [
    ("sdar", "coef", -0.1), ("sdar", "coef", float("nan")), ("sdar", "gate_beta", -1.0),
    ("sdar", "gate_beta", float("inf")), ("sdar", "gate", "max"), ("sdar", "divergence", "kl"), ("sdar", "top_k", 1),
    ("sdar", "top_k", 4.0), ("sdar", "top_k", True), ("skill_sd", "coef", -1e-3), ("rlsd", "start_lambda", 1.5),
    ("rlsd", "start_lambda", -0.1), ("rlsd", "warmdown_steps", 0), ("rlsd", "warmdown_steps", 2.5),
    ("rlsd", "eps_w", 1.0), ("rlsd", "eps_w", -0.1), ("rlsd", "eps_w", "0.2"), ("rlsd", "schedule", "cosine")])
def test_the_groups_reject_bad_values(group, field, bad):
  cls = {"sdar": SdarConfig, "rlsd": RlsdConfig, "skill_sd": SkillSdConfig}[group]
  with pytest.raises(ValueError, match=f"^{group}.{field}"):
    cls(**{field: bad})


def test_the_groups_defaults():
  sdar, rlsd = SdarConfig(), RlsdConfig()
  assert (sdar.coef, sdar.gate_beta, sdar.gate, sdar.divergence, sdar.top_k) == (0.01, 5.0, "gap", "reverse_kl", 16)
  assert (SkillSdConfig().coef, rlsd.start_lambda, rlsd.warmdown_steps, rlsd.eps_w, rlsd.schedule) == (
      0.001, 0.5, 50, 0.2, "released_code")
  assert hash(LossParams("sdar")) == hash(LossParams("sdar")) and LossParams("sdar").method == sdar
  with pytest.raises(ValueError, match="objective 'rlsd' reads the config group RlsdConfig, got SdarConfig"):
    LossParams("rlsd", method=sdar)


# ---------------------------------------------------------------- micro-batch exactness


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"])
@pytest.mark.parametrize("name, extra", [
    ("sdar", {}), ("sdar", dict(gate="soft_or", divergence="topk_jsd", top_k=2)),
    ("sdar", dict(gate="entropy", divergence="topk_forward_kl", top_k=2)),
    ("grpo_opsd", {}), ("opsd", {}), ("rlsd", {}), ("skill_sd", {})])
def test_metrics_sum_over_micro_batches(mode, name, extra):
  scores, batch = _batch(teacher_topk=True)
  scores = scores.replace(reference_logprobs=batch.old_logprobs + 0.1 * batch.loss_mask,
                          policy_logprobs=scores.policy_logprobs + 0.05 * batch.loss_mask)
  core = LossCore(loss_agg_mode=mode, kl_coef=0.01, entropy_coef=0.01)
  cfg = LossParams(name, core, SdarConfig(**extra) if extra else None)
  obj = get_objective(name)
  assert_loss_sums_over_rows(obj, scores, batch, cfg, normalizer_for(batch.loss_mask))


# ---------------------------------------------------------------- end to end through the scorer


def test_sdar_topk_end_to_end_through_scoring(tiny_scoring_batch):
  """The batch's teacher top-k ids drive the scorer's gather; a teacher equal to the student distils nothing."""
  from agentopd_jax.models import transformer
  from agentopd_jax.scoring.fused import score

  model, batch = tiny_scoring_batch
  mask = batch.loss_mask
  params = transformer.init_params(model, jax.random.key(0))
  # "Teacher" = the same params on the same context, top-4: the loss term must vanish.
  own = jax.jit(score, static_argnums=(0, 1))(model, ScoreConfig(vocab_chunk=64, reference=False, top_k=4), params,
                                              None, None, batch.score_batch())
  batch = batch.replace(old_logprobs=own.policy_logprobs, teacher_logprobs=own.policy_logprobs,
                        teacher_topk_ids=own.policy_topk_ids, teacher_topk_logprobs=own.policy_topk_logprobs)
  cfg = LossParams("sdar", method=SdarConfig(divergence="topk_forward_kl", top_k=4, coef=1.0))
  obj = get_objective("sdar")
  sc = obj.score_config(cfg, ScoreConfig(vocab_chunk=64))
  norm = normalizer_for(mask)

  def loss_fn(p, b):
    return obj.loss(score(model, sc, p, None, None, b.score_batch()), b, cfg, norm)

  step = jax.jit(jax.value_and_grad(loss_fn, has_aux=True))
  (_, metrics), _ = step(params, batch)
  np.testing.assert_allclose(metrics["sdar/loss"], 0.0, atol=1e-6)
  np.testing.assert_allclose(metrics["sdar/teacher_gap_mean"], 0.0, atol=1e-6)
  # A different teacher distribution on the same ids: a positive loss with finite, non-zero gradients.
  (_, metrics), grads = step(params, batch.replace(teacher_topk_logprobs=batch.teacher_topk_logprobs[..., ::-1]))
  assert float(metrics["sdar/loss"]) > 0
  assert all(np.all(np.isfinite(g)) for g in jax.tree.leaves(grads))
  assert sum(float(jnp.abs(g).sum()) for g in jax.tree.leaves(grads)) > 0
