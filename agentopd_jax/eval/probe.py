"""Teacher-forced accuracy of a policy on expert demonstrations, per kind of decision.

Success rates stay at zero until every decision of an episode is right, so they cannot tell a warm start that has
learnt nothing from one that has learnt all but one decision. This probe replays expert episodes through the
policy's own prompts and asks, per kind of the expert's action (`decision`: an ALFWorld verb such as go, take,
move; WebShop's search, click[product], click[option], click[buy now]; search-QA's search and answer): is the
first token after the tag the policy's argmax, is the whole reply, what probability does that first token get, and
what probability does the whole reply get (the chance that sampling at T = 1 reproduces it). docs/results.md uses it
to find which decision (taking the task's object, copying its id) a tiny model had not learnt.
"""
from __future__ import annotations

import collections
import re
from typing import Dict, List, Sequence

import numpy as np

from agentopd_jax.batching.collate import collate
from agentopd_jax.batching.samples import Sample
from agentopd_jax.scoring.fused import ScoreConfig, make_score_fn

TAGS = ("<action>", "<search>", "<answer>")  # what opens a reply's action (ALFWorld / WebShop; search-QA)
WEBSHOP_BUTTONS = ("back to search", "next >", "< prev", "description", "features", "reviews", "buy now")
_WEBSHOP_ACTION = re.compile(r"(\w+)\[(.*)\]", re.DOTALL)
_ASIN = re.compile(r"b0[0-9a-z]{8}")


def _verb_offset(tokenizer, completion_ids: Sequence[int]) -> int:
  """Index of the first completion token after the reply's first tag (the verb), or -1 if the reply has none."""
  for i in range(len(completion_ids)):
    if tokenizer.decode(list(completion_ids[:i])).endswith(TAGS):
      return i
  return -1


def decision(reply: str) -> str:
  """The kind of decision a reply makes: "search" / "answer" (search-QA's tags); for WebShop's `name[arg]` actions
  "search", "click[product]" (an ASIN), a button ("click[buy now]") or "click[option]"; else the first word of the
  action (an ALFWorld verb)."""
  for tag in TAGS[1:]:
    if tag in reply:
      return tag.strip("<>")
  action = reply.split(TAGS[0])[-1].split("</action>")[0].strip()
  webshop = _WEBSHOP_ACTION.fullmatch(action)
  if webshop:
    name, arg = webshop.groups()
    if name != "click":
      return name
    return f"click[{arg}]" if arg in WEBSHOP_BUTTONS else "click[product]" if _ASIN.fullmatch(arg) else "click[option]"
  return action.split()[0] if action.split() else ""


def demo_accuracy(model, params, samples: Sequence[Sample], tokenizer, batch_size: int = 16
                  ) -> Dict[str, Dict[str, float]]:
  """{decision: {n, verb_accuracy, reply_accuracy, verb_probability, reply_probability}} over step-layout
  demonstration samples (`decision` of each reply; "verb" is the first token after the tag).

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
      rows[decision(sample.response_text)].append([
          float(predicted[offset]), float(predicted.all()), float(np.exp(logprobs[r, targets[offset]])),
          float(np.exp(logprobs[r, targets].sum()))])
  return {kind: dict(n=len(v), verb_accuracy=float(np.mean([x[0] for x in v])),
                     reply_accuracy=float(np.mean([x[1] for x in v])),
                     verb_probability=float(np.mean([x[2] for x in v])),
                     reply_probability=float(np.mean([x[3] for x in v])))
          for kind, v in sorted(rows.items())}
