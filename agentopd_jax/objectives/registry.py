"""Objectives chosen by name: what each needs scored, and how its loss and metrics are assembled.

An `Objective` couples two things the train step must agree on: which scoring branches to run (`score_config`: a
reference forward only when the KL term is on, a teacher forward only for distillation objectives) and the loss.
Later methods (OPID, SDAR, Agentic-OPD) register their own objectives, typically reusing `grpo_loss` and adding an
auxiliary per-token term, so the train step never branches on the method (SDAR and its baselines:
`methods.sdar.losses`; Agentic-OPD: `methods.agentic_opd.losses`; each registers itself when `agentopd_jax.methods`
is imported).

Metric convention: every metric is a *contribution* that sums over the micro-batches of a mini-batch to the
mini-batch value (token statistics are divided by the mini-batch `Normalizer`), so the train step just adds them.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Dict, Mapping, Optional, Tuple

import jax
import jax.numpy as jnp

from agentopd_jax.batching.collate import TrainBatch
from agentopd_jax.objectives.losses import (AGG_MODES, KL_KINDS, Normalizer, add_entropy_bonus, agg_loss,
                                            kl_penalty, ppo_dual_clip_loss, require_score, sft_nll, token_share)
from agentopd_jax.scoring.fused import ScoreConfig, Scores

Metrics = Dict[str, jnp.ndarray]

# Domains of LossConfig's method fields (methods.sdar.losses and methods.agentic_opd.losses, which import this module
# and register their objectives, implement them).
OPD_VARIANTS = ("topk_reverse_kl", "sampled_token")
LAD_OTHER = ("none", "grpo")
SDAR_GATES = ("gap", "entropy", "soft_or")
SDAR_DIVERGENCES = ("reverse_kl", "topk_forward_kl", "topk_jsd")
RLSD_SCHEDULES = ("released_code", "from_lambda0")


@dataclasses.dataclass(frozen=True)
class LossConfig:
  """Loss hyperparameters (hashable: pass it as a static argument to jit). Defaults = verl-agent GRPO."""
  objective: str = "grpo"
  clip_ratio_low: float = 0.2      # ε_low:  ρ clipped below at 1 − ε_low
  clip_ratio_high: float = 0.2     # ε_high: ρ clipped above at 1 + ε_high
  clip_ratio_c: float = 3.0        # dual-clip bound c > 1 for A < 0
  kl_coef: float = 0.0             # β_KL of the KL(π_θ ‖ π_ref) loss term; 0 = no reference forward
  kl_type: str = "low_var_kl"
  entropy_coef: float = 0.0        # c_ent of the −c_ent·H bonus
  loss_agg_mode: str = "token-mean"
  loss_scale_factor: int = 0       # L of loss_agg_mode "seq-mean-token-sum-norm" (verl: the padded response length)
  pg_loss_coef: float = 1.0        # 0 turns the policy-gradient term off (e.g. SDAR's OPSD-only baseline)
  # Agentic-OPD (objective "agentic_opd", methods.agentic_opd.losses); ignored by the other objectives.
  opd_loss_coef: float = 1.0       # weight of the OPD term
  task_loss_coef: float = 0.0      # weight of the GRPO task term on every rollout; 0 = pure OPD (reference default)
  opd_top_k: int = 16              # k of the student's top-k support (OPD_TOP_K)
  opd_max_abs_log_ratio: float = 0.0   # clamp of the top-k log-ratio to ±c; 0 = no clamp (the reference's null)
  opd_variant: str = "topk_reverse_kl"  # or "sampled_token" (the documented PG-OPD advantage)
  lad_other: str = "none"          # what rollouts LAD does not route get: "none", or "grpo" (pg_loss_coef · PPO)
  # SDAR and its baselines (methods.sdar.losses); ignored by the other objectives.
  sdar_coef: float = 0.01          # λ of the λ·L_SDAR term
  gate_beta: float = 5.0           # β of the gate σ(β·Δ_t); 0 = ungated (g ≡ ½, the GRPO+OPSD baseline)
  sdar_gate: str = "gap"           # "gap" (SDAR), "entropy" or "soft_or" (paper ablations)
  sdar_divergence: str = "reverse_kl"  # or "topk_forward_kl" / "topk_jsd" over the teacher's top-k
  distill_top_k: int = 16          # k of the teacher's top-k support of the top-k divergences
  skill_sd_coef: float = 0.001     # λ_SDL of Skill-SD's ρ_on·k3 term
  rlsd_lambda: float = 0.5         # RLSD's λ_0, decayed linearly to 0 (`methods.sdar.losses.rlsd_lambda`)
  rlsd_warmdown_steps: int = 50    # W: iterations over which RLSD's λ reaches 0 (code default; paper scripts 100)
  rlsd_schedule: str = "released_code"  # λ_i = λ_0·max(0, 1 − i/W), or "from_lambda0": λ_0·max(0, 1 − (i − 1)/W)
  rlsd_eps_w: float = 0.2          # RLSD token weights clipped to [1 − ε_w, 1 + ε_w]

  def __post_init__(self):
    if self.objective not in OBJECTIVES:
      raise ValueError(f"LossConfig.objective: unknown objective {self.objective!r}; registered: {sorted(OBJECTIVES)}")
    for name in ("clip_ratio_low", "clip_ratio_high", "clip_ratio_c", "kl_coef", "entropy_coef", "pg_loss_coef",
                 "opd_loss_coef", "task_loss_coef", "opd_max_abs_log_ratio", "sdar_coef", "gate_beta", "skill_sd_coef",
                 "rlsd_lambda", "rlsd_eps_w"):
      value = getattr(self, name)
      if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"LossConfig.{name} must be a finite number, got {value!r}")
    if not 0.0 <= self.clip_ratio_low < 1.0:
      raise ValueError(f"LossConfig.clip_ratio_low must be in [0, 1), got {self.clip_ratio_low}")
    if self.clip_ratio_high < 0.0:
      raise ValueError(f"LossConfig.clip_ratio_high must be >= 0, got {self.clip_ratio_high}")
    if not self.clip_ratio_c > 1.0:
      raise ValueError(f"LossConfig.clip_ratio_c must be > 1 (dual-clip bound), got {self.clip_ratio_c}")
    if self.kl_coef < 0.0:
      raise ValueError(f"LossConfig.kl_coef must be >= 0, got {self.kl_coef}")
    if self.kl_type not in KL_KINDS:
      raise ValueError(f"LossConfig.kl_type must be one of {KL_KINDS}, got {self.kl_type!r}")
    if self.loss_agg_mode not in AGG_MODES:
      raise ValueError(f"LossConfig.loss_agg_mode must be one of {AGG_MODES}, got {self.loss_agg_mode!r}")
    if self.pg_loss_coef < 0.0:
      raise ValueError(f"LossConfig.pg_loss_coef must be >= 0, got {self.pg_loss_coef}")
    for name in ("opd_loss_coef", "task_loss_coef", "opd_max_abs_log_ratio", "sdar_coef", "gate_beta", "skill_sd_coef"):
      if getattr(self, name) < 0.0:
        raise ValueError(f"LossConfig.{name} must be >= 0, got {getattr(self, name)}")
    # distill_top_k >= 2: a top-1 support renormalises to a point mass, on which every divergence is 0.
    for name, least in (("opd_top_k", 1), ("distill_top_k", 2), ("rlsd_warmdown_steps", 1),
                        ("loss_scale_factor", 0)):
      value = getattr(self, name)
      if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ValueError(f"LossConfig.{name} must be an int >= {least}, got {value!r}")
    if self.loss_agg_mode == "seq-mean-token-sum-norm" and self.loss_scale_factor == 0:
      raise ValueError("LossConfig.loss_scale_factor must be > 0 with loss_agg_mode 'seq-mean-token-sum-norm': it is "
                       "the constant L of Σ v·m / L (verl: the padded response length, e.g. "
                       "rollout.max_response_tokens)")
    if self.opd_variant not in OPD_VARIANTS:
      raise ValueError(f"LossConfig.opd_variant must be one of {OPD_VARIANTS}, got {self.opd_variant!r}")
    if self.lad_other not in LAD_OTHER:
      raise ValueError(f"LossConfig.lad_other must be one of {LAD_OTHER}, got {self.lad_other!r}")
    if self.sdar_gate not in SDAR_GATES:
      raise ValueError(f"LossConfig.sdar_gate must be one of {SDAR_GATES}, got {self.sdar_gate!r}")
    if self.sdar_divergence not in SDAR_DIVERGENCES:
      raise ValueError(f"LossConfig.sdar_divergence must be one of {SDAR_DIVERGENCES}, got {self.sdar_divergence!r}")
    if self.rlsd_schedule not in RLSD_SCHEDULES:
      raise ValueError(f"LossConfig.rlsd_schedule must be one of {RLSD_SCHEDULES}, got {self.rlsd_schedule!r}")
    if not 0.0 <= self.rlsd_lambda <= 1.0:
      raise ValueError(f"LossConfig.rlsd_lambda must be in [0, 1], got {self.rlsd_lambda}")
    if not 0.0 <= self.rlsd_eps_w < 1.0:
      raise ValueError(f"LossConfig.rlsd_eps_w must be in [0, 1), got {self.rlsd_eps_w}")


LossFn = Callable[[Scores, TrainBatch, LossConfig, Normalizer], Tuple[jnp.ndarray, Metrics]]


@dataclasses.dataclass(frozen=True)
class Objective:
  """A named loss plus the scoring branches it reads.

  loss_fn(scores, batch, cfg, norm) -> (scalar loss, metrics): pure and jittable; `scores` come from
    `scoring.fused.score` with this objective's `score_config`, `norm` from `normalizer_for` over the mini-batch.
  branches(cfg) -> the ScoreConfig fields this objective sets (policy / reference / teacher / top_k / entropy);
    every other field (vocab_chunk, temperature) is taken from the caller's base config.
  check(cfg) -> None: raises ValueError for settings the objective cannot honour (optional).
  teacher_top_k(cfg) -> k: the objective reads teacher signals scored once per batch before the update
    (`TrainBatch.teacher_logprobs`, plus the teacher's top-k ids and log-probs when k > 0); None: it reads none.
  prepare(minibatch, cfg, iteration) -> minibatch: a host-side (numpy) transform the trainer applies to each
    mini-batch before the jitted step, given the 1-based iteration; for inputs that change every iteration (RLSD's
    λ schedule), which as static jit arguments would recompile the step each time.
  student_skills: the rollouts put the retrieved skills in the student's own prompt (Skill-GRPO).
  """
  name: str
  loss_fn: LossFn
  branches: Callable[[LossConfig], Mapping[str, Any]]
  check: Optional[Callable[[LossConfig], None]] = None
  teacher_top_k: Optional[Callable[[LossConfig], int]] = None
  prepare: Optional[Callable[[TrainBatch, LossConfig, int], TrainBatch]] = None
  student_skills: bool = False

  def score_config(self, cfg: LossConfig, base: Optional[ScoreConfig] = None) -> ScoreConfig:
    if self.check is not None:
      self.check(cfg)
    return dataclasses.replace(base if base is not None else ScoreConfig(), **self.branches(cfg))

  def loss(self, scores: Scores, batch: TrainBatch, cfg: LossConfig, norm: Normalizer) -> Tuple[jnp.ndarray, Metrics]:
    if self.check is not None:
      self.check(cfg)
    loss, metrics = self.loss_fn(scores, batch, cfg, norm)
    metrics = dict(metrics, loss=loss)
    return loss, jax.lax.stop_gradient(metrics)


OBJECTIVES: Dict[str, Objective] = {}


def register_objective(name: str, objective: Objective) -> Objective:
  """Add `objective` under `name` (a name is registered once; re-registering raises)."""
  if name in OBJECTIVES:
    raise ValueError(f"objective {name!r} is already registered")
  OBJECTIVES[name] = objective
  return objective


def get_objective(name: str) -> Objective:
  if name not in OBJECTIVES:
    raise ValueError(f"unknown objective {name!r}; choices: {sorted(OBJECTIVES)}")
  return OBJECTIVES[name]


def grpo_loss(scores: Scores, batch: TrainBatch, cfg: LossConfig, norm: Normalizer) -> Tuple[jnp.ndarray, Metrics]:
  """verl-agent actor loss over one micro-batch:

    L = pg_loss_coef · agg(L_PPO-dual-clip(ρ, A)) − entropy_coef · agg(H) + kl_coef · agg(KL(π_θ ‖ π_ref))

  with ρ = π_θ / π_old on the sampled tokens and A = `batch.advantages` (already broadcast over the loss mask).
  The building block for objectives that add an auxiliary per-token term on top of GRPO.

  Metrics (micro-batch contributions; see the module docstring): pg_loss, entropy, kl (agg with loss_agg_mode, as
  verl logs them); pg_clipfrac, pg_clipfrac_lower, ppo_kl, logprob_drift (token means). logprob_drift = mean
  |log π_θ − log π_old|: when `old_logprobs` are the sampler's, on the first mini-batch of an on-policy step (θ = old)
  it measures sampler↔trainer numerical drift; afterwards it also includes the policy's own movement.
  """
  mask = batch.loss_mask.astype(jnp.float32)
  logprobs = require_score(scores.policy_logprobs, "policy_logprobs", "the policy-gradient loss")
  terms = ppo_dual_clip_loss(logprobs, batch.old_logprobs, batch.advantages, mask, cfg.clip_ratio_low,
                             cfg.clip_ratio_high, cfg.clip_ratio_c)
  pg_loss = agg_loss(terms.loss, mask, cfg.loss_agg_mode, norm)
  loss = cfg.pg_loss_coef * pg_loss
  metrics = {
      "pg_loss": pg_loss,
      "pg_clipfrac": token_share(terms.clipped, mask, norm),
      "pg_clipfrac_lower": token_share(terms.dual_clipped, mask, norm),
      "ppo_kl": token_share(terms.approx_kl, mask, norm),
      "logprob_drift": token_share(jnp.abs(logprobs - batch.old_logprobs), mask, norm),
  }
  loss = add_entropy_bonus(loss, metrics, scores.policy_entropy, cfg.entropy_coef, mask, cfg.loss_agg_mode, norm)
  if cfg.kl_coef > 0.0:
    ref = require_score(scores.reference_logprobs, "reference_logprobs", "kl_coef > 0")
    kl = agg_loss(kl_penalty(logprobs, ref, cfg.kl_type), mask, cfg.loss_agg_mode, norm)
    metrics["kl"] = kl
    loss = loss + cfg.kl_coef * kl
  return loss, metrics


def grpo_branches(cfg: LossConfig) -> Dict[str, Any]:
  """Policy always; entropy always (cheap, and logged even when its coefficient is 0); reference iff KL is on."""
  return dict(policy=True, reference=cfg.kl_coef > 0.0, teacher="none", top_k=0, entropy=True)


def sft_loss(scores: Scores, batch: TrainBatch, cfg: LossConfig, norm: Normalizer) -> Tuple[jnp.ndarray, Metrics]:
  """Supervised warm start: L = agg(−log π_θ(y_t)) over the loss mask (demonstration tokens)."""
  mask = batch.loss_mask.astype(jnp.float32)
  logprobs = require_score(scores.policy_logprobs, "policy_logprobs", "the SFT loss")
  nll = agg_loss(sft_nll(logprobs, mask), mask, cfg.loss_agg_mode, norm)
  metrics = {"nll": nll}
  loss = add_entropy_bonus(nll, metrics, scores.policy_entropy, cfg.entropy_coef, mask, cfg.loss_agg_mode, norm)
  return loss, metrics


def _sft_check(cfg: LossConfig) -> None:
  if cfg.kl_coef != 0.0 or cfg.entropy_coef != 0.0:
    raise ValueError("objective 'sft' is plain NLL: LossConfig.kl_coef and LossConfig.entropy_coef must be 0")


def sft_branches(cfg: LossConfig) -> Dict[str, Any]:
  del cfg
  return dict(policy=True, reference=False, teacher="none", top_k=0, entropy=True)


register_objective("grpo", Objective(name="grpo", loss_fn=grpo_loss, branches=grpo_branches))
register_objective("sft", Objective(name="sft", loss_fn=sft_loss, branches=sft_branches, check=_sft_check))
