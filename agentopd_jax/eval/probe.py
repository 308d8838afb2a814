"""Teacher-forced accuracy of a policy on expert demonstrations, per expert command verb.

Success rates stay at zero until every decision of an episode is right, so they cannot tell a warm start that has
learnt nothing from one that has learnt all but one decision. This probe replays expert episodes through the
policy's own prompts and asks, per verb of the expert's action (go, take, move, use, open, ...): is the verb the
policy's argmax, is the whole reply, and what probability does the verb get. docs/results.md uses it to find which
decision (taking the task's object, copying its id) a tiny model had not learnt.
"""
from __future__ import annotations

import collections
from typing import Dict, List, Sequence

import numpy as np

from agentopd_jax.rollout.batch import collate
from agentopd_jax.rollout.types import Sample
from agentopd_jax.scoring.fused import ScoreConfig, make_score_fn

ACTION_TAG = "<action>"


def _verb_offset(tokenizer, completion_ids: Sequence[int]) -> int:
  """Index of the first completion token after the action tag (the verb), or -1 if the reply has no tag."""
  for i in range(len(completion_ids)):
    if tokenizer.decode(list(completion_ids[:i])).endswith(ACTION_TAG):
      return i
  return -1


def demo_accuracy(model, params, samples: Sequence[Sample], tokenizer, batch_size: int = 16
                  ) -> Dict[str, Dict[str, float]]:
  """{verb: {n, verb_accuracy, reply_accuracy, verb_probability}} over step-layout demonstration samples.

  One fused scoring call per batch gives each reply token's log-prob and the policy's argmax (top-1 id).
  """
  score = make_score_fn(model, ScoreConfig(reference=False, teacher="none", top_k=1, entropy=False))
  rows: Dict[str, List[List[float]]] = collections.defaultdict(list)
  for start in range(0, len(samples), batch_size):
    chunk = samples[start:start + batch_size]
    batch = collate(chunk, [0.0] * len(chunk), pad_to_multiple=128)
    out = score(params, None, None, batch.score_batch())
    logprobs, argmax = np.asarray(out.policy_logprobs), np.asarray(out.policy_topk_ids[..., 0])
    for r, sample in enumerate(chunk):
      offset = _verb_offset(tokenizer, sample.completion_ids)
      if offset < 0:
        continue
      targets = np.nonzero(batch.loss_mask[r])[0]  # target-indexed, like the scores
      predicted = argmax[r, targets] == batch.tokens[r, targets]
      verb = sample.response_text.split(ACTION_TAG)[-1].split()[0]
      rows[verb].append([float(predicted[offset]), float(predicted.all()), float(np.exp(logprobs[r, targets[offset]]))])
  return {verb: dict(n=len(v), verb_accuracy=float(np.mean([x[0] for x in v])),
                     reply_accuracy=float(np.mean([x[1] for x in v])),
                     verb_probability=float(np.mean([x[2] for x in v])))
          for verb, v in sorted(rows.items())}
