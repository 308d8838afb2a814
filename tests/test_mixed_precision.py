"""bf16 mixed precision as a training path: f32 master weights and Adam moments, bf16 matmuls, f32 softmax,
log-softmax and losses (`ModelConfig.dtype` "bfloat16" over `param_dtype` "float32"; the paper presets' setting).

Every tolerance sits at a stated margin above the error measured between bf16 and f32 compute on the same f32 params
(numbers in the comments; the runs are seeded, so they are deterministic on one machine). For scale, log-prob errors
of bf16 vs f32 compute, measured once with the fused scoring step (4 rows x 128 random tokens unless said):

  tiny preset, random init (log-probs ~ -7.7)                   max 0.0087, mean 0.0021 nats per token
  small preset, random init (~ -10.5)                           max 0.013,  mean 0.0038
  tiny / small, final-norm scale x10 (log-probs down to -31)    max 0.093 / 0.16, mean 0.023 / 0.041
  tiny preset trained on ALFWorld (SFT + GRPO), 4 rows of one
    83-token observation + 64 tokens it sampled                 max 0.26,   mean 0.014
  transformers' bf16 forward of those weights, same rows        max 0.18,   mean 0.015

The trained checkpoint is the latest of runs/forgetting/look_then_pick_lr3e-4_s0. Our bf16 path rounds like
torch's. On the trained model the error sits on tokens of middling probability (log-prob -10 to -1: mean 0.034);
on confident ones (log-prob > -1, 57 % of the targets) it is 0.002, and on the tokens the policy sampled itself,
what a GRPO step scores, mean 0.006 / max 0.17.
"""
import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from agentopd_jax.batching.collate import TrainBatch
from agentopd_jax.models import config as model_config, hf_io, loading, transformer
from agentopd_jax.objectives.registry import LossCore, LossParams
from agentopd_jax.parallel.sharding import make_mesh
from agentopd_jax.scoring.fused import ScoreConfig, make_score_fn
from agentopd_jax.training.train_step import OptimConfig, init_state, make_optimizer, make_train_step, split_minibatches

F32 = model_config.preset("tiny", vocab_size=256, hidden_size=64, intermediate_size=128, num_layers=2, num_heads=4,
                          num_kv_heads=2, head_dim=16)
BF16 = F32.replace(dtype="bfloat16")  # the same f32 params, bf16 matmuls
LOGPROBS_ONLY = ScoreConfig(reference=False, top_k=0, entropy=False)
LR = 1e-6  # the paper presets' learning rate


def _batch(seed, rows=8, width=32) -> TrainBatch:
  """Right-padded rows, the loss on a reply after a prompt, ±1 advantages; old log-probs are the caller's."""
  rng = np.random.default_rng(seed)
  tokens = rng.integers(3, F32.vocab_size, (rows, width)).astype(np.int32)
  lengths = rng.integers(width // 2, width + 1, rows)
  prompt = rng.integers(3, width // 2, rows)
  seg = (np.arange(width)[None] < lengths[:, None]).astype(np.int32)
  mask = ((np.arange(width)[None] >= prompt[:, None]) & (seg > 0)).astype(np.float32)
  adv = np.where(rng.random(rows) < 0.5, 1.0, -1.0)[:, None] * mask
  return TrainBatch(tokens=tokens * seg, segment_ids=seg, positions=np.tile(np.arange(width), (rows, 1)) * seg,
                    loss_mask=mask, advantages=adv.astype(np.float32), old_logprobs=np.zeros_like(mask))


def _logprobs(config, params, batch: TrainBatch) -> np.ndarray:
  return np.asarray(make_score_fn(config, LOGPROBS_ONLY)(params, None, None, batch.score_batch()).policy_logprobs)


def _flat_step(after, before) -> np.ndarray:
  return np.concatenate([(a - b).ravel() for a, b in zip(jax.tree.leaves(after), jax.tree.leaves(before))])


@pytest.fixture(scope="module")
def grpo_runs():
  """Two GRPO steps (entropy bonus on, AdamW at lr 1e-6) from the same f32 params and batches, with f32 and with bf16
  compute: {dtype: (params before, params after step 1, metrics of step 1, state after step 2)}. Old log-probs are
  the f32 policy's own, so the f32 ratio is 1 and the bf16 step's `logprob_drift` is its log-prob error. No KL
  term: its reference forward is the policy's forward code again, and would double the compile time."""
  params = transformer.init_params(F32, jax.random.key(0))
  batches = [split_minibatches(batch.replace(old_logprobs=_logprobs(F32, params, batch)), 8, 8)[0]
             for batch in (_batch(0), _batch(1))]
  optimizer = make_optimizer(OptimConfig(learning_rate=LR))
  out = {}
  for config in (F32, BF16):
    state = init_state(jax.tree.map(jnp.copy, params), optimizer)
    step = make_train_step(config, LossParams(core=LossCore(entropy_coef=0.001)), optimizer)
    state, metrics = step(state, batches[0])
    after_one = jax.tree.map(np.asarray, state.params)  # the next step donates `state`
    state, _ = step(state, batches[1])
    out[config.dtype] = (jax.tree.map(np.asarray, params), after_one, jax.tree.map(float, metrics), state)
  return out


def test_bf16_compute_keeps_f32_master_weights_and_adam_moments(grpo_runs):
  before, after_one, _, state = grpo_runs["bfloat16"]
  assert int(state.step) == 2
  adam = state.opt_state[1][0]  # clip_by_global_norm's (empty) state, then adamw's ScaleByAdamState
  for tree in (state.params, adam.mu, adam.nu):
    assert jax.tree.structure(tree) == jax.tree.structure(state.params)
    assert all(leaf.dtype == jnp.float32 for leaf in jax.tree.leaves(tree))
  # Why f32 masters: an lr-1e-6 Adam step is far below half a bf16 rounding step of a 0.02-sized weight, let alone of
  # a norm scale of 1. Measured: every f32 master leaf moved (>= 99.96 % of its elements); the same step added to
  # bf16 masters leaves 97.9-98.2 % of each matrix and 100 % of each norm scale unchanged (only the zero-initialised
  # biases, where bf16 is fine-grained, would move).
  bf16 = lambda x: np.asarray(jnp.asarray(x, jnp.bfloat16))
  for (path, old), new in zip(jax.tree_util.tree_leaves_with_path(before), jax.tree.leaves(after_one)):
    name = jax.tree_util.keystr(path)
    assert np.mean(new != old) > 0.99, name
    if "bias" not in name:
      assert np.mean(bf16(bf16(old).astype(np.float32) + (new - old)) == bf16(old)) > 0.97, name


def test_grpo_step_in_bf16_matches_f32(grpo_runs):
  before, f32_params, f32, _ = grpo_runs["float32"]
  _, bf16_params, bf16, _ = grpo_runs["bfloat16"]
  # Log-probs inside the step (mean |log-prob - f32 old log-prob| over the loss tokens). Measured: f32 6.4e-8, bf16
  # 6.8e-4. The lower bound shows the step really computed in bf16.
  assert f32["logprob_drift"] < 1e-6
  assert 1e-4 < bf16["logprob_drift"] < 3e-3
  # Loss 0.565901 (f32) vs 0.565808 (bf16): |diff| 9.3e-5, bound 5e-4. Grad norm 1.275944 vs 1.276398: relative
  # 3.6e-4, bound 2e-3 (the backward pass runs in bf16 too: cotangents are rounded to bf16 before each product, as
  # torch's bf16 autocast does; plain autodiff, with f32 backward products, gives 5.9e-6). Entropy 5.527705 in both
  # (bound 1e-4).
  assert abs(f32["loss"] - bf16["loss"]) < 5e-4
  np.testing.assert_allclose(bf16["grad_norm"], f32["grad_norm"], rtol=2e-3)
  np.testing.assert_allclose(bf16["entropy"], f32["entropy"], atol=1e-4)
  # The updates: Adam's first step is ~lr * sign(gradient), so they compare by direction. Measured: cosine 0.9953,
  # signs agree on 99.75 % of the elements; the params then differ by at most 2 lr (a flipped sign).
  f32_step, bf16_step = _flat_step(f32_params, before), _flat_step(bf16_params, before)
  assert f32_step @ bf16_step / np.linalg.norm(f32_step) / np.linalg.norm(bf16_step) > 0.99
  assert np.mean(np.sign(f32_step) == np.sign(bf16_step)) > 0.99
  for a, b in zip(jax.tree.leaves(f32_params), jax.tree.leaves(bf16_params)):
    np.testing.assert_allclose(a, b, atol=2.02 * LR, rtol=0)


def test_bf16_scoring_logprobs_agree_with_f32():
  # The fused scoring step, as the train step calls it, on random params with the final-norm scale x10 so the
  # log-probs spread as a trained model's do (down to -16.8, mean -10.8 on the loss tokens; a random init's all sit
  # near -log V, where bf16 has little to round). Measured: max 0.039, mean 0.0096 nats; bounds 2x that. The lower
  # bound shows the bf16 path really rounds.
  params = transformer.init_params(F32, jax.random.key(0))
  params = dict(params, final_norm={"scale": params["final_norm"]["scale"] * 10})
  batch = _batch(0)
  scored = (batch.loss_mask > 0) & (np.arange(batch.tokens.shape[1]) > 0)
  f32, bf16 = (_logprobs(config, params, batch)[scored] for config in (F32, BF16))
  assert f32.min() < -15  # the spread the tolerance was measured at
  err = np.abs(bf16 - f32)
  assert err.max() < 0.08 and 1e-3 < err.mean() < 0.02


def test_sft_learns_in_bf16_as_in_f32():
  # 20 SFT steps at lr 1e-2 on one fixed batch. Measured loss 5.565 -> 0.341 (f32) and 5.566 -> 0.334 (bf16); the two
  # curves differ by at most 0.037 at any step (bound 0.1).
  batch = split_minibatches(_batch(5), 8, 8)[0]
  curves = {}
  for config in (F32, BF16):
    optimizer = make_optimizer(OptimConfig(learning_rate=1e-2))
    state = init_state(transformer.init_params(F32, jax.random.key(0)), optimizer)
    step = make_train_step(config, LossParams("sft"), optimizer)
    losses = []
    for _ in range(20):
      state, metrics = step(state, batch)
      losses.append(float(metrics["loss"]))
    curves[config.dtype] = np.asarray(losses)
  for losses in curves.values():
    assert losses[-1] < 0.1 * losses[0]
  assert np.max(np.abs(curves["bfloat16"] - curves["float32"])) < 0.1


def _model_section(**fields) -> ml_collections.ConfigDict:
  """A run config's `model` section (presets.cpu_base) with `fields` set."""
  return ml_collections.ConfigDict({"path": "", "preset": "tiny", "param_dtype": "", "dtype": "", **fields})


@pytest.fixture(scope="module")
def small_corpus(tmp_path_factory):
  """The base corpus of a seconds-fast built-in tokenizer (< 300 tokens), trained once for the module and cached in a
  tmp folder."""
  with pytest.MonkeyPatch.context() as patch:
    patch.setenv("AGENTOPD_CACHE", str(tmp_path_factory.mktemp("tokenizer_cache")))
    yield ["go to drawer 1", "Nothing happens."] * 20


def test_run_config_dtypes_load_f32_masters_with_bf16_compute(small_corpus, tmp_path):
  """`model.dtype` (and `model.param_dtype`) of a run config through `load_model_and_tokenizer`, from HF folders
  saved in f32 and in bf16 (pretrained Qwen checkpoints are bf16)."""
  mesh = make_mesh((-1, 1, 1))
  params = transformer.init_params(F32, jax.random.key(0))
  config = F32.replace(vocab_size=512)  # room for the built-in tokenizer
  extra = np.asarray(jax.random.normal(jax.random.key(1), (256, F32.hidden_size))) * 0.02
  params = dict(params, embedding=np.concatenate([np.asarray(params["embedding"]), extra]).astype(np.float32))
  # (checkpoint dtype, model.param_dtype, model.dtype): model.dtype alone keeps the checkpoint's storage; the paper
  # presets' pair upcasts a bf16 checkpoint to f32 masters.
  for stored, param_dtype, dtype in (("float32", "", "bfloat16"), ("bfloat16", "float32", "bfloat16")):
    folder = str(tmp_path / stored)
    hf_io.save_hf(folder, config.replace(param_dtype=stored), jax.tree.map(lambda x: jnp.asarray(x, stored), params))
    loaded, loaded_params, _ = loading.load_model_and_tokenizer(
        _model_section(path=folder, param_dtype=param_dtype, dtype=dtype), "", 0, mesh, builtin_vocab=300,
        builtin_corpus=small_corpus)
    assert (loaded.param_dtype, loaded.dtype) == ("float32", "bfloat16")
    assert {leaf.dtype for leaf in jax.tree.leaves(loaded_params)} == {jnp.dtype(jnp.float32)}
    # The f32 masters hold exactly what the checkpoint holds (bf16 upcasts exactly).
    np.testing.assert_array_equal(np.asarray(loaded_params["embedding"]),
                                  np.asarray(jnp.asarray(params["embedding"], stored), np.float32))


def test_preset_compute_dtype_follows_param_dtype_unless_set(small_corpus, monkeypatch):
  # The params' dtypes come from the abstract params; skipping the random init's compile (10 s on a busy 2-core CPU)
  # keeps the check to the config resolution it is about.
  monkeypatch.setattr(loading.transformer, "init_params", lambda config, key: jax.tree.map(
      lambda a: jnp.zeros(a.shape, a.dtype), transformer.abstract_params(config)))
  mesh = make_mesh((-1, 1, 1))
  config, params, _ = loading.load_model_and_tokenizer(_model_section(dtype="bfloat16"), "", 0, mesh,
                                                       builtin_vocab=300, builtin_corpus=small_corpus)
  assert (config.param_dtype, config.dtype) == ("float32", "bfloat16")
  assert {leaf.dtype for leaf in jax.tree.leaves(params)} == {jnp.dtype(jnp.float32)}
  # A param_dtype alone sets compute too, as for a checkpoint; and a run folder's config.json from before
  # `model.dtype` existed, which lacks the field, loads as "".
  old = _model_section(param_dtype="bfloat16")
  del old["dtype"]
  config, params, _ = loading.load_model_and_tokenizer(old, "", 0, mesh, builtin_vocab=300,
                                                       builtin_corpus=small_corpus)
  assert (config.param_dtype, config.dtype) == ("bfloat16", "bfloat16")
  assert {leaf.dtype for leaf in jax.tree.leaves(params)} == {jnp.dtype(jnp.bfloat16)}


@pytest.mark.parametrize("field", ["dtype", "param_dtype"])
def test_bad_dtype_names_the_run_config_field(field):
  with pytest.raises(ValueError, match=rf"model\.{field} must be one of .*'bf16'"):
    loading.load_model_and_tokenizer(_model_section(**{field: "bf16"}), "", 0, None)
