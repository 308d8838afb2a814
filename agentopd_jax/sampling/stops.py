"""Stop-string detection inside the jitted decode loop.

A stop string such as `</action>` can be produced by many different token segmentations, so matching token-id
sequences is not enough. Instead each stop string becomes a byte-level KMP automaton, and we precompute for every
(automaton state, token) pair the state after reading that token's bytes and whether the string completed inside
it. The decode loop then advances all rows' automata with two gathers per step, exact for any tokenization.
"""
from __future__ import annotations

import functools
from typing import List, Sequence, Tuple

import numpy as np


def _bytes_to_unicode():
  """GPT-2 byte-level alphabet: byte value -> printable character (same table `tokenizers` ByteLevel uses)."""
  keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
  chars = keep[:]
  extra = 0
  for b in range(256):
    if b not in keep:
      keep.append(b)
      chars.append(256 + extra)
      extra += 1
  return dict(zip(keep, map(chr, chars)))


_UNICODE_TO_BYTE = {c: b for b, c in _bytes_to_unicode().items()}


def token_bytes(tokenizer, vocab_size: int) -> List[bytes]:
  """The exact bytes each token id contributes to decoded text (b"" for ids the tokenizer does not know)."""
  decoder = type(tokenizer.backend_tokenizer.decoder).__name__ if hasattr(tokenizer, "backend_tokenizer") else ""
  added = {i: t.content for i, t in getattr(tokenizer, "added_tokens_decoder", {}).items()}
  out = []
  pieces = tokenizer.convert_ids_to_tokens(list(range(min(vocab_size, len(tokenizer)))))
  for i, piece in enumerate(pieces):
    if piece is None:
      out.append(b"")
    elif i in added:
      out.append(added[i].encode("utf-8"))
    elif decoder == "ByteLevel" and all(ch in _UNICODE_TO_BYTE for ch in piece):
      out.append(bytes(_UNICODE_TO_BYTE[ch] for ch in piece))
    elif len(piece) == 6 and piece.startswith("<0x") and piece.endswith(">"):  # sentencepiece byte fallback
      out.append(bytes([int(piece[3:5], 16)]))
    else:
      out.append(piece.replace("\u2581", " ").encode("utf-8"))
  out += [b""] * (vocab_size - len(out))
  return out


def _kmp_table(pattern: bytes) -> np.ndarray:
  """delta[state, byte] for states 0..m-1; reaching state m means the pattern just completed."""
  m = len(pattern)
  delta = np.zeros((m, 256), np.int32)
  delta[0, pattern[0]] = 1
  fallback = 0
  for s in range(1, m):
    delta[s] = delta[fallback]
    delta[s, pattern[s]] = s + 1
    fallback = delta[fallback, pattern[s]]
  return delta


def _token_transitions(pattern: bytes, tok_bytes: Sequence[bytes]) -> Tuple[np.ndarray, np.ndarray]:
  m = len(pattern)
  delta = np.vstack([_kmp_table(pattern), np.zeros((1, 256), np.int32)])  # row m is never read (we stop on match)
  lengths = np.array([len(b) for b in tok_bytes])
  width = max(1, int(lengths.max()))
  mat = np.zeros((len(tok_bytes), width), np.int32)
  for i, b in enumerate(tok_bytes):
    mat[i, :len(b)] = np.frombuffer(b, np.uint8)
  next_state = np.zeros((m, len(tok_bytes)), np.int32)
  matched = np.zeros((m, len(tok_bytes)), bool)
  for s0 in range(m):
    state = np.full(len(tok_bytes), s0, np.int32)
    hit = np.zeros(len(tok_bytes), bool)
    for j in range(width):
      live = (j < lengths) & ~hit
      nxt = delta[state, mat[:, j]]
      state = np.where(live, nxt, state)
      hit |= live & (nxt == m)
    next_state[s0] = np.where(hit, 0, state)
    matched[s0] = hit
  return next_state, matched


@functools.lru_cache(maxsize=32)
def _tables_cached(stops: Tuple[str, ...], tok_bytes: Tuple[bytes, ...]):
  width = max(len(s.encode("utf-8")) for s in stops)
  next_state = np.zeros((len(stops), width, len(tok_bytes)), np.int32)
  matched = np.zeros((len(stops), width, len(tok_bytes)), bool)
  for i, s in enumerate(stops):
    ns, mt = _token_transitions(s.encode("utf-8"), tok_bytes)
    next_state[i, :len(ns)] = ns
    matched[i, :len(mt)] = mt
  return next_state, matched


def stop_tables(stops: Sequence[str], tok_bytes: Sequence[bytes]) -> Tuple[np.ndarray, np.ndarray]:
  """(next_state, matched), both [n_stops, max_len, vocab]; states past a string's length are unused."""
  if not stops:
    raise ValueError("stop_tables needs at least one stop string")
  if any(not s for s in stops):
    raise ValueError("stop strings must be non-empty")
  return _tables_cached(tuple(stops), tuple(tok_bytes))
