"""Training batches: the padded, target-indexed arrays every objective and the train step consume.

Token convention (the same as `scoring.fused`): arrays are indexed by *target* position, so `loss_mask[b, t]`,
`old_logprobs[b, t]` and `advantages[b, t]` all describe token `tokens[b, t]` as predicted from `tokens[b, :t]`.
Position 0 is never a loss position. Padding rows/columns have segment id 0 and a zero mask.
"""
from __future__ import annotations

from typing import Optional, Sequence

import chex
import jax.numpy as jnp
import numpy as np

from agentopd_jax.rollout.types import Sample
from agentopd_jax.scoring.fused import ScoreBatch


@chex.dataclass
class TrainBatch:
  tokens: jnp.ndarray                            # [B, T] int32 prompt + completion ids, padded at the end
  segment_ids: jnp.ndarray                       # [B, T] int32: 1 on real tokens, 0 on padding
  positions: jnp.ndarray                         # [B, T] int32
  loss_mask: jnp.ndarray                         # [B, T] float32: 1 on tokens the policy generated
  advantages: jnp.ndarray                        # [B, T] float32, already broadcast over the loss mask
  old_logprobs: jnp.ndarray                      # [B, T] float32: log π_old(token) (behaviour policy), 0 off-mask
  # Privileged-context teacher inputs (teacher mode "context"; see scoring.fused). None when unused.
  teacher_tokens: Optional[jnp.ndarray] = None
  teacher_segment_ids: Optional[jnp.ndarray] = None
  teacher_positions: Optional[jnp.ndarray] = None
  teacher_index: Optional[jnp.ndarray] = None
  # Agentic-OPD LAD routing (objectives.distill.lad_token_mask): [B, T] float32 weight of each loss token in the
  # distillation term, 1 = routed. Not part of the scoring inputs. None = every loss token routed (no LAD).
  distill_mask: Optional[jnp.ndarray] = None

  def score_batch(self) -> ScoreBatch:
    return ScoreBatch(tokens=self.tokens, segment_ids=self.segment_ids, loss_mask=self.loss_mask,
                      positions=self.positions, teacher_tokens=self.teacher_tokens,
                      teacher_segment_ids=self.teacher_segment_ids, teacher_positions=self.teacher_positions,
                      teacher_index=self.teacher_index)


def _round_up(n: int, multiple: int) -> int:
  return -(-n // multiple) * multiple


def collate(samples: Sequence[Sample], advantages: Sequence[float], pad_to_multiple: int = 32,
            max_length: Optional[int] = None, pad_id: int = 0, rows: Optional[int] = None) -> TrainBatch:
  """Right-padded host arrays (numpy) of `samples`; advantage i is broadcast over sample i's generated tokens.

  `rows` pads the batch with empty (all-masked-out) rows up to a fixed size, e.g. a multiple of the mini-batch.
  A sample longer than `max_length` is an error, never silently cut: its log-probs would no longer match.
  """
  if len(samples) != len(advantages):
    raise ValueError(f"collate: {len(samples)} samples but {len(advantages)} advantages")
  longest = max(s.length for s in samples)
  if max_length is not None and longest > max_length:
    raise ValueError(f"collate: a sample has {longest} tokens, over max_length={max_length}")
  width = _round_up(longest, pad_to_multiple)
  n = len(samples) if rows is None else rows
  if n < len(samples):
    raise ValueError(f"collate: rows={rows} is fewer than the {len(samples)} samples")
  tokens = np.full((n, width), pad_id, np.int32)
  segments = np.zeros((n, width), np.int32)
  positions = np.zeros((n, width), np.int32)
  mask = np.zeros((n, width), np.float32)
  adv = np.zeros((n, width), np.float32)
  old = np.zeros((n, width), np.float32)
  for b, (s, a) in enumerate(zip(samples, advantages)):
    p, length = len(s.prompt_ids), s.length
    tokens[b, :length] = s.prompt_ids + s.completion_ids
    segments[b, :length] = 1
    positions[b, :length] = np.arange(length)
    mask[b, p:length] = s.completion_mask
    adv[b, p:length] = a * np.asarray(s.completion_mask, np.float32)
    old[b, p:length] = np.asarray(s.behaviour_logprobs, np.float32) * np.asarray(s.completion_mask, np.float32)
  return TrainBatch(tokens=tokens, segment_ids=segments, positions=positions, loss_mask=mask, advantages=adv,
                    old_logprobs=old)
