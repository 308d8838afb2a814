"""Agentic-OPD: on-policy distillation from a checkpoint teacher, and LAD routing of which rollouts to distil.

The student is the best-validation checkpoint of a GRPO run; the teacher is another (frozen) checkpoint of the same
run, scored on the student's own rollouts (`scoring.fused`, teacher mode "params"). Two per-token OPD terms:

  * `topk_reverse_kl` — the live code ("Student Top-k OPD", `core_opd.topk_reverse_kl_per_teacher`): a reverse KL on
    the student's top-k support, both distributions renormalised there. Dense (k tokens per position), low variance.
    The reference takes the top-k ids from π_old (its log-prob pass before the update); here the train step's own
    scoring takes them from the live policy, which is π_old on the first optimizer step of a batch (every step with
    `agentic_opd.whole_batch_update`, as the authors' trainer takes).
  * `sampled_token_opd_advantage` — the documented/older variant (`core_opd.combine_opd_and_task_advantages`): the
    teacher−student log-prob gap of the sampled token, used as the PPO advantage (`ppo_dual_clip_loss`).

LAD (Locality-Aware Distillation) is not in the released code; `lad_mask` implements the seed's rule "distil only the
student's failed trajectories, on problems where the teacher does better" as a 0/1 weight per rollout. It reaches the
loss as `TrainBatch.distill_mask`, a per-token routing weight (`batching.collate.collate(distill_weights=...)`); `None`
routes every loss token
(plain Agentic-OPD, what the released code does).

`agentic_opd_loss` assembles the objective registered as "agentic_opd" (see `objectives.registry`):

  L = loss_coef · agg(d_t · ℓ_OPD,t) + PPO-clip(A_GRPO · s_t) − entropy_coef · agg(H)
  s_t = task_loss_coef + [lad_other == "grpo"] · pg_loss_coef · (1 − d_t)

with d_t the routing weight, loss_coef, task_loss_coef and lad_other the `agentic_opd` group's
(`LossParams.method`), pg_loss_coef and entropy_coef the `loss` core's. Aggregation uses the mini-batch `Normalizer`
of the *loss* mask, so the OPD term is Σ_j m_j ℓ_OPD(τ_j) / Σ_j |τ_j|_gen as in methods.md §2.1 (not a mean over
routed tokens only), and micro-batch losses add up exactly to the mini-batch loss. The objective registers itself in `objectives.registry` when this module is
imported (`agentopd_jax.methods` imports it).
"""
from __future__ import annotations

from typing import Dict, Optional, Tuple

import chex
import jax
import jax.numpy as jnp

from agentopd_jax.batching.collate import TrainBatch
from agentopd_jax.objectives.losses import (Normalizer, add_entropy_bonus, agg_loss, clamp, ppo_dual_clip_loss,
                                            require_score, token_share, topk_log_dists)
from agentopd_jax.methods.agentic_opd.config import OPD_VARIANTS, AgenticOpdConfig
from agentopd_jax.objectives.registry import LossParams, Objective, register_objective
from agentopd_jax.scoring.fused import Scores

LAD_MODES = ("solved_sets", "group_rates")

Metrics = Dict[str, jnp.ndarray]


# ---------------------------------------------------------------- OPD terms


def topk_reverse_kl(student_topk_logprobs: jnp.ndarray, teacher_topk_logprobs: jnp.ndarray, mask: jnp.ndarray,
                    max_abs_log_ratio: Optional[float] = None) -> jnp.ndarray:
  """Per-token reverse KL on the student's top-k support (Agentic-OPD live code), [B, T, k] × 2 → [B, T]:

    p̃_S = softmax_k(log π_θ(v_k | s_t)),   p̃_T = sg[softmax_k(log π_T(v_k | s_t))],   v_1..v_k = the top-k ids
    ℓ_t = Σ_k p̃_S,k · clip(log p̃_S,k − log p̃_T,k, −c, c)        (c = max_abs_log_ratio; no clip when None)

  The ids are the student's top-k as its scoring saw it (`Scores.policy_topk_ids`, stop-gradient): the live policy
  π_θ, which is π_old, the reference's choice, only while one optimizer step is taken per batch (see the module
  docstring).

  Why renormalise: the teacher is only scored at the k ids, so the tail mass of either model is unknown; on the
  common support both are proper distributions and ℓ_t ≥ 0 with equality iff they agree there (a shift of all k
  log-probs by a constant — the tail mass — cancels). The renormalisation is a `log_softmax`, stable for any inputs.

  Gradients: only the student's; the teacher is stop-gradient. Without the clamp,
  ∇ℓ = Σ_k ∇p̃_S,k (log p̃_S,k − log p̃_T,k) (the Σ_k p̃_S,k ∇log p̃_S,k term vanishes since Σ_k ∇p̃_S,k = 0). The clamp
  is `losses.clamp`, the reference's torch clamp: a clamped entry's log-ratio is the constant ±c, so that
  entry passes gradient only through its weight p̃_S,k (pushing its mass down when the student over-weights it by
  more than e^c, up when under-weighted), never through the ratio; so each entry's pull is bounded by c.

  `mask` [B, T]: ℓ is 0 where mask is 0, and positions off the mask are replaced by 0 *before* the softmax, so
  whatever they hold (zeros from `scoring.fused`, even ±inf or NaN) yields neither NaN values nor NaN gradients.
  """
  log_ps, log_pt = topk_log_dists(student_topk_logprobs, teacher_topk_logprobs, mask)
  log_ratio = log_ps - log_pt
  if max_abs_log_ratio is not None:
    if not max_abs_log_ratio > 0:
      raise ValueError(f"topk_reverse_kl: max_abs_log_ratio must be > 0 or None, got {max_abs_log_ratio}")
    log_ratio = clamp(log_ratio, -max_abs_log_ratio, max_abs_log_ratio)
  loss = jnp.sum(jnp.exp(log_ps) * log_ratio, axis=-1)
  return jnp.where(mask > 0, loss, 0.0)


def sampled_token_opd_advantage(teacher_logprobs: jnp.ndarray, student_logprobs: jnp.ndarray,
                                mask: jnp.ndarray) -> jnp.ndarray:
  """Documented Agentic-OPD variant, per token [B, T]:  A^OPD_t = sg[log π_T(y_t | s_t) − log π_S(y_t | s_t)].

  It is −(log π_S − log π_T), the single-sample (k1) estimate of the reverse KL's per-token cost, used as a
  policy-gradient advantage: tokens the teacher likes more than the student are reinforced. It is stop-gradient —
  an advantage, not a loss — so feed it (scaled, optionally plus task_loss_coef · A_GRPO) to `opd_policy_loss`,
  which applies the PPO importance ratio and clip. Zero off the mask.
  """
  chex.assert_rank([teacher_logprobs, student_logprobs, mask], 2)
  chex.assert_equal_shape([teacher_logprobs, student_logprobs, mask])
  gap = jax.lax.stop_gradient(teacher_logprobs.astype(jnp.float32) - student_logprobs.astype(jnp.float32))
  return jnp.where(mask > 0, gap, 0.0)


def opd_policy_loss(logprobs: jnp.ndarray, old_logprobs: jnp.ndarray, opd_advantages: jnp.ndarray,
                    mask: jnp.ndarray, clip_low: float, clip_high: float, clip_c: float,
                    task_advantages: Optional[jnp.ndarray] = None):
  """The sampled-token variant as a PPO loss: `ppo_dual_clip_loss` with A = A^OPD (+ A_task), per token.

  The advantages are added *before* the clip, as the reference code does (`combine_opd_and_task_advantages`), so
  this is not the sum of two separate PPO terms. Scale them beforehand (loss_coef, routing, task_loss_coef).
  Returns `losses.PolicyLossTerms`.
  """
  advantages = opd_advantages if task_advantages is None else opd_advantages + task_advantages
  return ppo_dual_clip_loss(logprobs, old_logprobs, advantages, mask, clip_low, clip_high, clip_c)


# ---------------------------------------------------------------- LAD routing


def lad_mask(won: jnp.ndarray, problem_ids_int: jnp.ndarray, teacher_solved: jnp.ndarray,
             student_solved: jnp.ndarray, mode: str = "solved_sets") -> jnp.ndarray:
  """LAD rollout routing, [N] → [N] float32 0/1 ("distil only the student's failures where the teacher is better"):

    solved_sets:  m_j = 1[τ_j lost] · 1[q(j) ∈ Q_T − P_S]
    group_rates:  m_j = 1[τ_j lost] · 1[succ_T(q(j)) > succ_S(q(j))]

  Args:
    won: [N] per rollout, success iff > 0 (bool, 0/1 or a reward: EM > 0 counts as solved).
    problem_ids_int: [N] int problem index q(j) in [0, U) (out-of-range ids are clamped by jnp indexing: map them).
    teacher_solved, student_solved: [U] per problem. solved_sets: 0/1 membership of the teacher's solved set Q_T
      (its validation log) and the student's P_S (its latest validation). group_rates: success rates in [0, 1] —
      the teacher's estimate, and the student's over the group's G rollouts (`problem_success_rates`).
    mode: static; "solved_sets" (the methods.md rule) or "group_rates" (its finer estimate).

  Why both factors: a won rollout has nothing to repair, and a problem the teacher does no better on would pull
  the student toward a teacher that is not stronger there — the "locality" of the distillation. The rule is
  elementwise in (won, q), so it can be evaluated per rollout or per step-row of a rollout alike. Pure jnp with
  static shapes: jit with `static_argnames="mode"`.
  """
  chex.assert_rank([won, problem_ids_int, teacher_solved, student_solved], 1)
  chex.assert_equal_shape([won, problem_ids_int])
  chex.assert_equal_shape([teacher_solved, student_solved])
  lost = ~(jnp.asarray(won) > 0)
  q = jnp.asarray(problem_ids_int).astype(jnp.int32)
  teacher = jnp.asarray(teacher_solved)[q]
  student = jnp.asarray(student_solved)[q]
  if mode == "solved_sets":
    better = (teacher > 0) & ~(student > 0)
  elif mode == "group_rates":
    better = teacher.astype(jnp.float32) > student.astype(jnp.float32)
  else:
    raise ValueError(f"lad_mask: mode must be one of {LAD_MODES}, got {mode!r}")
  return (lost & better).astype(jnp.float32)


def problem_success_rates(won: jnp.ndarray, problem_ids_int: jnp.ndarray, num_problems: int,
                          valid: Optional[jnp.ndarray] = None) -> jnp.ndarray:
  """[U] success rate per problem over the given rollouts (e.g. the student's G rollouts of each group); 0 for a
  problem without rollouts. `valid` [N] 0/1 drops padding rollouts; `num_problems` is static. Pass one entry per
  rollout (not per step-row), or a rollout with L step-rows counts L times."""
  chex.assert_rank([won, problem_ids_int], 1)
  chex.assert_equal_shape([won, problem_ids_int])
  w = jnp.ones(won.shape, jnp.float32) if valid is None else jnp.asarray(valid).astype(jnp.float32)
  q = jnp.asarray(problem_ids_int).astype(jnp.int32)
  wins = jax.ops.segment_sum(w * (jnp.asarray(won) > 0), q, num_segments=num_problems)
  count = jax.ops.segment_sum(w, q, num_segments=num_problems)
  return wins / jnp.maximum(count, 1.0)


# ---------------------------------------------------------------- the objective


def agentic_opd_loss(scores: Scores, batch: TrainBatch, params: LossParams,
                     norm: Normalizer) -> Tuple[jnp.ndarray, Metrics]:
  """Agentic-OPD actor loss over one micro-batch (methods.md §2.1), d_t = `batch.distill_mask` (1 on every loss
  token when None), s_t = task_loss_coef + [lad_other == "grpo"] · pg_loss_coef · (1 − d_t):

    topk_reverse_kl:  L = loss_coef · agg(d_t · ℓ_t) + agg(PPO-clip(ρ, A_GRPO · s_t)) − entropy_coef · agg(H)
    sampled_token:    L = agg(PPO-clip(ρ, loss_coef · d_t · A^OPD_t + A_GRPO · s_t)) − entropy_coef · agg(H)

  The PPO term is traced only when some s_t can be non-zero; with task_loss_coef = 0 and lad_other = "none" the
  top-k loss is exactly loss_coef · agg(d·ℓ) (− the entropy bonus). A^OPD uses the current student log-probs
  (stop-gradient): with one on-policy update per step (the reference setting) that is π_old, without the sampler's
  numerical drift. ρ = π_θ / π_old with π_old = `batch.old_logprobs`, as in `grpo_loss`.

  lad_norm: "loss_tokens" divides the top-k OPD term by every loss token of the mini-batch (the reference), so its
  step shrinks with LAD's routed share; "routed_tokens" divides it by the routed tokens (`norm.routed`) instead
  (token-mean aggregation and the top-k variant only: `agentic_opd_check`).

  lad_other: what a rollout LAD did not route gets. "none": no OPD term, and only the task term if
  task_loss_coef > 0 (which, as in the reference code, covers every rollout). "grpo": additionally plain GRPO
  (coefficient pg_loss_coef) on the non-routed rollouts, so every rollout is trained by one of the two signals.

  Metrics (micro-batch contributions): opd_loss (agg of the OPD term before its coefficient; sampled_token: the
  whole PPO surrogate), opd_reverse_kl (token mean over *all* loss tokens, routed or not: the top-k reverse KL, or
  the sampled-token estimate log π_S − log π_T), lad_routed_frac (routed share of loss tokens), lad_routed_rollouts
  (share of rows with a routed token, over the rows holding a sample), entropy; with a PPO term also
  task_loss (top-k variant), pg_clipfrac and ppo_kl.
  """
  cfg, core = params.method, params.core
  mask = batch.loss_mask.astype(jnp.float32)
  on = (mask > 0).astype(jnp.float32)
  routed = on if batch.distill_mask is None else batch.distill_mask.astype(jnp.float32) * on
  logprobs = require_score(scores.policy_logprobs, "policy_logprobs", "agentic_opd")
  task_scale = jnp.full_like(mask, cfg.task_loss_coef)
  if cfg.lad_other == "grpo":
    task_scale = task_scale + core.pg_loss_coef * (1.0 - routed)
  with_task = cfg.task_loss_coef > 0.0 or (cfg.lad_other == "grpo" and core.pg_loss_coef > 0.0)

  metrics: Metrics = {
      "lad_routed_frac": token_share(routed, mask, norm),
      "lad_routed_rollouts": jnp.sum((jnp.sum(routed, axis=-1) > 0).astype(jnp.float32)) / norm.sequences,
  }
  if cfg.variant == "topk_reverse_kl":
    student = require_score(scores.policy_topk_logprobs, "policy_topk_logprobs", "agentic_opd (topk_reverse_kl)")
    teacher = require_score(scores.teacher_topk_logprobs, "teacher_topk_logprobs", "agentic_opd (topk_reverse_kl)")
    if student.shape[-1] != cfg.top_k:
      raise ValueError(f"agentic_opd: scores carry top-{student.shape[-1]} log-probs but "
                       f"agentic_opd.top_k={cfg.top_k}")
    clamp = cfg.max_abs_log_ratio if cfg.max_abs_log_ratio > 0 else None
    per_token = topk_reverse_kl(student, teacher, mask, clamp)
    opd_loss = agg_loss(per_token * routed, mask, core.loss_agg_mode, norm)
    if cfg.lad_norm == "routed_tokens":  # Σ d·ℓ / Σ d instead of / Σ m: the step does not shrink with the routed share
      opd_loss = opd_loss * norm.tokens / norm.routed
    loss = cfg.loss_coef * opd_loss
    metrics["opd_loss"] = opd_loss
    metrics["opd_reverse_kl"] = token_share(per_token, mask, norm)
    if with_task:
      terms = ppo_dual_clip_loss(logprobs, batch.old_logprobs, batch.advantages * task_scale, mask,
                                 core.clip_ratio_low, core.clip_ratio_high, core.clip_ratio_c)
      task_loss = agg_loss(terms.loss, mask, core.loss_agg_mode, norm)
      loss = loss + task_loss
      metrics.update(task_loss=task_loss, pg_clipfrac=token_share(terms.clipped, mask, norm),
                     ppo_kl=token_share(terms.approx_kl, mask, norm))
  elif cfg.variant == "sampled_token":
    teacher_lp = require_score(scores.teacher_logprobs, "teacher_logprobs", "agentic_opd (sampled_token)")
    a_opd = sampled_token_opd_advantage(teacher_lp, logprobs, mask)
    task_adv = batch.advantages * task_scale if with_task else None
    terms = opd_policy_loss(logprobs, batch.old_logprobs, cfg.loss_coef * routed * a_opd, mask,
                            core.clip_ratio_low, core.clip_ratio_high, core.clip_ratio_c, task_advantages=task_adv)
    loss = agg_loss(terms.loss, mask, core.loss_agg_mode, norm)
    metrics.update(opd_loss=loss, opd_reverse_kl=token_share(-a_opd, mask, norm),
                   pg_clipfrac=token_share(terms.clipped, mask, norm), ppo_kl=token_share(terms.approx_kl, mask, norm))
  else:
    raise ValueError(f"agentic_opd.variant must be one of {OPD_VARIANTS}, got {cfg.variant!r}")

  loss = add_entropy_bonus(loss, metrics, scores.policy_entropy, core.entropy_coef, mask, core.loss_agg_mode, norm)
  return loss, metrics


def agentic_opd_branches(params: LossParams) -> Dict[str, object]:
  """Policy + entropy; the checkpoint teacher as a parameter pytree; the policy's top-k ids (k = agentic_opd.top_k)
  only for the top-k variant (the sampled-token variant reads the sampled token's teacher log-prob alone); no
  reference (the reference code's KL term is off, and the teacher is a separate branch here, not the reference
  slot)."""
  cfg = params.method
  top_k = cfg.top_k if cfg.variant == "topk_reverse_kl" else 0
  return dict(policy=True, reference=False, teacher="params", top_k=top_k, entropy=True)


def agentic_opd_check(params: LossParams) -> None:
  cfg = params.method
  if params.core.kl_coef != 0.0:
    raise ValueError("objective 'agentic_opd' has no KL-to-reference term (off in the reference code): "
                     "loss.kl_coef must be 0")
  if cfg.lad_norm == "routed_tokens" and (cfg.variant != "topk_reverse_kl" or params.core.loss_agg_mode != "token-mean"):
    raise ValueError(f"agentic_opd.lad_norm='routed_tokens' is a token mean over the routed tokens of the top-k OPD "
                     f"term: it needs agentic_opd.variant='topk_reverse_kl' and loss.loss_agg_mode='token-mean', got "
                     f"{cfg.variant!r} and {params.core.loss_agg_mode!r}")
  if cfg.variant == "topk_reverse_kl" and cfg.top_k < 2:
    raise ValueError(f"agentic_opd.top_k={cfg.top_k} renormalises to a point mass (the top-k reverse KL is "
                     "identically 0); use agentic_opd.top_k >= 2")


register_objective("agentic_opd", Objective(name="agentic_opd", loss_fn=agentic_opd_loss,
                                            branches=agentic_opd_branches, check=agentic_opd_check,
                                            group=AgenticOpdConfig))
