"""Padded batches: the target-indexed arrays every objective, the train step and the scoring step consume.

Token convention (the same as `scoring.fused`): arrays are indexed by *target* position, so `loss_mask[b, t]`,
`old_logprobs[b, t]` and `advantages[b, t]` all describe token `tokens[b, t]` as predicted from `tokens[b, :t]`.
A sample's first token (position 0) is never a loss position. Padding rows/columns have segment id 0 and a zero
mask. A row holds one sample, or several when packed (segment ids 1, 2, ..., positions restarting at 0).
"""
from __future__ import annotations

import dataclasses
from typing import List, Optional, Sequence

import chex
import jax.numpy as jnp
import numpy as np

from agentopd_jax.batching.samples import Sample


@chex.dataclass
class ScoreBatch:
  """The input of the fused scoring step (`scoring.fused`, whose module docstring says which targets it scores)."""
  tokens: jnp.ndarray                              # [B, T] int32
  segment_ids: jnp.ndarray                         # [B, T] int32, 0 = padding, >0 = sequence id (packing)
  loss_mask: jnp.ndarray                           # [B, T] which target tokens to score (see `scoring.fused`)
  positions: Optional[jnp.ndarray] = None          # [B, T]; default: restart at 0 per segment
  gather_ids: Optional[jnp.ndarray] = None         # [B, T, K] int32: ids whose policy log-probs to return (per target)
  prefix_of: Optional[jnp.ndarray] = None          # [B] int32: the head row each row continues (-1: none)
  prefix_segment: Optional[jnp.ndarray] = None     # [B] int32: its head's segment in that row
  scored: Optional[jnp.ndarray] = None             # [B, K] int32: every loss target of the row (0: none), see below


@chex.dataclass
class TrainBatch:
  tokens: jnp.ndarray                            # [B, T] int32 prompt + completion ids, padded at the end
  segment_ids: jnp.ndarray                       # [B, T] int32: k on the row's k-th sample, 0 on padding
  positions: jnp.ndarray                         # [B, T] int32
  loss_mask: jnp.ndarray                         # [B, T] float32: 1 on tokens the policy generated
  advantages: jnp.ndarray                        # [B, T] float32, already broadcast over the loss mask
  old_logprobs: jnp.ndarray                      # [B, T] float32: log π_old(token) (behaviour policy), 0 off-mask
  # Teacher signals scored once per batch before the update (`scoring.teacher_signals`: SDAR's privileged self, a
  # pool checkpoint, ...), constants of the loss. None when the objective reads none.
  teacher_logprobs: Optional[jnp.ndarray] = None      # [B, T] float32: log π_T(token | teacher context), 0 off-mask
  teacher_topk_ids: Optional[jnp.ndarray] = None      # [B, T, k] int32: the teacher's top-k ids at each target
  teacher_topk_logprobs: Optional[jnp.ndarray] = None  # [B, T, k] float32: their teacher log-probs
  # Agentic-OPD LAD routing (`collate(distill_weights=...)`, methods.agentic_opd.losses.lad_mask): [B, T] float32
  # weight of each loss token in the distillation term, 1 = routed. Not part of the scoring inputs. None = every loss
  # token routed (no LAD).
  distill_mask: Optional[jnp.ndarray] = None
  # Rollout correction's importance weights (`objectives.rollout_correction`, `collate(is_weights=...)`): [B, T]
  # float32 constants that multiply the policy-gradient term per token, 0 off-mask. None = no correction.
  rollout_is_weights: Optional[jnp.ndarray] = None
  # Shared prompt heads (`batching.prefixes`, `train_step.make_minibatches(share_prefixes=True)`): a row's samples
  # start after head segment `prefix_segment[b]` of head row `prefix_of[b]` (-1: none); the heads are forwarded once
  # per mini-batch, packed into P head rows, and attended to as a cache. They are the mini-batch's, not a
  # micro-batch's: [1, P, W].
  prefix_of: Optional[jnp.ndarray] = None             # [B] int32
  prefix_segment: Optional[jnp.ndarray] = None        # [B] int32
  prefix_tokens: Optional[jnp.ndarray] = None         # [1, P, W] int32
  prefix_segment_ids: Optional[jnp.ndarray] = None    # [1, P, W] int32: 1, 2, ... per head, 0 on padding
  # The loss targets of each row (`scored_targets`), so that the scoring step runs its last layer and the vocab's
  # log-softmax there only. None: at every position.
  scored: Optional[jnp.ndarray] = None                # [B, K] int32, 0 past a row's last

  def score_batch(self) -> ScoreBatch:
    return ScoreBatch(tokens=self.tokens, segment_ids=self.segment_ids, loss_mask=self.loss_mask,
                      positions=self.positions, gather_ids=self.teacher_topk_ids, prefix_of=self.prefix_of,
                      prefix_segment=self.prefix_segment, scored=self.scored)


@dataclasses.dataclass
class TeacherSignal:
  """One sample's teacher scores, per completion token (host numpy): log-prob of the sampled token, and optionally
  the teacher's top-k ids and log-probs ([n, k]). Zero on observation tokens (completion mask 0)."""
  logprobs: np.ndarray
  topk_ids: Optional[np.ndarray] = None
  topk_logprobs: Optional[np.ndarray] = None


def scored_targets(loss_mask: np.ndarray, width: int) -> np.ndarray:
  """[..., T] loss mask -> [..., width] int32: the targets t >= 1 with a loss, per row in order, 0 after them."""
  mask = np.asarray(loss_mask) > 0
  mask[..., 0] = False
  out = np.zeros(mask.shape[:-1] + (width,), np.int32)
  counts = mask.sum(-1)
  if counts.size and counts.max() > width:
    raise ValueError(f"scored_targets: a row has {counts.max()} loss targets, over the width {width}")
  index = np.nonzero(mask)
  slot = np.cumsum(mask, axis=-1)[index] - 1
  out[index[:-1] + (slot,)] = index[-1]
  return out


def round_up(n: int, multiple: int) -> int:
  return -(-n // multiple) * multiple


def bucket(n: int, minimum: int) -> int:
  """Rounds n up to a shape bucket: multiples of `minimum` up to 8x it, then four buckets per power of two.

  Bounds the number of compiled programs (prompt widths, cache sizes and row counts vary every call in RL) to a few
  per octave while wasting at most 25% of the work on padding.
  """
  step = minimum
  while n > 8 * step:
    step *= 2
  return max(minimum, -(-n // step) * step)


def pack_rows(lengths: Sequence[int], width: int) -> List[List[int]]:
  """First-fit decreasing bin packing: the sample indices of each row, every row's total length <= `width`.

  Rows come out in order of their first (longest) sample; each row lists its samples longest first, ties by index,
  so the layout is a pure function of the lengths.
  """
  if any(n > width for n in lengths):
    raise ValueError(f"pack_rows: a sample has {max(lengths)} tokens, over the row width {width}")
  rows: List[List[int]] = []
  free: List[int] = []
  for i in sorted(range(len(lengths)), key=lambda i: (-lengths[i], i)):
    row = next((r for r, room in enumerate(free) if room >= lengths[i]), None)
    if row is None:
      rows.append([])
      free.append(width)
      row = len(rows) - 1
    rows[row].append(i)
    free[row] -= lengths[i]
  return rows


def collate(samples: Sequence[Sample], advantages: Sequence[float], pad_to_multiple: int = 32,
            max_length: Optional[int] = None, pad_id: int = 0, rows: Optional[int] = None, pack_width: int = 0,
            distill_weights: Optional[Sequence[float]] = None,
            teacher: Optional[Sequence[TeacherSignal]] = None,
            layout: Optional[List[List[int]]] = None, skip: Optional[Sequence[int]] = None,
            is_weights: Optional[Sequence[Sequence[float]]] = None) -> TrainBatch:
  """Right-padded host arrays (numpy) of `samples`; advantage i, a float broadcast over sample i's generated tokens
  or one value per completion token (OPID's token-level advantage), fills them.

  `pack_width` = 0: one sample per row, rows as wide as the longest sample rounded up to `pad_to_multiple`.
  `pack_width` > 0: several samples per row (`pack_rows`), rows max(pack_width, that rounded length) wide. Each
  sample of a row gets its own segment id (1, 2, ...) and positions restarting at 0; attention never crosses
  segments, so every token's log-prob equals the unpacked batch's, and a token-mean loss is unchanged. Why: step
  samples are a few hundred tokens of very different lengths, and padding each to the longest wasted ~40 % of the
  CPU default's update. (A per-row `seq-mean` aggregation would count a packed row as one sequence: the trainers
  reject packing with it.)
  `rows` pads the batch with empty (all-masked-out) rows up to a fixed size, e.g. a multiple of the mini-batch.
  `distill_weights` (per sample) fills `distill_mask`: the weight on the sample's generated tokens (LAD routing).
  `teacher` (per sample) fills the teacher_* arrays at the sample's completion tokens, like `old_logprobs`.
  `is_weights` (per sample, per completion token) fills `rollout_is_weights` the same way.
  `layout` (the sample indices of each row, e.g. a slice of one `pack_rows` over more samples) replaces the packing.
  `skip` (per sample, fewer than its prompt tokens) leaves out the head of each sample, a shared prefix forwarded
  elsewhere: its tokens start at position skip[i] (the rows the update continues from a prefix cache).
  A sample longer than `max_length` is an error, never silently cut: its log-probs would no longer match.
  """
  if len(samples) != len(advantages) or (teacher is not None and len(teacher) != len(samples)) or (
      is_weights is not None and len(is_weights) != len(samples)):
    raise ValueError(f"collate: {len(samples)} samples but {len(advantages)} advantages"
                     + ("" if teacher is None else f", {len(teacher)} teacher signals")
                     + ("" if is_weights is None else f", {len(is_weights)} importance weights"))
  longest = max(s.length for s in samples)
  if max_length is not None and longest > max_length:
    raise ValueError(f"collate: a sample has {longest} tokens, over max_length={max_length}")
  skip = [0] * len(samples) if skip is None else list(skip)
  if any(not 0 <= k < max(len(s.prompt_ids), 1) for s, k in zip(samples, skip)):
    raise ValueError("collate: skip must leave every sample at least its last prompt token")
  lengths = [s.length - k for s, k in zip(samples, skip)]
  width = round_up(max(lengths), pad_to_multiple)
  width = max(width, pack_width)
  if layout is None:
    layout = pack_rows(lengths, width) if pack_width else [[i] for i in range(len(samples))]
  n = len(layout) if rows is None else rows
  if n < len(layout):
    raise ValueError(f"collate: rows={rows} is fewer than the {len(layout)} rows the samples need")
  tokens = np.full((n, width), pad_id, np.int32)
  segments = np.zeros((n, width), np.int32)
  positions = np.zeros((n, width), np.int32)
  mask = np.zeros((n, width), np.float32)
  adv = np.zeros((n, width), np.float32)
  old = np.zeros((n, width), np.float32)
  distill = None if distill_weights is None else np.zeros((n, width), np.float32)
  weights = None if is_weights is None else np.zeros((n, width), np.float32)
  k = 0 if teacher is None or teacher[0].topk_ids is None else teacher[0].topk_ids.shape[-1]
  t_lp = None if teacher is None else np.zeros((n, width), np.float32)
  t_ids = np.zeros((n, width, k), np.int32) if k else None
  t_topk = np.zeros((n, width, k), np.float32) if k else None
  for b, row in enumerate(layout):
    start = 0
    for segment, i in enumerate(row, start=1):
      s, a = samples[i], advantages[i]
      length = lengths[i]
      span = slice(start, start + length)
      generated = slice(start + len(s.prompt_ids) - skip[i], start + length)
      completion = np.asarray(s.completion_mask, np.float32)
      tokens[b, span] = (s.prompt_ids + s.completion_ids)[skip[i]:]
      segments[b, span] = segment
      positions[b, span] = skip[i] + np.arange(length)
      mask[b, generated] = completion
      adv[b, generated] = a * completion
      old[b, generated] = np.asarray(s.behaviour_logprobs, np.float32) * completion
      if distill is not None:
        distill[b, generated] = distill_weights[i] * (completion > 0)
      if weights is not None:
        weights[b, generated] = np.asarray(is_weights[i], np.float32) * (completion > 0)
      if t_lp is not None:
        t_lp[b, generated] = teacher[i].logprobs * completion
        if k:
          t_ids[b, generated] = teacher[i].topk_ids * (completion > 0)[:, None]
          t_topk[b, generated] = teacher[i].topk_logprobs * completion[:, None]
      start += length
  return TrainBatch(tokens=tokens, segment_ids=segments, positions=positions, loss_mask=mask, advantages=adv,
                    old_logprobs=old, distill_mask=distill, teacher_logprobs=t_lp, teacher_topk_ids=t_ids,
                    teacher_topk_logprobs=t_topk, rollout_is_weights=weights)
