"""Objectives chosen by name: what each needs scored, and how its loss and metrics are assembled.

An `Objective` couples two things the train step must agree on: which scoring branches to run (`score_config`: a
reference forward only when the KL term is on, a teacher forward only for distillation objectives) and the loss.
Methods register their own objectives, typically reusing `grpo_loss` and adding an auxiliary per-token term, so
the train step never branches on the method (SDAR and its baselines: `methods.sdar.losses`; Agentic-OPD:
`methods.agentic_opd.losses`; each registers itself when `agentopd_jax.methods` is imported). Every objective function
reads one `LossParams`: the `loss` section's PPO/GRPO core (`LossCore`) and the config group of the method that owns
the objective (`sdar`, `rlsd`, `skill_sd`, `agentic_opd`), the static argument of the jitted step.

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


@dataclasses.dataclass(frozen=True)
class LossCore:
  """The run config's `loss` section: the PPO/GRPO core every objective shares (hashable: a static jit argument).
  Defaults = verl-agent GRPO. A method's own loss fields are its config group (`LossParams.method`)."""
  clip_ratio_low: float = 0.2      # ε_low:  ρ clipped below at 1 − ε_low
  clip_ratio_high: float = 0.2     # ε_high: ρ clipped above at 1 + ε_high
  clip_ratio_c: float = 3.0        # dual-clip bound c > 1 for A < 0
  kl_coef: float = 0.0             # β_KL of the KL(π_θ ‖ π_ref) loss term; 0 = no reference forward
  kl_type: str = "low_var_kl"
  entropy_coef: float = 0.0        # c_ent of the −c_ent·H bonus
  loss_agg_mode: str = "token-mean"
  loss_scale_factor: int = 0       # L of loss_agg_mode "seq-mean-token-sum-norm" (verl: the padded response length)
  pg_loss_coef: float = 1.0        # 0 turns the policy-gradient term off (e.g. SDAR's OPSD-only baseline)

  def __post_init__(self):
    for name in ("clip_ratio_low", "clip_ratio_high", "clip_ratio_c", "kl_coef", "entropy_coef", "pg_loss_coef"):
      value = getattr(self, name)
      if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"loss.{name} must be a finite number, got {value!r}")
    if not 0.0 <= self.clip_ratio_low < 1.0:
      raise ValueError(f"loss.clip_ratio_low must be in [0, 1), got {self.clip_ratio_low}")
    if self.clip_ratio_high < 0.0:
      raise ValueError(f"loss.clip_ratio_high must be >= 0, got {self.clip_ratio_high}")
    if not self.clip_ratio_c > 1.0:
      raise ValueError(f"loss.clip_ratio_c must be > 1 (dual-clip bound), got {self.clip_ratio_c}")
    if self.kl_coef < 0.0:
      raise ValueError(f"loss.kl_coef must be >= 0, got {self.kl_coef}")
    if self.kl_type not in KL_KINDS:
      raise ValueError(f"loss.kl_type must be one of {KL_KINDS}, got {self.kl_type!r}")
    if self.loss_agg_mode not in AGG_MODES:
      raise ValueError(f"loss.loss_agg_mode must be one of {AGG_MODES}, got {self.loss_agg_mode!r}")
    if self.pg_loss_coef < 0.0:
      raise ValueError(f"loss.pg_loss_coef must be >= 0, got {self.pg_loss_coef}")
    value = self.loss_scale_factor
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
      raise ValueError(f"loss.loss_scale_factor must be an int >= 0, got {value!r}")
    if self.loss_agg_mode == "seq-mean-token-sum-norm" and self.loss_scale_factor == 0:
      raise ValueError("loss.loss_scale_factor must be > 0 with loss_agg_mode 'seq-mean-token-sum-norm': it is "
                       "the constant L of Σ v·m / L (verl: the padded response length, e.g. "
                       "rollout.max_response_tokens)")


@dataclasses.dataclass(frozen=True)
class LossParams:
  """What the jitted train step and an objective's functions read (frozen, hashable: static under jit):

    objective  the loss registry key (`OBJECTIVES`), chosen by the run's primary method
    core       the `loss` section (`LossCore`)
    method     the frozen config group of the method that owns the objective (`Objective.group`: SDAR's `sdar`,
               RLSD's `rlsd`, ...), None for an objective without one (grpo, sft). Left None for an objective that
               has one, it is that group's defaults.
  """
  objective: str = "grpo"
  core: LossCore = dataclasses.field(default_factory=LossCore)
  method: Any = None

  def __post_init__(self):
    objective = get_objective(self.objective)
    if not isinstance(self.core, LossCore):
      raise ValueError(f"LossParams.core must be a LossCore, got {type(self.core).__name__}")
    if objective.group is None:
      if self.method is not None:
        raise ValueError(f"objective {self.objective!r} reads no method config group, got "
                         f"{type(self.method).__name__}")
    elif self.method is None:
      object.__setattr__(self, "method", objective.group())
    elif not isinstance(self.method, objective.group):
      raise ValueError(f"objective {self.objective!r} reads the config group {objective.group.__name__}, got "
                       f"{type(self.method).__name__}")


LossFn = Callable[[Scores, TrainBatch, LossParams, Normalizer], Tuple[jnp.ndarray, Metrics]]


@dataclasses.dataclass(frozen=True)
class Objective:
  """A named loss plus the scoring branches it reads. Every function takes the run's `LossParams` (`params.core`:
  the PPO/GRPO core; `params.method`: the owning method's config group, of class `group`).

  loss_fn(scores, batch, params, norm) -> (scalar loss, metrics): pure and jittable; `scores` come from
    `scoring.fused.score` with this objective's `score_config`, `norm` from `normalizer_for` over the mini-batch.
  branches(params) -> the ScoreConfig fields this objective sets (policy / reference / teacher / top_k / entropy);
    every other field (vocab_chunk, temperature) is taken from the caller's base config.
  check(params) -> None: raises ValueError for settings the objective cannot honour (optional).
  teacher_top_k(params) -> k: the objective reads teacher signals scored once per batch before the update
    (`TrainBatch.teacher_logprobs`, plus the teacher's top-k ids and log-probs when k > 0); None: it reads none.
  prepare(minibatch, params, iteration) -> minibatch: a host-side (numpy) transform the trainer applies to each
    mini-batch before the jitted step, given the 1-based iteration; for inputs that change every iteration (RLSD's
    λ schedule), which as static jit arguments would recompile the step each time.
  group: the class of the method config group the functions read from `params.method` (None: none).
  """
  name: str
  loss_fn: LossFn
  branches: Callable[[LossParams], Mapping[str, Any]]
  check: Optional[Callable[[LossParams], None]] = None
  teacher_top_k: Optional[Callable[[LossParams], int]] = None
  prepare: Optional[Callable[[TrainBatch, LossParams, int], TrainBatch]] = None
  group: Optional[type] = None

  def score_config(self, params: LossParams, base: Optional[ScoreConfig] = None) -> ScoreConfig:
    if self.check is not None:
      self.check(params)
    return dataclasses.replace(base if base is not None else ScoreConfig(), **self.branches(params))

  def loss(self, scores: Scores, batch: TrainBatch, params: LossParams,
           norm: Normalizer) -> Tuple[jnp.ndarray, Metrics]:
    if self.check is not None:
      self.check(params)
    loss, metrics = self.loss_fn(scores, batch, params, norm)
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


def grpo_loss(scores: Scores, batch: TrainBatch, params: LossParams,
              norm: Normalizer) -> Tuple[jnp.ndarray, Metrics]:
  """verl-agent actor loss over one micro-batch:

    L = pg_loss_coef · agg(L_PPO-dual-clip(ρ, A)) − entropy_coef · agg(H) + kl_coef · agg(KL(π_θ ‖ π_ref))

  with ρ = π_θ / π_old on the sampled tokens, A = `batch.advantages` (already broadcast over the loss mask) and the
  coefficients of `params.core`. With rollout correction on, the surrogate's per-token values are multiplied by
  `batch.rollout_is_weights` (constants, `objectives.rollout_correction`) before the aggregation, as verl does. The
  building block for objectives that add an auxiliary per-token term on top of GRPO.

  Metrics (micro-batch contributions; see the module docstring): pg_loss, entropy, kl (agg with loss_agg_mode, as
  verl logs them); pg_clipfrac, pg_clipfrac_lower, ppo_kl, logprob_drift (token means). logprob_drift = mean
  |log π_θ − log π_old|: when `old_logprobs` are the sampler's, on the first mini-batch of an on-policy step (θ = old)
  it measures sampler↔trainer numerical drift; afterwards it also includes the policy's own movement.
  """
  cfg = params.core
  mask = batch.loss_mask.astype(jnp.float32)
  logprobs = require_score(scores.policy_logprobs, "policy_logprobs", "the policy-gradient loss")
  terms = ppo_dual_clip_loss(logprobs, batch.old_logprobs, batch.advantages, mask, cfg.clip_ratio_low,
                             cfg.clip_ratio_high, cfg.clip_ratio_c)
  pg_values = terms.loss if batch.rollout_is_weights is None else terms.loss * batch.rollout_is_weights
  pg_loss = agg_loss(pg_values, mask, cfg.loss_agg_mode, norm)
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


def grpo_branches(params: LossParams) -> Dict[str, Any]:
  """Policy always; entropy always (cheap, and logged even when its coefficient is 0); reference iff KL is on."""
  return dict(policy=True, reference=params.core.kl_coef > 0.0, teacher="none", top_k=0, entropy=True)


def sft_loss(scores: Scores, batch: TrainBatch, params: LossParams,
             norm: Normalizer) -> Tuple[jnp.ndarray, Metrics]:
  """Supervised warm start: L = agg(−log π_θ(y_t)) over the loss mask (demonstration tokens)."""
  cfg = params.core
  mask = batch.loss_mask.astype(jnp.float32)
  logprobs = require_score(scores.policy_logprobs, "policy_logprobs", "the SFT loss")
  nll = agg_loss(sft_nll(logprobs, mask), mask, cfg.loss_agg_mode, norm)
  metrics = {"nll": nll}
  loss = add_entropy_bonus(nll, metrics, scores.policy_entropy, cfg.entropy_coef, mask, cfg.loss_agg_mode, norm)
  return loss, metrics


def _sft_check(params: LossParams) -> None:
  if params.core.kl_coef != 0.0 or params.core.entropy_coef != 0.0:
    raise ValueError("objective 'sft' is plain NLL: loss.kl_coef and loss.entropy_coef must be 0")


def sft_branches(params: LossParams) -> Dict[str, Any]:
  del params
  return dict(policy=True, reference=False, teacher="none", top_k=0, entropy=True)


register_objective("grpo", Objective(name="grpo", loss_fn=grpo_loss, branches=grpo_branches))
register_objective("sft", Objective(name="sft", loss_fn=sft_loss, branches=sft_branches, check=_sft_check))
