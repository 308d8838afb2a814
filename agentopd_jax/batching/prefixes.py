"""Shared prompt prefixes: which sequences of a batch start with the same tokens, to forward those tokens once.

An agent's step prompts repeat long heads: the G rollouts of a task start from one prompt, and every prompt of a
skill-reading policy (Skill-GRPO, SDAR's privileged teacher) opens with the same skill text. A causal model's states
of a token depend only on the tokens before it, so a head that several sequences share can be forwarded once and
the rest of each sequence continue it as a KV cache (`transformer.forward(cache_rows=...)`): the scores are those
of whole sequences, up to the order of the attention sums. Teacher scoring (`scoring.teacher_signals`), the update
(`training.train_step.make_minibatches(share_prefixes=True)`) and the sampler (`Sampler.generate(prefix_keys=...)`)
use it.
"""
from __future__ import annotations

from typing import List, Sequence, Tuple

from agentopd_jax.batching.collate import round_up

MIN_SHARED = 64  # a common head shorter than this is not worth a prefix pass: its sequences stay whole
PREFIX_MULTIPLE = 128  # prefix rows are padded to a multiple of this (the cost of a prefix in `shared_prefixes`)


def _common(a: Sequence[int], b: Sequence[int]) -> int:
  n = min(len(a), len(b))
  return next((j for j in range(n) if a[j] != b[j]), n)


def shared_prefixes(prompts: Sequence[Sequence[int]], min_shared: int = MIN_SHARED
                    ) -> Tuple[List[int], List[List[int]]]:
  """(per prompt: the index of its shared prefix or -1, the prefixes' token ids).

  The prompts are sorted, so that prompts with a common head are neighbours, and cut into runs greedily: a run
  grows while the tokens it saves, n·L − round_up(L, PREFIX_MULTIPLE) for n members sharing L tokens (the padded
  prefix row costs one forward), do not shrink. A run of at least two prompts sharing at least `min_shared`
  tokens becomes a prefix. A prefix is never a whole prompt: a prompt's last token predicts the first completion
  token, so it stays with the sequence. The result depends on the prompts only, not on their order."""
  order = sorted(range(len(prompts)), key=lambda i: (list(prompts[i]), i))
  which: List[int] = [-1] * len(prompts)
  prefixes: List[List[int]] = []

  def saved(n: int, shared: int) -> int:
    return n * shared - round_up(shared, PREFIX_MULTIPLE)

  def close(members: List[int], shared: int) -> None:
    if len(members) > 1 and shared >= min_shared and saved(len(members), shared) > 0:
      for i in members:
        which[i] = len(prefixes)
      prefixes.append(list(prompts[members[0]][:shared]))

  members: List[int] = []
  shared = 0
  for i in order:
    cap = len(prompts[i]) - 1
    if members:
      joined = min(shared, cap, _common(prompts[members[-1]], prompts[i]))
      if joined >= min_shared and saved(len(members) + 1, joined) >= saved(len(members), shared):
        members.append(i)
        shared = joined
        continue
      close(members, shared)
    members, shared = [i], cap
  if members:
    close(members, shared)
  return which, prefixes
