"""Per-token loss terms and their aggregation, as pure functions over target-indexed [B, T] arrays.

Every term returns per-token values that are already zero off the loss mask; `agg_loss` turns them into a scalar.
Aggregation divides by a `Normalizer` counted once over the whole *mini-batch* instead of over each micro-batch, so
the micro-batch losses of a gradient-accumulation loop add up to exactly the mini-batch loss (verl divides each
micro-batch by its own token count and averages, which weighs tokens unevenly when micro-batches differ in length).
Formulas follow verl `core_algos` (`agg_loss`, `compute_policy_loss`, `kl_penalty`), with its `torch.clamp`s as
`clamp`, which passes the gradient the same way.
"""
from __future__ import annotations

from typing import Dict, NamedTuple, Optional, Tuple

import chex
import flax.struct
import jax
import jax.numpy as jnp

AGG_MODES = ("token-mean", "seq-mean-token-mean", "seq-mean-token-sum", "seq-mean-token-sum-norm")
PER_SEQUENCE_MODES = ("seq-mean-token-mean", "seq-mean-token-sum")  # a row is one sequence: no packing
KL_KINDS = ("kl", "k1", "abs", "mse", "k2", "low_var_kl", "k3")
_LOG_RATIO_CLAMP = 20.0   # verl clamps log π_θ − log π_old (and the k3 log-ratio) to ±20 before exp
_K3_CLAMP = 10.0          # verl clamps the k3 estimate itself to ±10


def clamp(x: jnp.ndarray, lo: Optional[float] = None, hi: Optional[float] = None) -> jnp.ndarray:
  """`torch.clamp(x, lo, hi)`, gradient included: all of it reaches x wherever lo ≤ x ≤ hi, ties included, and none
  outside. (`jnp.clip`, `jnp.minimum` and `jnp.maximum` give half of it to x at a tie, so a loss that mirrors a torch
  clamp would get a different gradient exactly on the bound, e.g. the PPO ratio at 1 ± ε.)"""
  if lo is not None:
    x = jnp.where(x < lo, lo, x)
  if hi is not None:
    x = jnp.where(x > hi, hi, x)
  return x


@flax.struct.dataclass
class Normalizer:
  """Denominators of `agg_loss` over one mini-batch: `tokens` = Σ mask and `sequences` = the rows holding a sample
  (each at least 1), and the constant `horizon` L of seq-mean-token-sum-norm (static; 0 = unset); `routed` = Σ of
  the distillation mask over the loss tokens (at least 1; `tokens` without one), for a term over routed tokens."""
  tokens: jnp.ndarray
  sequences: jnp.ndarray
  horizon: float = flax.struct.field(pytree_node=False, default=0.0)
  routed: Optional[jnp.ndarray] = None


def normalizer_for(mask: jnp.ndarray, segment_ids: Optional[jnp.ndarray] = None, horizon: float = 0.0,
                   distill_mask: Optional[jnp.ndarray] = None) -> Normalizer:
  """The normaliser of a (mini-)batch [B, T]; compute it over the whole mini-batch, before splitting.

  Sequences are counted as verl counts them, every row of its batch whether or not it has a loss token, except the
  padding rows that fill up a mini-batch here (`segment_ids` all 0: they hold no sample and are no row of verl's
  batch). Without `segment_ids` every row holds a sample. `horizon`: `LossCore.loss_scale_factor`. `distill_mask`
  (LAD's routing, [B, T]) sets `routed`.
  """
  chex.assert_rank(mask, 2)
  if not horizon >= 0:
    raise ValueError(f"normalizer_for: horizon must be >= 0, got {horizon}")
  tokens = jnp.sum(mask.astype(jnp.float32))
  if segment_ids is None:
    sequences = jnp.float32(mask.shape[0])
  else:
    chex.assert_equal_shape([mask, segment_ids])
    sequences = jnp.sum(jnp.any(segment_ids > 0, axis=-1).astype(jnp.float32))
  routed = tokens if distill_mask is None else jnp.sum(distill_mask.astype(jnp.float32) * (mask > 0))
  return Normalizer(tokens=jnp.maximum(tokens, 1.0), sequences=jnp.maximum(sequences, 1.0), horizon=float(horizon),
                    routed=jnp.maximum(routed, 1.0))


def agg_loss(values: jnp.ndarray, mask: jnp.ndarray, mode: str, normalizer: Normalizer) -> jnp.ndarray:
  """Scalar from per-token values v [B, T] and mask m [B, T] (verl's `agg_loss`):

    token-mean:               Σ_{b,t} v·m / N_tokens
    seq-mean-token-mean:      Σ_b [Σ_t v·m / Σ_t m] / N_seqs   (a sample without loss tokens adds 0; verl: 0/0)
    seq-mean-token-sum:       Σ_b Σ_t v·m / N_seqs
    seq-mean-token-sum-norm:  Σ_b Σ_t v·m / L                   (Dr. GRPO: no mean over rows; L = horizon)

  N_tokens, N_seqs and L come from `normalizer` (the mini-batch's), so the result is additive over row splits. verl
  aggregates each micro-batch and divides the sum by their count (its gradient accumulation), which for the
  seq-means is the same with equal micro-batches; for seq-mean-token-sum-norm it is this over the number of
  micro-batches per mini-batch: match a verl run with A of them by L = A × its response length.
  """
  chex.assert_rank([values, mask], 2)
  chex.assert_equal_shape([values, mask])
  if mode not in AGG_MODES:
    raise ValueError(f"unknown loss_agg_mode {mode!r}; choices: {AGG_MODES}")
  m = mask.astype(values.dtype)
  if mode == "token-mean":
    return jnp.sum(values * m) / normalizer.tokens
  row_sum = jnp.sum(values * m, axis=-1)
  if mode == "seq-mean-token-sum-norm":
    if not normalizer.horizon > 0:
      raise ValueError("loss_agg_mode 'seq-mean-token-sum-norm' divides by the constant L = "
                       "loss.loss_scale_factor, which the normaliser lacks (horizon 0)")
    return jnp.sum(row_sum) / normalizer.horizon
  if mode == "seq-mean-token-mean":
    row_sum = row_sum / jnp.maximum(jnp.sum(m, axis=-1), 1.0)
  return jnp.sum(row_sum) / normalizer.sequences


class PolicyLossTerms(NamedTuple):
  """Per-token outputs of `ppo_dual_clip_loss`, all [B, T] and zero off the mask."""
  loss: jnp.ndarray          # the dual-clipped surrogate loss
  clipped: jnp.ndarray       # 1 where the ε-clip is active (pg2 > pg1): token-mean = verl pg_clipfrac
  dual_clipped: jnp.ndarray  # 1 where A < 0 and the c-bound is active: token-mean = verl pg_clipfrac_lower
  approx_kl: jnp.ndarray     # log π_old − log π_θ (clamped log-ratio): token-mean = verl ppo_kl


def ppo_dual_clip_loss(logprobs: jnp.ndarray, old_logprobs: jnp.ndarray, advantages: jnp.ndarray, mask: jnp.ndarray,
                       clip_low: float, clip_high: float, clip_c: float) -> PolicyLossTerms:
  """PPO clipped surrogate with dual clip (Ye et al. 2020; verl `compute_policy_loss`), per token:

    ρ = exp(clamp(log π_θ − log π_old, −20, 20))
    pg1 = −A·ρ,   pg2 = −A·clip(ρ, 1 − ε_low, 1 + ε_high),   L_clip = max(pg1, pg2)
    L = min(L_clip, −A·c)  if A < 0  else  L_clip

  The dual clip bounds the loss of a negative-advantage token whose ratio has grown far above 1 (c > 1).
  """
  chex.assert_rank([logprobs, old_logprobs, advantages, mask], 2)
  chex.assert_equal_shape([logprobs, old_logprobs, advantages, mask])
  if not clip_c > 1.0:
    raise ValueError(f"ppo_dual_clip_loss: clip_c must be > 1 (dual-clip lower bound), got {clip_c}")
  m = mask.astype(logprobs.dtype)
  log_ratio = clamp(logprobs - old_logprobs, -_LOG_RATIO_CLAMP, _LOG_RATIO_CLAMP)
  ratio = jnp.exp(log_ratio)
  pg1 = -advantages * ratio
  pg2 = -advantages * clamp(ratio, 1.0 - clip_low, 1.0 + clip_high)
  clip1 = jnp.maximum(pg1, pg2)
  pg3 = -advantages * clip_c
  negative = advantages < 0
  loss = jnp.where(negative, jnp.minimum(clip1, pg3), clip1)
  clipped = (pg2 > pg1).astype(m.dtype)
  dual_clipped = ((clip1 > pg3) & negative).astype(m.dtype)
  on = (m > 0).astype(m.dtype)  # zero off the mask only: `agg_loss` applies a weighted mask's weights, once
  return PolicyLossTerms(loss=loss * on, clipped=clipped * on, dual_clipped=dual_clipped * on,
                         approx_kl=-log_ratio * on)


def kl_penalty(logprobs: jnp.ndarray, ref_logprobs: jnp.ndarray, kind: str) -> jnp.ndarray:
  """Per-token estimate of KL(π_θ ‖ π_ref) from sampled-token log-probs (Schulman 2020; verl `kl_penalty`):

    kl / k1:          log π_θ − log π_ref
    abs:              |log π_θ − log π_ref|
    mse / k2:         ½ (log π_θ − log π_ref)²
    low_var_kl / k3:  δ = clamp(log π_ref − log π_θ, −20, 20);  clamp(e^δ − δ − 1, −10, 10)

  Not masked: multiply by (or aggregate with) the loss mask.
  """
  chex.assert_equal_shape([logprobs, ref_logprobs])
  if kind in ("kl", "k1"):
    return logprobs - ref_logprobs
  if kind == "abs":
    return jnp.abs(logprobs - ref_logprobs)
  if kind in ("mse", "k2"):
    return 0.5 * jnp.square(logprobs - ref_logprobs)
  if kind in ("low_var_kl", "k3"):
    delta = clamp(ref_logprobs - logprobs, -_LOG_RATIO_CLAMP, _LOG_RATIO_CLAMP)
    return clamp(jnp.exp(delta) - delta - 1.0, -_K3_CLAMP, _K3_CLAMP)
  raise ValueError(f"unknown kl kind {kind!r}; choices: {KL_KINDS}")


def sft_nll(logprobs: jnp.ndarray, mask: jnp.ndarray) -> jnp.ndarray:
  """Per-token negative log-likelihood −log π_θ(y_t)·[m_t > 0] (supervised warm start on demonstrations).

  Zero off the mask but not weighted: a weighted mask (e.g. up-weighted replies) applies its weights in `agg_loss`.
  """
  chex.assert_rank([logprobs, mask], 2)
  chex.assert_equal_shape([logprobs, mask])
  return jnp.where(mask > 0, -logprobs, 0.0)


# ---------------------------------------------------------------- shared by the objectives


def token_share(x: jnp.ndarray, mask: jnp.ndarray, norm: Normalizer) -> jnp.ndarray:
  """Σ x·m / N_tokens of the mini-batch: this micro-batch's share of a token-mean statistic (metrics add up)."""
  return jnp.sum(x * mask) / norm.tokens


def require_score(array: Optional[jnp.ndarray], what: str, why: str) -> jnp.ndarray:
  """`array` (a `Scores` field), or one clear error naming the missing branch."""
  if array is None:
    raise ValueError(f"{why} needs scores.{what}, which is None (check the objective's score_config)")
  return array


def add_entropy_bonus(loss: jnp.ndarray, metrics: Dict[str, jnp.ndarray], entropy: Optional[jnp.ndarray],
                      entropy_coef: float, mask: jnp.ndarray, agg_mode: str, norm: Normalizer) -> jnp.ndarray:
  """loss − c_ent·agg(H), with agg(H) recorded as metrics["entropy"] whenever the policy entropy was scored."""
  if entropy is None:
    if entropy_coef != 0.0:
      require_score(None, "policy_entropy", "entropy_coef != 0")
    return loss
  metrics["entropy"] = agg_loss(entropy, mask, agg_mode, norm)
  return loss - entropy_coef * metrics["entropy"]


def topk_log_dists(student_topk_logprobs: jnp.ndarray, teacher_topk_logprobs: jnp.ndarray,
                   mask: jnp.ndarray) -> Tuple[jnp.ndarray, jnp.ndarray]:
  """(log p̃_S, log p̃_T): the student's and the (stop-gradient) teacher's log-probs at the same k ids [B, T, k],
  each renormalised on those ids by a `log_softmax`. Off-mask positions are replaced by 0 first, so whatever they
  hold (zeros, ±inf, NaN) gives uniform rows: finite values and finite gradients. The support of every top-k
  divergence (Agentic-OPD's on the student's top-k, SDAR's on the teacher's)."""
  chex.assert_rank([student_topk_logprobs, teacher_topk_logprobs], 3)
  chex.assert_rank(mask, 2)
  chex.assert_equal_shape([student_topk_logprobs, teacher_topk_logprobs])
  chex.assert_equal_shape_prefix([student_topk_logprobs, mask], 2)
  on = (mask > 0)[..., None]
  student = jnp.where(on, student_topk_logprobs.astype(jnp.float32), 0.0)
  teacher = jnp.where(on, jax.lax.stop_gradient(teacher_topk_logprobs).astype(jnp.float32), 0.0)
  return jax.nn.log_softmax(student, axis=-1), jax.nn.log_softmax(teacher, axis=-1)
