"""SDAR and its baselines (methods.md §4): distillation from the policy's own view with the retrieved skills.

The teacher is the rollout-time policy π_old reading the skill text c⁺ ⊕ the step prompt. It is scored once per
batch before the update (`scoring.teacher_signals`), so its outputs are constants the batch carries:
`TrainBatch.teacher_logprobs` [B, T] = log π_T(y_t | s_t⁺), and, for the top-k divergences, the teacher's top-k
`teacher_topk_ids` / `teacher_topk_logprobs` [B, T, k], at whose ids the train step's scoring returns the live
policy's `Scores.policy_gathered_logprobs`. `Scores.teacher_*` (a checkpoint teacher scored per micro-batch) is
never read here, and every objective runs GRPO's branches: no teacher forward per micro-batch.

  sdar        L = pg_loss_coef·L_GRPO − c_ent·H + β_KL·KL + sdar.coef·L_SDAR   (gated self-distillation)
  grpo_opsd   sdar with sdar.gate_beta = 0, so g ≡ ½: the ungated OPSD term added to GRPO (the authors' form)
  grpo_opsd_rkl  grpo_opsd with sdar.divergence = "reverse_kl_score" (its preset sets it): a naive baseline that
                 pulls toward the teacher, where the authors' form adds zero-mean noise
  opsd        sdar with pg_loss_coef = 0: the gated OPSD term alone (+ KL, entropy)
  rlsd        GRPO with teacher-reweighted advantages (`rlsd_advantages`, applied host-side by `rlsd_prepare`)
  skill_sd    L_GRPO + skill_sd.coef·agg(ρ_on·k3)

Each reads the `loss` core from `params.core` and its own config group (`methods.sdar.config`) from `params.method`:
`sdar` for the first three, `rlsd`, `skill_sd`. Metrics are micro-batch contributions (see `objectives.registry`).
"""
from __future__ import annotations

import dataclasses
from typing import Optional, Tuple

import chex
import jax
import jax.numpy as jnp
import numpy as np

from agentopd_jax.batching.collate import TrainBatch
from agentopd_jax.objectives.losses import Normalizer, agg_loss, clamp, require_score, token_share, topk_log_dists
from agentopd_jax.methods.sdar.config import SAMPLED_DIVERGENCES, SDAR_GATES, RlsdConfig, SdarConfig, SkillSdConfig
from agentopd_jax.objectives.registry import (LossParams, Metrics, Objective, grpo_branches, grpo_loss,
                                              register_objective)
from agentopd_jax.scoring.fused import Scores

_SDL_EXP_CLAMP = 20.0   # Skill-SD clamps −ℓ at 20 before exp (k3)
_SDL_RATIO_CLAMP = 10.0  # and log ρ_on at 10


def require_teacher_signal(array: Optional[jnp.ndarray], what: str, why: str):
  """`array` (a `TrainBatch` teacher field), or one clear error naming it."""
  if array is None:
    raise ValueError(f"{why} needs batch.{what}, which is None (the trainer scores it once per batch when "
                     "objective.teacher_top_k is set)")
  return array


# ---------------------------------------------------------------- SDAR gates and divergences


def sdar_gate(gap: jnp.ndarray, entropy: Optional[jnp.ndarray], beta: float, kind: str) -> jnp.ndarray:
  """Per-token gate g_t of the distillation term, [B, T], stop-gradient:

    gap:      g = σ(β·Δ_t),  Δ_t = log π_T(y_t | s_t⁺) − sg[log π_θ(y_t | s_t)]     (SDAR, the released code)
    entropy:  g = σ(β·h_t),  h_t = H(π_θ(· | s_t)), the student's token entropy
    soft_or:  g = 1 − (1 − g_gap)(1 − g_entropy)

  The gap gate distils where the teacher endorses the student's token (Δ > 0) and fades where it rejects it (bad
  retrieval, drift). The entropy and soft-OR gates are paper ablations without released code; which entropy they
  use is unknown, and we take the student's ("distil where the student is uncertain"; h ≥ 0, so g ∈ [½, 1)).
  Stop-gradient: the gate weighs the loss and is not optimised itself (θ could otherwise lower the loss by moving Δ
  or h instead of log π_θ(y_t)). β = 0 gives g ≡ ½ for the gap and entropy gates.
  """
  chex.assert_rank(gap, 2)
  if kind not in SDAR_GATES:
    raise ValueError(f"sdar_gate: kind must be one of {SDAR_GATES}, got {kind!r}")
  if kind != "gap":
    entropy = require_score(entropy, "policy_entropy", f"sdar_gate={kind!r}")
    chex.assert_equal_shape([gap, entropy])
  g_gap = jax.nn.sigmoid(beta * gap)
  if kind == "gap":
    return jax.lax.stop_gradient(g_gap)
  g_entropy = jax.nn.sigmoid(beta * entropy)
  if kind == "entropy":
    return jax.lax.stop_gradient(g_entropy)
  return jax.lax.stop_gradient(1.0 - (1.0 - g_gap) * (1.0 - g_entropy))


def sampled_reverse_kl(teacher_logprobs: jnp.ndarray, policy_logprobs: jnp.ndarray, mask: jnp.ndarray) -> jnp.ndarray:
  """SDAR's per-token term on the student's sampled token, [B, T]:  ℓ_t = sg[log π_T(y_t)] − log π_θ(y_t).

  On y_t ~ π_θ, ℓ_t is the single-sample estimate of −KL(π_θ ‖ π_T) (the reverse KL, negated). Its gradient is
  −∇log π_θ(y_t), so g_t·ℓ_t is a gated NLL on the student's own samples: with a stop-gradient gate,
  ∇agg(g·ℓ) = −agg(g_t ∇log π_θ(y_t)). Zero off the mask.
  """
  chex.assert_rank([teacher_logprobs, policy_logprobs, mask], 2)
  chex.assert_equal_shape([teacher_logprobs, policy_logprobs, mask])
  return jnp.where(mask > 0, jax.lax.stop_gradient(teacher_logprobs) - policy_logprobs, 0.0)


def reverse_kl_score(teacher_logprobs: jnp.ndarray, policy_logprobs: jnp.ndarray, mask: jnp.ndarray) -> jnp.ndarray:
  """The sampled reverse-KL gradient as a surrogate on the student's sampled token, [B, T]:

    ℓ_t = −sg[log π_T(y_t) − log π_θ(y_t)] · log π_θ(y_t)

  KL(π_θ ‖ π_T) = E_{y~π_θ}[log π_θ(y) − log π_T(y)], and since E_{y~π_θ}[∇log π_θ(y)] = 0 its gradient is
  E_{y~π_θ}[(log π_θ(y) − log π_T(y))·∇log π_θ(y)]: on y_t ~ π_θ, ∇ℓ_t is its single-sample (score-function)
  estimate. So E[∇ℓ] = ∇KL(π_θ ‖ π_T), and the term pulls the student toward the teacher: tokens the teacher likes
  better than the student (Δ_t > 0) are pushed up, the others down. `sampled_reverse_kl` (the released code's
  ℓ = sg[log π_T] − log π_θ) has the expected gradient −E[∇log π_θ] = 0 instead; with a constant gate it adds only
  noise. The value of ℓ is not a KL (its gradient is what matters). Zero off the mask.
  """
  chex.assert_rank([teacher_logprobs, policy_logprobs, mask], 2)
  chex.assert_equal_shape([teacher_logprobs, policy_logprobs, mask])
  gap = jax.lax.stop_gradient(teacher_logprobs - policy_logprobs)
  return jnp.where(mask > 0, -gap * policy_logprobs, 0.0)


def topk_forward_kl(policy_topk_logprobs: jnp.ndarray, teacher_topk_logprobs: jnp.ndarray,
                    mask: jnp.ndarray) -> jnp.ndarray:
  """Forward KL on the teacher's top-k support, [B, T, k] × 2 → [B, T]:

    p̃_T = sg[softmax_k(log π_T(v_k | s_t⁺))],  q̃_θ = softmax_k(log π_θ(v_k | s_t)),  v_1..v_k = top-k of π_T
    ℓ_t = KL(p̃_T ‖ q̃_θ) = Σ_k p̃_T,k (log p̃_T,k − log q̃_θ,k)

  Renormalised because only the k teacher ids are scored: the tail mass of either model is unknown, and on the
  common support both are proper distributions (ℓ ≥ 0, 0 iff they agree there). Mass-covering: ∂ℓ/∂log π_θ(v_j) =
  q̃_j − p̃_j pulls up every id the teacher likes. Only the policy gets gradients. Zero off the mask.
  """
  log_q, log_p = topk_log_dists(policy_topk_logprobs, teacher_topk_logprobs, mask)
  loss = jnp.sum(jnp.exp(log_p) * (log_p - log_q), axis=-1)
  return jnp.where(mask > 0, loss, 0.0)


def topk_reverse_kl(policy_topk_logprobs: jnp.ndarray, teacher_topk_logprobs: jnp.ndarray,
                    mask: jnp.ndarray) -> jnp.ndarray:
  """Reverse KL on the teacher's top-k support (same p̃_T, q̃_θ as `topk_forward_kl`), [B, T, k] × 2 → [B, T]:

    ℓ_t = KL(q̃_θ ‖ p̃_T) = Σ_k q̃_θ,k (log q̃_θ,k − log p̃_T,k)

  The exact reverse KL over the k ids, with an exact gradient (no sampling): ∂ℓ/∂log π_θ(v_j) =
  q̃_j·(log q̃_j − log p̃_j − ℓ). Mode-seeking: it pushes down the ids the student over-weights relative to the
  teacher. With k = the vocabulary it is KL(π_θ ‖ π_T) itself. Only the policy gets gradients. Zero off the mask.
  """
  log_q, log_p = topk_log_dists(policy_topk_logprobs, teacher_topk_logprobs, mask)
  loss = jnp.sum(jnp.exp(log_q) * (log_q - log_p), axis=-1)
  return jnp.where(mask > 0, loss, 0.0)


def topk_jsd(policy_topk_logprobs: jnp.ndarray, teacher_topk_logprobs: jnp.ndarray, mask: jnp.ndarray) -> jnp.ndarray:
  """Jensen–Shannon divergence on the teacher's top-k support (same p̃_T, q̃_θ as `topk_forward_kl`), [B, T]:

    M = ½(p̃_T + q̃_θ),   ℓ_t = ½ KL(p̃_T ‖ M) + ½ KL(q̃_θ ‖ M)      (in nats, 0 ≤ ℓ ≤ ln 2)

  Symmetric and bounded, so one token where the two disagree completely cannot dominate the loss. log M is a
  logaddexp, stable for any inputs. Only the policy gets gradients. Zero off the mask.
  """
  log_q, log_p = topk_log_dists(policy_topk_logprobs, teacher_topk_logprobs, mask)
  log_m = jnp.logaddexp(log_p, log_q) - jnp.log(2.0)
  loss = 0.5 * jnp.sum(jnp.exp(log_p) * (log_p - log_m) + jnp.exp(log_q) * (log_q - log_m), axis=-1)
  return jnp.where(mask > 0, loss, 0.0)


# ---------------------------------------------------------------- SDAR and its ablation baselines


def sdar_loss(scores: Scores, batch: TrainBatch, params: LossParams,
              norm: Normalizer) -> Tuple[jnp.ndarray, Metrics]:
  """SDAR actor loss over one micro-batch (methods.md §4.1; GRPO's advantages untouched by the teacher):

    L = pg_loss_coef·L_GRPO − c_ent·H + β_KL·KL(π_θ ‖ π_ref) + λ·L_SDAR,   L_SDAR = agg(g_t·ℓ_t)

  λ = sdar.coef, g_t = `sdar_gate` (β = sdar.gate_beta, kind sdar.gate), ℓ_t by sdar.divergence:
  `sampled_reverse_kl` (default, the released code), `reverse_kl_score` (the sampled ∇KL(π_θ ‖ π_T)), or over the
  teacher's top-k `topk_forward_kl`, `topk_reverse_kl`, `topk_jsd` (paper ablations). Δ_t uses the live policy
  log-prob, as in the reference's micro-batch loop.

  Metrics (contributions): GRPO's, plus sdar/loss (L_SDAR before λ), sdar/gate_mean, sdar/gate_active_ratio (share of
  loss tokens with g > ½), sdar/teacher_gap_mean (mean Δ_t, live θ).
  """
  cfg = params.method
  mask = batch.loss_mask.astype(jnp.float32)
  why = f"objective {params.objective!r}"
  teacher = jax.lax.stop_gradient(require_teacher_signal(batch.teacher_logprobs, "teacher_logprobs", why))
  logprobs = require_score(scores.policy_logprobs, "policy_logprobs", why)
  loss, metrics = grpo_loss(scores, batch, params, norm)
  gap = jnp.where(mask > 0, teacher - jax.lax.stop_gradient(logprobs), 0.0)
  gate = sdar_gate(gap, scores.policy_entropy, cfg.gate_beta, cfg.gate)
  if cfg.divergence in SAMPLED_DIVERGENCES:
    sampled = sampled_reverse_kl if cfg.divergence == "reverse_kl" else reverse_kl_score
    per_token = sampled(teacher, logprobs, mask)
  else:
    why = f"{why} (sdar.divergence={cfg.divergence!r})"
    require_teacher_signal(batch.teacher_topk_ids, "teacher_topk_ids", why)
    teacher_topk = require_teacher_signal(batch.teacher_topk_logprobs, "teacher_topk_logprobs", why)
    policy_topk = require_score(scores.policy_gathered_logprobs, "policy_gathered_logprobs", why)
    if teacher_topk.shape[-1] != cfg.top_k:
      raise ValueError(f"{why}: the batch carries the teacher's top-{teacher_topk.shape[-1]} but "
                       f"sdar.top_k={cfg.top_k}")
    divergence = {"topk_forward_kl": topk_forward_kl, "topk_reverse_kl": topk_reverse_kl,
                  "topk_jsd": topk_jsd}[cfg.divergence]
    per_token = divergence(policy_topk, teacher_topk, mask)
  sdar = agg_loss(gate * per_token, mask, params.core.loss_agg_mode, norm)
  metrics.update({
      "sdar/loss": sdar,
      "sdar/gate_mean": token_share(gate, mask, norm),
      "sdar/gate_active_ratio": token_share((gate > 0.5).astype(jnp.float32), mask, norm),
      "sdar/teacher_gap_mean": token_share(gap, mask, norm),
  })
  return loss + cfg.coef * sdar, metrics


def grpo_opsd_loss(scores: Scores, batch: TrainBatch, params: LossParams, norm: Normalizer):
  """SDAR's GRPO+OPSD baseline: `sdar_loss` with sdar.gate_beta = 0, so g ≡ ½ on every token (no gating)."""
  return sdar_loss(scores, batch, dataclasses.replace(params, method=dataclasses.replace(params.method, gate_beta=0.0)),
                   norm)


def opsd_loss(scores: Scores, batch: TrainBatch, params: LossParams, norm: Normalizer):
  """SDAR's OPSD baseline: `sdar_loss` with pg_loss_coef = 0 (the gated distillation term, KL and entropy only)."""
  return sdar_loss(scores, batch, dataclasses.replace(params, core=dataclasses.replace(params.core, pg_loss_coef=0.0)),
                   norm)


def sdar_teacher_top_k(params: LossParams) -> int:
  """The sampled-token divergences read only log π_T(y_t); the top-k ones the teacher's top-`sdar.top_k`."""
  return 0 if params.method.divergence in SAMPLED_DIVERGENCES else params.method.top_k


def sampled_token_only(params: LossParams) -> int:
  del params
  return 0


def _grpo_opsd_check(params: LossParams) -> None:
  if params.method.gate != "gap":
    raise ValueError(f"objective 'grpo_opsd' is SDAR without gating (β = 0, g ≡ ½), which only the gap gate gives: "
                     f"sdar.gate must be 'gap', got {params.method.gate!r}")


def _grpo_opsd_rkl_check(params: LossParams) -> None:
  _grpo_opsd_check(params)
  if params.method.divergence != "reverse_kl_score":
    raise ValueError(f"objective 'grpo_opsd_rkl' is GRPO+OPSD with the sampled reverse-KL gradient: sdar.divergence "
                     f"must be 'reverse_kl_score', got {params.method.divergence!r} (grpo_opsd takes the others)")


# ---------------------------------------------------------------- RLSD


def rlsd_lambda(cfg: RlsdConfig, iteration: int) -> float:
  """RLSD's mixing weight at a 1-based GRPO iteration i, λ_0 = rlsd.start_lambda, W = rlsd.warmdown_steps:

    released_code:  λ_i = λ_0 · max(0, 1 − i / W)
    from_lambda0:   λ_i = λ_0 · max(0, 1 − (i − 1) / W)

  `released_code` (the default) is the authors' trainer (`_get_rlsd_lambda(global_steps)`, whose first update is
  step 1): iteration 1 gets λ_0(1 − 1/W), iteration W/2 gets λ_0/2, and from iteration W on λ = 0 (plain GRPO).
  `from_lambda0` is the same line one iteration later, starting at λ_0 as the paper's "λ decays linearly from λ_0
  to 0" reads.
  """
  if isinstance(iteration, bool) or not isinstance(iteration, (int, np.integer)) or iteration < 1:
    raise ValueError(f"rlsd_lambda: iteration is 1-based, got {iteration!r}")
  step = iteration if cfg.schedule == "released_code" else iteration - 1
  return cfg.start_lambda * max(0.0, 1.0 - step / cfg.warmdown_steps)


def rlsd_advantages(advantages, teacher_logprobs, old_logprobs, mask, segment_ids, lam: float,
                    eps_w: float) -> np.ndarray:
  """RLSD token advantages (`rlsd_utils.compute_rlsd_token_advantage`), host numpy, any matching shapes [..., T]:

    A = the sample's advantage at its first loss token (the sequence advantage, as the reference reads it)
    Δ_t = log π_T(y_t) − log π_old(y_t),   w_t = clip(exp(sign(A)·Δ_t), 1 − ε_w, 1 + ε_w)
    Â_t = A·((1 − λ) + λ·w_t)                                           (0 off the mask)

  A sample is a segment of a row (`segment_ids`: packed rows hold several), so every token of it uses that one A,
  even where the given advantages vary along it (OPID's token-level skill shift). The verifier's sign is kept
  (w > 0); the teacher only redistributes credit within a sample: on a success (A > 0) tokens it endorses (Δ > 0)
  get more, on a failure (A < 0) they are penalised less (exp(−Δ) < 1). The clip bounds any token's reweighting to
  ±ε_w. A = 0 stays 0. Both log-probs are batch constants, so Â is too.
  """
  a = np.asarray(advantages, np.float32)
  on = np.asarray(mask) > 0
  segments = np.asarray(segment_ids).astype(np.int64)
  rows = np.arange(a.size // a.shape[-1]).reshape(a.shape[:-1] + (1,))
  sample = (rows * (segments.max(initial=0) + 1) + segments)[on]   # one id per (row, segment), in token order
  ids, first = np.unique(sample, return_index=True)
  a_seq = np.zeros_like(a)
  a_seq[on] = a[on][first][np.searchsorted(ids, sample)]
  delta = np.asarray(teacher_logprobs, np.float32) - np.asarray(old_logprobs, np.float32)
  weight = np.clip(np.exp(np.sign(a_seq) * delta), 1.0 - eps_w, 1.0 + eps_w)
  return np.where(on, a_seq * ((1.0 - lam) + lam * weight), 0.0).astype(np.float32)


def rlsd_prepare(minibatch: TrainBatch, params: LossParams, iteration: int) -> TrainBatch:
  """RLSD's host-side step: the mini-batch with `rlsd_advantages` at λ = `rlsd_lambda(params.method, iteration)` in
  place of its GRPO advantages; the loss is then plain `grpo_loss`."""
  cfg = params.method
  teacher = require_teacher_signal(minibatch.teacher_logprobs, "teacher_logprobs", "objective 'rlsd'")
  return minibatch.replace(advantages=rlsd_advantages(minibatch.advantages, teacher, minibatch.old_logprobs,
                                                      minibatch.loss_mask, minibatch.segment_ids,
                                                      rlsd_lambda(cfg, iteration), cfg.eps_w))


# ---------------------------------------------------------------- Skill-SD


def skill_sd_per_token(policy_logprobs: jnp.ndarray, teacher_logprobs: jnp.ndarray, old_logprobs: jnp.ndarray,
                       mask: jnp.ndarray) -> jnp.ndarray:
  """Skill-SD's self-distillation term (`skillsd_utils.compute_sdl_loss`), per token [B, T]:

    ℓ = log π_θ(y_t) − sg[log π_T(y_t)],   k3 = exp(min(−ℓ, 20)) − 1 + ℓ,   ρ_on = exp(min(log π_θ − sg[log π_old], 10))
    term = ρ_on · k3

  k3 ≥ 0 estimates KL(π_θ ‖ π_T) on y_t ~ π_old; ρ_on is the importance ratio from the sampler, and it is not
  detached (as in the reference): the gradient is ρ_on·k3 + ρ_on·(1 − e^{−ℓ}) per unit of ∇log π_θ(y_t) where no
  clamp is active. The mins are the reference's `torch.clamp(max=...)` (`losses.clamp`): at a tie (−ℓ = 20 or
  log ρ_on = 10) the whole gradient still passes. Zero off the mask.
  """
  chex.assert_rank([policy_logprobs, teacher_logprobs, old_logprobs, mask], 2)
  chex.assert_equal_shape([policy_logprobs, teacher_logprobs, old_logprobs, mask])
  ell = policy_logprobs - jax.lax.stop_gradient(teacher_logprobs)
  k3 = jnp.exp(clamp(-ell, hi=_SDL_EXP_CLAMP)) - 1.0 + ell
  rho = jnp.exp(clamp(policy_logprobs - jax.lax.stop_gradient(old_logprobs), hi=_SDL_RATIO_CLAMP))
  return jnp.where(mask > 0, rho * k3, 0.0)


def skill_sd_loss(scores: Scores, batch: TrainBatch, params: LossParams,
                  norm: Normalizer) -> Tuple[jnp.ndarray, Metrics]:
  """Skill-SD baseline (methods.md §4.1 table): L = L_GRPO(+ KL, entropy) + skill_sd.coef·agg(ρ_on·k3).
  Metric skillsd/loss: agg(ρ_on·k3) before its coefficient."""
  mask = batch.loss_mask.astype(jnp.float32)
  teacher = require_teacher_signal(batch.teacher_logprobs, "teacher_logprobs", "objective 'skill_sd'")
  logprobs = require_score(scores.policy_logprobs, "policy_logprobs", "objective 'skill_sd'")
  loss, metrics = grpo_loss(scores, batch, params, norm)
  sdl = agg_loss(skill_sd_per_token(logprobs, teacher, batch.old_logprobs, mask), mask, params.core.loss_agg_mode,
                 norm)
  metrics["skillsd/loss"] = sdl
  return loss + params.method.coef * sdl, metrics


# ---------------------------------------------------------------- registration

register_objective("sdar", Objective(name="sdar", loss_fn=sdar_loss, branches=grpo_branches,
                                     teacher_top_k=sdar_teacher_top_k, group=SdarConfig))
register_objective("grpo_opsd", Objective(name="grpo_opsd", loss_fn=grpo_opsd_loss, branches=grpo_branches,
                                          check=_grpo_opsd_check, teacher_top_k=sdar_teacher_top_k, group=SdarConfig))
register_objective("grpo_opsd_rkl", Objective(name="grpo_opsd_rkl", loss_fn=grpo_opsd_loss,
                                              branches=grpo_branches, check=_grpo_opsd_rkl_check,
                                              teacher_top_k=sampled_token_only, group=SdarConfig))
register_objective("opsd", Objective(name="opsd", loss_fn=opsd_loss, branches=grpo_branches,
                                     teacher_top_k=sdar_teacher_top_k, group=SdarConfig))
register_objective("rlsd", Objective(name="rlsd", loss_fn=grpo_loss, branches=grpo_branches,
                                     teacher_top_k=sampled_token_only, prepare=rlsd_prepare, group=RlsdConfig))
register_objective("skill_sd", Objective(name="skill_sd", loss_fn=skill_sd_loss, branches=grpo_branches,
                                         teacher_top_k=sampled_token_only, group=SkillSdConfig))
