"""Tests for the logits processors in agentopd_jax.sampling.sampler (greedy / temperature / top-k / top-p),
SamplingParams validation, and end-to-end stop handling of `Sampler` on a tiny random model.

Compile counts are kept low: `sample_from_logits` is jitted once per static mode and two batch shapes
([N_DRAWS, V] for statistics, [4, V] for the hypothesis property); the Sampler tests share one decode compile.
"""
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from agentopd_jax.envs.verl_agent.corpus import default_corpus
from agentopd_jax.models import transformer
from agentopd_jax.models.config import preset
from agentopd_jax.models.tokenizer import builtin_tokenizer
from agentopd_jax.sampling.sampler import Sampler, SamplingParams, sample_from_logits
from agentopd_jax.sampling.stops import token_bytes

V = 50
N_DRAWS = 4000

_sample = jax.jit(sample_from_logits, static_argnames=("greedy", "top_k", "use_top_p"))


def sample(logits, key, temperature=1.0, top_p=1.0, *, greedy=False, top_k=0, use_top_p=False):
  toks, lp, plp = _sample(jnp.asarray(logits, jnp.float32), key, jnp.float32(temperature), jnp.float32(top_p),
                          greedy=greedy, top_k=top_k, use_top_p=use_top_p)
  return np.asarray(toks), np.asarray(lp), np.asarray(plp)


def log_softmax64(x, axis=-1):
  x = np.asarray(x, np.float64)
  m = x.max(axis=axis, keepdims=True)
  return x - m - np.log(np.exp(x - m).sum(axis=axis, keepdims=True))


def pick(a, idx):
  return np.take_along_axis(a, np.asarray(idx)[:, None], -1)[:, 0]


@pytest.fixture(scope="module")
def distinct_logits():
  """N_DRAWS different rows of continuous random logits (no ties)."""
  return np.random.default_rng(0).normal(0.0, 2.5, (N_DRAWS, V)).astype(np.float32)


@pytest.fixture(scope="module")
def one_row():
  """One logits vector with a clear head and a long tail, for frequency tests (rows repeated N_DRAWS times)."""
  rng = np.random.default_rng(1)
  row = np.concatenate([[2.0, 1.6, 1.2, 0.9, 0.5, 0.2, 0.0, -0.3], rng.uniform(-4.0, -1.0, V - 8)])
  return rng.permutation(row).astype(np.float32)


def assert_frequencies(tokens, probs, n_sigma=4.5):
  """Empirical token frequencies agree with `probs` token by token within n_sigma binomial standard deviations."""
  freq = np.bincount(tokens, minlength=len(probs)) / len(tokens)
  sigma = np.sqrt(probs * (1 - probs) / len(tokens)) + 1e-3
  bad = np.abs(freq - probs) > n_sigma * sigma
  assert not bad.any(), {int(i): (float(freq[i]), float(probs[i])) for i in np.nonzero(bad)[0]}


def frequencies_match(tokens, probs, n_sigma=4.5):
  try:
    assert_frequencies(tokens, probs, n_sigma)
    return True
  except AssertionError:
    return False


# --------------------------------------------------------------------------------------------------------------
# greedy
# --------------------------------------------------------------------------------------------------------------


def test_greedy_is_argmax(distinct_logits):
  for key in (0, 1):
    toks, lp, plp = sample(distinct_logits, jax.random.key(key), temperature=0.3, greedy=True)
    np.testing.assert_array_equal(toks, distinct_logits.argmax(-1))
    np.testing.assert_array_equal(lp, np.zeros(N_DRAWS, np.float32))
    np.testing.assert_allclose(plp, pick(log_softmax64(distinct_logits), toks), atol=1e-5)


# --------------------------------------------------------------------------------------------------------------
# temperature only
# --------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("temperature", [0.5, 1.0, 2.0])
def test_temperature_frequencies_match_softmax(one_row, temperature):
  logits = np.tile(one_row, (N_DRAWS, 1))
  toks, lp, plp = sample(logits, jax.random.key(7), temperature)
  probs = np.exp(log_softmax64(one_row / temperature))
  assert_frequencies(toks, probs)
  # The check is sharp enough to tell temperatures apart (so a T / 1/T / T**2 mix-up would fail).
  for wrong in {1.0 / temperature, temperature ** 2, 1.0} - {temperature}:
    assert not frequencies_match(toks, np.exp(log_softmax64(one_row / wrong)))
  np.testing.assert_allclose(lp, pick(log_softmax64(logits / temperature), toks), atol=1e-5)
  # Untruncated, the policy log-probs (what the trainer scores at this temperature) are the sampling ones.
  np.testing.assert_allclose(plp, pick(log_softmax64(logits / temperature), toks), atol=1e-5)


def test_same_key_same_tokens_different_key_different_tokens(distinct_logits):
  a = sample(distinct_logits, jax.random.key(3), 1.0)
  b = sample(distinct_logits, jax.random.key(3), 1.0)
  c = sample(distinct_logits, jax.random.key(4), 1.0)
  for x, y in zip(a, b):
    np.testing.assert_array_equal(x, y)
  assert (a[0] != c[0]).mean() > 0.3
  # Also for the truncating modes.
  a = sample(distinct_logits, jax.random.key(3), 1.0, 0.9, top_k=5, use_top_p=True)
  b = sample(distinct_logits, jax.random.key(3), 1.0, 0.9, top_k=5, use_top_p=True)
  c = sample(distinct_logits, jax.random.key(5), 1.0, 0.9, top_k=5, use_top_p=True)
  np.testing.assert_array_equal(a[0], b[0])
  assert (a[0] != c[0]).mean() > 0.2


# --------------------------------------------------------------------------------------------------------------
# top-k
# --------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("temperature", [0.7, 1.5])
def test_top_k_support_and_logprobs(distinct_logits, temperature):
  k = 5
  topk = np.argsort(-distinct_logits, axis=-1)[:, :k]
  for seed in (0, 1):
    toks, lp, plp = sample(distinct_logits, jax.random.key(seed), temperature, top_k=k)
    assert (toks[:, None] == topk).any(-1).all()  # every draw among the k largest logits of its row
    kept = np.take_along_axis(distinct_logits, topk, -1) / temperature
    ref = log_softmax64(kept)[np.arange(N_DRAWS), (toks[:, None] == topk).argmax(-1)]
    np.testing.assert_allclose(lp, ref, atol=1e-5)
    np.testing.assert_allclose(plp, pick(log_softmax64(distinct_logits / temperature), toks), atol=1e-5)
  # Not everything collapses onto the argmax: lower-ranked members of the top-k do get sampled.
  ranks = (toks[:, None] == topk).argmax(-1)
  assert set(ranks.tolist()) == set(range(k))


def test_top_k_frequencies_renormalised(one_row):
  k, temperature = 4, 1.3
  logits = np.tile(one_row, (N_DRAWS, 1))
  toks, lp, _ = sample(logits, jax.random.key(11), temperature, top_k=k)
  top = np.argsort(-one_row)[:k]
  probs = np.zeros(V)
  probs[top] = np.exp(log_softmax64(one_row[top] / temperature))
  assert_frequencies(toks, probs)
  assert set(toks.tolist()) == set(top.tolist())


def test_top_k_one_is_greedy(distinct_logits):
  toks, lp, plp = sample(distinct_logits, jax.random.key(2), 1.0, top_k=1)
  np.testing.assert_array_equal(toks, distinct_logits.argmax(-1))
  np.testing.assert_allclose(lp, 0.0, atol=1e-6)


# --------------------------------------------------------------------------------------------------------------
# top-p
# --------------------------------------------------------------------------------------------------------------


def nucleus(logits_row, temperature, top_p):
  """Reference nucleus in float64: token ids sorted by prob, the prefix kept, and whether the cut is clear-cut."""
  order = np.argsort(-logits_row, kind="stable")
  p = np.exp(log_softmax64(logits_row[order] / temperature))
  before = np.cumsum(p) - p
  n_keep = int((before < top_p).sum())
  ambiguous = np.min(np.abs(before - top_p)) < 1e-4
  return order[:n_keep], p[:n_keep], ambiguous


@pytest.mark.parametrize("temperature,top_p", [(1.0, 0.7), (0.6, 0.9), (2.0, 0.3)])
def test_top_p_support_and_logprobs(distinct_logits, temperature, top_p):
  toks, lp, plp = sample(distinct_logits, jax.random.key(21), temperature, top_p, use_top_p=True)
  checked = 0
  sizes = []
  for r in range(N_DRAWS):
    keep, p, ambiguous = nucleus(distinct_logits[r], temperature, top_p)
    if ambiguous:
      continue
    checked += 1
    sizes.append(len(keep))
    assert toks[r] in keep, (r, toks[r], keep)
    i = int(np.nonzero(keep == toks[r])[0][0])
    assert lp[r] == pytest.approx(math.log(p[i] / p.sum()), abs=1e-4)
  assert checked > 0.95 * N_DRAWS
  assert max(sizes) > 1  # the test exercises real truncation, not only the argmax
  np.testing.assert_allclose(plp, pick(log_softmax64(distinct_logits / temperature), toks), atol=1e-5)


def test_top_p_frequencies_on_exact_support(one_row):
  """top_p strictly between two cumulative masses: exactly that prefix is sampled, renormalised."""
  temperature = 1.0
  order = np.argsort(-one_row)
  p = np.exp(log_softmax64(one_row[order] / temperature))
  cum = np.cumsum(p)
  n_keep = 4  # keep the 4 most likely tokens: top_p between cum[2] and cum[3]
  top_p = float(cum[n_keep - 2] + cum[n_keep - 1]) / 2
  logits = np.tile(one_row, (N_DRAWS, 1))
  toks, lp, _ = sample(logits, jax.random.key(5), temperature, top_p, use_top_p=True)
  probs = np.zeros(V)
  probs[order[:n_keep]] = p[:n_keep] / p[:n_keep].sum()
  assert set(toks.tolist()) == set(order[:n_keep].tolist())
  assert_frequencies(toks, probs)
  np.testing.assert_allclose(lp, np.log(probs[toks]), atol=1e-5)


def test_top_p_tiny_is_argmax_only(distinct_logits):
  for seed in range(3):
    toks, lp, plp = sample(distinct_logits, jax.random.key(seed), 1.7, 1e-6, use_top_p=True)
    np.testing.assert_array_equal(toks, distinct_logits.argmax(-1))
    np.testing.assert_allclose(lp, 0.0, atol=1e-6)
    np.testing.assert_allclose(plp, log_softmax64(distinct_logits / 1.7).max(-1), atol=1e-5)


def test_top_k_and_top_p_together(distinct_logits):
  """top-k first, then the nucleus of the renormalised top-k distribution."""
  k, temperature, top_p = 6, 1.0, 0.8
  toks, lp, _ = sample(distinct_logits, jax.random.key(8), temperature, top_p, top_k=k, use_top_p=True)
  checked = 0
  for r in range(0, N_DRAWS, 4):
    order = np.argsort(-distinct_logits[r])[:k]
    p = np.exp(log_softmax64(distinct_logits[r, order] / temperature))
    before = np.cumsum(p) - p
    if np.min(np.abs(before - top_p)) < 1e-4:
      continue
    keep = order[before < top_p]
    assert toks[r] in keep
    pk = p[before < top_p]
    assert lp[r] == pytest.approx(math.log(pk[list(keep).index(toks[r])] / pk.sum()), abs=1e-4)
    checked += 1
  assert checked > 0.9 * N_DRAWS / 4


# --------------------------------------------------------------------------------------------------------------
# property: arbitrary finite logits never give bad ids or NaN log-probs
# --------------------------------------------------------------------------------------------------------------

MODES = [  # (greedy, top_k, use_top_p)
    (True, 0, False), (False, 0, False), (False, 1, False), (False, 7, False), (False, 0, True), (False, 7, True),
]
# Rounded to 1e-3: values like -1.2e-38 become subnormal after `/ temperature` and XLA on CPU flushes those to
# zero, which creates ties the float64 reference does not see (an artefact of the check, not of the sampler).
finite_logits = hnp.arrays(
    np.float32, (4, V),
    elements=st.floats(-30, 30, width=32, allow_nan=False, allow_infinity=False).map(lambda x: round(x, 3)),
) | hnp.arrays(np.float32, (4, V), elements=st.sampled_from([-30.0, 0.0, 30.0, 5.5]))  # heavy ties


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(logits=finite_logits, mode=st.sampled_from(MODES), temperature=st.floats(0.05, 4.0),
       top_p=st.floats(1e-3, 1.0), seed=st.integers(0, 2**31 - 1))
def test_sample_from_logits_is_always_valid(logits, mode, temperature, top_p, seed):
  greedy, top_k, use_top_p = mode
  toks, lp, plp = sample(logits, jax.random.key(seed), temperature, top_p, greedy=greedy, top_k=top_k,
                         use_top_p=use_top_p)
  assert toks.shape == lp.shape == plp.shape == (4,)
  assert ((toks >= 0) & (toks < V)).all()
  assert np.isfinite(lp).all() and np.isfinite(plp).all()
  assert (lp <= 1e-5).all() and (plp <= 1e-5).all()
  np.testing.assert_allclose(plp, pick(log_softmax64(logits if greedy else logits / temperature), toks), atol=1e-4)
  if greedy:
    np.testing.assert_array_equal(toks, logits.argmax(-1))
  if top_k:
    kth = np.sort(logits, -1)[:, -top_k]
    assert (pick(logits, toks) >= kth).all()  # among the k largest (ties at the boundary allowed)
  if use_top_p and not greedy:
    # Nucleus: the mass of tokens strictly more likely than the chosen one is below top_p (computed on the
    # top-k renormalised distribution when top-k is on too).
    scaled = np.asarray(logits, np.float64) / np.float32(temperature)
    if top_k:
      scaled = np.where(scaled >= np.sort(scaled, -1)[:, -top_k][:, None], scaled, -np.inf)
    probs = np.exp(log_softmax64(scaled))
    chosen = pick(scaled, toks)
    above = np.where(scaled > chosen[:, None], probs, 0.0).sum(-1)
    assert (above < top_p + 1e-4).all(), (above, top_p)
  # The chosen token never has (numerically) zero probability under the sampling distribution.
  assert (lp > -1e4).all()


# --------------------------------------------------------------------------------------------------------------
# SamplingParams validation
# --------------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kwargs", [
    dict(max_new_tokens=0), dict(max_new_tokens=-3), dict(temperature=-0.1), dict(top_p=0.0), dict(top_p=-0.5),
    dict(top_p=1.01), dict(top_k=-1),
])
def test_sampling_params_rejects(kwargs):
  with pytest.raises(ValueError):
    SamplingParams(**kwargs)


def test_sampling_params_accepts_edges():
  SamplingParams(max_new_tokens=1, temperature=0.0, top_p=1.0, top_k=0)
  SamplingParams(top_p=1e-9, top_k=1, temperature=1e-3)


# --------------------------------------------------------------------------------------------------------------
# Sampler end to end: stop strings, per-row stop strings, stop token ids
# --------------------------------------------------------------------------------------------------------------

MAX_NEW = 12
STOP = "on"  # in ~5% of the built-in tokens, and it can also straddle two tokens ("o" + "n...")
PROMPT_TEXTS = ["go to drawer 1", "You arrive at", "<think>", "x", "Nothing happens.", "put a", "A", "hello world"]


@pytest.fixture(scope="session")
def tok(tmp_path_factory):
  return builtin_tokenizer(default_corpus(), cache_dir=tmp_path_factory.getbasetemp() / "agentopd_tokenizer_cache")


@pytest.fixture(scope="module")
def e2e(tok):
  cfg = preset("tiny", num_layers=1)
  assert cfg.vocab_size == len(tok) == 2048
  params = random_params(cfg)
  sampler = Sampler(cfg, tokenizer=tok)
  prompts = [tok.encode(t, add_special_tokens=False) for t in PROMPT_TEXTS]
  tb = token_bytes(tok, cfg.vocab_size)
  key = jax.random.key(1)
  ref = sampler.generate(params, prompts, key, SamplingParams(max_new_tokens=MAX_NEW))
  assert ref.finish_reasons == ["length"] * len(prompts)
  assert (ref.lengths == MAX_NEW).all()
  return dict(cfg=cfg, params=params, sampler=sampler, prompts=prompts, tb=tb, key=key, ref=ref)


def random_params(cfg):
  """Random weights in the model's exact param structure. Built in numpy from `abstract_params` because an
  un-jitted `transformer.init_params` takes ~8 s on CPU and the values do not matter here (norm scales 1)."""
  rng = np.random.default_rng(0)

  def leaf(path, s):
    if "scale" in jax.tree_util.keystr(path):
      return jnp.ones(s.shape, s.dtype)
    return jnp.asarray(rng.normal(0.0, 0.05, s.shape), s.dtype)

  params = jax.tree_util.tree_map_with_path(leaf, transformer.abstract_params(cfg))
  assert jax.tree.structure(params) == jax.tree.structure(transformer.abstract_params(cfg))
  return params


def first_stop_len(tb, ids, stop):
  """1 + index of the token at which `stop` first occurs in the bytes of `ids`, or None."""
  acc = b""
  for i, t in enumerate(ids):
    acc += tb[t]
    if stop.encode() in acc:
      return i + 1
  return None


def test_reference_run_logprobs(e2e):
  ref = e2e["ref"]
  # Temperature 1 without truncation: the sampling distribution is the model distribution.
  np.testing.assert_allclose(ref.logprobs, ref.policy_logprobs, atol=1e-5)
  assert np.isfinite(ref.policy_logprobs).all() and (ref.policy_logprobs < 0).all()
  assert ((ref.tokens >= 0) & (ref.tokens < e2e["cfg"].vocab_size)).all()


def check_stopped_rows(e2e, out, stops_per_row, stop_ids=()):
  ref, tb, tok = e2e["ref"], e2e["tb"], e2e["sampler"].tokenizer
  for b, stops in enumerate(stops_per_row):
    full = ref.row(b)
    ends = [first_stop_len(tb, full, s) for s in stops]
    ends += [full.index(t) + 1 for t in stop_ids if t in full]
    ends = [e for e in ends if e is not None]
    want_len = min(ends) if ends else MAX_NEW
    row = out.row(b)
    assert out.lengths[b] == want_len, (b, out.lengths[b], want_len)
    assert row == full[:want_len]  # sampling itself is unchanged by stopping (same key, independent rows)
    assert (out.tokens[b, want_len:] == e2e["sampler"].pad_id).all()
    np.testing.assert_allclose(out.logprobs[b, :want_len], ref.logprobs[b, :want_len], atol=1e-5)
    np.testing.assert_allclose(out.policy_logprobs[b, :want_len], ref.policy_logprobs[b, :want_len], atol=1e-5)
    assert (out.logprobs[b, want_len:] == 0).all()
    text = b"".join(tb[t] for t in row)
    before = b"".join(tb[t] for t in row[:-1])
    if out.finish_reasons[b] == "stop":
      assert ends
      hit_string = [s for s in stops if s.encode() in text]
      hit_id = row[-1] in stop_ids
      assert hit_string or hit_id
      for s in hit_string:
        assert s in tok.decode(row)
        assert s.encode() not in before  # it completed exactly at the last token
    else:
      assert out.finish_reasons[b] == "length"
      assert len(row) == MAX_NEW
      for s in stops:
        assert s.encode() not in text
      assert not set(row) & set(stop_ids)


def test_stop_string_truncates_exactly(e2e):
  out = e2e["sampler"].generate(e2e["params"], e2e["prompts"], e2e["key"],
                                SamplingParams(max_new_tokens=MAX_NEW, stop_strings=(STOP,)))
  check_stopped_rows(e2e, out, [(STOP,)] * len(e2e["prompts"]))
  # The run is informative: some rows stopped early, some ran to the length limit.
  assert "stop" in out.finish_reasons and "length" in out.finish_reasons
  assert (out.lengths < MAX_NEW).any()


def test_row_stop_strings_apply_only_to_their_rows(e2e):
  n = len(e2e["prompts"])
  per_row = [(STOP,) if b % 2 == 0 else () for b in range(n)]
  out = e2e["sampler"].generate(e2e["params"], e2e["prompts"], e2e["key"], SamplingParams(max_new_tokens=MAX_NEW),
                                row_stop_strings=per_row)
  check_stopped_rows(e2e, out, per_row)
  ref, tb = e2e["ref"], e2e["tb"]
  # Some row without the stop string does contain it, and was not stopped by it.
  odd_with_stop = [b for b in range(1, n, 2) if STOP.encode() in b"".join(tb[t] for t in ref.row(b))]
  assert odd_with_stop
  for b in odd_with_stop:
    assert out.finish_reasons[b] == "length" and out.lengths[b] == MAX_NEW
  assert any(out.finish_reasons[b] == "stop" for b in range(0, n, 2))


def test_stop_token_ids(e2e):
  ref = e2e["ref"]
  stop_id = int(ref.tokens[0, 5])
  out = e2e["sampler"].generate(e2e["params"], e2e["prompts"], e2e["key"],
                                SamplingParams(max_new_tokens=MAX_NEW, stop_token_ids=(stop_id,)))
  check_stopped_rows(e2e, out, [()] * len(e2e["prompts"]), stop_ids=(stop_id,))
  assert out.finish_reasons[0] == "stop" and out.row(0)[-1] == stop_id and out.lengths[0] <= 6


def test_greedy_end_to_end(e2e):
  sampler, params, prompts = e2e["sampler"], e2e["params"], e2e["prompts"]
  sp = SamplingParams(max_new_tokens=MAX_NEW, temperature=0.0, stop_strings=(STOP,))
  a = sampler.generate(params, prompts, jax.random.key(0), sp)
  b = sampler.generate(params, prompts, jax.random.key(99), sp)
  np.testing.assert_array_equal(a.tokens, b.tokens)  # greedy ignores the key
  assert (a.logprobs == 0).all()
  assert np.isfinite(a.policy_logprobs).all()
  for r in range(len(prompts)):
    n = int(a.lengths[r])
    assert (a.policy_logprobs[r, :n] < 0).all()
  tb = e2e["tb"]
  for r in range(len(prompts)):
    text = b"".join(tb[t] for t in a.row(r))
    assert (STOP.encode() in text) == (a.finish_reasons[r] == "stop")
