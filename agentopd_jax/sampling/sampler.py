"""Batched KV-cache sampler with multi-turn continuation.

Layout of a row's history: every token already fed to the model sits in the cache (slots [0, length)); the last
sampled token is `pending` (sampled, not yet fed). A decode step feeds `pending`, samples the next token and makes
it the new pending one. Prefill appends `prompt[:-1]` and makes `prompt[-1]` pending; a continuation appends
`[pending] + new_tokens[:-1]` and makes `new_tokens[-1]` pending. So the history is never re-prefilled, and a
continued row is token-for-token the same sequence a fresh prefill of the full history would see.

Log-probs returned per sampled token:
  * `logprobs`: under the distribution actually sampled from: logits / temperature, restricted to the top-k and
    nucleus (top-p) support and renormalised there; 0.0 for greedy decoding (a point mass).
  * `model_logprobs`: under the raw model distribution (temperature 1, no truncation), which is what the training
    scorer computes; use these for sampler-vs-trainer drift checks.
"""
from __future__ import annotations

import dataclasses
import functools
from typing import List, Optional, Sequence

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np

from agentopd_jax.models import transformer
from agentopd_jax.models.config import ModelConfig
from agentopd_jax.sampling import stops as stops_lib

FINISH_RUNNING, FINISH_STOP, FINISH_LENGTH = 0, 1, 2
_REASONS = {FINISH_RUNNING: "running", FINISH_STOP: "stop", FINISH_LENGTH: "length"}


@dataclasses.dataclass(frozen=True)
class SamplingParams:
  """How to decode. temperature == 0 means greedy; top_k == 0 and top_p == 1 switch truncation off."""
  max_new_tokens: int = 64
  temperature: float = 1.0
  top_k: int = 0
  top_p: float = 1.0
  stop_strings: Sequence[str] = ()
  stop_token_ids: Sequence[int] = ()

  def __post_init__(self):
    if self.max_new_tokens < 1:
      raise ValueError(f"SamplingParams.max_new_tokens must be >= 1, got {self.max_new_tokens}")
    if self.temperature < 0:
      raise ValueError(f"SamplingParams.temperature must be >= 0, got {self.temperature}")
    if self.top_k < 0:
      raise ValueError(f"SamplingParams.top_k must be >= 0, got {self.top_k}")
    if not 0.0 < self.top_p <= 1.0:
      raise ValueError(f"SamplingParams.top_p must be in (0, 1], got {self.top_p}")


@flax.struct.dataclass
class DecodeState:
  cache: transformer.KVCache
  pending: jnp.ndarray  # [B] last sampled token, not yet in the cache


@dataclasses.dataclass
class SampleOutput:
  tokens: np.ndarray          # [B, N] sampled ids, `pad_id` past each row's length
  lengths: np.ndarray         # [B] number of sampled tokens per row (stop tokens included)
  logprobs: np.ndarray        # [B, N] under the sampling distribution (see module docstring)
  model_logprobs: np.ndarray  # [B, N] under the raw model distribution
  finish_reasons: List[str]   # "stop" | "length" (or "inactive" for rows not decoded this call)
  state: DecodeState          # pass to `Sampler.continue_generation`

  def row(self, b: int) -> List[int]:
    return self.tokens[b, :self.lengths[b]].tolist()


def _round_up(n: int, multiple: int) -> int:
  return max(multiple, -(-n // multiple) * multiple)


def sample_from_logits(logits, key, temperature, top_p, *, greedy: bool, top_k: int, use_top_p: bool):
  """Samples one token per row from f32 logits [B, V]; returns (tokens, sampling log-probs, model log-probs)."""
  model_logp = jax.nn.log_softmax(logits, axis=-1)
  if greedy:
    tokens = jnp.argmax(logits, axis=-1)
    return tokens, jnp.zeros(tokens.shape, jnp.float32), jnp.take_along_axis(model_logp, tokens[:, None], -1)[:, 0]
  scaled = logits / temperature
  if top_k or use_top_p:
    # Sort once (top-k when set: it is far cheaper than a full sort of a 150k vocabulary) and truncate there.
    if top_k:
      vals, ids = jax.lax.top_k(scaled, top_k)
    else:
      ids = jnp.argsort(-scaled, axis=-1)
      vals = jnp.take_along_axis(scaled, ids, axis=-1)
    if use_top_p:
      probs = jax.nn.softmax(vals, axis=-1)
      # Keep the smallest prefix whose mass reaches top_p (the first token always stays).
      keep = (jnp.cumsum(probs, axis=-1) - probs) < top_p
      vals = jnp.where(keep, vals, -jnp.inf)
    choice = jax.random.categorical(key, vals, axis=-1)
    tokens = jnp.take_along_axis(ids, choice[:, None], -1)[:, 0]
    logp = jnp.take_along_axis(jax.nn.log_softmax(vals, axis=-1), choice[:, None], -1)[:, 0]
  else:
    tokens = jax.random.categorical(key, scaled, axis=-1)
    logp = jnp.take_along_axis(jax.nn.log_softmax(scaled, axis=-1), tokens[:, None], -1)[:, 0]
  return tokens, logp, jnp.take_along_axis(model_logp, tokens[:, None], -1)[:, 0]


def _append(config: ModelConfig, params, state: DecodeState, chunk, chunk_lens, new_pending):
  """Feeds right-padded `chunk` [B, T] (chunk_lens valid per row) into the cache; sets the new pending tokens."""
  segment = (jnp.arange(chunk.shape[1])[None, :] < chunk_lens[:, None]).astype(jnp.int32)
  positions = state.cache.lengths[:, None] + jnp.arange(chunk.shape[1])[None, :]
  _, cache = transformer.forward(config, params, chunk, positions, segment, state.cache)
  return DecodeState(cache=cache, pending=new_pending)


def _decode(config: ModelConfig, params, state: DecodeState, key, active, max_new, stop_ids, stop_next,
            stop_matched, stop_rows, temperature, top_p, *, num_steps: int, greedy: bool, top_k: int,
            use_top_p: bool, pad_id: int):
  b = state.pending.shape[0]
  w_out = transformer.unembed_weight(config, params)
  n_stops = stop_next.shape[0]

  def cond(carry):
    step, done = carry[0], carry[2]
    return (step < num_steps) & ~jnp.all(done)

  def body(carry):
    step, st, done, toks, lps, mlps, n_gen, stop_state, reasons = carry
    seg = (~done).astype(jnp.int32)[:, None]
    hidden, cache = transformer.forward(config, params, st.pending[:, None], st.cache.lengths[:, None], seg, st.cache)
    logits = jnp.einsum("bd,dv->bv", hidden[:, 0].astype(config.compute_dtype), w_out.astype(config.compute_dtype),
                        preferred_element_type=jnp.float32)
    tok, lp, mlp = sample_from_logits(logits, jax.random.fold_in(key, step), temperature, top_p,
                                      greedy=greedy, top_k=top_k, use_top_p=use_top_p)
    tok = jnp.where(done, pad_id, tok).astype(jnp.int32)
    toks = toks.at[:, step].set(tok)
    lps = lps.at[:, step].set(jnp.where(done, 0.0, lp))
    mlps = mlps.at[:, step].set(jnp.where(done, 0.0, mlp))
    n_gen = n_gen + (~done)
    # Stop strings: advance each row's automata by the new token's bytes.
    idx = jnp.arange(n_stops)[None, :]
    matched = stop_matched[idx, stop_state, tok[:, None]] & stop_rows
    stop_state = stop_next[idx, stop_state, tok[:, None]]
    hit = jnp.any(matched, axis=-1) | jnp.any(tok[:, None] == stop_ids, axis=-1)
    finished = ~done & (hit | (n_gen >= max_new))
    reasons = jnp.where(finished, jnp.where(hit, FINISH_STOP, FINISH_LENGTH), reasons)
    st = DecodeState(cache=cache, pending=jnp.where(done, st.pending, tok))
    return step + 1, st, done | finished, toks, lps, mlps, n_gen, stop_state, reasons

  done0 = ~active | (max_new <= 0)
  carry = (jnp.int32(0), state, done0, jnp.full((b, num_steps), pad_id, jnp.int32),
           jnp.zeros((b, num_steps), jnp.float32), jnp.zeros((b, num_steps), jnp.float32),
           jnp.zeros((b,), jnp.int32), jnp.zeros((b, n_stops), jnp.int32), jnp.zeros((b,), jnp.int32))
  _, state, _, toks, lps, mlps, n_gen, _, reasons = jax.lax.while_loop(cond, body, carry)
  return state, toks, lps, mlps, n_gen, reasons


@functools.lru_cache(maxsize=None)
def _jitted_steps(config: ModelConfig):
  """One pair of jitted steps per model config, shared by all samplers so nothing compiles twice."""
  append = jax.jit(functools.partial(_append, config), donate_argnums=(1,))
  decode = jax.jit(functools.partial(_decode, config), donate_argnums=(1,),
                   static_argnames=("num_steps", "greedy", "top_k", "use_top_p", "pad_id"))
  return append, decode


class Sampler:
  """Jitted prefill + `lax.while_loop` decode over a static-shape KV cache.

  Args:
    config: the model.
    tokenizer: needed only for stop strings (their byte-exact detection uses each token's bytes).
    pad_id: written past each row's end in the token outputs.
    bucket: prompt/new-token/cache lengths are rounded up to multiples of this to bound recompilation.
  """

  def __init__(self, config: ModelConfig, tokenizer=None, pad_id: int = 0, bucket: int = 32):
    self.config = config
    self.tokenizer = tokenizer
    self.pad_id = pad_id
    self.bucket = bucket
    self._token_bytes = None
    self._append, self._decode = _jitted_steps(config)

  # --- public API ------------------------------------------------------------------------------------------

  def init_state(self, batch: int, cache_size: int) -> DecodeState:
    return DecodeState(cache=transformer.KVCache.init(self.config, batch, cache_size),
                       pending=jnp.zeros((batch,), jnp.int32))

  def generate(self, params, prompts: Sequence[Sequence[int]], key: jax.Array, sampling: SamplingParams,
               cache_size: Optional[int] = None, row_max_new_tokens: Optional[Sequence[int]] = None,
               row_stop_strings: Optional[Sequence[Sequence[str]]] = None) -> SampleOutput:
    """Samples continuations of token-id prompts (any lengths >= 1); rows finish independently.

    cache_size: slots per row; defaults to the longest prompt plus max_new_tokens. Give more to continue later.
    row_max_new_tokens / row_stop_strings: per-row overrides of the SamplingParams values.
    """
    if not prompts or any(len(p) == 0 for p in prompts):
      raise ValueError("generate: every prompt needs at least one token")
    longest = max(len(p) for p in prompts)
    n_max = max(row_max_new_tokens) if row_max_new_tokens is not None else sampling.max_new_tokens
    cache_size = cache_size or _round_up(longest + n_max, self.bucket)
    state = self.init_state(len(prompts), cache_size)
    return self._feed_and_decode(params, state, [list(p) for p in prompts], key, sampling, None,
                                 row_max_new_tokens, row_stop_strings, first_turn=True)

  def continue_generation(self, params, state: DecodeState, new_tokens: Sequence[Sequence[int]], key: jax.Array,
                          sampling: SamplingParams, active: Optional[Sequence[bool]] = None,
                          row_max_new_tokens: Optional[Sequence[int]] = None,
                          row_stop_strings: Optional[Sequence[Sequence[str]]] = None) -> SampleOutput:
    """Appends `new_tokens[b]` (e.g. an environment observation) after row b's history and decodes again.

    The previous call's last sampled token is part of the history. Rows with `active[b]` False are left as they
    are (nothing appended, nothing sampled). `state` is consumed (its buffers are donated).
    """
    b = state.pending.shape[0]
    if len(new_tokens) != b:
      raise ValueError(f"continue_generation: got {len(new_tokens)} rows of new tokens for a batch of {b}")
    active = [True] * b if active is None else list(active)
    chunks = []
    for row, (toks, on) in enumerate(zip(new_tokens, active)):
      if on and len(toks) == 0:
        raise ValueError(f"continue_generation: row {row} is active but has no new tokens to append")
      chunks.append(list(toks) if on else [])
    return self._feed_and_decode(params, state, chunks, key, sampling, active, row_max_new_tokens,
                                 row_stop_strings, first_turn=False)

  # --- internals -------------------------------------------------------------------------------------------

  def _feed_and_decode(self, params, state, chunks, key, sampling, active, row_max_new, row_stops, first_turn):
    b = len(chunks)
    active = [True] * b if active is None else active
    max_new = np.asarray(row_max_new if row_max_new is not None else [sampling.max_new_tokens] * b, np.int32)
    if max_new.shape != (b,):
      raise ValueError(f"row_max_new_tokens must have one entry per row ({b}), got {max_new.shape}")
    pending = np.asarray(state.pending)
    # Tokens to write now: the old pending token (not on the first turn) and all new tokens but the last.
    feeds, new_pending = [], pending.copy()
    for row, chunk in enumerate(chunks):
      if not chunk:
        feeds.append([])
        continue
      prefix = [] if first_turn else [int(pending[row])]
      feeds.append(prefix + chunk[:-1])
      new_pending[row] = chunk[-1]
    lengths = np.asarray(state.cache.lengths)
    capacity = state.cache.capacity
    for row in range(b):
      need = lengths[row] + len(feeds[row]) + (max_new[row] if active[row] else 0)
      if need > capacity:
        raise ValueError(
            f"KV cache capacity exceeded for row {row}: {lengths[row]} cached + {len(feeds[row])} new + "
            f"{max_new[row]} max new tokens = {need} > cache_size {capacity}; pass a larger cache_size")
    width = max(len(f) for f in feeds)
    if width:
      padded = np.full((b, _round_up(width, self.bucket)), self.pad_id, np.int32)
      for row, feed in enumerate(feeds):
        padded[row, :len(feed)] = feed
      state = self._append(params, state, jnp.asarray(padded), jnp.asarray([len(f) for f in feeds], jnp.int32),
                           jnp.asarray(new_pending, jnp.int32))
    else:
      state = DecodeState(cache=state.cache, pending=jnp.asarray(new_pending, jnp.int32))

    stop_ids, stop_next, stop_matched, stop_rows = self._stop_arrays(sampling, row_stops, b)
    num_steps = _round_up(int(max_new.max()), self.bucket)
    greedy = sampling.temperature == 0.0
    state, toks, lps, mlps, n_gen, reasons = self._decode(
        params, state, key, jnp.asarray(active), jnp.asarray(max_new), stop_ids, stop_next, stop_matched,
        stop_rows, jnp.float32(max(sampling.temperature, 1e-6)), jnp.float32(sampling.top_p),
        num_steps=num_steps, greedy=greedy, top_k=0 if greedy else int(sampling.top_k),
        use_top_p=(not greedy) and sampling.top_p < 1.0, pad_id=self.pad_id)
    n_gen = np.asarray(n_gen)
    reasons = np.asarray(reasons)
    finish = [_REASONS[int(r)] if on else "inactive" for r, on in zip(reasons, active)]
    width_out = max(1, int(n_gen.max()))
    return SampleOutput(tokens=np.asarray(toks)[:, :width_out], lengths=n_gen,
                        logprobs=np.asarray(lps)[:, :width_out], model_logprobs=np.asarray(mlps)[:, :width_out],
                        finish_reasons=finish, state=state)

  def _stop_arrays(self, sampling: SamplingParams, row_stops, b: int):
    ids = list(sampling.stop_token_ids)
    stop_ids = jnp.asarray(np.array([ids or [-1]] * b, np.int32))
    per_row = [tuple(sampling.stop_strings)] * b if row_stops is None else [tuple(s) for s in row_stops]
    if len(per_row) != b:
      raise ValueError(f"row_stop_strings must have one entry per row ({b}), got {len(per_row)}")
    strings = sorted({s for row in per_row for s in row})
    if not strings:
      dummy = np.zeros((1, 1, self.config.vocab_size), np.int32)
      return stop_ids, jnp.asarray(dummy), jnp.asarray(dummy.astype(bool)), jnp.zeros((b, 1), bool)
    if self.tokenizer is None:
      raise ValueError("stop strings need the Sampler to be built with a tokenizer")
    if self._token_bytes is None:
      self._token_bytes = stops_lib.token_bytes(self.tokenizer, self.config.vocab_size)
    next_state, matched = stops_lib.stop_tables(strings, self._token_bytes)
    rows = np.array([[s in row for s in strings] for row in per_row], bool)
    return stop_ids, jnp.asarray(next_state), jnp.asarray(matched), jnp.asarray(rows)
