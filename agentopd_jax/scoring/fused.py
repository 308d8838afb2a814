"""One jitted scoring step: policy, reference and teacher per-token log-probs of the same tokens, at once.

Token convention: everything is indexed by the *target* position. `logprobs[b, t]` is log p(tokens[b, t] |
tokens[b, :t]) for t >= 1. A target is scored only where `loss_mask` is on and it has a prediction from its own
sequence: segment_ids[t-1] == segment_ids[t] != 0. So position 0, the first real token after left padding and the
first token of each packed sequence are never scored from a padding slot or from the previous sequence, whatever
the loss mask says. Outputs are zero on targets that are not scored.

Teacher mode "params": another parameter pytree (a checkpoint teacher) on the student's own tokens, scored in the
same step. Teachers that read a different context (SDAR's privileged skill prompt, OPID's analysed skill) are not
scored here per micro-batch: `scoring.teacher_signals` scores them once per batch with the rollout-time parameters,
and the batch carries their log-probs as constants. Their top-k support comes back through `ScoreBatch.gather_ids`:
the policy's log-probs at those ids (with gradients), for divergences over the teacher's top-k.

Shared prefixes (`batching.prefixes`): a row with `ScoreBatch.prefix_of[b] >= 0` continues segment
`prefix_segment[b]` of that head row, whose keys and values each branch passes in `prefixes`
(`transformer.prefix_cache`, computed once per mini-batch by the train step, which also carries the policy
prefix's gradient back through its forward). Its positions start after the prefix.

Loss targets only (`ScoreBatch.scored`, the targets of each row that have a loss): the last layer (queries,
attention, MLP) and the vocab-chunked statistics run at the states that predict them, not at every position
(`transformer.forward(read=...)`): in an agent's step samples the completion is a few percent of a row, so this
takes most of the last layer and of the log-softmax out of the update. The outputs are the same [B, T] arrays.

Policy outputs carry gradients (use inside a loss). Teacher and reference outputs are stop-gradient, and so are
the gaps: they are signals that weight or gate a loss (SDAR's gate σ(β·Δ), OPID's advantage Δ) and must not pull
the policy themselves. A loss that needs the gradient through the policy log-prob (the KL penalty) computes it
from `policy_logprobs`.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import Dict, Optional

import chex
import jax
import jax.numpy as jnp

from agentopd_jax.batching.collate import ScoreBatch
from agentopd_jax.models import transformer
from agentopd_jax.models.config import ModelConfig
from agentopd_jax.scoring.chunked import token_stats

TEACHER_MODES = ("none", "params")


@dataclasses.dataclass(frozen=True)
class ScoreConfig:
  """Which branches to run and how. Each combination compiles once; switching one off never touches the others."""
  policy: bool = True
  reference: bool = True
  teacher: str = "none"
  top_k: int = 16
  vocab_chunk: int = 8192
  temperature: float = 1.0
  entropy: bool = True

  def __post_init__(self):
    if self.teacher not in TEACHER_MODES:
      raise ValueError(f"ScoreConfig.teacher must be one of {TEACHER_MODES}, got {self.teacher!r}")
    if self.top_k and not self.policy:
      raise ValueError("ScoreConfig.top_k > 0 needs the policy branch (the top-k ids are the policy's)")


@chex.dataclass
class Scores:
  """All [B, T] (or [B, T, k]); zero on targets that are not scored (module docstring). Absent branches are None."""
  policy_logprobs: Optional[jnp.ndarray] = None
  policy_entropy: Optional[jnp.ndarray] = None
  policy_topk_ids: Optional[jnp.ndarray] = None
  policy_topk_logprobs: Optional[jnp.ndarray] = None
  policy_gathered_logprobs: Optional[jnp.ndarray] = None  # [B, T, K] at `ScoreBatch.gather_ids` (with gradients)
  reference_logprobs: Optional[jnp.ndarray] = None
  teacher_logprobs: Optional[jnp.ndarray] = None
  teacher_topk_logprobs: Optional[jnp.ndarray] = None   # teacher log-probs at the policy's top-k ids
  teacher_gap: Optional[jnp.ndarray] = None              # sg[teacher - policy log-prob of the sampled token]
  reference_gap: Optional[jnp.ndarray] = None            # sg[reference - policy log-prob of the sampled token]


def _shift_in(x: jnp.ndarray) -> jnp.ndarray:
  """[B, T-1, ...] predictions for targets 1..T-1 -> [B, T, ...] with a zero row for target 0."""
  return jnp.concatenate([jnp.zeros_like(x[:, :1]), x], axis=1)


def _predicted(segment_ids: jnp.ndarray) -> jnp.ndarray:
  """[B, T] bool: target t is predicted from its own sequence, segment_ids[t-1] == segment_ids[t] != 0.

  The state at t-1 of a padding slot or of another packed sequence says nothing about token t.
  """
  seg = segment_ids
  return _shift_in((seg[:, 1:] == seg[:, :-1]) & (seg[:, 1:] != 0))


def score(config: ModelConfig, score_config: ScoreConfig, policy_params, reference_params, teacher_params,
          batch: ScoreBatch, prefixes: Optional[Dict[str, transformer.KVCache]] = None) -> Scores:
  """Pure scoring function (differentiable w.r.t. `policy_params` and `prefixes["policy"]`); see `make_score_fn`
  for the jitted step. `prefixes`: {branch: its prefix cache} when `batch.prefix_of` is set."""
  sc = score_config
  if (batch.prefix_of is None) != (prefixes is None):
    raise ValueError("score: a batch with prefix_of needs the prefixes' caches, and only such a batch takes them")
  chex.assert_rank([batch.tokens, batch.segment_ids, batch.loss_mask], 2)
  chex.assert_equal_shape([batch.tokens, batch.segment_ids, batch.loss_mask])
  tokens = batch.tokens
  targets = tokens[:, 1:]
  # An indicator, not the mask's values: a weighted loss mask applies its weights once, in the loss aggregation.
  mask = ((batch.loss_mask > 0) & _predicted(batch.segment_ids)).astype(jnp.float32)
  stats_kw = dict(chunk=sc.vocab_chunk, temperature=sc.temperature, compute_dtype=config.compute_dtype)

  if batch.scored is None:
    read, targets_at = None, targets
    spread = _shift_in
  else:  # the states at t - 1 of the scored targets t, and back to [B, T] at t (padding adds zeros at target 1)
    read, valid = jnp.maximum(batch.scored - 1, 0), batch.scored > 0
    targets_at = jnp.take_along_axis(tokens, read + 1, axis=1)
    rows = jnp.arange(tokens.shape[0])[:, None]

    def spread(x):
      on = valid.reshape(valid.shape + (1,) * (x.ndim - 2))
      return jnp.zeros(tokens.shape + x.shape[2:], x.dtype).at[rows, read + 1].add(jnp.where(on, x, 0))

  def hidden_of(params, branch):
    """The final states that predict the targets: [B, T-1, D] (targets 1..T-1) or [B, K, D] at `read`."""
    if prefixes is None:
      h = transformer.forward(config, params, tokens, batch.positions, batch.segment_ids, read=read)[0]
    else:
      h = transformer.forward(config, params, tokens, batch.positions, batch.segment_ids, prefixes[branch],
                              cache_rows=batch.prefix_of, cache_segments=batch.prefix_segment,
                              read=read)[0]
    return h[:, :-1] if read is None else h

  def at_targets(x):  # [B, T, ...] per target -> what hidden_of's states predict
    return x[:, 1:] if read is None else jnp.take_along_axis(x, (read + 1).reshape(read.shape + (1,) * (x.ndim - 2)),
                                                             axis=1)

  def masked(x, m=mask):
    return x * (m[..., None] if x.ndim == 3 else m)

  out = Scores()
  policy_lp = None
  topk_ids = None
  if sc.policy:
    h = hidden_of(policy_params, "policy")
    gather = None if batch.gather_ids is None else at_targets(batch.gather_ids)
    st = token_stats(h, transformer.unembed_weight(config, policy_params), targets_at, top_k=sc.top_k,
                     entropy=sc.entropy, gather_ids=gather, **stats_kw)
    policy_lp = masked(spread(st.logprobs))
    out.policy_logprobs = policy_lp
    if sc.entropy:
      out.policy_entropy = masked(spread(st.entropy))
    if sc.top_k:
      topk_ids = jax.lax.stop_gradient(spread(st.topk_ids))
      out.policy_topk_ids = topk_ids * mask[..., None].astype(jnp.int32)
      out.policy_topk_logprobs = masked(spread(st.topk_logprobs))
    if gather is not None:
      out.policy_gathered_logprobs = masked(spread(st.gathered_logprobs))

  if sc.reference:
    if reference_params is None:
      raise ValueError("ScoreConfig.reference=True but no reference params were given")
    h = hidden_of(reference_params, "reference")
    st = token_stats(h, transformer.unembed_weight(config, reference_params), targets_at, **stats_kw)
    out.reference_logprobs = jax.lax.stop_gradient(masked(spread(st.logprobs)))
    if policy_lp is not None:
      out.reference_gap = jax.lax.stop_gradient(out.reference_logprobs - policy_lp)

  if sc.teacher == "params":
    if teacher_params is None:
      raise ValueError("ScoreConfig.teacher='params' but no teacher params were given")
    h = hidden_of(teacher_params, "teacher")
    st = token_stats(h, transformer.unembed_weight(config, teacher_params), targets_at,
                     gather_ids=None if topk_ids is None else at_targets(topk_ids), **stats_kw)
    out.teacher_logprobs = jax.lax.stop_gradient(masked(spread(st.logprobs)))
    if topk_ids is not None:
      out.teacher_topk_logprobs = jax.lax.stop_gradient(masked(spread(st.gathered_logprobs)))
    if policy_lp is not None:
      out.teacher_gap = jax.lax.stop_gradient(masked(out.teacher_logprobs - policy_lp))
  return out


@functools.lru_cache(maxsize=None)
def make_score_fn(config: ModelConfig, score_config: ScoreConfig):
  """jit(score) for one model/score config: `fn(policy_params, reference_params, teacher_params, batch)`.

  Pass None for the params of a branch that is switched off. Cached per config pair, so repeated calls share
  one compilation cache.
  """
  return jax.jit(functools.partial(score, config, score_config))
