"""Fused scoring step: equals separate forward passes, log-probs at given ids, top-k gather, gradients,
no target scored from padding or another packed sequence, gaps without gradient."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agentopd_jax.batching.collate import ScoreBatch, scored_targets
from agentopd_jax.models import transformer
from agentopd_jax.models.config import preset
from agentopd_jax.scoring.chunked import token_stats
from agentopd_jax.scoring.fused import ScoreConfig, make_score_fn, score

# vocab 333 with chunk 64: the last chunk is partial, which exercises the shifted-and-masked final chunk.
CONFIG = preset("tiny", vocab_size=333, num_layers=2, hidden_size=64, intermediate_size=128, num_heads=4,
                num_kv_heads=2, head_dim=16)
CHUNK = 64


@pytest.fixture(scope="module")
def three_params():
  return [transformer.init_params(CONFIG, jax.random.key(i)) for i in range(3)]


@pytest.fixture(scope="module")
def batch():
  b, t = 3, 24
  tokens = jax.random.randint(jax.random.key(5), (b, t), 0, CONFIG.vocab_size)
  seg = jnp.ones((b, t), jnp.int32).at[2, 17:].set(0)
  mask = ((jnp.arange(t)[None] >= 6) & (seg > 0)).astype(jnp.float32)
  return ScoreBatch(tokens=tokens, segment_ids=seg, loss_mask=mask)


def _full_logprobs(params, tokens, segment_ids):
  """Reference: one plain forward, full [B, T, V] log-softmax, target-indexed like the scorer."""
  hidden, _ = transformer.forward(CONFIG, params, tokens, None, segment_ids)
  logp = jax.nn.log_softmax(transformer.logits_from_hidden(CONFIG, params, hidden), axis=-1)[:, :-1]
  token_lp = jnp.take_along_axis(logp, tokens[:, 1:, None], -1)[..., 0]
  return logp, jnp.pad(token_lp, ((0, 0), (1, 0)))


def test_fused_equals_three_separate_forwards(three_params, batch):
  policy, reference, teacher = three_params
  cfg = ScoreConfig(teacher="params", top_k=16, vocab_chunk=CHUNK)
  out = make_score_fn(CONFIG, cfg)(policy, reference, teacher, batch)
  mask = np.array(batch.loss_mask)
  mask[:, 0] = 0
  full = {}
  for name, params, got in [("policy", policy, out.policy_logprobs), ("reference", reference,
                                                                      out.reference_logprobs),
                            ("teacher", teacher, out.teacher_logprobs)]:
    full[name], expected = _full_logprobs(params, batch.tokens, batch.segment_ids)
    np.testing.assert_allclose(got, expected * mask, atol=1e-5)
  np.testing.assert_allclose(out.teacher_gap, (out.teacher_logprobs - out.policy_logprobs), atol=1e-6)
  np.testing.assert_allclose(out.reference_gap, (out.reference_logprobs - out.policy_logprobs), atol=1e-6)
  assert float(jnp.abs(out.teacher_gap).sum()) > 0  # different models really differ
  # Entropy of the policy.
  logp = full["policy"]
  entropy = jnp.pad(-(jnp.exp(logp) * logp).sum(-1), ((0, 0), (1, 0)))
  np.testing.assert_allclose(out.policy_entropy, entropy * mask, atol=1e-5)
  # Everything is zero off the mask.
  for arr in (out.policy_logprobs, out.reference_logprobs, out.teacher_logprobs, out.policy_entropy):
    assert np.all(np.asarray(arr)[mask == 0] == 0)


def test_weighted_loss_mask_scores_like_its_indicator(three_params, batch):
  # A weighted mask (SFT's up-weighted replies) selects the same tokens; its weights belong to the loss, not here.
  policy, reference, teacher = three_params
  fn = make_score_fn(CONFIG, ScoreConfig(teacher="params", top_k=4, vocab_chunk=CHUNK))
  weighted = batch.loss_mask * jnp.where(jnp.arange(batch.tokens.shape[1]) % 2 == 0, 7.0, 0.5)
  plain = fn(policy, reference, teacher, batch)
  got = fn(policy, reference, teacher, ScoreBatch(tokens=batch.tokens, segment_ids=batch.segment_ids, loss_mask=weighted))
  for name in ("policy_logprobs", "reference_logprobs", "teacher_logprobs", "policy_entropy", "policy_topk_ids",
               "policy_topk_logprobs", "teacher_topk_logprobs"):
    np.testing.assert_array_equal(getattr(got, name), getattr(plain, name), err_msg=name)


def test_topk_ids_and_teacher_gather(three_params, batch):
  policy, _, teacher = three_params
  out = make_score_fn(CONFIG, ScoreConfig(reference=False, teacher="params", top_k=16, vocab_chunk=CHUNK))(
      policy, None, teacher, batch)
  mask = np.array(batch.loss_mask, bool)
  mask[:, 0] = False
  pol_logp, _ = _full_logprobs(policy, batch.tokens, batch.segment_ids)
  tea_logp, _ = _full_logprobs(teacher, batch.tokens, batch.segment_ids)
  vals, ids = jax.lax.top_k(pol_logp, 16)
  got_ids = np.asarray(out.policy_topk_ids)[:, 1:]
  np.testing.assert_array_equal(got_ids[mask[:, 1:]], np.asarray(ids)[mask[:, 1:]])
  np.testing.assert_allclose(np.asarray(out.policy_topk_logprobs)[:, 1:][mask[:, 1:]],
                             np.asarray(vals)[mask[:, 1:]], atol=1e-5)
  gathered = jnp.take_along_axis(tea_logp, ids, axis=-1)
  np.testing.assert_allclose(np.asarray(out.teacher_topk_logprobs)[:, 1:][mask[:, 1:]],
                             np.asarray(gathered)[mask[:, 1:]], atol=1e-5)


def test_gathered_ids_match_full_softmax_with_gradient(three_params, batch):
  """`gather_ids` (a teacher's top-k support) returns the policy's log-probs at those ids, target-indexed, with the
  gradient of a full log-softmax."""
  policy = three_params[0]
  ids = jax.random.randint(jax.random.key(9), batch.tokens.shape + (5,), 0, CONFIG.vocab_size)
  gathered = ScoreBatch(tokens=batch.tokens, segment_ids=batch.segment_ids, loss_mask=batch.loss_mask, gather_ids=ids)
  cfg = ScoreConfig(reference=False, top_k=0, entropy=False, vocab_chunk=CHUNK)
  mask = np.array(batch.loss_mask)
  mask[:, 0] = 0

  def fused(p):
    return score(CONFIG, cfg, p, None, None, gathered).policy_gathered_logprobs

  def direct(p):
    logp, _ = _full_logprobs(p, batch.tokens, batch.segment_ids)
    at = jnp.take_along_axis(logp, ids[:, 1:], axis=-1)
    return jnp.pad(at, ((0, 0), (1, 0), (0, 0))) * mask[..., None]

  np.testing.assert_allclose(fused(policy), direct(policy), atol=1e-5)
  g_fused = jax.grad(lambda p: fused(p).sum())(policy)
  g_direct = jax.grad(lambda p: direct(p).sum())(policy)
  for a, b in zip(jax.tree.leaves(g_fused), jax.tree.leaves(g_direct)):
    np.testing.assert_allclose(a, b, atol=2e-4)


def test_policy_gradients_match_full_softmax(three_params, batch):
  policy = three_params[0]
  cfg = ScoreConfig(reference=False, top_k=4, vocab_chunk=CHUNK)

  def chunked_loss(p):
    out = score(CONFIG, cfg, p, None, None, batch)
    return out.policy_logprobs.sum() + 0.1 * out.policy_entropy.sum() + 0.01 * out.policy_topk_logprobs.sum()

  def full_loss(p):
    mask = batch.loss_mask.at[:, 0].set(0.0)
    logp, token_lp = _full_logprobs(p, batch.tokens, batch.segment_ids)
    logp = jnp.pad(logp, ((0, 0), (1, 0), (0, 0)))
    entropy = -(jnp.exp(logp) * logp).sum(-1)
    top = jax.lax.top_k(logp, 4)[0]
    return ((token_lp + 0.1 * entropy) * mask).sum() + 0.01 * (top * mask[..., None]).sum()

  g_chunked = jax.grad(chunked_loss)(policy)
  g_full = jax.grad(full_loss)(policy)
  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=2e-5, rtol=1e-4), g_chunked, g_full)


@pytest.mark.parametrize("chunk", [1, 7, 100, 333, 4096])
def test_token_stats_independent_of_chunk_size(chunk):
  h = jax.random.normal(jax.random.key(0), (2, 5, 16))
  w = jax.random.normal(jax.random.key(1), (16, 333))
  targets = jax.random.randint(jax.random.key(2), (2, 5), 0, 333)
  top_k = min(chunk, 3)
  st = token_stats(h, w, targets, chunk=chunk, top_k=top_k, entropy=True, gather_ids=targets[..., None])
  logp = jax.nn.log_softmax(h @ w, axis=-1)
  np.testing.assert_allclose(st.logprobs, jnp.take_along_axis(logp, targets[..., None], -1)[..., 0], atol=1e-5)
  np.testing.assert_allclose(st.gathered_logprobs[..., 0], st.logprobs, atol=1e-6)
  # chunk=1 rescales the accumulators 333 times: allow f32 round-off relative to the entropy's size.
  np.testing.assert_allclose(st.entropy, -(jnp.exp(logp) * logp).sum(-1), atol=1e-5, rtol=2e-5)
  vals, ids = jax.lax.top_k(logp, top_k)
  np.testing.assert_array_equal(st.topk_ids, ids)
  np.testing.assert_allclose(st.topk_logprobs, vals, atol=1e-5)


def test_token_stats_temperature():
  h = jax.random.normal(jax.random.key(0), (1, 4, 8))
  w = jax.random.normal(jax.random.key(1), (8, 50))
  targets = jnp.array([[1, 2, 3, 4]])
  st = token_stats(h, w, targets, chunk=16, temperature=0.5)
  logp = jax.nn.log_softmax((h @ w) / 0.5, axis=-1)
  np.testing.assert_allclose(st.logprobs, jnp.take_along_axis(logp, targets[..., None], -1)[..., 0], atol=1e-5)


def test_branches_switch_off_and_errors(three_params, batch):
  policy, reference, _ = three_params
  out = make_score_fn(CONFIG, ScoreConfig(reference=False, top_k=0, entropy=False, vocab_chunk=CHUNK))(
      policy, None, None, batch)
  assert out.reference_logprobs is None and out.teacher_logprobs is None and out.policy_topk_ids is None
  assert out.policy_entropy is None and out.policy_logprobs is not None
  only_ref = make_score_fn(CONFIG, ScoreConfig(policy=False, top_k=0, vocab_chunk=CHUNK))(None, reference, None,
                                                                                         batch)
  assert only_ref.policy_logprobs is None and only_ref.reference_gap is None
  with pytest.raises(ValueError, match="no reference params"):
    make_score_fn(CONFIG, ScoreConfig(vocab_chunk=CHUNK))(policy, None, None, batch)
  with pytest.raises(ValueError, match="no teacher params"):
    make_score_fn(CONFIG, ScoreConfig(reference=False, teacher="params", vocab_chunk=CHUNK))(policy, None, None,
                                                                                             batch)
  with pytest.raises(ValueError, match="ScoreConfig.teacher"):
    ScoreConfig(teacher="other")
  with pytest.raises(ValueError, match="top_k"):
    ScoreConfig(policy=False)


def _policy_lp(policy, tokens, seg, mask, **batch_kw):
  fn = make_score_fn(CONFIG, ScoreConfig(reference=False, top_k=0, entropy=False, vocab_chunk=CHUNK))
  out = fn(policy, None, None, ScoreBatch(tokens=jnp.asarray(tokens), segment_ids=jnp.asarray(seg),
                                          loss_mask=jnp.asarray(mask, jnp.float32), **batch_kw))
  return np.asarray(out.policy_logprobs)


def test_left_padding_never_scores_the_first_token_from_a_pad(three_params):
  # Loss mask = attention mask, as a left-padded tokenizer batch gives it: the first real token has no prediction.
  policy = three_params[0]
  rows = [[7, 8, 9, 10, 11, 12], [13, 14, 15]]
  width = 8
  tokens, seg = np.zeros((2, width), np.int32), np.zeros((2, width), np.int32)
  for b, r in enumerate(rows):
    tokens[b, width - len(r):], seg[b, width - len(r):] = r, 1
  got = _policy_lp(policy, tokens, seg, seg)
  for b, r in enumerate(rows):
    alone = _policy_lp(policy, [r], np.ones((1, len(r))), np.ones((1, len(r))))[0]
    assert alone[0] == 0.0
    np.testing.assert_allclose(got[b, width - len(r):], alone, atol=1e-5)
    assert np.all(got[b, :width - len(r)] == 0)


def test_packed_rows_never_score_across_a_segment_boundary(three_params):
  # Two sequences packed in one row, every token in the loss mask: the second one's first token is not predicted
  # by the first sequence's last state, and each sequence scores as it does alone.
  policy = three_params[0]
  a, b = [21, 22, 23, 24], [31, 32, 33]
  tokens = np.array([a + b + [0]], np.int32)
  seg = np.array([[1] * len(a) + [2] * len(b) + [0]], np.int32)
  got = _policy_lp(policy, tokens, seg, np.ones_like(seg))[0]
  for start, r in ((0, a), (len(a), b)):
    alone = _policy_lp(policy, [r], np.ones((1, len(r))), np.ones((1, len(r))))[0]
    np.testing.assert_allclose(got[start:start + len(r)], alone, atol=1e-5)
  assert got[len(a)] == 0.0 and got[-1] == 0.0


def test_gaps_carry_no_gradient(three_params, batch):
  # SDAR's gate σ(β·Δ) and OPID's advantage Δ treat the gap as a constant; the policy log-prob keeps its gradient.
  policy, reference, teacher = three_params
  cfg = ScoreConfig(teacher="params", top_k=0, entropy=False, vocab_chunk=CHUNK)

  def gated_and_plain(p):
    s = score(CONFIG, cfg, p, reference, teacher, batch)
    gated = jax.nn.sigmoid(2.0 * s.teacher_gap) + s.reference_gap
    return jnp.stack([gated.sum(), (s.teacher_logprobs - s.policy_logprobs).sum()])

  jac = jax.tree.leaves(jax.jacrev(gated_and_plain)(policy))   # one compile, a [2, ...] gradient per leaf
  assert all(float(jnp.abs(g[0]).max()) == 0.0 for g in jac)
  assert max(float(jnp.abs(g[1]).max()) for g in jac) > 0.0


def test_scored_targets_lists_each_rows_loss_targets():
  mask = np.array([[1, 0, 1, 1, 0, 0], [0, 0, 0, 0, 0, 2], [0, 0, 0, 0, 0, 0]], np.float32)
  np.testing.assert_array_equal(scored_targets(mask, 4), [[2, 3, 0, 0], [5, 0, 0, 0], [0, 0, 0, 0]])
  with pytest.raises(ValueError, match="width 1"):
    scored_targets(mask, 1)


@pytest.mark.parametrize("packed", [False, True])
def test_scored_targets_score_like_every_position(three_params, batch, packed):
  """`ScoreBatch.scored` (the last layer and the log-softmax at the loss targets only): every output of the three
  branches, top-k and gathered ids included, and the policy's gradient, are those of scoring every position."""
  policy, reference, teacher = three_params
  seg = np.array(batch.segment_ids)
  if packed:
    seg[0, 10:] = 2
  ids = jax.random.randint(jax.random.key(9), batch.tokens.shape + (5,), 0, CONFIG.vocab_size)
  full = ScoreBatch(tokens=batch.tokens, segment_ids=jnp.asarray(seg), loss_mask=batch.loss_mask, gather_ids=ids)
  read = full.replace(scored=jnp.asarray(scored_targets(np.asarray(batch.loss_mask), 32)))
  cfg = ScoreConfig(teacher="params", top_k=4, vocab_chunk=CHUNK)
  want, got = (score(CONFIG, cfg, policy, reference, teacher, b) for b in (full, read))
  for name in want.keys():
    np.testing.assert_allclose(np.asarray(got[name]), np.asarray(want[name]), atol=1e-5, err_msg=name)

  def loss(p, b):
    out = score(CONFIG, cfg, p, reference, teacher, b)
    return (out.policy_logprobs.sum() + 0.1 * out.policy_entropy.sum() + 0.01 * out.policy_topk_logprobs.sum()
            + 0.01 * out.policy_gathered_logprobs.sum())

  jax.tree.map(lambda a, b: np.testing.assert_allclose(a, b, atol=2e-5, rtol=1e-4),
               jax.grad(loss)(policy, read), jax.grad(loss)(policy, full))
