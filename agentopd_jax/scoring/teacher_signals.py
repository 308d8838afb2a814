"""Teacher log-probs of a batch's responses, scored once before the update and then kept as constants.

SDAR's gate and gap, OPID's Δ and RLSD's reweighting read a teacher's log-probs of the tokens the student sampled,
under the *rollout-time* parameters (π_old) or a frozen checkpoint, on the student's prompt or on a privileged one.
The trainer scores them here, once per iteration, without a gradient; the train step reads them from the batch, so
no micro-batch re-scores the teacher and no gradient reaches a gate or a gap.

Two things keep this pass cheap, since only the completion tokens are read:
- **Shared prefixes** (`batching.prefixes`). The sequences of a batch share long prompt heads: the G rollouts of a
  task, the skill text of a privileged prompt. Each head is forwarded once; each sequence's remaining tokens attend to
  its keys and values as a cache (`transformer.forward(cache_rows=...)`), packed into rows like the update's. A
  causal model's states of a token depend only on the tokens before it, so the log-probs are those of a forward of
  the whole sequence (to rounding: the attention sums in another order).
- **Work at completion tokens only.** The last layer (queries, attention, MLP) and the vocab-chunked log-softmax (and
  top-k) run only at the positions that predict completion tokens (`transformer.forward(read=...)`), not on every
  position of the prompts: earlier layers still run everywhere, as their keys and values feed the next layer.
"""
from __future__ import annotations

import dataclasses
import functools

from typing import Dict, List, Optional, Sequence, Tuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from agentopd_jax.batching.collate import TeacherSignal, pack_rows, round_up
from agentopd_jax.batching.prefixes import shared_prefixes
from agentopd_jax.batching.samples import Sample
from agentopd_jax.models import transformer
from agentopd_jax.models.config import ModelConfig
from agentopd_jax.scoring.chunked import token_stats

PAD_MULTIPLE = 128  # row and prefix width bucket, as the update's (bounds recompilation)
SCORED_MULTIPLE = 32  # bucket of the completion positions scored per row


@functools.lru_cache(maxsize=None)
def _scorer(config: ModelConfig, top_k: int, temperature: float, prefixed: bool):
  """jit: (params, prefix cache or None, rows) -> log-probs [B, C] (and top-k ids and log-probs [B, C, k]) of the
  targets at the gathered positions. With `prefixed`, row b continues prefix `rows["prefix"][b]` of the cache."""

  def run(params, heads, rows):
    at, _ = transformer.forward(config, params, rows["tokens"], rows["positions"], rows["segment_ids"], heads,
                                cache_rows=rows["prefix"] if prefixed else None, read=rows["at"])
    st = token_stats(at, transformer.unembed_weight(config, params), rows["targets"], top_k=top_k,
                     temperature=temperature, compute_dtype=config.compute_dtype)
    return st.logprobs, st.topk_ids, st.topk_logprobs

  return jax.jit(run)


@functools.lru_cache(maxsize=None)
def _prefill(config: ModelConfig):
  """jit: (params, prefix tokens [G, P], their segment ids) -> the prefixes' KV cache."""
  return jax.jit(functools.partial(transformer.prefix_cache, config))


def _rows(samples, layout, skip, width, rows, scored):
  """Host arrays of rows: each row packs the samples of `layout[r]`, each without its first `skip[i]` tokens (the
  shared prefix, whose length is also where its positions start); `at`/`targets` index the hidden state that
  predicts each completion token and that token, `scored` per row."""
  out = {name: np.zeros((rows, width), np.int32) for name in ("tokens", "positions", "segment_ids")}
  out.update(at=np.zeros((rows, scored), np.int32), targets=np.zeros((rows, scored), np.int32))
  spans = []
  for b, row in enumerate(layout):
    offset, slot, mine = 0, 0, []
    for seg, i in enumerate(row, 1):
      s = samples[i]
      ids = (list(s.prompt_ids) + list(s.completion_ids))[skip[i]:]
      n = len(ids)
      out["tokens"][b, offset:offset + n] = ids
      out["positions"][b, offset:offset + n] = skip[i] + np.arange(n)
      out["segment_ids"][b, offset:offset + n] = seg
      first = offset + len(s.prompt_ids) - skip[i]  # the first completion token's place in the row
      c = len(s.completion_ids)
      out["at"][b, slot:slot + c] = np.maximum(np.arange(first - 1, first - 1 + c), 0)  # no prompt: not scored
      out["targets"][b, slot:slot + c] = s.completion_ids
      mine.append((i, slot))
      offset, slot = offset + n, slot + c
    spans.append(mine)
  return out, spans


def score_teacher(model: ModelConfig, params, samples: Sequence[Sample], *, top_k: int = 0, temperature: float = 1.0,
                  pack_width: int = 0, rows_per_call: int = 16, mesh: Optional[Mesh] = None
                  ) -> List[TeacherSignal]:
  """Per sample, the log-prob under `params` of each completion token given its prompt and earlier tokens (zero on
  observation tokens), and with `top_k` > 0 the k most likely ids there and their log-probs.

  `samples` are the teacher's sequences: the student's completion after the teacher's prompt. The prompt heads they
  share (`batching.prefixes.shared_prefixes`) are forwarded once. The rest of each sample goes into rows of
  `pack_width` tokens (0: one sample per row), `rows_per_call` at a time (rounded up to the mesh's data-parallel
  size) through one jitted call, so an iteration compiles few shapes.
  """
  if not samples:
    return []
  which, prefixes = shared_prefixes([s.prompt_ids for s in samples])
  skip = [len(prefixes[w]) if w >= 0 else 0 for w in which]
  data_parallel = mesh.shape["data"] * mesh.shape["fsdp"] if mesh is not None else 1
  shard = (lambda x: jax.device_put(x, NamedSharding(mesh, P(("data", "fsdp"))))) if mesh is not None else jnp.asarray
  replicate = (lambda x: jax.device_put(x, NamedSharding(mesh, P()))) if mesh is not None else (lambda x: x)

  heads = None
  if prefixes:
    n, capacity = round_up(len(prefixes), 8), round_up(max(map(len, prefixes)), PAD_MULTIPLE)
    tokens, segments = np.zeros((n, capacity), np.int32), np.zeros((n, capacity), np.int32)
    for g, ids in enumerate(prefixes):
      tokens[g, :len(ids)], segments[g, :len(ids)] = ids, 1
    heads = replicate(_prefill(model)(params, jnp.asarray(tokens), jnp.asarray(segments)))

  out: List[Optional[TeacherSignal]] = [None] * len(samples)
  for prefixed in (True, False):
    chosen = [i for i in range(len(samples)) if (which[i] >= 0) == prefixed]
    if not chosen:
      continue
    width = max(pack_width, round_up(max(samples[i].length - skip[i] for i in chosen), PAD_MULTIPLE))
    if not pack_width:
      layout = [[i] for i in chosen]
    else:  # a row packs samples of one prefix only (or, without one, any)
      parts = [[i for i in chosen if which[i] == g] for g in range(len(prefixes))] if prefixed else [chosen]
      layout = [[part[j] for j in row] for part in parts
                for row in pack_rows([samples[i].length - skip[i] for i in part], width)]
    rows = round_up(min(rows_per_call, len(layout)), data_parallel)
    scored = round_up(max(sum(len(samples[i].completion_ids) for i in row) for row in layout), SCORED_MULTIPLE)
    score = _scorer(model, top_k, float(temperature), prefixed)
    for start in range(0, len(layout), rows):
      chunk = layout[start:start + rows]
      host, spans = _rows(samples, chunk, skip, width, rows, scored)
      if prefixed:
        host["prefix"] = np.asarray([which[row[0]] for row in chunk] + [0] * (rows - len(chunk)), np.int32)
      logprobs, ids, topk = score(params, heads if prefixed else None, {k: shard(v) for k, v in host.items()})
      logprobs = np.asarray(logprobs)
      ids, topk = (np.asarray(ids), np.asarray(topk)) if top_k else (None, None)
      for b, mine in enumerate(spans):
        for i, slot in mine:
          s = samples[i]
          span = slice(slot, slot + len(s.completion_ids))
          on = np.asarray(s.completion_mask) > 0
          on[:1] &= len(s.prompt_ids) > 0  # a first token with nothing before it has no prediction
          out[i] = TeacherSignal(logprobs=np.where(on, logprobs[b, span], 0.0).astype(np.float32),
                                 topk_ids=None if ids is None else np.where(on[:, None], ids[b, span], 0),
                                 topk_logprobs=None if topk is None else np.where(on[:, None], topk[b, span], 0.0)
                                 .astype(np.float32))
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
