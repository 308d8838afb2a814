"""Tests for agentopd_jax.sampling.stops: per-token bytes and the byte-level KMP stop-string automata.

The reference everywhere is the obvious definition: a stop string has matched after token i exactly when its UTF-8
bytes occur in the concatenated bytes of tokens 0..i. The automaton is run the way the sampler runs it:
`matched = matched_tbl[k, state, tok]; state = next_state[k, state, tok]`, and only the first match counts.
"""
import itertools
import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentopd_jax.envs.verl_agent.corpus import default_corpus
from agentopd_jax.models.tokenizer import builtin_tokenizer
from agentopd_jax.sampling import stops as stops_lib
from agentopd_jax.sampling.stops import stop_tables, token_bytes

VOCAB = 2048
FIXED_STOPS = ("</action>", "</search>", "</answer>", "\n", "ab", "<|im_end|>")
# Texts mixing the agent-environment style the tokenizer was trained on with non-ASCII and special-token text.
TEXT_PIECES = list("abn </>actiosearwh\n<|im_end|>.,'ö北京東é") + ["\u2011", "🙂", "ß", " the ", "<|im_end|>", "</action>"]


def texts(max_pieces):
  return st.lists(st.sampled_from(TEXT_PIECES), max_size=max_pieces).map("".join)


SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@pytest.fixture(scope="session")
def tok(tmp_path_factory):
  # Shared cache folder under the session's base temp dir: the other test file that builds it reuses the build.
  return builtin_tokenizer(default_corpus(), cache_dir=tmp_path_factory.getbasetemp() / "agentopd_tokenizer_cache")


@pytest.fixture(scope="session")
def tb(tok):
  out = token_bytes(tok, VOCAB)
  assert len(out) == VOCAB
  return out


# --------------------------------------------------------------------------------------------------------------
# helpers
# --------------------------------------------------------------------------------------------------------------


def run_automata(stops, tok_bytes, ids):
  """First token index at which each stop matched (None if never), running the tables as the sampler does."""
  next_state, matched = stop_tables(list(stops), tok_bytes)
  n = len(stops)
  assert next_state.shape == matched.shape == (n, max(len(s.encode()) for s in stops), len(tok_bytes))
  state = np.zeros(n, np.int64)
  first = [None] * n
  for i, t in enumerate(ids):
    hit = matched[np.arange(n), state, t]
    state = next_state[np.arange(n), state, t]
    for k in range(n):
      if hit[k] and first[k] is None:
        first[k] = i
  return first


def reference_first(stop, tok_bytes, ids):
  pattern = stop.encode("utf-8")
  acc = b""
  for i, t in enumerate(ids):
    acc += tok_bytes[t]
    if pattern in acc:
      return i
  return None


def encode_split(tok, text, cuts):
  """Encode `text` piecewise at character positions `cuts` so the segmentation differs from a plain encode."""
  bounds = [0] + sorted(set(c for c in cuts if 0 < c < len(text))) + [len(text)]
  ids = []
  for a, b in zip(bounds, bounds[1:]):
    ids += tok.encode(text[a:b], add_special_tokens=False)
  return ids


stop_strategy = st.one_of(
    st.sampled_from(FIXED_STOPS),
    st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=4),
    st.text(alphabet=st.sampled_from(list("ab<>/ n")), min_size=1, max_size=5),
)


# --------------------------------------------------------------------------------------------------------------
# token_bytes
# --------------------------------------------------------------------------------------------------------------


def test_token_bytes_special_tokens_and_out_of_range(tok):
  out = token_bytes(tok, VOCAB + 37)
  assert len(out) == VOCAB + 37
  assert out[:3] == [b"<|endoftext|>", b"<|im_start|>", b"<|im_end|>"]
  assert out[VOCAB:] == [b""] * 37  # ids the tokenizer does not know contribute nothing
  assert all(out[i] for i in range(len(tok)))  # every real token has some bytes
  # Byte-level BPE: each of the 256 single bytes is some token.
  assert {b for b in out if len(b) == 1} == {bytes([i]) for i in range(256)}
  # A shorter table is a prefix of the full one.
  assert token_bytes(tok, 100) == out[:100]


def test_token_bytes_every_token_individually(tok, tb):
  """Each token's bytes are what the tokenizer decodes it to (checked where that decode is valid UTF-8)."""
  checked = 0
  for i in range(len(tok)):
    try:
      text = tb[i].decode("utf-8")
    except UnicodeDecodeError:
      continue  # partial UTF-8 sequence; `decode` would give U+FFFD, covered by the concatenation test
    assert tok.decode([i]) == text, (i, tb[i])
    checked += 1
  assert checked > 700


@settings(max_examples=60, **SETTINGS)
@given(text=texts(40) | st.text(max_size=20),
       cuts=st.lists(st.integers(0, 60), max_size=6))
def test_token_bytes_concatenate_to_decoded_text(tok, tb, text, cuts):
  ids = encode_split(tok, text, cuts)
  joined = b"".join(tb[i] for i in ids)
  assert joined == tok.decode(ids).encode("utf-8")
  assert joined == text.encode("utf-8")  # byte-level BPE is lossless


@pytest.mark.parametrize("text", ["Wilhelm Röntgen", "北京 東京", "e\u2011commerce", "🙂👍🏽 done", "<|im_end|>\n<action>ö</action>"])
def test_token_bytes_non_ascii_examples(tok, tb, text):
  ids = tok.encode(text, add_special_tokens=False)
  assert b"".join(tb[i] for i in ids) == tok.decode(ids).encode("utf-8") == text.encode("utf-8")


# --------------------------------------------------------------------------------------------------------------
# stop_tables against the definition
# --------------------------------------------------------------------------------------------------------------


@settings(max_examples=80, **SETTINGS)
@given(stops=st.lists(stop_strategy, min_size=1, max_size=3, unique=True),
       ids=st.lists(st.integers(0, VOCAB - 1), max_size=60))
def test_automaton_matches_definition_random_ids(tb, stops, ids):
  got = run_automata(stops, tb, ids)
  assert got == [reference_first(s, tb, ids) for s in stops]


@settings(max_examples=80, **SETTINGS)
@given(stops=st.lists(stop_strategy, min_size=1, max_size=3, unique=True),
       which=st.integers(0, 2),
       pre=texts(15),
       post=texts(10),
       cuts=st.lists(st.integers(0, 40), max_size=6),
       noise=st.lists(st.integers(0, VOCAB - 1), max_size=4))
def test_automaton_matches_definition_stop_spanning_tokens(tok, tb, stops, which, pre, post, cuts, noise):
  """Texts that contain a stop string, tokenized in pieces so the stop string straddles token boundaries."""
  stop = stops[which % len(stops)]
  text = pre + stop + post
  ids = list(noise) + encode_split(tok, text, cuts)
  expected = [reference_first(s, tb, ids) for s in stops]
  assert expected[which % len(stops)] is not None  # the stop really is in the bytes
  assert run_automata(stops, tb, ids) == expected


@pytest.mark.parametrize("stop", FIXED_STOPS)
def test_each_fixed_stop_at_every_split_point(tok, tb, stop):
  """Deterministic: the stop string cut at every character position, inside realistic text."""
  text = f"<think>go to drawer 1</think>\n<action>open {stop} drawer</action>"
  start = text.index(stop)
  for cut in range(start, start + len(stop) + 1):
    ids = encode_split(tok, text, [cut, cut + 1])
    assert run_automata([stop], tb, ids) == [reference_first(stop, tb, ids)]
    assert reference_first(stop, tb, ids) is not None


def test_first_match_not_earlier_after_partial_prefixes(tb):
  """`</act` then `</action>`: the partial prefix must not fire, the full string fires at its last token."""
  pieces = [b"</", b"act", b"ion", b" </", b"action", b">"]
  ids = [tb.index(p) if p in tb else None for p in pieces]
  if None in ids:  # build from single bytes when a piece is not a token
    ids = [tb.index(bytes([c])) for p in pieces for c in p]
  assert run_automata(["</action>"], tb, ids) == [len(ids) - 1]


# --------------------------------------------------------------------------------------------------------------
# KMP corner cases on a hand-made vocabulary: all strings over {a, b} of length 1..3
# --------------------------------------------------------------------------------------------------------------

AB_VOCAB = [b""] + ["".join(p).encode() for n in (1, 2, 3) for p in itertools.product("ab", repeat=n)]


def _segment(text: bytes, rng: random.Random):
  ids, i = [], 0
  while i < len(text):
    n = rng.randint(1, min(3, len(text) - i))
    ids.append(AB_VOCAB.index(text[i:i + n]))
    if rng.random() < 0.1:
      ids.append(0)  # empty token: must not change the state
    i += n
  return ids


@pytest.mark.parametrize("stop,text,end", [
    ("aab", b"aaab", 4), ("abab", b"ababab", 4), ("aabaa", b"aabaabaa", 5), ("abaab", b"abaabaab", 5),
    ("aaaa", b"aaabaaaa", 8), ("abba", b"abbabba", 4), ("bbb", b"babbabbb", 8), ("a", b"bba", 3),
])
def test_kmp_self_overlapping_patterns(stop, text, end):
  """The stop matches at byte `end` (1-based) whatever the segmentation."""
  rng = random.Random(0)
  for _ in range(200):
    ids = _segment(text, rng)
    lengths = np.cumsum([len(AB_VOCAB[i]) for i in ids])
    want = int(np.argmax(lengths >= end))  # first token whose bytes reach position `end`
    assert run_automata([stop], AB_VOCAB, ids) == [want], (stop, [AB_VOCAB[i] for i in ids])


@pytest.mark.parametrize("stop", ["aab", "abab", "aabaa", "abaab", "aaaa", "babb", "ab"])
def test_kmp_exhaustive_small_texts(stop):
  rng = random.Random(1)
  for n in range(1, 10):
    for chars in itertools.product(b"ab", repeat=n):
      ids = _segment(bytes(chars), rng)
      assert run_automata([stop], AB_VOCAB, ids) == [reference_first(stop, AB_VOCAB, ids)]


def test_kmp_table_single_byte_transitions():
  """The byte-level table itself: delta[state, byte] is the longest prefix of the pattern that is a suffix."""
  for pattern in (b"aab", b"abab", b"abacabab", b"</action>"):
    delta = stops_lib._kmp_table(pattern)
    for s in range(len(pattern)):
      for c in set(pattern) | {ord("z")}:
        seen = pattern[:s] + bytes([c])
        want = max(k for k in range(len(seen) + 1) if seen.endswith(pattern[:k]))
        assert delta[s, c] == want, (pattern, s, chr(c))


def test_multiple_stops_of_different_lengths_are_independent(tb):
  """Padding shorter strings' tables to the longest one must not change their behaviour."""
  stops = ["\n", "ab", "</answer>"]
  ns_all, mt_all = stop_tables(stops, tb)
  for k, s in enumerate(stops):
    ns, mt = stop_tables([s], tb)
    m = len(s.encode())
    np.testing.assert_array_equal(ns_all[k, :m], ns[0, :m])
    np.testing.assert_array_equal(mt_all[k, :m], mt[0, :m])


def test_matched_table_semantics(tb):
  """matched[s, t] is True iff the pattern completes within token t's bytes when starting in state s."""
  stop = "</action>"
  ns, mt = stop_tables([stop], tb)
  pattern = stop.encode()
  for s in range(len(pattern)):
    prefix = pattern[:s]
    for t in range(0, VOCAB, 7):
      assert mt[0, s, t] == (pattern in prefix + tb[t] and pattern not in prefix), (s, tb[t])
  assert mt[0, 0, 2] == False  # noqa: E712  (<|im_end|> has no "</action>")
  # The special token <|im_end|> matches its own string as a stop in one step.
  ns2, mt2 = stop_tables(["<|im_end|>"], tb)
  assert mt2[0, 0, 2]


# --------------------------------------------------------------------------------------------------------------
# errors
# --------------------------------------------------------------------------------------------------------------


def test_errors(tb):
  with pytest.raises(ValueError):
    stop_tables([], tb)
  with pytest.raises(ValueError):
    stop_tables([""], tb)
  with pytest.raises(ValueError):
    stop_tables(["ok", ""], tb)
