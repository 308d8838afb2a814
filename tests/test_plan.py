"""The memory plan (`training.memory_plan`, `experiments/plan.py`) against what JAX really allocates and compiles.

Parameters and optimizer state must match to the byte: the shard shapes of the real shardings on the 8 fake
devices, then the shards a real `init_state` places. The estimated parts are checked against XLA's own accounting
of the compiled train step and prefill (`memory_analysis().temp_size_in_bytes`), within PLAN_FACTOR either way; on
CPU in f32 only, since XLA:CPU runs bf16 dots in f32 and so holds f32 copies no accelerator would. The CLI plans
the 7B paper config without allocating.
"""
import collections
import json
import math
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from agentopd_jax.batching.collate import TrainBatch
from agentopd_jax.models import config as model_config, transformer
from agentopd_jax.models.lora import LoraConfig
from agentopd_jax.objectives.registry import LossCore, LossParams, get_objective
from agentopd_jax.parallel.sharding import make_mesh
from agentopd_jax.sampling import sampler
from agentopd_jax.scoring.fused import ScoreConfig
from agentopd_jax.training import memory_plan
from agentopd_jax.training.train_step import (OptimConfig, TrainState, init_state, make_optimizer, make_train_step,
                                              state_shardings)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SMALL = model_config.preset("small")
LOSS = LossParams(core=LossCore(kl_coef=0.01, entropy_coef=0.001))  # GRPO with the KL reference, as the paper presets
OPTIMIZER = make_optimizer(OptimConfig(learning_rate=1e-6))
PLAN_FACTOR = 4 / 3  # measured / planned must lie in [1 / PLAN_FACTOR, PLAN_FACTOR]


def _workload(rows=16, seq_len=256, sampler_rows=64, prefill_len=512):
  return memory_plan.Workload(rows=rows, seq_len=seq_len, minibatch_rows=rows,
                              score=get_objective("grpo").score_config(LOSS, ScoreConfig()), sampler_rows=sampler_rows,
                              cache_capacity=2 * prefill_len, prefill_len=prefill_len)


def _plan(model, mesh_shape, rows=16, seq_len=256, sampler_rows=64, prefill_len=512):
  return memory_plan.plan(model, mesh_shape, OPTIMIZER, _workload(rows, seq_len, sampler_rows, prefill_len),
                          with_reference=True)


def _placed(abstract, shardings):
  return jax.tree.map(lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), abstract, shardings)


@pytest.mark.parametrize("mesh_shape", [(2, 2, 2), (8, 1, 1)])
@pytest.mark.parametrize("name", ["small", "qwen2.5-7b"])
def test_params_and_optimizer_bytes_are_the_real_shardings_shard_sizes(name, mesh_shape):
  model = model_config.preset(name, param_dtype="bfloat16")
  real = state_shardings(model, OPTIMIZER, make_mesh(mesh_shape), with_reference=True)
  abstract = transformer.abstract_params(model)

  def per_device(tree, shardings):
    return sum(math.prod(s.shard_shape(a.shape)) * a.dtype.itemsize
               for a, s in zip(jax.tree.leaves(tree), jax.tree.leaves(shardings)))

  plan = _plan(model, mesh_shape)
  assert plan.params == per_device(abstract, real.params)
  assert plan.opt_state == per_device(jax.eval_shape(OPTIMIZER.init, abstract), real.opt_state)
  assert plan.opt_state == 2 * plan.params + 4  # Adam's mu and nu in the params' bf16, plus its int32 count
  assert plan.reference == plan.params


def test_params_and_optimizer_bytes_equal_a_real_init_state():
  mesh_shape = (2, 2, 2)
  params = jax.tree.map(lambda a: jnp.zeros(a.shape, a.dtype), transformer.abstract_params(SMALL))  # bytes, not values
  state = init_state(params, OPTIMIZER, jax.tree.map(jnp.copy, params), make_mesh(mesh_shape), SMALL)

  def per_device(tree):
    held = collections.Counter()
    for leaf in jax.tree.leaves(tree):
      for shard in leaf.addressable_shards:
        held[shard.device] += shard.data.nbytes
    assert len(set(held.values())) == 1, held  # every device holds the same share
    return next(iter(held.values()))

  plan = _plan(SMALL, mesh_shape)
  assert (plan.params, plan.opt_state, plan.reference) == (
      per_device(state.params), per_device(state.opt_state), per_device(state.reference_params))


@pytest.mark.parametrize("mesh_shape,remat", [((8, 1, 1), True), ((1, 8, 1), False)])
def test_train_step_temporaries_match_the_compiled_step(mesh_shape, remat):
  """16 rows x 256 tokens of the ~36 M `small` preset, data-parallel with remat and FSDP without (docs/planning.md:
  ratios 1.02 and 0.81)."""
  model, rows, width = SMALL.replace(remat=remat), 16, 256
  mesh = make_mesh(mesh_shape)
  shardings = state_shardings(model, OPTIMIZER, mesh, with_reference=True)
  abstract = transformer.abstract_params(model)
  state = TrainState(step=jax.ShapeDtypeStruct((), jnp.int32, sharding=shardings.step),
                     params=_placed(abstract, shardings.params),
                     opt_state=_placed(jax.eval_shape(OPTIMIZER.init, abstract), shardings.opt_state),
                     reference_params=_placed(abstract, shardings.params))
  zeros = lambda dtype: np.zeros((1, rows, width), dtype)
  minibatch = TrainBatch(tokens=zeros(np.int32), segment_ids=zeros(np.int32) + 1, positions=zeros(np.int32),
                         loss_mask=zeros(np.float32), advantages=zeros(np.float32), old_logprobs=zeros(np.float32))
  step = make_train_step(model, LOSS, OPTIMIZER, mesh, with_reference=True)
  compiled = step.lower(state, minibatch).compile().memory_analysis()
  plan = _plan(model, mesh_shape, rows, width)
  assert compiled.argument_size_in_bytes == plan.resident + plan.minibatch + 4  # + the int32 step
  ratio = compiled.temp_size_in_bytes / plan.train_step(remat)
  print(f"train step {mesh_shape} remat={remat}: compiled {compiled.temp_size_in_bytes / 2**20:.1f} MiB, planned "
        f"{plan.train_step(remat) / 2**20:.1f} MiB, ratio {ratio:.2f}")
  assert 1 / PLAN_FACTOR <= ratio <= PLAN_FACTOR


@pytest.mark.parametrize("mesh_shape", [(8, 1, 1), (1, 8, 1)])
def test_prefill_temporaries_match_the_compiled_sampler(mesh_shape):
  """The sampler's first prefill of 64 rows x 512 tokens into a 1024-slot cache (docs/planning.md: ratios 1.00 and
  1.18: the cache write's update arrays, then FSDP's MLP on all rows, dominate)."""
  rows, width = 64, 512
  mesh = make_mesh(mesh_shape)
  cache = jax.eval_shape(lambda: transformer.KVCache.init(SMALL, rows, 2 * width))
  state = sampler.DecodeState(cache=_placed(cache, transformer.cache_shardings(cache, mesh)),
                              pending=jax.ShapeDtypeStruct((rows,), jnp.int32))
  params = _placed(transformer.abstract_params(SMALL), transformer.param_shardings(SMALL, mesh))
  append = sampler._jitted_steps(SMALL, mesh)[0]
  lengths = jax.ShapeDtypeStruct((rows,), jnp.int32)
  compiled = append.lower(params, state, jax.ShapeDtypeStruct((rows, width), jnp.int32), lengths, lengths,
                          cache_empty=True).compile().memory_analysis()
  plan = _plan(SMALL, mesh_shape, sampler_rows=rows, prefill_len=width)
  ratio = compiled.temp_size_in_bytes / plan.prefill
  print(f"prefill {mesh_shape}: compiled {compiled.temp_size_in_bytes / 2**20:.1f} MiB, planned "
        f"{plan.prefill / 2**20:.1f} MiB, ratio {ratio:.2f}")
  assert 1 / PLAN_FACTOR <= ratio <= PLAN_FACTOR
  per_device = rows // 8  # rows over data x fsdp; k and v in f32, segment ids and lengths in int32
  assert plan.kv_cache == (2 * SMALL.num_layers * per_device * SMALL.num_kv_heads * 2 * width * SMALL.head_dim * 4
                           + per_device * 2 * width * 4 + per_device * 4)


def test_cli_plans_the_7b_paper_config_for_h100_without_allocating():
  argv = ["plan.py", "--config=configs/alfworld.py:qwen2p5_7b", "--config.mesh_shape=1,8,1", "--accelerator=h100"]
  script = (f"import runpy, sys, jax\nsys.argv = {argv!r}\ntry:\n  runpy.run_path('experiments/plan.py', "
            f"run_name='__main__')\nexcept SystemExit as e:\n  assert not e.code, e.code\n"
            f"print('live arrays:', len(jax.live_arrays()))")
  out = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, JAX_PLATFORMS="cpu"))
  assert out.returncode == 0, out.stderr[-3000:]
  lines = out.stdout.splitlines()
  assert "live arrays: 0" in lines
  verdicts = [line for line in lines if line[2:].startswith("h100")]
  assert len(verdicts) == 2 and all("fit" in line for line in verdicts), lines
  assert "params float32, compute bfloat16; mesh (data, fsdp, tensor) = (1, 8, 1)" in lines[0]


def test_cli_json_and_a_mesh_shape_with_a_wildcard():
  cmd = [sys.executable, os.path.join(ROOT, "experiments", "plan.py"), "--config=configs/alfworld.py",
         "--num_devices=8", "--json"]
  out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=120,
                       env=dict(os.environ, JAX_PLATFORMS="cpu"))
  assert out.returncode == 0, out.stderr[-3000:]
  result = json.loads(out.stdout)
  assert result["mesh_shape"] == [8, 1, 1]
  assert set(result["verdicts"]) == set(memory_plan.ACCELERATORS)
  assert result["bytes_per_device"]["peak"]["remat"] <= result["bytes_per_device"]["peak"]["no_remat"]


def test_bad_mesh_shapes_are_named():
  with pytest.raises(ValueError, match=r"has a -1: give the device count"):
    memory_plan.resolve_mesh_shape((-1, 1, 1), 0)
  with pytest.raises(ValueError, match=r"needs 16 devices, not 8"):
    memory_plan.resolve_mesh_shape((2, 8, 1), 8)
  with pytest.raises(ValueError, match=r"mesh_shape must be 3 sizes"):
    memory_plan.abstract_mesh((2, 0, 1))
  with pytest.raises(ValueError, match=r"unknown accelerator 'tpu'"):
    memory_plan.accelerator_bytes("tpu")


@pytest.mark.parametrize("mesh_shape", [(1, 1, 1), (2, 2, 2)])
def test_a_lora_plan_holds_the_adapters_state_and_the_samplers_merged_copy_not_a_reference(mesh_shape):
  """LoRA: the base (the model's shardings), the f32 adapters replicated with their Adam moments, gradients and
  update, no reference copy (π_ref is the base), and the sampler's merged policy, a second model-sized copy."""
  model = model_config.preset("qwen2.5-7b", param_dtype="bfloat16")
  cfg = LoraConfig(rank=64, alpha=64.0)
  work = _plan(model, mesh_shape)
  lora_plan = memory_plan.plan(model, mesh_shape, OPTIMIZER, _workload(),
                               with_reference=True, lora=cfg)
  d, f, h, kv, hd, layers = 3584, 18944, 28, 4, 128, 28
  per_layer = 64 * ((d + h * hd) + 2 * (d + kv * hd) + (h * hd + d) + 2 * (d + f) + (f + d))  # r·(in + out) each
  adapters = 4 * layers * per_layer  # f32, replicated
  assert lora_plan.adapters == adapters and lora_plan.gradients == 2 * adapters
  assert lora_plan.optimizer_update == adapters and lora_plan.opt_state == 2 * adapters + 4
  assert lora_plan.params == lora_plan.merged == work.params and lora_plan.reference == 0
  assert lora_plan.resident < work.resident - work.params  # no Adam moments of the model's size
  assert lora_plan.activations == work.activations
