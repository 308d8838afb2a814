"""Teacher signals scored once per batch: packed or not, with shared prompt prefixes or not, they equal a direct
forward of the teacher's sequence, top-k included; SDAR's privileged prompt (raw prefix, re-encoded, left-truncated);
the per-turn metrics."""
import jax
import numpy as np
import pytest

from agentopd_jax.batching.collate import TeacherSignal, collate
from agentopd_jax.batching.samples import Sample
from agentopd_jax.envs.verl_agent.corpus import default_corpus
from agentopd_jax.models import transformer
from agentopd_jax.models.config import preset
from agentopd_jax.models.tokenizer import apply_chat_template, builtin_tokenizer
from agentopd_jax.parallel.sharding import make_mesh
from agentopd_jax.rollout.chat import raw_prefixed_ids, templated_text
from agentopd_jax.scoring.teacher_signals import score_teacher
from agentopd_jax.methods.sdar.teacher import TeacherConfig, signal_metrics

CONFIG = preset("tiny", vocab_size=300, num_layers=2, hidden_size=64, intermediate_size=128, num_heads=4,
                num_kv_heads=2, head_dim=16)


def _samples(n=5, seed=0):
  rng = np.random.RandomState(seed)
  out = []
  for i in range(n):
    prompt, completion = rng.randint(1, 300, rng.randint(3, 40)).tolist(), rng.randint(1, 300, rng.randint(2, 9))
    mask = [1] * len(completion)
    if i == 1:  # an observation token inside a whole-trajectory completion
      mask[len(mask) // 2] = 0
    out.append(Sample(prompt_ids=prompt, completion_ids=completion.tolist(), completion_mask=mask,
                      behaviour_logprobs=[-1.0 * m for m in mask], group_id=0, problem_id="p", traj_id=i,
                      step_index=i % 3, action_valid=1.0))
  return out


@jax.jit
def _logits(params, tokens, segments):
  hidden, _ = transformer.forward(CONFIG, params, tokens, None, segments)
  return transformer.logits_from_hidden(CONFIG, params, hidden)[0]


def _direct(params, sample, temperature=1.0):
  """Full-softmax log-probs of the completion tokens and the full distributions that predict them. One compiled
  forward for every sample: the sequence is padded to 256 tokens (segment 0), which no earlier position sees."""
  ids = sample.prompt_ids + sample.completion_ids
  tokens, segments = np.zeros((2, 1, 256), np.int32)
  tokens[0, :len(ids)], segments[0, :len(ids)] = ids, 1
  logits = _logits(params, tokens, segments)
  logp = jax.nn.log_softmax(logits[:len(ids)] / temperature, axis=-1)
  n = len(sample.prompt_ids)
  dists = np.asarray(logp[n - 1:sample.length - 1])
  token_lp = np.take_along_axis(dists, np.asarray(sample.completion_ids)[:, None], axis=-1)[:, 0]
  return token_lp * np.asarray(sample.completion_mask), dists


@pytest.mark.parametrize("pack_width,rows", [(0, 2), (128, 1)])
def test_scores_equal_a_direct_forward_per_sample(pack_width, rows):
  params = transformer.init_params(CONFIG, jax.random.key(0))
  samples = _samples()
  got = score_teacher(CONFIG, params, samples, top_k=4, pack_width=pack_width, rows_per_call=rows)
  for s, sig in zip(samples, got):
    expect, dists = _direct(params, s)
    np.testing.assert_allclose(sig.logprobs, expect, atol=1e-5)
    on = np.asarray(s.completion_mask, bool)
    top = np.sort(dists, axis=-1)[:, ::-1][:, :4]
    np.testing.assert_allclose(sig.topk_logprobs[on], top[on], atol=1e-5)
    np.testing.assert_allclose(np.take_along_axis(dists, sig.topk_ids, -1)[on], top[on], atol=1e-5)


def _prefixed_samples(seed=0):
  """Three groups: two whose prompts start with a long common prefix (one with an empty-prompt-free twist: a member
  whose prompt diverges after 80 tokens), one of unrelated prompts."""
  rng = np.random.RandomState(seed)
  heads = [rng.randint(1, 300, n).tolist() for n in (90, 130)]
  out = []
  for g, head in enumerate(heads + [None]):
    for j in range(4):
      prompt = (head + rng.randint(1, 300, rng.randint(1, 30)).tolist()) if head else rng.randint(1, 300, 20).tolist()
      if g == 0 and j == 3:
        prompt = head[:80] + [(head[80] % 299) + 1] + prompt[81:]
      completion = rng.randint(1, 300, rng.randint(2, 9)).tolist()
      mask = [1] * len(completion)
      mask[-1] = j % 2  # an observation token at the end of some
      out.append(Sample(prompt_ids=prompt, completion_ids=completion, completion_mask=mask,
                        behaviour_logprobs=[0.0] * len(completion), group_id=g, problem_id=str(g), traj_id=4 * g + j,
                        step_index=j, action_valid=1.0))
  return out


@pytest.mark.parametrize("pack_width,rows", [(0, 3), (256, 2)])
def test_shared_prefix_scores_equal_a_direct_forward(pack_width, rows):
  params = transformer.init_params(CONFIG, jax.random.key(2))
  samples = _prefixed_samples(seed=1)
  got = score_teacher(CONFIG, params, samples, top_k=3, pack_width=pack_width, rows_per_call=rows, temperature=0.8)
  for s, sig in zip(samples, got):
    expect, dists = _direct(params, s, temperature=0.8)
    np.testing.assert_allclose(sig.logprobs, expect, atol=1e-5)
    on = np.asarray(s.completion_mask, bool)
    top = np.sort(dists, axis=-1)[:, ::-1][:, :3]
    np.testing.assert_allclose(sig.topk_logprobs[on], top[on], atol=1e-5)
    assert (sig.topk_ids[~on] == 0).all() and (sig.logprobs[~on] == 0).all()
  meshed = score_teacher(CONFIG, params, samples, top_k=3, pack_width=pack_width, rows_per_call=rows,
                         temperature=0.8, mesh=make_mesh((8, 1, 1)))
  for a, b in zip(got, meshed):
    np.testing.assert_allclose(a.logprobs, b.logprobs, atol=1e-5)


def test_a_completion_without_a_prompt_scores_from_its_second_token():
  params = transformer.init_params(CONFIG, jax.random.key(3))
  s = Sample(prompt_ids=[], completion_ids=[4, 5, 6], completion_mask=[1, 1, 1], behaviour_logprobs=[0.0] * 3,
             group_id=0, problem_id="p", traj_id=0, step_index=0, action_valid=1.0)
  got = score_teacher(CONFIG, params, [s])[0].logprobs
  whole = Sample(prompt_ids=[4], completion_ids=[5, 6], completion_mask=[1, 1], behaviour_logprobs=[0.0] * 2,
                 group_id=0, problem_id="p", traj_id=0, step_index=0, action_valid=1.0)
  assert got[0] == 0.0
  np.testing.assert_allclose(got[1:], _direct(params, whole)[0], atol=1e-5)


def test_scores_on_a_mesh_and_at_a_temperature_match():
  params = transformer.init_params(CONFIG, jax.random.key(1))
  samples = _samples(7, seed=3)
  plain = score_teacher(CONFIG, params, samples, temperature=0.7)
  meshed = score_teacher(CONFIG, params, samples, temperature=0.7, pack_width=128, rows_per_call=3,
                         mesh=make_mesh((8, 1, 1)))
  for a, b in zip(plain, meshed):
    np.testing.assert_allclose(a.logprobs, b.logprobs, atol=1e-5)
    assert a.topk_ids is None and b.topk_ids is None
  hot = score_teacher(CONFIG, params, samples[:1])[0].logprobs
  assert np.abs(hot - plain[0].logprobs).max() > 1e-3  # the temperature is applied


def test_signals_land_on_their_samples_completion_tokens_in_a_packed_batch():
  samples = _samples(4)
  signals = [TeacherSignal(logprobs=np.full(len(s.completion_ids), -(i + 1.0)),
                           topk_ids=np.full((len(s.completion_ids), 2), i + 1, np.int32),
                           topk_logprobs=np.full((len(s.completion_ids), 2), -0.5 * (i + 1)))
             for i, s in enumerate(samples)]
  batch = collate(samples, [1.0] * 4, 32, pack_width=128, teacher=signals)
  on = batch.loss_mask > 0
  # Each loss token carries its own sample's teacher values; nothing off the loss mask.
  np.testing.assert_array_equal(batch.teacher_logprobs[on], -batch.teacher_topk_ids[..., 0][on].astype(np.float32))
  np.testing.assert_array_equal(batch.teacher_logprobs[~on], 0.0)
  np.testing.assert_array_equal(batch.teacher_topk_logprobs[..., 1][on], 0.5 * batch.teacher_logprobs[on])
  assert batch.score_batch().gather_ids is batch.teacher_topk_ids
  assert sorted(np.unique(batch.teacher_logprobs[on]).tolist()) == [-4.0, -3.0, -2.0, -1.0]


def test_privileged_prompt_is_a_raw_prefix_before_the_template_and_loses_it_first():
  tok = builtin_tokenizer(default_corpus())
  ids = apply_chat_template(tok, [{"role": "user", "content": "Your task is to: put a book in sofa."}])
  text = templated_text(tok, ids)
  assert text.startswith("<|im_start|>user\n") and text.endswith("<|im_start|>assistant\n")
  prefix = "[Privileged Skill Information]\nGo to the sofa last.\n\n"
  full = raw_prefixed_ids(tok, prefix, text)
  assert tok.decode(full, skip_special_tokens=False) == prefix + text
  assert full[-len(ids):] == ids  # the student's prompt is intact after the prefix
  cut = raw_prefixed_ids(tok, prefix, text, len(ids) + 2)
  assert cut == full[-(len(ids) + 2):] and len(cut) == len(ids) + 2  # the skill goes first, never the task


def test_signal_metrics_by_turn():
  samples = _samples(3)
  signals = []
  for s in samples:
    n = len(s.completion_ids)
    signals.append(TeacherSignal(logprobs=np.where(np.asarray(s.completion_mask) > 0, 0.0 if s.traj_id else -2.0,
                                                   0.0) * np.ones(n)))
  m = signal_metrics(samples, signals, gate_beta=5.0)
  # Behaviour log-probs are -1 on every generated token: gap = teacher + 1.
  assert m["teacher/gap_turn0"] == pytest.approx(-1.0) and m["teacher/kl_turn0"] == pytest.approx(1.0)
  assert m["teacher/gap_turn1"] == pytest.approx(1.0) and m["teacher/gate_active_turn1"] == 1.0
  assert m["teacher/gate_turn0"] == pytest.approx(1 / (1 + np.exp(5.0)))
  gaps = np.concatenate([np.full(sum(s.completion_mask), -1.0 if s.traj_id == 0 else 1.0) for s in samples])
  assert m["teacher/gap_mean"] == pytest.approx(gaps.mean()) and m["teacher/gap_std"] == pytest.approx(gaps.std())


def test_teacher_config_names_the_bad_field():
  with pytest.raises(ValueError, match="teacher.source"):
    TeacherConfig(source="ema")
  with pytest.raises(ValueError, match="teacher.context"):
    TeacherConfig(context="hint")
  with pytest.raises(ValueError, match="teacher.pool_run"):
    TeacherConfig(source="pool")
