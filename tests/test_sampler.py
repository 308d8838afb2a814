"""KV-cache sampler: multi-turn continuation equals re-prefilling, log-probs equal the scorer's, padded prompts with
a mask equal unpadded ones, clear errors."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agentopd_jax.batching.collate import ScoreBatch
from agentopd_jax.models import transformer
from agentopd_jax.models.config import preset
from agentopd_jax.sampling.sampler import Sampler, SamplingParams
from agentopd_jax.scoring.fused import ScoreConfig, make_score_fn

CONFIG = preset("tiny", vocab_size=300, num_layers=2, hidden_size=64, intermediate_size=128, num_heads=4,
                num_kv_heads=2, head_dim=16)


@pytest.fixture(scope="module")
def params():
  # A larger init scale gives peaked distributions, so greedy decoding has no near-ties between paths.
  p = transformer.init_params(CONFIG, jax.random.key(0))
  return jax.tree.map(lambda x: x * 3.0 if x.ndim >= 2 else x, p)


def _sequence_logprobs(params, rows, temperature=1.0):
  """Scoring-step log-probs of each row's tokens (target-indexed), one row per sequence."""
  width = max(len(r) for r in rows)
  tokens = np.zeros((len(rows), width), np.int32)
  seg = np.zeros((len(rows), width), np.int32)
  for i, r in enumerate(rows):
    tokens[i, :len(r)], seg[i, :len(r)] = r, 1
  fn = make_score_fn(CONFIG, ScoreConfig(reference=False, top_k=0, entropy=False, temperature=temperature))
  out = fn(params, None, None, ScoreBatch(tokens=jnp.asarray(tokens), segment_ids=jnp.asarray(seg),
                                          loss_mask=jnp.asarray(seg)))
  return np.asarray(out.policy_logprobs)


def test_three_turn_continuation_equals_reprefill(params):
  greedy = SamplingParams(max_new_tokens=12, temperature=0.0)
  prompts = [[5, 6, 7, 8, 9, 10], [11, 12], [13, 14, 15, 16]]
  observations = [[[21, 22, 23], [24], [25, 26, 27, 28, 29]], [[31, 32], [33, 34, 35, 36], [37]]]
  sampler = Sampler(CONFIG)
  out = sampler.generate(params, prompts, jax.random.key(0), greedy, cache_size=128)
  history = [p + out.row(b) for b, p in enumerate(prompts)]
  turns = [out]
  for obs in observations:
    out = sampler.continue_generation(params, out.state, obs, jax.random.key(1), greedy)
    turns.append(out)
    for b in range(3):
      history[b] = history[b] + obs[b] + out.row(b)

  # Re-prefill: a fresh sampler run on each turn's full history must give the same tokens and log-probs.
  fresh = Sampler(CONFIG)
  replay = [list(p) for p in prompts]
  for turn, out in enumerate(turns):
    ref = fresh.generate(params, replay, jax.random.key(0), greedy, cache_size=128)
    for b in range(3):
      assert out.row(b) == ref.row(b)
      np.testing.assert_allclose(out.policy_logprobs[b, :out.lengths[b]], ref.policy_logprobs[b, :ref.lengths[b]],
                                 atol=1e-4)
      replay[b] = replay[b] + out.row(b) + (observations[turn][b] if turn < len(observations) else [])

  # And the scoring step of the whole multi-turn sequence agrees with the sampler at every generated token.
  scored = _sequence_logprobs(params, history)
  for b in range(3):
    pos = len(prompts[b])
    for turn, out in enumerate(turns):
      n = out.lengths[b]
      np.testing.assert_allclose(scored[b, pos:pos + n], out.policy_logprobs[b, :n], atol=1e-4)
      pos += n + (len(observations[turn][b]) if turn < len(observations) else 0)


def test_sampled_logprobs_equal_scoring_logprobs(params):
  # Temperature 1 without truncation: the sampling distribution is the model's, so both log-probs must agree.
  prompts = [[1, 2, 3], [4, 5, 6, 7, 8, 9, 10, 11]]
  out = Sampler(CONFIG).generate(params, prompts, jax.random.key(7), SamplingParams(max_new_tokens=20))
  np.testing.assert_allclose(out.logprobs, out.policy_logprobs, atol=1e-5)
  scored = _sequence_logprobs(params, [p + out.row(b) for b, p in enumerate(prompts)])
  for b, p in enumerate(prompts):
    np.testing.assert_allclose(scored[b, len(p):len(p) + out.lengths[b]], out.logprobs[b, :out.lengths[b]],
                               atol=1e-4)


def test_policy_logprobs_equal_scoring_at_the_sampling_temperature(params):
  # The behaviour log-probs of PPO's ratio: the trainer scores logits / T (as verl's actor does), so the sampler
  # must report the same numbers, untruncated, whatever top-k it sampled with.
  prompts = [[1, 2, 3], [4, 5, 6, 7, 8, 9, 10, 11]]
  out = Sampler(CONFIG).generate(params, prompts, jax.random.key(5),
                                 SamplingParams(max_new_tokens=16, temperature=0.4, top_k=50))
  rows = [p + out.row(b) for b, p in enumerate(prompts)]
  at_t, at_1 = _sequence_logprobs(params, rows, temperature=0.4), _sequence_logprobs(params, rows)
  for b, p in enumerate(prompts):
    got = out.policy_logprobs[b, :out.lengths[b]]
    np.testing.assert_allclose(at_t[b, len(p):len(p) + out.lengths[b]], got, atol=1e-4)
    assert np.abs(at_1[b, len(p):len(p) + out.lengths[b]] - got).max() > 1e-2  # T matters for these params


def test_truncated_sampling_logprobs_are_renormalised(params):
  prompts = [[1, 2, 3]] * 4
  out = Sampler(CONFIG).generate(params, prompts, jax.random.key(3),
                                 SamplingParams(max_new_tokens=8, temperature=0.7, top_k=5))
  # Renormalised on 5 tokens at T=0.7: never less likely than under the full distribution.
  assert np.all(out.logprobs >= out.policy_logprobs - 1e-6)
  assert np.all(out.logprobs >= np.log(1e-12))


def test_deterministic_for_a_key(params):
  sampling = SamplingParams(max_new_tokens=16, temperature=1.0, top_p=0.9)
  prompts = [[3, 4, 5], [6, 7]]
  a = Sampler(CONFIG).generate(params, prompts, jax.random.key(11), sampling)
  b = Sampler(CONFIG).generate(params, prompts, jax.random.key(11), sampling)
  c = Sampler(CONFIG).generate(params, prompts, jax.random.key(12), sampling)
  np.testing.assert_array_equal(a.tokens, b.tokens)
  np.testing.assert_array_equal(a.logprobs, b.logprobs)
  assert not np.array_equal(a.tokens, c.tokens)


def test_rows_finish_independently(params):
  prompts = [[1, 2], [3, 4], [5, 6]]
  greedy = SamplingParams(max_new_tokens=10, temperature=0.0)
  full = Sampler(CONFIG).generate(params, prompts, jax.random.key(0), greedy)
  stop_id = full.row(1)[3]  # row 1 must stop at the first occurrence of this id
  out = Sampler(CONFIG).generate(params, prompts, jax.random.key(0),
                                 SamplingParams(max_new_tokens=10, temperature=0.0, stop_token_ids=(stop_id,)),
                                 row_max_new_tokens=[4, 10, 10])
  assert out.lengths[0] == min(4, full.row(0).index(stop_id) + 1 if stop_id in full.row(0) else 4)
  first = full.row(1).index(stop_id)
  assert out.row(1) == full.row(1)[:first + 1] and out.finish_reasons[1] == "stop"
  assert np.all(out.tokens[1, first + 1:] == 0)
  # A finished row never disturbs the others: row 2 equals its unconstrained run up to its own stop.
  expect2 = full.row(2)[:full.row(2).index(stop_id) + 1] if stop_id in full.row(2) else full.row(2)
  assert out.row(2) == expect2


def test_the_models_own_stop_ids_end_every_reply(params):
  """A model folder's generation_config.json EOS ids (`ModelConfig.stop_token_ids`) stop rows with no stop ids of
  their own, and join the ones a call names."""
  prompts = [[1, 2], [3, 4]]
  greedy = SamplingParams(max_new_tokens=10, temperature=0.0)
  full = Sampler(CONFIG).generate(params, prompts, jax.random.key(0), greedy)
  stop_id = full.row(0)[2]
  model_stops = Sampler(CONFIG.replace(stop_token_ids=(stop_id,)))
  out = model_stops.generate(params, prompts, jax.random.key(0), greedy)
  assert out.row(0) == full.row(0)[:full.row(0).index(stop_id) + 1] and out.finish_reasons[0] == "stop"
  other = full.row(1)[1]
  both = model_stops.generate(params, prompts, jax.random.key(0),
                              SamplingParams(max_new_tokens=10, temperature=0.0, stop_token_ids=(other,)))
  first = min(full.row(1).index(t) for t in (stop_id, other) if t in full.row(1))
  assert both.row(1) == full.row(1)[:first + 1] and both.finish_reasons[1] == "stop"


def test_inactive_rows_are_left_untouched(params):
  greedy = SamplingParams(max_new_tokens=6, temperature=0.0)
  sampler = Sampler(CONFIG)
  out = sampler.generate(params, [[1, 2, 3], [4, 5, 6]], jax.random.key(0), greedy, cache_size=64)
  before = np.asarray(out.state.cache.lengths).copy()
  out2 = sampler.continue_generation(params, out.state, [[7, 8], []], jax.random.key(0), greedy,
                                     active=[True, False])
  after = np.asarray(out2.state.cache.lengths)
  assert out2.finish_reasons[1] == "inactive" and out2.lengths[1] == 0
  assert after[1] == before[1]
  assert after[0] == before[0] + 2 + 6  # old pending + first new token, then one fed token per decode step


def test_cache_capacity_errors_are_clear(params):
  sampler = Sampler(CONFIG)
  with pytest.raises(ValueError, match="KV cache capacity exceeded for row 0"):
    sampler.generate(params, [[1] * 40], jax.random.key(0), SamplingParams(max_new_tokens=30), cache_size=64)
  out = sampler.generate(params, [[1, 2, 3]], jax.random.key(0), SamplingParams(max_new_tokens=8), cache_size=32)
  with pytest.raises(ValueError, match="cache_size 32"):
    sampler.continue_generation(params, out.state, [[5] * 20], jax.random.key(0), SamplingParams(max_new_tokens=8))


def test_input_validation(params):
  sampler = Sampler(CONFIG)
  with pytest.raises(ValueError, match="at least one token"):
    sampler.generate(params, [[1], []], jax.random.key(0), SamplingParams())
  out = sampler.generate(params, [[1], [2]], jax.random.key(0), SamplingParams(max_new_tokens=2))
  with pytest.raises(ValueError, match="no new tokens"):
    sampler.continue_generation(params, out.state, [[3], []], jax.random.key(0), SamplingParams())
  with pytest.raises(ValueError, match="need the Sampler to be built with a tokenizer"):
    Sampler(CONFIG).generate(params, [[1]], jax.random.key(0), SamplingParams(stop_strings=("</action>",)))


def test_padded_prompts_with_a_mask_equal_the_unpadded_prompts(params):
  # A left-padded batch (one row also right-padded) and its mask: pads never reach the cache and positions count
  # from the first real token, so tokens and log-probs are the unpadded rows', also after a padded continuation.
  prompts = [[5, 6, 7, 8, 9, 10], [11, 12], [13, 14, 15]]
  pad = 0
  padded = np.array([[5, 6, 7, 8, 9, 10, pad], [pad, pad, pad, pad, 11, 12, pad], [pad, pad, pad, 13, 14, 15, pad]])
  mask = np.array([[1] * 6 + [0], [0] * 4 + [1, 1, 0], [0, 0, 0, 1, 1, 1, 0]])
  obs = [[21, 22], [23], [24, 25, 26]]
  obs_padded, obs_mask = np.array([[0, 21, 22], [0, 0, 23], [24, 25, 26]]), np.array([[0, 1, 1], [0, 0, 1], [1, 1, 1]])
  sampling = SamplingParams(max_new_tokens=16, temperature=1.0, top_k=50)
  sampler = Sampler(CONFIG, pad_id=pad)
  plain = sampler.generate(params, prompts, jax.random.key(3), sampling, cache_size=64)
  masked = sampler.generate(params, padded, jax.random.key(3), sampling, cache_size=64, prompt_mask=mask)
  turns = [(plain, masked), (sampler.continue_generation(params, plain.state, obs, jax.random.key(4), sampling),
                             sampler.continue_generation(params, masked.state, obs_padded, jax.random.key(4), sampling,
                                                         new_tokens_mask=obs_mask))]
  for a, b in turns:
    np.testing.assert_array_equal(b.tokens, a.tokens)
    np.testing.assert_array_equal(b.lengths, a.lengths)
    np.testing.assert_allclose(b.logprobs, a.logprobs, atol=1e-6)
    np.testing.assert_allclose(b.policy_logprobs, a.policy_logprobs, atol=1e-6)
  # Without the mask the pads are prompt tokens, and the same rows decode differently.
  unmasked = sampler.generate(params, padded, jax.random.key(3), sampling, cache_size=64)
  assert not np.allclose(unmasked.policy_logprobs[1:], plain.policy_logprobs[1:])


def test_prompt_mask_validation(params):
  sampler = Sampler(CONFIG)
  with pytest.raises(ValueError, match="holes"):
    sampler.generate(params, [[1, 2, 3]], jax.random.key(0), SamplingParams(), prompt_mask=[[1, 0, 1]])
  with pytest.raises(ValueError, match="mask of shape"):
    sampler.generate(params, [[1, 2, 3]], jax.random.key(0), SamplingParams(), prompt_mask=[[1, 1]])
  with pytest.raises(ValueError, match="mask of 2 rows"):
    sampler.generate(params, [[1, 2, 3]], jax.random.key(0), SamplingParams(), prompt_mask=[[1, 1, 1], [1]])
  with pytest.raises(ValueError, match="at least one token"):
    sampler.generate(params, [[1, 2], [3, 4]], jax.random.key(0), SamplingParams(), prompt_mask=[[0, 1], [0, 0]])


def test_row_keys_make_a_row_independent_of_its_batch(params):
  """With one key per row, a row draws the same tokens alone or beside others (a batch split over hosts plays the
  same); a wrong number of keys is an error."""
  sampling = SamplingParams(max_new_tokens=12, temperature=1.0)
  keys = jax.random.split(jax.random.key(5), 3)
  prompts = [[3, 4, 5], [6, 7], [8, 9, 10, 11]]
  together = Sampler(CONFIG).generate(params, prompts, keys, sampling)
  for i in range(3):
    alone = Sampler(CONFIG).generate(params, [prompts[i]], keys[i:i + 1], sampling)
    np.testing.assert_array_equal(alone.row(0), together.row(i))
    np.testing.assert_allclose(alone.policy_logprobs[0, :alone.lengths[0]],
                               together.policy_logprobs[i, :together.lengths[i]], atol=1e-5)
  with pytest.raises(ValueError, match="one per row"):
    Sampler(CONFIG).generate(params, prompts, keys[:2], sampling)


def test_shared_heads_prefill_once_and_sample_like_whole_prompts(params):
  """Rows of one key prefill the head their prompts share once (`prefix_keys`); the cache then continues as a whole
  prompt's would: the same greedy tokens and log-probs (to rounding) now and after a continuation, and the saved
  prefill is reported. Rows of other keys, or of none, share nothing."""
  rng = np.random.default_rng(0)
  head = rng.integers(1, 300, 90).tolist()
  prompts = ([head + rng.integers(1, 300, int(rng.integers(1, 20))).tolist() for _ in range(4)]
             + [rng.integers(1, 300, 30).tolist(), head + [5], head + [6, 7]])
  keys = [0, 0, 0, 0, None, 0, 1]  # the last row shares the head's tokens but not the key
  sampler = Sampler(CONFIG, pad_id=0)
  sp = SamplingParams(max_new_tokens=12, temperature=0.0)
  whole = sampler.generate(params, prompts, jax.random.key(1), sp, cache_size=160)
  shared = sampler.generate(params, prompts, jax.random.key(1), sp, cache_size=160, prefix_keys=keys)
  assert whole.prefill_saved == 0 and shared.prefill_saved == 5 * 90 - 90  # five rows skip the head, forwarded once
  np.testing.assert_array_equal(shared.tokens, whole.tokens)
  np.testing.assert_allclose(shared.policy_logprobs, whole.policy_logprobs, atol=1e-5)
  np.testing.assert_array_equal(np.asarray(shared.state.cache.lengths), np.asarray(whole.state.cache.lengths))
  obs = [rng.integers(1, 300, 5).tolist() for _ in prompts]
  after_whole = sampler.continue_generation(params, whole.state, obs, jax.random.key(2), sp)
  after_shared = sampler.continue_generation(params, shared.state, obs, jax.random.key(2), sp)
  np.testing.assert_array_equal(after_shared.tokens, after_whole.tokens)
  np.testing.assert_allclose(after_shared.policy_logprobs, after_whole.policy_logprobs, atol=1e-5)
  with pytest.raises(ValueError, match="prefix_keys"):
    sampler.generate(params, prompts, jax.random.key(1), sp, prefix_keys=[0])


def test_shared_heads_are_prefilled_in_few_padding_rows(params, monkeypatch):
  """Up to four heads go through four head rows, not a bucket of eight: padding rows are prefilled in full and would
  cost what sharing spares (benchmarks/bench_rollout.py, `group_prefill`). Tokens equal whole prompts' either way."""
  rng = np.random.default_rng(1)
  heads = [rng.integers(1, 300, 100).tolist() for _ in range(5)]  # over MIN_SHARED (64) tokens
  sampler = Sampler(CONFIG, pad_id=0)
  seed, rows = sampler._seed, []

  def counted(params, state, tokens, segments, which):
    rows.append(tokens.shape[0])
    return seed(params, state, tokens, segments, which)

  monkeypatch.setattr(sampler, "_seed", counted)
  sp = SamplingParams(max_new_tokens=6, temperature=0.0)
  for n_heads in (1, 3, 5):
    prompts = [heads[g] + rng.integers(1, 300, 4).tolist() for g in range(n_heads) for _ in range(4)]
    keys = [g for g in range(n_heads) for _ in range(4)]
    shared = sampler.generate(params, prompts, jax.random.key(1), sp, prefix_keys=keys)
    whole = sampler.generate(params, prompts, jax.random.key(1), sp)
    np.testing.assert_array_equal(shared.tokens, whole.tokens)
  assert rows == [4, 4, 8]
