"""Teacher log-probs of a batch's responses, scored once before the update and then kept as constants.

SDAR's gate and gap, OPID's Δ and RLSD's reweighting read a teacher's log-probs of the tokens the student sampled,
under the *rollout-time* parameters (π_old) or a frozen checkpoint, on the student's prompt or on a privileged one.
The trainer scores them here, once per iteration: each teacher sequence is forwarded exactly once, packed into rows
like the update's, through the fused scoring step's policy branch (no gradient is taken). The train step then reads
them from the batch, so no micro-batch re-scores the teacher and no gradient reaches a gate or a gap.
"""
from __future__ import annotations

import dataclasses

from typing import Dict, List, Optional, Sequence, Tuple

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from agentopd_jax.batching.collate import TeacherSignal, collate, pack_rows, round_up
from agentopd_jax.batching.samples import Sample
from agentopd_jax.models.config import ModelConfig
from agentopd_jax.scoring.fused import ScoreConfig, make_score_fn

PAD_MULTIPLE = 128  # row-width bucket, as the update's (bounds recompilation)


def score_teacher(model: ModelConfig, params, samples: Sequence[Sample], *, top_k: int = 0, temperature: float = 1.0,
                  pack_width: int = 0, rows_per_call: int = 16, mesh: Optional[Mesh] = None) -> List[TeacherSignal]:
  """Per sample, the log-prob under `params` of each completion token given its prompt and earlier tokens (zero on
  observation tokens), and with `top_k` > 0 the k most likely ids there and their log-probs.

  `samples` are the teacher's sequences: the student's completion after the teacher's prompt. Rows of `pack_width`
  tokens (0: one sample per row) go `rows_per_call` at a time (rounded up to the mesh's data-parallel size) through
  one jitted scoring call, so an iteration compiles one or two shapes.
  """
  if not samples:
    return []
  score = make_score_fn(model, ScoreConfig(policy=True, reference=False, teacher="none", top_k=top_k,
                                           temperature=temperature, entropy=False))
  width = max(pack_width, round_up(max(s.length for s in samples), PAD_MULTIPLE))
  layout = pack_rows([s.length for s in samples], width) if pack_width else [[i] for i in range(len(samples))]
  data_parallel = mesh.shape["data"] * mesh.shape["fsdp"] if mesh is not None else 1
  rows = round_up(min(rows_per_call, len(layout)), data_parallel)
  out: List[Optional[TeacherSignal]] = [None] * len(samples)
  for start in range(0, len(layout), rows):
    chunk = layout[start:start + rows]
    batch = collate(samples, [0.0] * len(samples), PAD_MULTIPLE, rows=rows, pack_width=width, layout=chunk)
    inputs = batch.score_batch()
    if mesh is not None:
      inputs = jax.device_put(inputs, jax.tree.map(lambda x: NamedSharding(mesh, P(("data", "fsdp"))), inputs))
    scores = score(params, None, None, inputs)
    logprobs = np.asarray(scores.policy_logprobs)
    ids = np.asarray(scores.policy_topk_ids) if top_k else None
    topk = np.asarray(scores.policy_topk_logprobs) if top_k else None
    for b, row in enumerate(chunk):
      offset = 0
      for i in row:
        s = samples[i]
        span = slice(offset + len(s.prompt_ids), offset + s.length)
        out[i] = TeacherSignal(logprobs=logprobs[b, span].copy(),
                               topk_ids=None if ids is None else ids[b, span].copy(),
                               topk_logprobs=None if topk is None else topk[b, span].copy())
        offset += s.length
  return out


def recompute_behaviour(model: ModelConfig, params, samples: Sequence[Sample], *, temperature: float = 1.0,
                        pack_width: int = 0, rows_per_call: int = 16, mesh: Optional[Mesh] = None
                        ) -> Tuple[List[Sample], Dict[str, float]]:
  """The samples with their behaviour log-probs (π_old) replaced by the trainer's own forward under `params` (the
  rollout-time policy), as verl recomputes them; and the sampler-vs-trainer drift over completion tokens, |Δ| mean
  and max. Why: a sampler at another precision, sharding or attention kernel than the update scores slightly
  different log-probs, and PPO's ratio should start at exactly 1."""
  scored = score_teacher(model, params, samples, temperature=temperature, pack_width=pack_width,
                         rows_per_call=rows_per_call, mesh=mesh)
  gaps = [np.abs(np.asarray(s.behaviour_logprobs, np.float32) - t.logprobs)[np.asarray(s.completion_mask) > 0]
          for s, t in zip(samples, scored)]
  gaps = np.concatenate(gaps) if gaps else np.zeros(0, np.float32)
  out = [dataclasses.replace(s, behaviour_logprobs=t.logprobs.tolist()) for s, t in zip(samples, scored)]
  return out, {"rollout/old_logprob_drift_mean": float(gaps.mean()) if gaps.size else 0.0,
               "rollout/old_logprob_drift_max": float(gaps.max()) if gaps.size else 0.0}
