"""Rollout correction: importance weights and rejection masks between the sampler's policy and π_old (verl's
`algorithm.rollout_correction`, `verl/trainer/ppo/rollout_corr_helper.py`).

The sampler draws every token from π_rollout: its own numerics (bf16 weights and cache, a sharding or kernel the
update does not use) and its truncation (temperature, top-k, top-p applied), recorded per token as
`Sample.rollout_logprobs`. PPO's ratio is taken against π_old, `Sample.behaviour_logprobs`: the trainer's own forward
when `rollout.recompute_old_logprobs` is on, else the sampler's untruncated log-probs (verl's bypass mode, where the
two differ by the truncation only). Where π_old ≠ π_rollout the data are off-policy for π_old, and this module
measures and corrects it, per sample over its generated tokens (completion mask 1), with log ρ = log π_old −
log π_rollout:

  IS weights (`is_level`):   token:     w_t = exp(clamp(log ρ_t, ±20))
                             sequence:  w_t = exp(clamp(Σ_s log ρ_s, ±20))   (one weight per sample)
  then, with `is_threshold` "C" (TIS): w ← min(w, C); with "lo_hi" (IcePop): w ← w where lo ≤ w ≤ hi, else 0;
  optionally divided by their mean over the batch's tokens (token) or samples (sequence). They multiply the
  policy-gradient term of the loss per token, as constants (`TrainBatch.rollout_is_weights`).

  Rejection (`rs`, comma-separated, every option must pass): a token or a whole sample leaves the loss mask where a
  divergence estimate leaves its band. Per token k1 = −log ρ, k2 = ½ (log ρ)², k3 = ρ − 1 − log ρ (log ρ clamped to
  ±20), and binary_kl = max of the two Bernoulli KLs between π_old and π_rollout of the token. `token_k*` and
  `binary_kl` act per token; `seq_sum_k*`, `seq_mean_k*` (the geometric-mean ratio for k1) and `seq_max_k*` per
  sample. k1 options keep log lo ≤ k1 ≤ log hi (`rs_threshold` "lo_hi", or "hi" with lo = 1/hi); the others keep the
  statistic ≤ their single bound.

Metrics, under `rollout_corr/` with verl's names: the mismatch `kl` = mean(log π_rollout − log π_old) (may be
negative), `k3_kl`, `chi2_token` = E[ρ²] − 1, `chi2_seq` = E[(Π ρ)²] − 1, `training_ppl` and `rollout_ppl` (means of
per-sample perplexities), `log_ppl_diff`; with IS on, the weights' mean, std, min, max, `rollout_is_eff_sample_size`
= 1 / mean((w / mean w)²) and `rollout_is_ratio_fraction_high` (the fraction truncated at C); with rejection on,
`rollout_rs_masked_fraction` (tokens) and `rollout_rs_seq_masked_fraction` (samples). They are this process's
samples' statistics; only the batch normalisation is taken over every process (`gather`).
"""
from __future__ import annotations

import dataclasses
import math
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from agentopd_jax.batching.samples import Sample

SAFETY_BOUND = 20.0  # verl clamps every log-ratio to ±20 before exp
IS_LEVELS = ("", "token", "sequence")
RS_OPTIONS = ("token_k1", "token_k2", "token_k3", "seq_sum_k1", "seq_sum_k2", "seq_sum_k3", "seq_mean_k1",
              "seq_mean_k2", "seq_mean_k3", "seq_max_k2", "seq_max_k3", "binary_kl")
_TOKEN_RS = ("token_k1", "token_k2", "token_k3", "binary_kl")
_BINARY_KL_EPS = 1e-6


@dataclasses.dataclass(frozen=True)
class RolloutCorrectionConfig:
  """The `rollout_correction` section: off by default (strictly the loss of plain PPO against π_old)."""
  is_level: str = ""             # "" (no weights), "token" or "sequence"
  is_threshold: str = "2.0"      # "C": truncate the weights at C (TIS); "lo_hi": zero those outside [lo, hi] (IcePop)
  is_batch_normalize: bool = False  # divide the weights by their batch mean (token level: over tokens; sequence: samples)
  rs: str = ""                   # rejection options, comma-separated (RS_OPTIONS); "" = none
  rs_threshold: str = ""         # one bound for every option or one per option, comma-separated; k1 options "lo_hi"

  def __post_init__(self):
    if self.is_level not in IS_LEVELS:
      raise ValueError(f"rollout_correction.is_level must be one of {IS_LEVELS}, got {self.is_level!r}")
    parse_is_threshold(self.is_threshold)
    options = rs_options(self.rs)
    if options:
      parse_rs_thresholds(options, self.rs_threshold)
    elif self.rs_threshold:
      raise ValueError(f"rollout_correction.rs_threshold is set ({self.rs_threshold!r}) but rs is empty")

  @property
  def enabled(self) -> bool:
    return bool(self.is_level or self.rs)


def parse_is_threshold(spec: str) -> Tuple[float, Optional[float]]:
  """"C" -> (C, None); "lo_hi" -> (hi, lo). One clear error naming the field otherwise."""
  try:
    parts = [float(x) for x in str(spec).strip().split("_")]
  except ValueError:
    parts = []
  if len(parts) == 1 and parts[0] > 0:
    return parts[0], None
  if len(parts) == 2 and 0 < parts[0] <= parts[1]:
    return parts[1], parts[0]
  raise ValueError(f"rollout_correction.is_threshold must be a positive bound \"C\" or \"lo_hi\" with 0 < lo <= hi, "
                   f"got {spec!r}")


def rs_options(spec: str) -> List[str]:
  """The rejection options of `rs`, in order, each once."""
  options: List[str] = []
  for name in (x.strip() for x in str(spec).split(",")):
    if not name:
      continue
    if name not in RS_OPTIONS:
      raise ValueError(f"rollout_correction.rs: unknown option {name!r}; choices: {RS_OPTIONS}")
    if name not in options:
      options.append(name)
  return options


def parse_rs_thresholds(options: Sequence[str], spec: str) -> Dict[str, Tuple[Optional[float], float]]:
  """{option: (lower, upper)}: one entry of `spec` for every option or one per option. k1 options take "lo_hi" or
  "hi" (lo = 1/hi), ratios compared in log space; the others one upper bound on their statistic (lower None)."""
  specs = [x.strip() for x in str(spec).split(",") if x.strip()]
  if len(specs) not in (1, len(options)):
    raise ValueError(f"rollout_correction.rs_threshold needs one bound for all of {list(options)} or one per "
                     f"option, got {spec!r}")
  specs = specs * len(options) if len(specs) == 1 else specs
  out = {}
  for name, entry in zip(options, specs):
    try:
      parts = [float(x) for x in entry.split("_")]
    except ValueError:
      parts = []
    if name.endswith("k1"):
      if len(parts) == 1 and parts[0] > 0:
        parts = [1.0 / parts[0], parts[0]]
      if len(parts) != 2 or not 0 < parts[0] <= parts[1]:
        raise ValueError(f"rollout_correction.rs_threshold for {name} must be \"lo_hi\" (0 < lo <= hi) or \"hi\", "
                         f"got {entry!r}")
      out[name] = (parts[0], parts[1])
    else:
      if len(parts) != 1 or not parts[0] > 0:
        raise ValueError(f"rollout_correction.rs_threshold for {name} must be one positive bound, got {entry!r}")
      out[name] = (None, parts[0])
  return out


def _padded(samples: Sequence[Sample]) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
  """(log π_old, log π_rollout, mask) as [N, L] float64 arrays over the samples' completion tokens."""
  width = max((len(s.completion_ids) for s in samples), default=1)
  old, roll, mask = (np.zeros((len(samples), width)) for _ in range(3))
  for i, s in enumerate(samples):
    n = len(s.completion_ids)
    if s.rollout_logprobs is None:
      raise ValueError(f"rollout correction: sample {i} ({s.problem_id!r}, step {s.step_index}) has no "
                       f"rollout_logprobs (the sampler's); demonstrations cannot be corrected")
    old[i, :n], roll[i, :n] = s.behaviour_logprobs, s.rollout_logprobs
    mask[i, :n] = np.asarray(s.completion_mask) > 0
  return old, roll, mask


def _masked_mean(x: np.ndarray, mask: np.ndarray, axis=None) -> np.ndarray:
  return np.sum(x * mask, axis=axis) / np.maximum(np.sum(mask, axis=axis), 1.0)


def is_weights(log_ratio: np.ndarray, mask: np.ndarray, level: str, threshold: str
               ) -> Tuple[np.ndarray, np.ndarray]:
  """(applied weights, raw weights) [N, L], zero off the mask (the module docstring's formulas, before any batch
  normalisation)."""
  if level == "token":
    raw = np.exp(np.clip(log_ratio, -SAFETY_BOUND, SAFETY_BOUND))
  elif level == "sequence":
    total = np.sum(log_ratio * mask, axis=-1, keepdims=True)
    raw = np.broadcast_to(np.exp(np.clip(total, -SAFETY_BOUND, SAFETY_BOUND)), log_ratio.shape)
  else:
    raise ValueError(f"is_weights: level must be 'token' or 'sequence', got {level!r}")
  raw = raw * mask
  upper, lower = parse_is_threshold(threshold)
  if lower is None:
    return np.minimum(raw, upper), raw
  return np.where((raw >= lower) & (raw <= upper), raw, 0.0), raw


def _token_stats(log_ratio: np.ndarray, old: np.ndarray, roll: np.ndarray) -> Dict[str, np.ndarray]:
  safe = np.clip(log_ratio, -SAFETY_BOUND, SAFETY_BOUND)
  p = np.clip(np.exp(old), _BINARY_KL_EPS, 1 - _BINARY_KL_EPS)
  q = np.clip(np.exp(roll), _BINARY_KL_EPS, 1 - _BINARY_KL_EPS)
  forward = p * np.log(p / q) + (1 - p) * np.log((1 - p) / (1 - q))
  reverse = q * np.log(q / p) + (1 - q) * np.log((1 - q) / (1 - p))
  return {"k1": -safe, "k2": 0.5 * safe ** 2, "k3": np.exp(safe) - 1.0 - safe,
          "binary_kl": np.maximum(forward, reverse)}


def rejection_mask(log_ratio: np.ndarray, old: np.ndarray, roll: np.ndarray, mask: np.ndarray, rs: str,
                   threshold: str) -> Tuple[np.ndarray, Dict[str, float]]:
  """(keep [N, L] in {0, 1}, metrics): the tokens every option of `rs` keeps (the module docstring's rules)."""
  options = rs_options(rs)
  bounds = parse_rs_thresholds(options, threshold)
  stats = _token_stats(log_ratio, old, roll)
  keep = np.ones_like(mask)
  metrics = {}
  for name in options:
    lower, upper = bounds[name]
    if name in _TOKEN_RS:
      stat = stats[name if name == "binary_kl" else name[-2:]]
    else:
      token = stats[name[-2:]]
      if name.startswith("seq_sum"):
        per = np.sum(token * mask, axis=-1)
      elif name.startswith("seq_mean"):
        per = _masked_mean(token, mask, axis=-1)
      else:
        per = np.max(np.where(mask > 0, token, -np.inf), axis=-1)
        per = np.where(np.isfinite(per), per, 0.0)
      stat = np.broadcast_to(per[:, None], mask.shape)
    if lower is not None:
      passed = (stat >= math.log(lower)) & (stat <= math.log(upper))
    else:
      passed = stat <= upper
    keep = keep * passed
    metrics[f"rollout_rs_{name}_mean"] = float(_masked_mean(stat, mask))
    metrics[f"rollout_rs_{name}_max"] = float(np.max(np.where(mask > 0, stat, -np.inf)))
    metrics[f"rollout_rs_{name}_masked_fraction"] = float(_masked_mean(1.0 - passed, mask))
  metrics["rollout_rs_masked_fraction"] = float(_masked_mean(1.0 - keep, mask))
  valid = np.sum(mask, axis=-1) > 0
  metrics["rollout_rs_seq_masked_fraction"] = float(np.mean(np.any((keep == 0) & (mask > 0), axis=-1)[valid]))
  return keep, metrics


def offpolicy_metrics(old: np.ndarray, roll: np.ndarray, mask: np.ndarray) -> Dict[str, float]:
  """The mismatch between π_old and π_rollout over the masked tokens (the module docstring's list)."""
  valid = np.sum(mask, axis=-1) > 0
  log_ratio = old - roll
  mean_old = _masked_mean(old, mask, axis=-1)[valid]
  mean_roll = _masked_mean(roll, mask, axis=-1)[valid]
  rho = np.exp(np.clip(log_ratio, -SAFETY_BOUND, SAFETY_BOUND))
  seq = np.clip(np.sum(log_ratio * mask, axis=-1)[valid], -SAFETY_BOUND, SAFETY_BOUND)
  diff = mean_roll - mean_old
  return {"kl": float(_masked_mean(roll - old, mask)),
          "k3_kl": float(_masked_mean(np.exp(log_ratio) - log_ratio - 1.0, mask)),
          "training_ppl": float(np.mean(np.exp(-mean_old))), "training_log_ppl": float(np.mean(-mean_old)),
          "rollout_ppl": float(np.mean(np.exp(-mean_roll))), "rollout_log_ppl": float(np.mean(-mean_roll)),
          "log_ppl_diff": float(np.mean(diff)), "log_ppl_abs_diff": float(np.mean(np.abs(diff))),
          "ppl_ratio": float(np.mean(np.exp(diff))),
          "chi2_token": float(_masked_mean(rho ** 2, mask) - 1.0), "chi2_seq": float(np.mean(np.exp(2.0 * seq)) - 1.0)}


def _is_metrics(weights: np.ndarray, raw: np.ndarray, mask: np.ndarray, threshold: str) -> Dict[str, float]:
  upper, lower = parse_is_threshold(threshold)
  lower = 1.0 / upper if lower is None else lower
  on = mask > 0
  clamped = np.minimum(np.maximum(weights, 0.0), upper)
  mean = _masked_mean(clamped, mask)
  return {"rollout_is_mean": float(_masked_mean(weights, mask)),
          "rollout_is_std": float(np.sqrt(max(_masked_mean(clamped ** 2, mask) - mean ** 2, 0.0))),
          "rollout_is_min": float(np.min(weights[on])), "rollout_is_max": float(np.max(weights[on])),
          "rollout_is_eff_sample_size": float(1.0 / _masked_mean((clamped / (mean + 1e-8)) ** 2, mask)),
          "rollout_is_ratio_fraction_high": float(_masked_mean(raw > upper, mask)),
          "rollout_is_ratio_fraction_low": float(_masked_mean(raw < lower, mask))}


def correct(samples: Sequence[Sample], cfg: RolloutCorrectionConfig,
            gather: Callable[[List[float]], Sequence[float]] = list
            ) -> Tuple[List[Sample], Optional[List[np.ndarray]], Dict[str, float]]:
  """(the samples with rejected tokens out of their completion masks, per-sample IS weights over their completion
  tokens or None when `is_level` is "", the `rollout_corr/` metrics). `gather` sums a list of numbers over processes
  (the batch normalisation's totals; identity on one process): every process calls this, with or without samples."""
  samples = list(samples)
  old, roll, mask = _padded(samples)
  weights, metrics = None, {}
  if mask.any():
    metrics = offpolicy_metrics(old, roll, mask)
  log_ratio = old - roll
  if cfg.is_level:
    weights, raw = is_weights(log_ratio, mask, cfg.is_level, cfg.is_threshold)
    if mask.any():
      metrics.update(_is_metrics(weights, raw, mask, cfg.is_threshold))
    if cfg.is_batch_normalize:
      if cfg.is_level == "token":
        total, count = np.sum(weights * mask), np.sum(mask)
      else:
        valid = np.sum(mask, axis=-1) > 0
        total, count = np.sum(_masked_mean(weights, mask, axis=-1)[valid]), np.sum(valid)
      total, count = (float(x) for x in gather([float(total), float(count)]))
      factor = total / max(count, 1.0)
      if factor > 1e-8:
        weights = weights / factor
      metrics["rollout_is_batch_norm_factor"] = factor if factor > 1e-8 else 1.0
  if cfg.rs and mask.any():
    keep, rs_metrics = rejection_mask(log_ratio, old, roll, mask, cfg.rs, cfg.rs_threshold)
    metrics.update(rs_metrics)
    samples = [dataclasses.replace(s, completion_mask=[int(m and k) for m, k in
                                                       zip(s.completion_mask, keep[i, :len(s.completion_ids)])])
               for i, s in enumerate(samples)]
  per_sample = None if weights is None else [weights[i, :len(s.completion_ids)].astype(np.float32)
                                             for i, s in enumerate(samples)]
  return samples, per_sample, {f"rollout_corr/{k}": v for k, v in metrics.items()}
