"""The jitted train step: sharded equals single-device, micro-batching is exact, a non-finite batch is skipped."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentopd_jax.batching.collate import TrainBatch, bucket, pack_rows
from agentopd_jax.batching.samples import Sample
from agentopd_jax.models import config as model_config, transformer
from agentopd_jax.methods.agentic_opd.config import AgenticOpdConfig
from agentopd_jax.objectives.registry import LossCore, LossParams
from agentopd_jax.parallel.sharding import make_mesh
from agentopd_jax.training.train_step import (OptimConfig, cached_train_step, init_state, learning_rate_schedule,
                                              make_minibatches, make_optimizer, make_train_step, split_minibatches)

CONFIG = model_config.preset("tiny", vocab_size=256, hidden_size=64, intermediate_size=128, num_layers=2,
                             num_heads=4, num_kv_heads=2, head_dim=16)


def _batch(rows=8, width=24, seed=0) -> TrainBatch:
  """Random prompts + completions of different lengths, right-padded; advantages ±1, old log-probs near truth."""
  rng = np.random.default_rng(seed)
  tokens = rng.integers(3, CONFIG.vocab_size, (rows, width)).astype(np.int32)
  lengths = rng.integers(width // 2, width + 1, rows)
  prompt = rng.integers(3, width // 2, rows)
  seg = (np.arange(width)[None] < lengths[:, None]).astype(np.int32)
  mask = ((np.arange(width)[None] >= prompt[:, None]) & (seg > 0)).astype(np.float32)
  adv = np.where(rng.random(rows) < 0.5, 1.0, -1.0)[:, None] * mask
  old = -np.log(CONFIG.vocab_size) * mask + 0.05 * rng.standard_normal((rows, width)) * mask
  return TrainBatch(tokens=tokens * seg, segment_ids=seg, positions=np.tile(np.arange(width), (rows, 1)) * seg,
                    loss_mask=mask, advantages=adv.astype(np.float32), old_logprobs=old.astype(np.float32))


def _params():
  return transformer.init_params(CONFIG, jax.random.key(0))


LOSS = LossParams(core=LossCore(kl_coef=0.01, entropy_coef=0.001))
OPTIM = OptimConfig(learning_rate=1e-3, warmup_steps=2)


def _train(mesh=None, micro=4, steps=2, loss=LOSS, batch=None, optim=OPTIM):
  optimizer = make_optimizer(optim)
  params = _params()
  reference = jax.tree.map(jnp.copy, params) if loss.core.kl_coef else None
  state = init_state(params, optimizer, reference, mesh=mesh, model=CONFIG)
  step = make_train_step(CONFIG, loss, optimizer, mesh, with_reference=reference is not None)
  metrics = []
  for s in range(steps):
    mb = split_minibatches(batch if batch is not None else _batch(seed=s), 8, micro)[0]
    state, m = step(state, mb)
    metrics.append(jax.tree.map(float, m))
  return state, metrics


def test_sharded_step_equals_single_device():
  single, m1 = _train()
  mesh = make_mesh((2, 2, 2))
  sharded, m2 = _train(mesh=mesh)
  assert int(sharded.step) == int(single.step) == 2
  for a, b in zip(jax.tree.leaves(single.params), jax.tree.leaves(sharded.params)):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=2e-6, rtol=2e-5)
  specs = {leaf.sharding.spec for leaf in jax.tree.leaves(sharded.params)}
  assert any(spec != jax.sharding.PartitionSpec() for spec in specs)  # something really is sharded
  np.testing.assert_allclose(m1[-1]["loss"], m2[-1]["loss"], rtol=1e-5)


def test_micro_batch_accumulation_is_exact():
  """One micro-batch of 8 rows or four of 2 rows: same loss, same metrics, same update (token-mean is global)."""
  whole, mw = _train(micro=8)
  parts, mp = _train(micro=2)
  for a, b in zip(jax.tree.leaves(whole.params), jax.tree.leaves(parts.params)):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=2e-6, rtol=2e-5)
  for k in mw[0]:
    np.testing.assert_allclose(mw[0][k], mp[0][k], rtol=2e-5, atol=1e-6, err_msg=k)


def test_a_cached_step_is_shared_by_equal_configs_and_trains_as_a_fresh_one():
  """Runs in one process that build the step from equal (model, loss, optimizer config) get one step object, whose
  traced programs they share, and it updates a state as a step of its own optimizer would, bit for bit."""
  step = cached_train_step(CONFIG, LOSS, OPTIM, with_reference=True)
  assert cached_train_step(CONFIG, LOSS, OptimConfig(learning_rate=1e-3, warmup_steps=2), with_reference=True) is step
  assert cached_train_step(CONFIG, LOSS, OptimConfig(learning_rate=2e-3, warmup_steps=2), with_reference=True) \
      is not step
  fresh, _ = _train()
  optimizer = make_optimizer(OPTIM)  # the run's own, for its state
  state = init_state(_params(), optimizer, jax.tree.map(jnp.copy, _params()), model=CONFIG)
  for s in range(2):
    state, _ = step(state, split_minibatches(_batch(seed=s), 8, 4)[0])
  for a, b in zip(jax.tree.leaves(fresh), jax.tree.leaves(state)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_non_finite_loss_skips_the_update():
  bad = _batch()
  bad.advantages[0, -1] = np.nan
  bad.loss_mask[0, -1] = 1.0
  optimizer = make_optimizer(OPTIM)
  state = init_state(_params(), optimizer)
  before = jax.tree.map(np.asarray, state.params)
  step = make_train_step(CONFIG, LossParams(), optimizer)
  state, metrics = step(state, split_minibatches(bad, 8, 4)[0])
  assert float(metrics["skipped"]) == 1.0 and int(state.step) == 0
  for a, b in zip(jax.tree.leaves(before), jax.tree.leaves(state.params)):
    np.testing.assert_array_equal(a, np.asarray(b))
  state, metrics = step(state, split_minibatches(_batch(), 8, 4)[0])
  assert float(metrics["skipped"]) == 0.0 and int(state.step) == 1


def test_sft_objective_learns_a_fixed_batch():
  batch = _batch(seed=5)
  _, metrics = _train(loss=LossParams("sft"), steps=30, batch=batch, micro=8,
                      optim=OptimConfig(learning_rate=1e-2))
  assert metrics[-1]["loss"] < 0.5 * metrics[0]["loss"]


def test_kl_objective_without_reference_is_an_error():
  with pytest.raises(ValueError, match="needs reference params"):
    make_train_step(CONFIG, LossParams(core=LossCore(kl_coef=0.1)), make_optimizer(OPTIM))


def test_seq_mean_counts_every_sample_and_no_padding_row():
  """verl's seq-mean divides by every row of its batch, a sample without loss tokens too; the rows that pad a
  mini-batch (segment id 0) are not in its batch. Rows 6 and 7 below have no loss tokens; row 7 is padding, or a
  sample: the per-token losses are the same, and the mean is over 7 rows, or 8."""
  batch = _batch()
  batch.loss_mask[6:] = 0.0
  batch.advantages[6:] = 0.0
  batch.old_logprobs[6:] = 0.0
  batch.segment_ids[7] = 0
  as_sample = batch.replace(segment_ids=batch.segment_ids.copy())
  as_sample.segment_ids[7, 0] = 1
  model = model_config.preset("tiny", vocab_size=256, hidden_size=16, intermediate_size=32, num_layers=1, num_heads=1,
                              num_kv_heads=1, head_dim=16)
  optimizer = make_optimizer(OPTIM)
  step = make_train_step(model, LossParams(core=LossCore(loss_agg_mode="seq-mean-token-sum")), optimizer)
  pg = [float(step(init_state(transformer.init_params(model, jax.random.key(0)), optimizer),
                   split_minibatches(b, 8, 8)[0])[1]["pg_loss"]) for b in (batch, as_sample)]
  np.testing.assert_allclose(pg[1], pg[0] * 7 / 8, rtol=1e-5)


def test_split_minibatches_shapes_and_errors():
  parts = split_minibatches(_batch(rows=8), 4, 2)
  assert len(parts) == 2 and parts[0].tokens.shape == (2, 2, 24)
  with pytest.raises(ValueError, match="multiple of mini_batch_size"):
    split_minibatches(_batch(rows=8), 3, 1)


def _samples(n=12, seed=0):
  """Step samples of 10-60 tokens with on-policy-ish behaviour log-probs and ±1 advantages."""
  rng = np.random.default_rng(seed)
  out = []
  for i in range(n):
    p, r = int(rng.integers(5, 40)), int(rng.integers(2, 20))
    out.append(Sample(prompt_ids=rng.integers(3, CONFIG.vocab_size, p).tolist(),
                      completion_ids=rng.integers(3, CONFIG.vocab_size, r).tolist(), completion_mask=[1] * r,
                      behaviour_logprobs=(-np.log(CONFIG.vocab_size) + 0.05 * rng.standard_normal(r)).tolist(),
                      group_id=i // 4, problem_id=str(i // 4), traj_id=i, step_index=0, action_valid=1.0))
  return out, np.where(rng.random(n) < 0.5, 1.0, -1.0).tolist()


@pytest.mark.parametrize("loss", [LossParams(core=LossCore(kl_coef=0.01, entropy_coef=0.001)), LossParams("sft")],
                         ids=["grpo_kl_entropy", "sft"])
def test_packed_minibatches_train_exactly_like_one_sample_per_row(loss):
  # Packing only rearranges tokens: segments keep attention apart and positions restart, so a token-mean loss,
  # its gradients and the updated params equal the unpacked batch's.
  samples, adv = _samples()
  results = []
  for pack_width in (0, 64):
    minibatches = make_minibatches(samples, adv, 6, 2, pack_width)
    optimizer = make_optimizer(OPTIM)
    params = _params()
    state = init_state(params, optimizer, jax.tree.map(jnp.copy, params) if loss.core.kl_coef else None)
    step = make_train_step(CONFIG, loss, optimizer, with_reference=bool(loss.core.kl_coef))
    losses = []
    for mb in minibatches:
      state, m = step(state, mb)
      losses.append(float(m["loss"]))
    results.append((state.params, losses, minibatches))
  (unpacked, l0, mb0), (packed, l1, mb1) = results
  assert len(mb0) == len(mb1) == 2
  assert mb1[0].tokens.size < mb0[0].tokens.size  # fewer padded tokens
  assert int(mb1[0].segment_ids.max()) > 1       # rows really hold several samples
  np.testing.assert_allclose(l0, l1, rtol=1e-5)
  for a, b in zip(jax.tree.leaves(unpacked), jax.tree.leaves(packed)):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-6, rtol=1e-5)


def test_make_minibatches_shapes():
  samples, adv = _samples(n=10)
  parts = make_minibatches(samples, adv, 4, 2)                 # unpacked: 3 runs of <= 4 samples, 4 rows each
  assert [p.tokens.shape[:2] for p in parts] == [(2, 2)] * 3 and parts[0].tokens.shape[2] % 128 == 0
  assert float(sum(p.loss_mask.sum() for p in parts)) == sum(len(s.completion_ids) for s in samples)
  packed = make_minibatches(samples, adv, 4, 16, pack_width=128)
  shapes = {p.tokens.shape for p in packed}
  assert len(shapes) == 1 and shapes.pop()[1:] == (4, 128)    # one shape; rows bucketed to a multiple of 4
  assert float(sum(p.loss_mask.sum() for p in packed)) == sum(len(s.completion_ids) for s in samples)
  wide = make_minibatches(samples, adv, 4, 16, pack_width=16)  # rows widen to the longest sample (rounded up)
  assert wide[0].tokens.shape[-1] == 128
  # On a mesh the rows of a micro-batch are split over the data axes: 8 devices need a multiple of 8 rows.
  sharded = make_minibatches(samples, adv, 4, 16, pack_width=128, mesh=make_mesh((8, 1, 1)))
  assert sharded[0].tokens.shape[:2] == (1, 8)


def test_learning_rate_schedule_warms_up_then_cosine_decays_to_the_floor():
  cfg = OptimConfig(learning_rate=1e-2, warmup_steps=2, decay_steps=4, final_lr_ratio=0.1)
  # Hand-computed: warmup 0, 0.5, then cosine 1e-2 * (0.1 + 0.9 * (1 + cos(pi k / 4)) / 2) for k = 0..4, then flat.
  expected = [0.0, 5e-3, 1e-2, 1e-2 * (0.1 + 0.45 * (1 + np.cos(np.pi / 4))), 1e-2 * 0.55,
              1e-2 * (0.1 + 0.45 * (1 + np.cos(3 * np.pi / 4))), 1e-3, 1e-3]
  schedule = learning_rate_schedule(cfg)
  np.testing.assert_allclose([float(schedule(k)) for k in range(len(expected))], expected, rtol=1e-5, atol=1e-12)
  assert learning_rate_schedule(OptimConfig(learning_rate=1e-3)) == 1e-3  # constant: a float, no step counter
  with pytest.raises(ValueError, match="final_lr_ratio"):
    OptimConfig(learning_rate=1e-3, decay_steps=3, final_lr_ratio=2.0)


def _distill(mesh=None, teacher_seed=1, micro=4):
  """Three Agentic-OPD steps (top-k reverse KL to a teacher checkpoint) on one batch from the same start."""
  optimizer = make_optimizer(OPTIM)
  loss = LossParams("agentic_opd", method=AgenticOpdConfig(top_k=4))
  state = init_state(_params(), optimizer, mesh=mesh, model=CONFIG)
  teacher = transformer.init_params(CONFIG, jax.random.key(teacher_seed))
  step = make_train_step(CONFIG, loss, optimizer, mesh)
  metrics = []
  for _ in range(3):
    state, m = step(state, split_minibatches(_batch(), 8, micro)[0], teacher)
    metrics.append(jax.tree.map(float, m))
  return state, metrics


def test_distillation_step_scores_the_given_teacher_sharded_and_single():
  single, m1 = _distill()
  assert m1[0]["opd_reverse_kl"] > 0 and m1[2]["opd_reverse_kl"] < m1[0]["opd_reverse_kl"]  # it distils
  sharded, m2 = _distill(mesh=make_mesh((2, 2, 2)))
  np.testing.assert_allclose(m1[0]["loss"], m2[0]["loss"], rtol=1e-5)
  # Later steps agree less tightly than GRPO's: Adam's normalisation amplifies float reduction-order noise in the
  # near-zero gradients of a random model's almost uniform top-k distributions.
  for a, b in zip(jax.tree.leaves(single.params), jax.tree.leaves(sharded.params)):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-4)
  # The student as its own teacher: the renormalised distributions agree, nothing to distil.
  _, same = _distill(teacher_seed=0)
  assert abs(same[0]["opd_reverse_kl"]) < 1e-6


def test_distillation_step_without_teacher_is_an_error():
  optimizer = make_optimizer(OPTIM)
  step = make_train_step(CONFIG, LossParams("agentic_opd", method=AgenticOpdConfig(top_k=4)), optimizer)
  with pytest.raises(ValueError, match="teacher_params"):
    step(init_state(_params(), optimizer), split_minibatches(_batch(), 8, 4)[0])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(1, 64), min_size=1, max_size=40), st.integers(64, 200))
def test_pack_rows_places_every_sample_once_within_the_width(lengths, width):
  rows = pack_rows(lengths, width)
  assert sorted(i for row in rows for i in row) == list(range(len(lengths)))
  assert all(sum(lengths[i] for i in row) <= width for row in rows)
  # First-fit never leaves two rows that could be merged, so it uses < 2x the optimal number of rows.
  assert len(rows) <= max(1, 2 * -(-sum(lengths) // width))
  assert rows == pack_rows(lengths, width)  # deterministic


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 5000), st.sampled_from([1, 4, 8, 32, 128]))
def test_bucket_pads_little_and_gives_few_shapes_per_octave(n, minimum):
  b = bucket(n, minimum)
  assert b >= n and b % minimum == 0 and bucket(b, minimum) == b
  assert b <= max(minimum * 8, n + n // 4 + minimum) and b - n < max(minimum, b // 4 + 1)
  # at most 4 buckets in (2^k, 2^(k+1)] past 8x the minimum
  octave = {bucket(m, minimum) for m in range(8 * minimum * 2 ** 3 + 1, 8 * minimum * 2 ** 4 + 1)}
  assert len(octave) == 4


def test_pack_rows_rejects_a_sample_wider_than_the_row():
  with pytest.raises(ValueError, match="over the row width 8"):
    pack_rows([3, 9], 8)


def _grouped_samples(seed=0):
  """Three tasks x 6 rollouts: each task's prompts open with one head of 70-100 tokens (a skill text), then differ;
  the first rollout's prompt is the head + 1 token; plus 3 samples that share nothing."""
  rng = np.random.default_rng(seed)
  out = []
  for task in range(3):
    head = rng.integers(3, CONFIG.vocab_size, int(rng.integers(70, 100))).tolist()
    for j in range(6):
      tail = rng.integers(3, CONFIG.vocab_size, 1 if j == 0 else int(rng.integers(5, 30))).tolist()
      out.append(head + tail)
  out += [rng.integers(3, CONFIG.vocab_size, int(rng.integers(20, 60))).tolist() for _ in range(3)]
  samples = []
  for i, prompt in enumerate(out):
    r = int(rng.integers(2, 12))
    samples.append(Sample(prompt_ids=prompt, completion_ids=rng.integers(3, CONFIG.vocab_size, r).tolist(),
                          completion_mask=[1] * r,
                          behaviour_logprobs=(-np.log(CONFIG.vocab_size) + 0.05 * rng.standard_normal(r)).tolist(),
                          group_id=i // 6, problem_id=str(i // 6), traj_id=i, step_index=0, action_valid=1.0))
  order = rng.permutation(len(samples))  # tasks interleaved: mini-batches mix them
  return [samples[i] for i in order], np.where(rng.random(len(samples)) < 0.5, 1.0, -1.0)[order].tolist()


def _steps(minibatches, loss, config=CONFIG, mesh=None, teacher=None):
  optimizer = make_optimizer(OPTIM)
  params = transformer.init_params(config, jax.random.key(0))
  state = init_state(params, optimizer, jax.tree.map(jnp.copy, params) if loss.core.kl_coef else None, mesh=mesh,
                     model=config)
  step = make_train_step(config, loss, optimizer, mesh, with_reference=bool(loss.core.kl_coef))
  metrics = []
  for mb in minibatches:
    state, m = step(state, mb, teacher)
    metrics.append(jax.tree.map(float, m))
  return state.params, metrics


@pytest.mark.parametrize("loss", [LOSS, LossParams("agentic_opd", method=AgenticOpdConfig(top_k=4))],
                         ids=["grpo_kl_entropy", "distill_teacher"])
def test_shared_prefix_minibatches_train_like_whole_rows(loss):
  """Heads forwarded once per mini-batch, rows continuing them as a cache: the losses, metrics and updated params of
  whole packed rows (f32), the gradient reaching the head's tokens through its keys and values. Also on a mesh."""
  samples, adv = _grouped_samples()
  teacher = transformer.init_params(CONFIG, jax.random.key(1)) if loss.objective == "agentic_opd" else None
  whole = make_minibatches(samples, adv, 12, 2, pack_width=128)
  shared = make_minibatches(samples, adv, 12, 2, pack_width=128, share_prefixes=True)
  assert shared[0].prefix_tokens.shape[:2] == (1, 4) and shared[0].prefix_of.shape == shared[0].tokens.shape[:2]
  assert all(int(mb.prefix_segment_ids.max()) >= 1 for mb in shared)
  heads = sum(int((mb.prefix_segment_ids > 0).sum()) for mb in shared)
  # Every token is in a row or a head; each head is in the rows of its samples only once.
  assert (sum(int((mb.segment_ids > 0).sum()) for mb in shared) + heads
          < sum(int((mb.segment_ids > 0).sum()) for mb in whole))
  assert float(sum(mb.loss_mask.sum() for mb in shared)) == sum(len(s.completion_ids) for s in samples)
  want_params, want = _steps(whole, loss, teacher=teacher)
  got_params, got = _steps(shared, loss, teacher=teacher)
  for w, g in zip(want, got):
    for name in w:
      np.testing.assert_allclose(g[name], w[name], rtol=2e-5, atol=1e-6, err_msg=name)
  # Adam moves an element by about the learning rate (1e-3) whatever its gradient's size, so where a gradient is near
  # zero, rounding-level differences move it by up to a few 1e-6 (the CPU's thread split decides how many).
  for a, b in zip(jax.tree.leaves(want_params), jax.tree.leaves(got_params)):
    np.testing.assert_allclose(np.asarray(b), np.asarray(a), atol=1e-5, rtol=1e-5)
  mesh = make_mesh((2, 2, 2))
  sharded = make_minibatches(samples, adv, 12, 8, pack_width=128, share_prefixes=True, mesh=mesh)
  assert sharded[0].prefix_tokens.shape[1] % 4 == 0
  mesh_params, on_mesh = _steps(sharded, loss, mesh=mesh, teacher=teacher)
  np.testing.assert_allclose(on_mesh[0]["loss"], want[0]["loss"], rtol=2e-5)
  for a, b in zip(jax.tree.leaves(want_params), jax.tree.leaves(mesh_params)):
    np.testing.assert_allclose(np.asarray(b), np.asarray(a), atol=1e-5)


def test_shared_prefix_bf16_step_matches_whole_rows():
  """The bf16 path (blocked attention over the prefix cache, its flash backward): the whole rows' loss and update
  to bf16 rounding."""
  config = CONFIG.replace(dtype="bfloat16")
  samples, adv = _grouped_samples(seed=1)
  whole_params, whole = _steps(make_minibatches(samples, adv, 16, 4, pack_width=128), LOSS, config)
  shared_params, shared = _steps(make_minibatches(samples, adv, 16, 4, pack_width=128, share_prefixes=True), LOSS,
                                 config)
  np.testing.assert_allclose(shared[0]["loss"], whole[0]["loss"], rtol=2e-2, atol=1e-3)
  np.testing.assert_allclose(shared[0]["grad_norm"], whole[0]["grad_norm"], rtol=5e-2)
  moved = [np.abs(np.asarray(b) - np.asarray(a)).max() for a, b in zip(jax.tree.leaves(whole_params),
                                                                       jax.tree.leaves(shared_params))]
  assert max(moved) < 2e-3  # lr 1e-3 x 2 steps: the same direction


def test_share_prefixes_needs_packed_rows_on_one_process():
  samples, adv = _grouped_samples()
  with pytest.raises(ValueError, match="share_prefixes"):
    make_minibatches(samples, adv, 8, 2, share_prefixes=True)
  with pytest.raises(ValueError, match="share_prefixes"):
    make_minibatches(samples, adv, 8, 2, pack_width=128, share_prefixes=True, agree=lambda v: tuple(v))


def test_shared_prefixes_only_where_they_save_token_slots():
  """Heads cost their own padded rows and split the packing by head, so the iteration keeps whole rows unless the
  shared layout forwards fewer token slots; a sample longer than a row that shares nothing continues a head of its
  own, so that rows stay `pack_width` wide."""
  rng = np.random.default_rng(3)
  head = rng.integers(3, CONFIG.vocab_size, 66).tolist()
  def sample(prompt, i, r=4):
    return Sample(prompt_ids=prompt, completion_ids=rng.integers(3, CONFIG.vocab_size, r).tolist(),
                  completion_mask=[1] * r, behaviour_logprobs=[-5.0] * r, group_id=0, problem_id="0", traj_id=i,
                  step_index=0, action_valid=1.0)
  # Two prompts on a 66-token head, long different tails: sharing saves 66 tokens but costs a head row.
  few = [sample(head + rng.integers(3, CONFIG.vocab_size, 150).tolist(), i) for i in range(2)]
  (whole,) = make_minibatches(few, [1.0, -1.0], 2, 2, pack_width=256, share_prefixes=True)
  assert whole.prefix_tokens is None and whole.prefix_of is None
  # A long sample that shares nothing beside the grouped ones: its prompt goes to a head row of its own (packed with
  # the shared heads) and the rows stay 128 wide.
  grouped, adv = _grouped_samples()
  samples = grouped + [sample(rng.integers(3, CONFIG.vocab_size, 200).tolist(), 99)]
  adv = adv + [1.0]
  (plain,) = make_minibatches(samples, adv, len(samples), 4, pack_width=128)
  (own,) = make_minibatches(samples, adv, len(samples), 4, pack_width=128, share_prefixes=True)
  assert plain.tokens.shape[-1] == 256 and own.tokens.shape[-1] == 128
  seg = own.prefix_segment_ids[0]
  heads = [int((seg[r] == k).sum()) for r in range(seg.shape[0]) for k in range(1, int(seg[r].max()) + 1)]
  assert 199 in heads and len(heads) == 4  # three shared heads and the long prompt's own
  assert int(own.prefix_segment_ids.max()) >= 2  # heads packed several to a head row
  _, want = _steps([plain], LOSS)
  _, got = _steps([own], LOSS)
  for name in ("loss", "grad_norm"):
    np.testing.assert_allclose(got[0][name], want[0][name], rtol=2e-5, atol=1e-7)


def test_scored_targets_train_like_every_position():
  """Mini-batches list each row's loss targets (`TrainBatch.scored`, a quarter row doubled to fit the fullest), and
  the step trains on them as on every position: losses, metrics and params (f32, GRPO + KL + entropy). Rows whose
  loss covers over half of them stay without the list."""
  samples, adv = _grouped_samples()
  mbs = make_minibatches(samples, adv, 12, 2, pack_width=128)
  most = max(int((mb.loss_mask[..., 1:] > 0).sum(-1).max()) for mb in mbs)
  assert all(mb.scored.shape == mb.tokens.shape[:2] + (32,) for mb in mbs) and 8 < most <= 32
  assert all(int((mb.scored > 0).sum()) == int((mb.loss_mask[..., 1:] > 0).sum()) for mb in mbs)
  want_params, want = _steps([mb.replace(scored=None) for mb in mbs], LOSS)
  got_params, got = _steps(mbs, LOSS)
  for w, g in zip(want, got):
    for name in w:
      np.testing.assert_allclose(g[name], w[name], rtol=2e-5, atol=1e-6, err_msg=name)
  for a, b in zip(jax.tree.leaves(want_params), jax.tree.leaves(got_params)):
    np.testing.assert_allclose(np.asarray(b), np.asarray(a), atol=1e-5, rtol=1e-5)

  long = [Sample(prompt_ids=[3, 4], completion_ids=list(range(5, 75)), completion_mask=[1] * 70,
                 behaviour_logprobs=[-5.0] * 70, group_id=0, problem_id="0", traj_id=i, step_index=0,
                 action_valid=1.0) for i in range(2)]
  (mb,) = make_minibatches(long, [1.0, -1.0], 2, 2, pack_width=128)
  assert mb.scored is None
