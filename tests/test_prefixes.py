"""Shared prompt prefixes (`batching.prefixes.shared_prefixes`): hand-built batches and properties over random ones
(each prefix a strict head of its members' prompts, worth its forward, independent of the batch's order)."""
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from agentopd_jax.batching.collate import round_up
from agentopd_jax.batching.prefixes import MIN_SHARED, PREFIX_MULTIPLE, shared_prefixes


def _heads(seed=0):
  """Two tasks x 4 prompts on heads of 90 and 130 tokens (one prompt leaves the first head after 80), 4 unrelated."""
  rng = random.Random(seed)
  toks = lambda n: [rng.randrange(1, 300) for _ in range(n)]
  heads = [toks(90), toks(130)]
  prompts = [heads[g] + toks(rng.randrange(1, 30)) for g in range(2) for _ in range(4)]
  prompts[3] = heads[0][:80] + [heads[0][80] % 299 + 1] + prompts[3][81:]
  return prompts + [toks(100) for _ in range(4)]


def test_heads_of_a_batch():
  prompts = _heads()
  which, prefixes = shared_prefixes(prompts)
  assert which[8:] == [-1] * 4                                   # unrelated prompts share nothing
  assert len({which[i] for i in range(4)}) == len({which[i] for i in range(4, 8)}) == 1
  assert prefixes[which[0]] == prompts[0][:80]                   # the diverging prompt still pays: 4 x 80 tokens
  assert prefixes[which[4]] == prompts[4][:len(prefixes[which[4]])] and len(prefixes[which[4]]) >= 130
  assert shared_prefixes(prompts[:1]) == ([-1], [])              # one prompt alone shares nothing
  twins = [prompts[4], list(prompts[4])]
  assert shared_prefixes(twins) == ([0, 0], [prompts[4][:-1]])   # never a whole prompt
  short = [p[:MIN_SHARED] for p in prompts[:4]]                  # a head under MIN_SHARED tokens is not shared
  assert shared_prefixes(short)[1] == [] and MIN_SHARED > 20


def _batches():
  """Prompts over a few random heads with random tails; tiny vocabularies make accidental common heads likely."""
  head = st.lists(st.integers(1, 3), min_size=0, max_size=300)
  return st.lists(st.tuples(st.integers(0, 3), st.lists(st.integers(1, 3), min_size=0, max_size=40)),
                  min_size=1, max_size=30).flatmap(
      lambda picks: st.lists(head, min_size=4, max_size=4).map(
          lambda heads: [heads[h] + tail for h, tail in picks]))


@settings(max_examples=60, deadline=None)
@given(_batches(), st.randoms(use_true_random=False))
def test_prefixes_are_strict_worthwhile_heads_whatever_the_order(prompts, rnd):
  which, prefixes = shared_prefixes(prompts)
  members = {p: [i for i, w in enumerate(which) if w == p] for p in range(len(prefixes))}
  for p, ids in enumerate(prefixes):
    assert len(members[p]) >= 2 and len(ids) >= MIN_SHARED
    assert len(members[p]) * len(ids) - round_up(len(ids), PREFIX_MULTIPLE) > 0  # it saves tokens
    for i in members[p]:
      assert prompts[i][:len(ids)] == ids and len(prompts[i]) > len(ids)
  for i, j in [(i, j) for i in range(len(prompts)) for j in range(i) if prompts[i] == prompts[j]]:
    assert which[i] == which[j]  # equal prompts always share
  order = list(range(len(prompts)))
  rnd.shuffle(order)
  which2, prefixes2 = shared_prefixes([prompts[i] for i in order])
  as_sets = lambda w, ps, idx: {(frozenset(idx[i] for i, x in enumerate(w) if x == p), tuple(ps[p]))
                                for p in range(len(ps))}
  assert as_sets(which2, prefixes2, order) == as_sets(which, prefixes, list(range(len(prompts))))
