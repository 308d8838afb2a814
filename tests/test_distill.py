"""Agentic-OPD: hand-computed top-k reverse KL (and its clamp), the sampled-token advantage, LAD routing, and the
registered `agentic_opd` objective (value, task term, routing, micro-batch exactness, scoring end to end)."""
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from conftest import assert_loss_sums_over_rows
from agentopd_jax.batching.collate import TrainBatch, collate
from agentopd_jax.batching.samples import Sample
from agentopd_jax.methods.agentic_opd.losses import (lad_mask, opd_policy_loss, problem_success_rates,
                                                    sampled_token_opd_advantage, topk_reverse_kl)
from agentopd_jax.methods.agentic_opd.config import AgenticOpdConfig
from agentopd_jax.objectives import (LossCore, LossParams, broadcast_to_tokens, get_objective, normalizer_for,
                                     ppo_dual_clip_loss)
from agentopd_jax.scoring.fused import ScoreConfig, Scores

LN = math.log

# ---------------------------------------------------------------- top-k reverse KL


def _k3_example():
  """One position, k = 3. The top-k log-probs are *not* normalised (the tail mass is elsewhere in the vocabulary):
    student π_θ(v_k) = 0.5, 0.25, 0.125 (sum 0.875) → p̃_S = 4/7, 2/7, 1/7 = 0.571429, 0.285714, 0.142857
    teacher π_T(v_k) = 0.2, 0.2, 0.4    (sum 0.8)   → p̃_T = 0.25, 0.25, 0.5
    log-ratios log(p̃_S/p̃_T) = log(16/7), log(8/7), log(2/7) = 0.826679, 0.133531, −1.252763
  """
  student = jnp.log(jnp.array([[[0.5, 0.25, 0.125]]]))
  teacher = jnp.log(jnp.array([[[0.2, 0.2, 0.4]]]))
  return student, teacher, jnp.ones((1, 1))


def test_topk_reverse_kl_k3_hand_value():
  student, teacher, mask = _k3_example()
  # ℓ = 4/7·0.826679 + 2/7·0.133531 + 1/7·(−1.252763) = 0.472388 + 0.038152 − 0.178966 = 0.331574
  expected = 4 / 7 * LN(16 / 7) + 2 / 7 * LN(8 / 7) + 1 / 7 * LN(2 / 7)
  np.testing.assert_allclose(expected, 0.331574, atol=1e-6)
  np.testing.assert_allclose(topk_reverse_kl(student, teacher, mask), [[expected]], rtol=1e-5)


def test_topk_reverse_kl_clamp_hand_value():
  student, teacher, mask = _k3_example()
  # c = 1: only the third log-ratio (−1.252763) is clamped, to −1:  0.472388 + 0.038152 − 1/7 = 0.367683
  expected = 4 / 7 * LN(16 / 7) + 2 / 7 * LN(8 / 7) - 1 / 7
  np.testing.assert_allclose(expected, 0.367683, atol=1e-6)
  np.testing.assert_allclose(topk_reverse_kl(student, teacher, mask, max_abs_log_ratio=1.0), [[expected]], rtol=1e-5)
  # c = 0.1 clamps all three: 4/7·0.1 + 2/7·0.1 − 1/7·0.1 = 0.5/7 = 0.0714286
  np.testing.assert_allclose(topk_reverse_kl(student, teacher, mask, 0.1), [[0.5 / 7]], rtol=1e-5)
  # A clamp wider than every log-ratio changes nothing.
  np.testing.assert_allclose(topk_reverse_kl(student, teacher, mask, 5.0), topk_reverse_kl(student, teacher, mask),
                             rtol=1e-6)
  with pytest.raises(ValueError, match="max_abs_log_ratio"):
    topk_reverse_kl(student, teacher, mask, 0.0)


def test_topk_reverse_kl_gradients_student_only_and_under_clamp():
  student, teacher, mask = _k3_example()
  p = np.array([4, 2, 1]) / 7
  r = np.log(p / np.array([0.25, 0.25, 0.5]))
  ell = float(np.sum(p * r))
  g_teacher = jax.grad(lambda t: jnp.sum(topk_reverse_kl(student, t, mask)))(teacher)
  np.testing.assert_array_equal(g_teacher, 0.0)                      # the teacher is stop-gradient
  # No clamp: ∂ℓ/∂s_j = Σ_k ∂p̃_k/∂s_j · r_k (the p̃·∇log p̃ term sums to 0) = p̃_j (r_j − ℓ), with ∂p̃_k/∂s_j =
  # p̃_k(δ_kj − p̃_j). Numbers: ℓ = 0.331574 → g = 4/7·0.495105, 2/7·(−0.198043), 1/7·(−1.584337).
  g = jax.grad(lambda s: jnp.sum(topk_reverse_kl(s, teacher, mask)))(student)
  np.testing.assert_allclose(g[0, 0], p * (r - ell), rtol=1e-5, atol=1e-7)
  # Clamp c = 1 (entry 3 clamped to the constant −1, u = unclamped indicator = 1, 1, 0):
  #   ∂ℓ/∂s_j = Σ_k ∂p̃_k/∂s_j · clip(r_k) + Σ_{k unclamped} p̃_k ∂log p̃_k/∂s_j = p̃_j (c_j + u_j − ℓ_c − Σ_k u_k p̃_k)
  c, u = np.clip(r, -1.0, 1.0), np.array([1.0, 1.0, 0.0])
  ell_c = float(np.sum(p * c))
  g = jax.grad(lambda s: jnp.sum(topk_reverse_kl(s, teacher, mask, 1.0)))(student)
  np.testing.assert_allclose(g[0, 0], p * (c + u - ell_c - np.sum(u * p)), rtol=1e-5, atol=1e-7)


def test_topk_reverse_kl_zero_when_teacher_agrees_on_the_support():
  rng = np.random.default_rng(0)
  student = jnp.asarray(np.log(rng.dirichlet(np.ones(20), size=(2, 5))[..., :4]), jnp.float32)   # top-4 of 20
  mask = jnp.ones((2, 5))
  np.testing.assert_allclose(topk_reverse_kl(student, student, mask), 0.0, atol=1e-6)
  # A teacher that differs only by its tail mass (every top-k log-prob shifted by one constant) also agrees.
  np.testing.assert_allclose(topk_reverse_kl(student, student - 0.7, mask), 0.0, atol=1e-6)
  # Otherwise ℓ > 0 (a KL on the common support).
  assert np.all(np.asarray(topk_reverse_kl(student, student[..., ::-1], mask)) >= -1e-7)


def test_topk_reverse_kl_masked_positions_contribute_nothing():
  student, teacher, _ = _k3_example()
  # Position 0 is off the mask and holds zeros (as scoring.fused leaves it); position 2 holds garbage (−inf, NaN).
  garbage = jnp.array([[[-jnp.inf, jnp.nan, 0.0]]])
  s = jnp.concatenate([jnp.zeros((1, 1, 3)), student, garbage], axis=1)
  t = jnp.concatenate([jnp.zeros((1, 1, 3)), teacher, garbage], axis=1)
  mask = jnp.array([[0.0, 1.0, 0.0]])
  loss = topk_reverse_kl(s, t, mask)
  np.testing.assert_allclose(loss, [[0.0, 0.331574, 0.0]], atol=1e-6)
  g = jax.grad(lambda x: jnp.sum(topk_reverse_kl(x, t, mask)))(s)
  assert np.all(np.isfinite(g))
  np.testing.assert_array_equal(g[0, 0], 0.0)
  np.testing.assert_array_equal(g[0, 2], 0.0)


# ---------------------------------------------------------------- sampled-token advantage


def test_sampled_token_opd_advantage():
  teacher = jnp.array([[0.0, -1.0, -3.0], [-0.5, -2.0, 0.0]])
  student = jnp.array([[0.0, -2.0, -1.0], [-0.5, -2.0, -9.0]])
  mask = jnp.array([[0, 1, 1], [0, 1, 0]], jnp.float32)
  # A = log π_T − log π_S on the mask: −1 − (−2) = 1;  −3 − (−1) = −2;  −2 − (−2) = 0; off-mask 0.
  a = sampled_token_opd_advantage(teacher, student, mask)
  np.testing.assert_allclose(a, [[0, 1, -2], [0, 0, 0]])
  # An advantage, not a loss: no gradient to either input.
  g = jax.grad(lambda s: jnp.sum(sampled_token_opd_advantage(teacher, s, mask)))(student)
  np.testing.assert_array_equal(g, 0.0)
  # Used as the PPO advantage: opd_policy_loss is ppo_dual_clip_loss with A = A^OPD (+ A_task, added before the clip).
  old = student
  logp = student + jnp.array([[0.0, 0.5, 0.0], [0.0, 0.0, 0.0]])
  terms = opd_policy_loss(logp, old, a, mask, 0.2, 0.2, 3.0)
  # token (0,1): ρ = e^0.5 = 1.6487 > 1.2, A = 1 → −1.2;  token (0,2): ρ = 1, A = −2 → 2.
  np.testing.assert_allclose(terms.loss, [[0, -1.2, 2.0], [0, 0, 0]], rtol=1e-6)
  task = jnp.array([[0.0, 1.0, 1.0], [0.0, 1.0, 0.0]])
  np.testing.assert_array_equal(opd_policy_loss(logp, old, a, mask, 0.2, 0.2, 3.0, task).loss,
                                ppo_dual_clip_loss(logp, old, a + task, mask, 0.2, 0.2, 3.0).loss)


# ---------------------------------------------------------------- LAD


def test_lad_mask_solved_sets_worked_example():
  # U = 4 problems. Teacher solved Q_T = {0, 1, 2}; student solved P_S = {1, 3} → Q_T − P_S = {0, 2}.
  teacher_solved = jnp.array([1, 1, 1, 0])
  student_solved = jnp.array([0, 1, 0, 1])
  won = jnp.array([0.0, 1.0, 0.0, 0.0, 0.0, 1.0, 0.0])   # rewards: EM > 0 = won
  q = jnp.array([0, 0, 1, 2, 3, 2, 2])
  # (lost, q0 ∈ gap) 1 | won 0 | q1 solved by the student 0 | (lost, q2) 1 | q3 not the teacher's 0 | won 0 | 1
  expected = [1, 0, 0, 1, 0, 0, 1]
  np.testing.assert_array_equal(lad_mask(won, q, teacher_solved, student_solved), expected)
  jitted = jax.jit(lad_mask, static_argnames="mode")
  np.testing.assert_array_equal(jitted(won > 0, q, teacher_solved > 0, student_solved > 0, mode="solved_sets"),
                                expected)
  with pytest.raises(ValueError, match="group_rates"):
    lad_mask(won, q, teacher_solved, student_solved, mode="coverage")


def test_lad_mask_group_rates_worked_example():
  # G = 2 student rollouts per problem; the last row is padding (valid 0, won 1, problem 0).
  q = jnp.array([0, 0, 1, 1, 2, 2, 3, 3, 0])
  won = jnp.array([0, 1, 0, 0, 0, 0, 1, 0, 1])
  valid = jnp.array([1, 1, 1, 1, 1, 1, 1, 1, 0])
  student_rate = problem_success_rates(won, q, 4, valid)
  np.testing.assert_allclose(student_rate, [0.5, 0.0, 0.0, 0.5])     # padding does not count: q0 is 1/2, not 2/3
  teacher_rate = jnp.array([0.5, 0.25, 1.0, 0.0])
  # teacher > student on q1 (0.25 > 0) and q2 (1 > 0); not on q0 (0.5 = 0.5, a tie is not "better") nor q3.
  # Routed = lost rollouts of q1 and q2: rows 2, 3, 4, 5.
  m = jax.jit(lad_mask, static_argnames="mode")(won, q, teacher_rate, student_rate, mode="group_rates")
  np.testing.assert_array_equal(m, [0, 0, 1, 1, 1, 1, 0, 0, 0])
  np.testing.assert_allclose(problem_success_rates(won[:8], q[:8], 5), [0.5, 0, 0, 0.5, 0])   # no rollouts → 0


def test_collate_distill_weights_cover_the_generated_tokens_of_each_sample():
  # Routing is per rollout; it reaches the loss on that rollout's generated tokens only (observation tokens of a
  # whole-trajectory sample have completion mask 0), with or without packing, and padding rows get 0.
  samples = [Sample(prompt_ids=[5, 6], completion_ids=[7, 8, 9], completion_mask=[1, 0, 1],
                    behaviour_logprobs=[-1.0, 0.0, -1.0], group_id=0, problem_id="a", traj_id=0, step_index=-1,
                    action_valid=1.0),
             Sample(prompt_ids=[5], completion_ids=[7, 8], completion_mask=[1, 1], behaviour_logprobs=[-1.0, -1.0],
                    group_id=0, problem_id="a", traj_id=1, step_index=-1, action_valid=1.0)]
  batch = collate(samples, [1.0, -1.0], pad_to_multiple=8, rows=3, distill_weights=[1.0, 0.0])
  np.testing.assert_array_equal(batch.distill_mask, [[0, 0, 1, 0, 1, 0, 0, 0], [0] * 8, [0] * 8])
  packed = collate(samples, [1.0, -1.0], pad_to_multiple=8, pack_width=8, distill_weights=[0.0, 1.0])
  np.testing.assert_array_equal(packed.segment_ids, [[1, 1, 1, 1, 1, 2, 2, 2]])
  np.testing.assert_array_equal(packed.distill_mask, [[0, 0, 0, 0, 0, 0, 1, 1]])


# ---------------------------------------------------------------- the agentic_opd objective

# Per-token top-2 probabilities (student, teacher) and the renormalised reverse KL of each loss token:
#   (0,1): S .6 .2 → .75 .25;  T .1 .3 → .25 .75;  ℓ = .75 ln 3 + .25 ln(1/3) = .5 ln 3            = 0.549306
#   (0,2): S .5 .5 → .5 .5;    T .2 .2 → .5 .5;    ℓ = 0 (only the tail mass differs)
#   (0,3): S .4 .1 → .8 .2;    T .4 .4 → .5 .5;    ℓ = .8 ln 1.6 + .2 ln .4 = .376003 − .183258      = 0.192745
#   (1,1): S .3 .3 → .5 .5;    T .9 .05 → 18/19 1/19; ℓ = .5 ln(19/36) + .5 ln(19/2) = .5 ln(361/72) = 0.806106
#   (1,2): S .7 .2 → 7/9 2/9;  T .2 .7 → 2/9 7/9;  ℓ = (7/9 − 2/9) ln 3.5                           = 0.695979
ELL = [[0.0, 0.5 * LN(3), 0.0, 0.8 * LN(1.6) + 0.2 * LN(0.4)], [0.0, 0.5 * LN(361 / 72), 5 / 9 * LN(3.5), 0.0]]
S_TOP = [[[1, 1], [.6, .2], [.5, .5], [.4, .1]], [[1, 1], [.3, .3], [.7, .2], [1, 1]]]
T_TOP = [[[1, 1], [.1, .3], [.2, .2], [.4, .4]], [[1, 1], [.9, .05], [.2, .7], [1, 1]]]


def _opd_batch(distill_mask=None):
  """Two rows, T = 4, k = 2; loss tokens (0, 1..3) and (1, 1..2). Row 0 has A = +1, row 1 A = −1.
  Log-ratios log π_θ − log π_old: 0.5 at (0, 1), else 0. Off-mask entries are zero, as scoring.fused leaves them."""
  mask = jnp.array([[0, 1, 1, 1], [0, 1, 1, 0]], jnp.float32)
  old = jnp.array([[0, -1.0, -2.0, -0.5], [0, -1.5, -1.0, 0]]) * mask
  logp = old + jnp.array([[0, 0.5, 0, 0], [0, 0, 0, 0]]) * mask
  teacher_lp = logp + jnp.array([[0, 0.1, -0.2, 0.3], [0, -0.4, 0.05, 0]]) * mask
  entropy = jnp.array([[0, 1.0, 2.0, 0.5], [0, 1.5, 0.25, 0]]) * mask
  scores = Scores(policy_logprobs=logp, policy_entropy=entropy, teacher_logprobs=teacher_lp,
                  policy_topk_logprobs=jnp.log(jnp.array(S_TOP)) * mask[..., None],
                  teacher_topk_logprobs=jnp.log(jnp.array(T_TOP)) * mask[..., None])
  zeros = jnp.zeros((2, 4), jnp.int32)
  batch = TrainBatch(tokens=zeros, segment_ids=(mask > 0).astype(jnp.int32).at[:, 0].set(1), positions=zeros,
                     loss_mask=mask, advantages=broadcast_to_tokens(jnp.array([1.0, -1.0]), mask), old_logprobs=old,
                     distill_mask=distill_mask)
  return scores, batch


def _opd(core=None, **fields):
  """The `agentic_opd` objective's LossParams: `core` the LossCore fields, `fields` the agentic_opd group's."""
  return LossParams("agentic_opd", LossCore(**(core or {})), AgenticOpdConfig(**fields))


def _run(cfg, scores, batch):
  obj = get_objective("agentic_opd")
  return jax.jit(obj.loss, static_argnums=2)(scores, batch, cfg, normalizer_for(batch.loss_mask))


def test_agentic_opd_pure_opd_is_exactly_the_topk_term():
  cfg = _opd(top_k=2)
  scores, batch = _opd_batch()
  loss, metrics = _run(cfg, scores, batch)
  # token-mean over the 5 loss tokens: (0.549306 + 0 + 0.192745 + 0.806106 + 0.695979) / 5 = 0.448827
  opd = sum(map(sum, ELL)) / 5
  np.testing.assert_allclose(opd, 0.448827, atol=1e-6)
  np.testing.assert_allclose(loss, opd, rtol=1e-5)
  np.testing.assert_allclose(metrics["opd_loss"], opd, rtol=1e-5)
  np.testing.assert_allclose(metrics["opd_reverse_kl"], opd, rtol=1e-5)
  np.testing.assert_allclose(metrics["lad_routed_frac"], 1.0, rtol=1e-6)
  np.testing.assert_allclose(metrics["lad_routed_rollouts"], 1.0, rtol=1e-6)
  np.testing.assert_allclose(metrics["entropy"], (1 + 2 + 0.5 + 1.5 + 0.25) / 5, rtol=1e-6)
  assert set(metrics) == {"loss", "opd_loss", "opd_reverse_kl", "lad_routed_frac", "lad_routed_rollouts", "entropy"}
  # task_loss_coef = 0 is exactly the OPD term: same value as the term alone, and the coefficient scales it.
  direct = jnp.sum(topk_reverse_kl(scores.policy_topk_logprobs, scores.teacher_topk_logprobs, batch.loss_mask)) / 5
  assert float(loss) == float(direct)
  loss2, _ = _run(_opd({"entropy_coef": 0.01}, top_k=2, loss_coef=2.0), scores, batch)
  np.testing.assert_allclose(loss2, 2 * opd - 0.01 * 1.05, rtol=1e-5)
  # With the clamp on (c = 0.3): (0,1) log-ratios ln 3, −ln 3 → ±0.3: .75·.3 − .25·.3 = 0.15;
  # (0,3): ln 1.6 = 0.47 → 0.3, ln .4 → −0.3: .8·.3 − .2·.3 = 0.18;  (1,1): .5·(−0.3) + .5·0.3 = 0;
  # (1,2): ±ln 3.5 → ±0.3: 7/9·.3 − 2/9·.3 = 0.166667.  Mean = (0.15 + 0 + 0.18 + 0 + 0.166667) / 5
  loss3, _ = _run(_opd(top_k=2, max_abs_log_ratio=0.3), scores, batch)
  np.testing.assert_allclose(loss3, (0.15 + 0.18 + 0.5 / 3) / 5, rtol=1e-5)


def test_agentic_opd_task_term_and_lad_routing():
  scores, batch = _opd_batch()
  # task_loss_coef = 0.5: PPO with A·0.5 on every loss token. (0,1): ρ = e^0.5 = 1.6487, A = .5 → max(−.824, −.6)
  # = −0.6; (0,2), (0,3): ρ = 1 → −0.5 each; (1,1), (1,2): A = −.5 → 0.5 each. Sum −0.6 → token-mean −0.12.
  cfg = _opd(top_k=2, task_loss_coef=0.5)
  loss, metrics = _run(cfg, scores, batch)
  opd = sum(map(sum, ELL)) / 5
  np.testing.assert_allclose(metrics["task_loss"], -0.12, rtol=1e-5)
  np.testing.assert_allclose(loss, opd - 0.12, rtol=1e-5)
  np.testing.assert_allclose(metrics["pg_clipfrac"], 1 / 5, rtol=1e-6)
  # LAD routes row 0 only: the OPD term keeps the loss mask's denominator (Σ_j m_j ℓ_j / Σ_j |τ_j|, methods.md).
  d = broadcast_to_tokens(jnp.array([1.0, 0.0]), (batch.loss_mask > 0).astype(jnp.float32))
  scores, batch = _opd_batch(distill_mask=d)
  routed_opd = (ELL[0][1] + ELL[0][2] + ELL[0][3]) / 5
  loss, metrics = _run(_opd(top_k=2), scores, batch)
  np.testing.assert_allclose(loss, routed_opd, rtol=1e-5)
  np.testing.assert_allclose(metrics["opd_reverse_kl"], opd, rtol=1e-5)   # diagnostic over all loss tokens
  np.testing.assert_allclose(metrics["lad_routed_frac"], 3 / 5, rtol=1e-6)
  np.testing.assert_allclose(metrics["lad_routed_rollouts"], 1 / 2, rtol=1e-6)
  # lad_other = "grpo": the non-routed row 1 gets PPO with A = −1 (pg_loss_coef 1): 1 + 1 → 2/5 = 0.4.
  loss, metrics = _run(_opd(top_k=2, lad_other="grpo"), scores, batch)
  np.testing.assert_allclose(metrics["task_loss"], 0.4, rtol=1e-5)
  np.testing.assert_allclose(loss, routed_opd + 0.4, rtol=1e-5)
  # Both: row 0 scale 0.5 (−0.6 − 0.5 − 0.5), row 1 scale 0.5 + 1 (1.5 + 1.5): 1.4 / 5 = 0.28.
  loss, _ = _run(_opd(top_k=2, lad_other="grpo", task_loss_coef=0.5), scores, batch)
  np.testing.assert_allclose(loss, routed_opd + 0.28, rtol=1e-5)


def test_lad_normalised_by_routed_tokens():
  """lad_norm="routed_tokens": the OPD term is Σ d·ℓ / Σ d over the mini-batch (3 routed of 5 loss tokens here), so
  its step does not shrink with the routed share; the task term keeps every loss token's denominator."""
  d = jnp.array([[0, 1, 1, 1], [0, 0, 0, 0]], jnp.float32)
  scores, batch = _opd_batch(distill_mask=d)
  routed_sum = ELL[0][1] + ELL[0][2] + ELL[0][3]
  norm = normalizer_for(batch.loss_mask, distill_mask=d)
  assert float(norm.tokens) == 5.0 and float(norm.routed) == 3.0
  obj = get_objective("agentic_opd")
  cfg = _opd(top_k=2, lad_norm="routed_tokens")
  loss, metrics = obj.loss(scores, batch, cfg, norm)
  np.testing.assert_allclose(loss, routed_sum / 3, rtol=1e-5)
  np.testing.assert_allclose(metrics["opd_loss"], routed_sum / 3, rtol=1e-5)
  np.testing.assert_allclose(obj.loss(scores, batch, _opd(top_k=2), norm)[0], routed_sum / 5, rtol=1e-5)
  # Every token routed: the two norms agree. With lad_other = "grpo" the task term (row 1: 0.4) is unchanged.
  np.testing.assert_allclose(normalizer_for(batch.loss_mask, distill_mask=jnp.ones_like(d)).routed, 5.0)
  loss, metrics = obj.loss(scores, batch, _opd(top_k=2, lad_norm="routed_tokens", lad_other="grpo"), norm)
  np.testing.assert_allclose(metrics["task_loss"], 0.4, rtol=1e-5)
  np.testing.assert_allclose(loss, routed_sum / 3 + 0.4, rtol=1e-5)
  # Micro-batches of one row each, with the mini-batch's normaliser, add up to the whole.
  rows = [obj.loss(jax.tree.map(lambda x: x[i:i + 1], scores), jax.tree.map(lambda x: x[i:i + 1], batch), cfg,
                   norm)[0] for i in (0, 1)]
  np.testing.assert_allclose(sum(rows), routed_sum / 3, rtol=1e-5)
  with pytest.raises(ValueError, match="lad_norm='routed_tokens'.*token-mean"):
    obj.score_config(_opd({"loss_agg_mode": "seq-mean-token-mean"}, top_k=2, lad_norm="routed_tokens"))
  with pytest.raises(ValueError, match="lad_norm='routed_tokens'.*topk_reverse_kl"):
    obj.score_config(_opd(variant="sampled_token", lad_norm="routed_tokens"))
  with pytest.raises(ValueError, match="agentic_opd.lad_norm must be one of"):
    AgenticOpdConfig(lad_norm="all")


def test_agentic_opd_sampled_token_variant():
  scores, batch = _opd_batch()
  cfg = _opd(variant="sampled_token")
  # A^OPD = teacher − student = 0.1, −0.2, 0.3 | −0.4, 0.05. PPO: (0,1) ρ = e^0.5, A = .1 → max(−.16487, −.12) =
  # −0.12; (0,2) ρ = 1, A = −.2 → 0.2; (0,3) −0.3; (1,1) 0.4; (1,2) −0.05. Sum 0.13 → 0.026.
  loss, metrics = _run(cfg, scores, batch)
  np.testing.assert_allclose(loss, 0.026, rtol=1e-5)
  np.testing.assert_allclose(metrics["opd_reverse_kl"], (-0.1 + 0.2 - 0.3 + 0.4 - 0.05) / 5, rtol=1e-5)
  # + task_loss_coef·A_GRPO added to the advantage before the clip: A = 1.1, 0.8, 1.3 | −1.4, −0.95.
  # (0,1) ρ = e^0.5, A = 1.1 → −1.1·1.2 = −1.32; −0.8; −1.3; 1.4; 0.95. Sum −1.07 → −0.214.
  loss, _ = _run(_opd(variant="sampled_token", task_loss_coef=1.0), scores, batch)
  np.testing.assert_allclose(loss, -0.214, rtol=1e-5)
  # Routing row 0 only removes row 1's OPD advantage: 0.4 − 0.05 drop out → (−0.12 + 0.2 − 0.3) / 5 = −0.044.
  scores, batch = _opd_batch(distill_mask=broadcast_to_tokens(jnp.array([1.0, 0.0]), (batch.loss_mask > 0).astype(jnp.float32)))
  loss, _ = _run(cfg, scores, batch)
  np.testing.assert_allclose(loss, -0.044, rtol=1e-5)


@pytest.mark.parametrize("mode", ["token-mean", "seq-mean-token-mean", "seq-mean-token-sum"])
@pytest.mark.parametrize("variant", ["topk_reverse_kl", "sampled_token"])
def test_agentic_opd_sums_over_micro_batches(mode, variant):
  cfg = _opd({"loss_agg_mode": mode, "entropy_coef": 0.01}, top_k=2, task_loss_coef=0.3, lad_other="grpo",
             variant=variant)
  scores, batch = _opd_batch(distill_mask=jnp.array([[0, 1, 1, 1], [0, 0, 0, 0]], jnp.float32))
  obj = get_objective("agentic_opd")
  assert_loss_sums_over_rows(obj, scores, batch, cfg, normalizer_for(batch.loss_mask))


def test_agentic_opd_gradients_reach_the_student_only():
  cfg = _opd(top_k=2, task_loss_coef=0.5)
  scores, batch = _opd_batch()
  obj = get_objective("agentic_opd")
  norm = normalizer_for(batch.loss_mask)

  def loss_of(student, teacher):
    return obj.loss(scores.replace(policy_topk_logprobs=student, teacher_topk_logprobs=teacher), batch, cfg, norm)[0]
  gs, gt = jax.grad(loss_of, argnums=(0, 1))(scores.policy_topk_logprobs, scores.teacher_topk_logprobs)
  np.testing.assert_array_equal(gt, 0.0)
  assert np.all(np.isfinite(gs)) and np.abs(gs).sum() > 0
  np.testing.assert_array_equal(gs[:, 0], 0.0)         # off-mask positions
  np.testing.assert_array_equal(gs[0, 2], 0.0)         # (0,2): p̃_S = p̃_T, a minimum


def test_agentic_opd_score_config_checks_and_config_validation():
  obj = get_objective("agentic_opd")
  sc = obj.score_config(LossParams("agentic_opd"), ScoreConfig(vocab_chunk=128, temperature=0.7))
  assert (sc.policy, sc.reference, sc.teacher, sc.top_k, sc.entropy) == (True, False, "params", 16, True)
  assert (sc.vocab_chunk, sc.temperature) == (128, 0.7)
  assert obj.score_config(_opd(top_k=4)).top_k == 4
  assert obj.score_config(_opd(variant="sampled_token")).top_k == 0
  with pytest.raises(ValueError, match="kl_coef"):
    obj.score_config(LossParams("agentic_opd", LossCore(kl_coef=0.01)))
  with pytest.raises(ValueError, match="agentic_opd.top_k"):
    obj.score_config(_opd(top_k=1))
  scores, batch = _opd_batch()
  with pytest.raises(ValueError, match="agentic_opd.top_k"):          # scores carry k = 2, config says 16
    obj.loss(scores, batch, LossParams("agentic_opd"), normalizer_for(batch.loss_mask))
  with pytest.raises(ValueError, match="teacher_topk_logprobs"):
    obj.loss(scores.replace(teacher_topk_logprobs=None), batch, _opd(top_k=2), normalizer_for(batch.loss_mask))
  for field, bad in [("variant", "forward_kl"), ("lad_other", "kl"), ("top_k", 0), ("top_k", 2.0),
                     ("task_loss_coef", -0.1), ("loss_coef", float("inf")), ("max_abs_log_ratio", -1.0)]:
    with pytest.raises(ValueError, match=f"^agentic_opd.{field}"):
      AgenticOpdConfig(**{field: bad})
  # The group's loss defaults are the authors'; a LossParams without a group gets them; a batch without
  # distill_mask is unchanged.
  assert LossParams("agentic_opd").method == _opd(loss_coef=1.0, task_loss_coef=0.0, top_k=16).method
  with pytest.raises(ValueError, match="objective 'agentic_opd' reads the config group AgenticOpdConfig"):
    LossParams("agentic_opd", method=LossCore())
  assert batch.distill_mask is None


def test_agentic_opd_end_to_end_through_scoring(tiny_scoring_batch):
  """The objective's score_config drives the real scorer: a teacher equal to the student gives zero OPD loss."""
  from agentopd_jax.models import transformer
  from agentopd_jax.scoring.fused import score

  model, batch = tiny_scoring_batch
  student = transformer.init_params(model, jax.random.key(0))
  teacher = transformer.init_params(model, jax.random.key(1))
  cfg = _opd(top_k=4)
  obj = get_objective("agentic_opd")
  sc = obj.score_config(cfg, ScoreConfig(vocab_chunk=64))
  norm = normalizer_for(batch.loss_mask)

  def loss_fn(params, teacher_params):
    return obj.loss(score(model, sc, params, None, teacher_params, batch.score_batch()), batch, cfg, norm)

  (loss, metrics), grads = jax.jit(jax.value_and_grad(loss_fn, has_aux=True))(student, student)
  np.testing.assert_allclose(loss, 0.0, atol=1e-6)
  (loss, metrics), grads = jax.jit(jax.value_and_grad(loss_fn, has_aux=True))(student, teacher)
  assert float(loss) > 0 and np.isfinite(float(loss))
  assert all(np.all(np.isfinite(g)) for g in jax.tree.leaves(grads))
  assert sum(float(jnp.abs(g).sum()) for g in jax.tree.leaves(grads)) > 0
