"""LoRA on our parameter pytrees (`models/lora.py`): PEFT's initialisation and scaling, a hand-computed merge, and
Hugging Face PEFT loading our exported adapters onto the tiny random HF base with the logits of our merged model."""
import dataclasses
import importlib.util
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from agentopd_jax.batching.collate import TrainBatch
from agentopd_jax.batching.samples import Sample
from agentopd_jax.models import config as model_config, hf_io, lora, transformer
from agentopd_jax.models.loading import pool_params, run_params
from agentopd_jax.models.lora import LoraConfig
from agentopd_jax.objectives.registry import LossCore, LossParams
from agentopd_jax.parallel.sharding import make_mesh
from agentopd_jax.storage.checkpoints import CheckpointPool
from agentopd_jax.training.train_step import (OptimConfig, init_state, make_minibatches, make_optimizer,
                                              make_train_step, policy_params, split_minibatches)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TOL = 1e-4


def _random_adapters(params, cfg, seed=0):
  """Adapters with b drawn too, so that they change the model."""
  adapters = lora.init_adapters(params, cfg, jax.random.key(seed))
  keys = iter(jax.random.split(jax.random.key(seed + 1), len(adapters)))
  return {t: {"a": ad["a"], "b": 0.05 * jax.random.normal(next(keys), ad["b"].shape)} for t, ad in adapters.items()}


def _logits(config, params, tokens, read=None, array=False):
  hidden, _ = transformer.forward(config, params, jnp.asarray(tokens), read=read)
  logits = transformer.logits_from_hidden(config, params, hidden)
  return logits if array else np.asarray(logits)


def test_fresh_adapters_leave_the_base_and_follow_peft_init(hf_checkpoints):
  _, path = hf_checkpoints["qwen2"]
  config, params = hf_io.load_hf(path)
  cfg = LoraConfig(rank=8, alpha=16.0)
  adapters = lora.init_adapters(params, cfg, jax.random.key(0))
  assert set(adapters) == set(lora.TARGETS)
  d, h, kv, hd = config.hidden_size, config.num_heads, config.num_kv_heads, config.head_dim
  ff = config.intermediate_size
  shapes = {"q": (d, h * hd), "k": (d, kv * hd), "v": (d, kv * hd), "o": (h * hd, d), "gate": (d, ff), "up": (d, ff),
            "down": (ff, d)}
  for t, (fan_in, fan_out) in shapes.items():
    a, b = adapters[t]["a"], adapters[t]["b"]
    assert a.shape == (config.num_layers, fan_in, 8) and b.shape == (config.num_layers, 8, fan_out)
    assert float(jnp.abs(a).max()) <= 1 / np.sqrt(fan_in) and float(jnp.abs(a).max()) > 0.5 / np.sqrt(fan_in)
    assert not np.any(np.asarray(b))
  merged = lora.merge(params, adapters, cfg)
  assert all(np.array_equal(x, y) for x, y in zip(jax.tree.leaves(params), jax.tree.leaves(merged)))
  assert cfg.scale == 2.0 and LoraConfig(rank=16, alpha=16.0, rslora=True).scale == 4.0


def test_merge_adds_the_scaled_product_by_hand():
  params = {"layers": {"attn": {"o_kernel": jnp.ones((1, 2, 1, 3))}}}  # [L, h, hd, d]: in = 2, out = 3
  a = jnp.asarray([[[1.0], [2.0]]])        # [1, 2, r=1]
  b = jnp.asarray([[[1.0, 0.0, -1.0]]])    # [1, 1, 3]
  merged = lora.merge(params, {"o": {"a": a, "b": b}}, LoraConfig(rank=1, alpha=2.0, targets=("o",)))
  expected = 1.0 + 2.0 * np.asarray([[1.0, 0.0, -1.0], [2.0, 0.0, -2.0]]).reshape(1, 2, 1, 3)
  np.testing.assert_array_equal(np.asarray(merged["layers"]["attn"]["o_kernel"]), expected)
  assert np.asarray(params["layers"]["attn"]["o_kernel"]).max() == 1.0  # the base is left alone


@pytest.mark.parametrize("rslora", [False, True])
def test_peft_loads_our_adapters_onto_the_hf_base_with_our_merged_logits(hf_checkpoints, tmp_path, rslora):
  peft = pytest.importorskip("peft")
  model, path = hf_checkpoints["qwen2"]
  base = type(model).from_pretrained(path).eval()  # PEFT wraps and freezes its base: not the session's shared model
  config, params = hf_io.load_hf(path)
  cfg = LoraConfig(rank=4, alpha=8.0, rslora=rslora, targets=("q", "k", "v", "o", "gate", "up", "down"))
  adapters = _random_adapters(params, cfg)
  lora.export_peft(str(tmp_path), config, adapters, cfg, base_model=path)
  written = json.load(open(os.path.join(tmp_path, lora.ADAPTER_CONFIG)))
  assert written["r"] == 4 and written["lora_alpha"] == 8.0 and written["use_rslora"] == rslora
  tokens = np.random.RandomState(0).randint(0, config.vocab_size, (2, 24))
  ours = _logits(config, lora.merge(params, adapters, cfg), tokens)
  assert np.abs(ours - _logits(config, params, tokens)).max() > 1e-2  # the adapters matter
  adapted = peft.PeftModel.from_pretrained(base, str(tmp_path)).eval()
  with torch.no_grad():
    theirs = adapted(torch.tensor(tokens)).logits.numpy()
  assert np.abs(ours - theirs).max() <= TOL
  back, back_cfg = lora.import_peft(str(tmp_path), config, params)
  assert back_cfg == cfg
  for t in cfg.targets:
    np.testing.assert_array_equal(np.asarray(back[t]["a"]), np.asarray(adapters[t]["a"]))
    np.testing.assert_array_equal(np.asarray(back[t]["b"]), np.asarray(adapters[t]["b"]))


def test_bad_lora_config_and_adapter_files_are_named(hf_checkpoints, tmp_path):
  with pytest.raises(ValueError, match="lora.rank must be an integer >= 0"):
    LoraConfig(rank=-1)
  with pytest.raises(ValueError, match="lora.alpha must be > 0"):
    LoraConfig(rank=4, alpha=0.0)
  with pytest.raises(ValueError, match="lora.targets must be distinct names"):
    LoraConfig(rank=4, targets=("q", "lm_head"))
  _, path = hf_checkpoints["qwen2"]
  config, params = hf_io.load_hf(path)
  with pytest.raises(FileNotFoundError, match="adapter_config.json"):
    lora.import_peft(str(tmp_path), config, params)
  cfg = LoraConfig(rank=2, targets=("q",))
  lora.export_peft(str(tmp_path), config, lora.init_adapters(params, cfg, jax.random.key(0)), cfg)
  written = json.load(open(os.path.join(tmp_path, lora.ADAPTER_CONFIG)))
  json.dump(dict(written, target_modules=["q_proj", "v_proj"]), open(os.path.join(tmp_path, lora.ADAPTER_CONFIG), "w"))
  with pytest.raises(ValueError, match=r"no tensor base_model\.model\.model\.layers\.0\.self_attn\.v_proj\.lora_A"):
    lora.import_peft(str(tmp_path), config, params)
  json.dump(dict(written, use_dora=True), open(os.path.join(tmp_path, lora.ADAPTER_CONFIG), "w"))
  with pytest.raises(ValueError, match="use_dora must be false"):
    lora.import_peft(str(tmp_path), config, params)


def test_a_model_section_with_a_peft_adapter_loads_the_merged_model(hf_checkpoints, tmp_path):
  """`model.adapter`: a PEFT folder trained on `model.path`'s base (verl's `lora_adapter_path`) is merged at load."""
  from agentopd_jax.envs.verl_agent.corpus import default_corpus
  from agentopd_jax.models.loading import ModelSpec, load_model_and_tokenizer
  from agentopd_jax.models.tokenizer import builtin_tokenizer
  from agentopd_jax.parallel.sharding import make_mesh

  _, path = hf_checkpoints["qwen2"]
  config, params = hf_io.load_hf(path)
  cfg = LoraConfig(rank=2, alpha=4.0, targets=("q", "down"))
  adapters = _random_adapters(params, cfg)
  lora.export_peft(str(tmp_path / "adapter"), config, adapters, cfg)
  builtin_tokenizer(default_corpus(), vocab_size=300).save_pretrained(str(tmp_path / "tok"))
  mesh = make_mesh((8, 1, 1))
  spec = ModelSpec(path=path, adapter=str(tmp_path / "adapter"))
  _, loaded, _ = load_model_and_tokenizer(spec, str(tmp_path / "tok"), 0, mesh)
  for x, y in zip(jax.tree.leaves(lora.merge(params, adapters, cfg)), jax.tree.leaves(loaded)):
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
  with pytest.raises(ValueError, match="model.adapter='a' needs model.path"):
    load_model_and_tokenizer(ModelSpec(adapter="a"), str(tmp_path / "tok"), 0, mesh)


# --- training the adapters ------------------------------------------------------------------------------------------

TINY = model_config.preset("tiny", vocab_size=256, hidden_size=64, intermediate_size=128, num_layers=2, num_heads=4,
                           num_kv_heads=2, head_dim=16)
KL_LOSS = LossParams(core=LossCore(kl_coef=0.01, entropy_coef=0.001))


def _tiny_batch(rows=8, width=24, seed=0):
  rng = np.random.default_rng(seed)
  tokens = rng.integers(3, TINY.vocab_size, (rows, width)).astype(np.int32)
  seg = (np.arange(width)[None] < rng.integers(width // 2, width + 1, rows)[:, None]).astype(np.int32)
  mask = ((np.arange(width)[None] >= rng.integers(3, width // 2, rows)[:, None]) & (seg > 0)).astype(np.float32)
  adv = np.where(rng.random(rows) < 0.5, 1.0, -1.0)[:, None] * mask
  old = -np.log(TINY.vocab_size) * mask + 0.05 * rng.standard_normal((rows, width)) * mask
  batch = TrainBatch(tokens=tokens * seg, segment_ids=seg, positions=np.tile(np.arange(width), (rows, 1)) * seg,
                     loss_mask=mask, advantages=adv.astype(np.float32), old_logprobs=old.astype(np.float32))
  return split_minibatches(batch, rows, 4)[0]


def test_the_unmerged_forward_and_its_gradient_are_the_merged_models():
  """`attach` (training) against `merge` (the sampler): the logits at every position and at read positions, and the
  adapters' gradient, which at b = 0 is the chain rule by hand: dL/db = s · aᵀ · dL/dW."""
  params = transformer.init_params(TINY, jax.random.key(0))
  cfg = LoraConfig(rank=4, alpha=8.0)
  adapters = _random_adapters(params, cfg)
  tokens = jnp.asarray(np.random.RandomState(0).randint(0, TINY.vocab_size, (2, 20)))
  read = jnp.asarray([[3, 7], [10, 19]])
  merged, attached = lora.merge(params, adapters, cfg), lora.attach(params, adapters, cfg)
  for r in (None, read):  # the prefix cache's path: test_a_lora_step_over_shared_prompt_heads_trains_like_whole_rows
    np.testing.assert_allclose(_logits(TINY, attached, tokens, r), _logits(TINY, merged, tokens, r), atol=2e-5)

  def loss(p):
    return jnp.sum(jnp.tanh(jnp.asarray(_logits(TINY, p, tokens, None, array=True))))

  fresh = lora.init_adapters(params, cfg, jax.random.key(3))
  by_adapters = jax.grad(lambda ad: loss(lora.attach(params, ad, cfg)))(fresh)
  by_weights = jax.grad(loss)(params)
  for target, (path, n_in, _) in lora.TARGETS.items():
    g_w = by_weights
    for k in path:
      g_w = g_w[k]
    g_w = g_w.reshape(TINY.num_layers, *lora._split(g_w.shape, n_in))
    want = cfg.scale * jnp.einsum("lir,lio->lro", fresh[target]["a"], g_w)
    # The two sides sum in different orders in f32, so an entry's error scales with the array's largest entries (~10),
    # not with its own: an entry of 0.006 may be off by 3e-6 on some CPUs.
    np.testing.assert_allclose(np.asarray(by_adapters[target]["b"]), np.asarray(want), rtol=1e-4,
                               atol=2e-6 * float(np.abs(want).max()))
    assert not np.any(np.asarray(by_adapters[target]["a"]))  # b = 0: a gets no gradient yet, as in PEFT


def _lora_steps(mesh=None, steps=2):
  optimizer = make_optimizer(OptimConfig(learning_rate=1e-3))
  params = transformer.init_params(TINY, jax.random.key(0))
  cfg = LoraConfig(rank=4, alpha=8.0)
  state = init_state(lora.init_adapters(params, cfg, jax.random.key(1)), optimizer, None, mesh, TINY,
                     base_params=jax.tree.map(jnp.copy, params))  # the step donates the state
  step = make_train_step(TINY, KL_LOSS, optimizer, mesh, with_reference=True, lora=cfg)
  metrics = []
  for s in range(steps):
    state, m = step(state, _tiny_batch(seed=s))
    metrics.append(jax.tree.map(float, m))
  return params, cfg, state, metrics


def test_a_lora_step_trains_the_adapters_only_from_the_base_policy_with_the_base_as_reference():
  params, cfg, state, metrics = _lora_steps()
  optimizer = make_optimizer(OptimConfig(learning_rate=1e-3))
  full = init_state(jax.tree.map(jnp.copy, params), optimizer, jax.tree.map(jnp.copy, params))
  _, want = make_train_step(TINY, KL_LOSS, optimizer, with_reference=True)(full, _tiny_batch(seed=0))
  for name in ("loss", "pg_loss", "entropy", "kl"):  # b = 0: the first step scores the base, π_ref itself
    np.testing.assert_allclose(metrics[0][name], float(want[name]), rtol=1e-5, atol=1e-7, err_msg=name)
  assert metrics[0]["kl"] == 0.0 and metrics[1]["kl"] > 0.0  # the second step's policy has moved off the base
  for x, y in zip(jax.tree.leaves(params), jax.tree.leaves(state.base_params)):
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
  assert jax.tree.structure(state.params) == jax.tree.structure(lora.init_adapters(params, cfg, jax.random.key(1)))
  assert all(np.any(np.asarray(ad["b"])) for ad in state.params.values())
  trained = sum(x.size for x in jax.tree.leaves(state.params))
  assert sum(x.size for x in jax.tree.leaves(state.opt_state)) == 2 * trained + 1  # Adam's moments and its count
  merged = policy_params(state, cfg)
  for x, y in zip(jax.tree.leaves(lora.merge(params, state.params, cfg)), jax.tree.leaves(merged)):
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def test_a_sharded_lora_step_equals_the_single_device_one():
  _, _, single, m1 = _lora_steps()
  _, _, sharded, m2 = _lora_steps(mesh=make_mesh((2, 2, 2)))
  np.testing.assert_allclose(m2[-1]["loss"], m1[-1]["loss"], rtol=1e-5)
  for a, b in zip(jax.tree.leaves(single.params), jax.tree.leaves(sharded.params)):
    np.testing.assert_allclose(np.asarray(b), np.asarray(a), atol=2e-6, rtol=2e-5)
  assert any(leaf.sharding.spec != jax.sharding.PartitionSpec() for leaf in jax.tree.leaves(sharded.base_params))


def test_a_pool_of_adapters_gives_each_steps_merged_weights(tmp_path):
  """A LoRA run's checkpoints hold adapters and its pool the base once: `pool_params` (every reader of a run's
  weights: warm starts, teacher pools, serving) hands back base + that step's adapters."""
  params, cfg, state, _ = _lora_steps(steps=1)
  record = {"lora": dataclasses.asdict(cfg)}
  with CheckpointPool(tmp_path / "run" / "checkpoints") as pool:
    with pytest.raises(FileNotFoundError, match="base weights"):
      pool.restore_base(params)
    os.makedirs(os.path.join(pool.directory, "base"))
    with pytest.raises(FileNotFoundError, match="move it to .*checkpoints.base"):
      pool.restore_base(params)
    os.rmdir(os.path.join(pool.directory, "base"))
    pool.save_base(params)
    pool.save(3, {"adapters": state.params, "opt_state": state.opt_state, "step": state.step}, metrics={},
              outcomes=None, config={}, extra=record)
    pool.save(4, {"adapters": state.params, "step": state.step}, metrics={}, outcomes=None, config={}, extra={})
    # The base lies beside the pool: orbax's manager deletes unfinished folders inside its directory from a
    # background thread when it opens, which took a base being written there at that moment.
    assert sorted(os.listdir(pool.directory)) == ["3", "4", "checksums.json"]
    assert os.path.isdir(f"{pool.directory}.base")
    abstract = transformer.abstract_params(TINY)
    got = pool_params(pool, 3, abstract)
    for x, y in zip(jax.tree.leaves(lora.merge(params, state.params, cfg)), jax.tree.leaves(got)):
      np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    with pytest.raises(ValueError, match="holds adapters but no 'lora' record"):
      pool_params(pool, 4, abstract)
  ran, number = run_params(tmp_path / "run", "3", abstract)
  assert number == 3 and jax.tree.structure(ran) == jax.tree.structure(got)


def test_a_lora_step_over_shared_prompt_heads_trains_like_whole_rows():
  """Heads forwarded once per mini-batch as a cache of base + adapters: the gradient reaches the adapters through
  the heads' keys and values too, so the loss and the updated adapters are those of whole packed rows."""
  rng = np.random.default_rng(0)
  samples, advantages = [], []
  for task in range(3):
    head = rng.integers(3, TINY.vocab_size, int(rng.integers(70, 100))).tolist()
    for j in range(6):
      prompt = head + rng.integers(3, TINY.vocab_size, int(rng.integers(5, 30))).tolist()
      r = int(rng.integers(2, 12))
      samples.append(Sample(prompt_ids=prompt, completion_ids=rng.integers(3, TINY.vocab_size, r).tolist(),
                            completion_mask=[1] * r, behaviour_logprobs=[-np.log(TINY.vocab_size)] * r,
                            group_id=task, problem_id=str(task), traj_id=6 * task + j, step_index=0,
                            action_valid=1.0))
      advantages.append(1.0 if j % 2 else -1.0)

  def train(minibatches):
    optimizer = make_optimizer(OptimConfig(learning_rate=1e-3))
    params = transformer.init_params(TINY, jax.random.key(0))
    cfg = LoraConfig(rank=4, alpha=8.0)
    adapters = _random_adapters(params, cfg)  # b != 0: the heads' keys and values depend on the adapters
    state = init_state(adapters, optimizer, None, base_params=params)
    step = make_train_step(TINY, KL_LOSS, optimizer, with_reference=True, lora=cfg)
    losses = []
    for mb in minibatches:
      state, m = step(state, mb)
      losses.append(float(m["loss"]))
    return state.params, losses

  whole = make_minibatches(samples, advantages, 9, 3, pack_width=128)
  shared = make_minibatches(samples, advantages, 9, 3, pack_width=128, share_prefixes=True)
  assert all(mb.prefix_tokens is not None for mb in shared)
  want_adapters, want = train(whole)
  got_adapters, got = train(shared)
  np.testing.assert_allclose(got, want, rtol=2e-5)
  for a, b in zip(jax.tree.leaves(want_adapters), jax.tree.leaves(got_adapters)):
    np.testing.assert_allclose(np.asarray(b), np.asarray(a), atol=1e-5, rtol=1e-5)


def test_a_pool_of_adapters_restores_onto_a_mesh(tmp_path):
  """The base sharded over 8 devices: the adapters come back replicated over the same devices, and the merged
  weights on the base's shardings."""
  params, cfg, state, _ = _lora_steps(steps=1)
  with CheckpointPool(tmp_path / "checkpoints") as pool:
    pool.save_base(params)
    pool.save(1, {"adapters": state.params, "step": state.step}, metrics={}, outcomes=None, config={},
              extra={"lora": dataclasses.asdict(cfg)})
    mesh = make_mesh((2, 4, 1))
    abstract = transformer.sharded_abstract_params(TINY, mesh)
    got = pool_params(pool, 1, abstract)
  for x, y, a in zip(jax.tree.leaves(lora.merge(params, state.params, cfg)), jax.tree.leaves(got),
                     jax.tree.leaves(abstract)):
    np.testing.assert_allclose(np.asarray(y), np.asarray(x), rtol=1e-6, atol=1e-7)
    assert y.sharding == a.sharding
  # experiments/same_run.py reads the base's shapes from the saved metadata beside the pool: the merged weights.
  spec = importlib.util.spec_from_file_location("same_run", os.path.join(ROOT, "experiments", "same_run.py"))
  same_run = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(same_run)
  assert same_run.run_checkpoints(str(tmp_path)) == {
      1: (same_run.params_digest(lora.merge(params, state.params, cfg)), None)}
