"""Per-device memory plan of a run, from shapes alone: nothing is allocated, so a 7B plan runs on any CPU.

Why: a run that does not fit dies minutes into its first rollout or update, after the weights were loaded. The
plan says beforehand, for a mesh and precision, how many bytes each device holds and whether that fits a named
accelerator.

Exact parts. Parameters, Adam moments, reference and teacher copies are summed leaf by leaf over
`jax.eval_shape` of the real initialisers with the repo's own shardings (`train_step.state_shardings`,
`transformer.cache_shardings`) on a `jax.sharding.AbstractMesh`: per-device bytes are
prod(NamedSharding.shard_shape(shape)) x itemsize, so any mesh can be planned without its devices. optax keeps
both Adam moments in the params' dtype (`scale_by_adam`: mu_dtype None). The KV cache is
[layers, B, kv_heads, S, head_dim] x 2 in the compute dtype, rows over data x fsdp, KV heads over tensor where
they divide.

Estimated parts, per device. t: tokens per row; c: the compute dtype's bytes; d, hq, hkv, hd, L, V: hidden size,
q heads, KV heads, head dim, layers, vocabulary. Rows split as the compiled programs split them (read off their HLO
on CPU): attention works on b = rows / (data x fsdp) rows of a device, n = b·t tokens; the MLP and the unembedding
on b_d = rows / data rows, n_d = b_d·t (over fsdp XLA splits their contraction, the fsdp-sharded embed dim, rather
than their rows), with the MLP width f_t and the vocab chunk split over tensor where the rules split them. Nothing
else is counted as split over tensor.
  one layer's saved activations
      A = n·d·(6c + 8) + n·hd·(4hq + 4hkv)·c + 4·n·hq·hd + 8·b·hq·t + 3·b_d·t·f_t·c
      (residual, norms with their f32 intermediates, q/k/v before and after rope, attention output in f32 and c,
      the blocked attention's softmax statistics (it recomputes each query block's scores in the backward pass), the
      MLP's gate and up and the transposed copy of their product that `matmul` keeps for the weight gradient; with
      `attention_impl="dot_product"` the masked f32 scores, the f32 softmax and its cast, b·hq·t²·(8 + c), instead
      of the statistics)
  activations without remat      L·A
  activations with remat         L·n·d·c + A       the layer inputs the scan keeps + one layer recomputed
  loss head                      n_d·d·(c + 4) + ceil(V / chunk)·n_d·4·(4 + 2k) + 4·n_d·chunk_t·4
      (final norm; the vocab-chunked log-softmax keeps per chunk its running stats and top-k, k = top_k, and works
      on one [n_d, chunk] f32 block at a time: logits, exp, entropy term, their gradient; never [n, V] logits)
  gradients                      2 x params        the accumulator the step scans micro-batches into + one
                                                   micro-batch's gradients, in the params' dtype and sharding
  optimizer update               1 x params        AdamW's update tree, after the backward pass has freed the
                                                   activations: train step = batch + gradients + max(activations +
                                                   loss head, optimizer update)
  prefill (rollout, B rows)      max(b·hq·t·(8 + min(t, 128)·(8 + c)) + 2·L·b·t·hkv·hd·c, 3·L·B·t·hkv·hd·c,
                                     4·b_d·t·f_t·c)
      (one query block's scores and softmax, and the statistics, while the scan stacks every layer's new keys and
      values (with attention_impl="dot_product" all t rows' scores); the cache write,
      whose update arrays XLA keeps for all B rows of the sampler's batch on every device; one layer's MLP)
The blocked attention materialises one query block's [b, heads, 128, t] scores at a time, in the forward and the
backward pass, and keeps none of them per layer (with `attention_impl="dot_product"` the [b, heads, t, t] scores are
kept per layer: the big term at long rows; not measured here).
The terms are read off the code; which of them are live at once, and on how many rows, was settled against the
compiled programs' `memory_analysis()` on CPU, which tests/test_plan.py keeps checking (docs/planning.md records
the numbers, mesh by mesh).

LoRA (`lora.rank` > 0): the params are the frozen base; the adapters (f32, replicated), their Adam moments, gradients
and update replace the model-sized ones; there is no reference copy (π_ref is the base); and the sampler's policy,
base + adapters merged once per iteration, is a second model-sized copy, resident through the iteration
(`merged`). The unmerged low-rank products in the update add 2·n·r·c per adapted projection to a layer's activations,
not counted (r is small next to the widths).

Peak = resident (params + adapters + merged + optimizer + reference + teacher) + max(train step, rollout = live
caches x KV cache + prefill). It fits an accelerator when it is at most HEADROOM of the accelerator's HBM.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Dict, Mapping, Optional, Sequence, Union

import jax
import optax
from jax.sharding import AbstractMesh, NamedSharding, PartitionSpec as P

from agentopd_jax.models import lora as lora_lib, transformer
from agentopd_jax.models.blocked_attention import BLOCK
from agentopd_jax.models.config import ModelConfig
from agentopd_jax.models.lora import LoraConfig
from agentopd_jax.parallel.sharding import MESH_AXES, logical_to_spec
from agentopd_jax.scoring.fused import ScoreConfig
from agentopd_jax.training.train_step import state_shardings

GiB = 2 ** 30

# HBM per chip / GPU (Google Cloud TPU docs: v4 32, v5e 16, v5p 95; NVIDIA: A100 40 or 80, H100 SXM 80, H200 141),
# read as GiB. HEADROOM leaves 10 % for fragmentation, XLA's own buffers and what the runtime reserves; 90 % of a
# GiB figure is still below the same figure in decimal GB, so the budget holds whichever unit the vendor meant.
HEADROOM = 0.9
ACCELERATORS = {"v4": 32, "v5e": 16, "v5p": 95, "a100-40gb": 40, "a100-80gb": 80, "h100": 80, "h200": 141}

MeshShape = Union[Mapping[str, int], Sequence[int]]


def abstract_mesh(mesh_shape: MeshShape) -> AbstractMesh:
  """A device-free mesh over (data, fsdp, tensor) from a dict or a 3-tuple of sizes (no -1: resolve it first)."""
  if isinstance(mesh_shape, Mapping):
    if set(mesh_shape) != set(MESH_AXES):
      raise ValueError(f"mesh_shape must name the axes {MESH_AXES}, got {sorted(mesh_shape)}")
    sizes = tuple(mesh_shape[a] for a in MESH_AXES)
  else:
    sizes = tuple(mesh_shape)
  if len(sizes) != 3 or any(not isinstance(s, int) or s < 1 for s in sizes):
    raise ValueError(f"mesh_shape must be 3 sizes >= 1 (data, fsdp, tensor), got {tuple(mesh_shape)}")
  return AbstractMesh(sizes, MESH_AXES)


def resolve_mesh_shape(mesh_shape: Sequence[int], num_devices: Optional[int]) -> tuple:
  """`make_mesh`'s rule without devices: one -1 entry absorbs `num_devices` / the product of the others."""
  shape = list(mesh_shape)
  if len(shape) != 3 or shape.count(-1) > 1:
    raise ValueError(f"mesh_shape must be 3 entries (data, fsdp, tensor) with at most one -1, got {tuple(shape)}")
  if -1 in shape:
    if not num_devices:
      raise ValueError(f"mesh_shape {tuple(shape)} has a -1: give the device count (plan.py's "
                       f"--num_devices) or all three sizes")
    shape[shape.index(-1)] = num_devices // math.prod(s for s in shape if s != -1)
  if num_devices and math.prod(shape) != num_devices:
    raise ValueError(f"mesh_shape {tuple(shape)} needs {math.prod(shape)} devices, not {num_devices}")
  return tuple(shape)


def sharded_bytes(abstract_tree, sharding_tree) -> int:
  """Bytes one device holds of a pytree of ShapeDtypeStructs placed by a matching pytree of NamedShardings."""
  sizes = jax.tree.map(lambda a, s: math.prod(s.shard_shape(a.shape)) * a.dtype.itemsize,
                       abstract_tree, sharding_tree)
  return sum(jax.tree.leaves(sizes))


def _rows_per_device(mesh: AbstractMesh, rows: int, axes=("data", "fsdp")) -> int:
  return -(-rows // math.prod(mesh.shape[a] for a in axes))


def _local(mesh: AbstractMesh, logical: str, size: int) -> int:
  """Per-device extent of a dimension of logical axis `logical` under the sharding rules."""
  return NamedSharding(mesh, logical_to_spec(P(logical), (size,), mesh)).shard_shape((size,))[0]


def layer_activation_bytes(model: ModelConfig, mesh: AbstractMesh, rows: int, seq_len: int) -> int:
  """A of the module docstring: one decoder layer's activations for `rows` x `seq_len` tokens (whole mesh)."""
  b, b_mlp = _rows_per_device(mesh, rows), _rows_per_device(mesh, rows, ("data",))
  t, n, c = seq_len, b * seq_len, model.compute_dtype.itemsize
  d, hd, hq, hkv = model.hidden_size, model.head_dim, model.num_heads, model.num_kv_heads
  f = _local(mesh, "mlp", model.intermediate_size)
  # The blocked attention (the "xla" path of a chunk) and cuDNN flash attention keep per query only its softmax
  # statistics, never the [t, t] scores; the plain dot-product path keeps the scores and their softmax.
  scores = b * hq * t * t * (8 + c) if model.attention_impl == "dot_product" else b * hq * t * 8
  return n * d * (6 * c + 8) + n * hd * (4 * hq + 4 * hkv) * c + 4 * n * hq * hd + scores + 3 * b_mlp * t * f * c


def activation_bytes(model: ModelConfig, mesh: AbstractMesh, rows: int, seq_len: int, remat: bool) -> int:
  """The decoder stack's activations of one micro-batch through forward and backward, with or without remat."""
  layer = layer_activation_bytes(model, mesh, rows, seq_len)
  if not remat:
    return model.num_layers * layer
  inputs = _rows_per_device(mesh, rows) * seq_len * model.hidden_size * model.compute_dtype.itemsize
  return model.num_layers * inputs + layer


def loss_head_bytes(model: ModelConfig, mesh: AbstractMesh, rows: int, seq_len: int, score: ScoreConfig) -> int:
  """The policy's vocab-chunked log-softmax (with gradients) over one micro-batch."""
  n = _rows_per_device(mesh, rows, ("data",)) * seq_len
  chunk = min(score.vocab_chunk, model.vocab_size)
  chunks = -(-model.vocab_size // chunk)
  block = _local(mesh, "vocab", model.vocab_size) * chunk // model.vocab_size
  return (n * model.hidden_size * (model.compute_dtype.itemsize + 4) + chunks * n * 4 * (4 + 2 * score.top_k)
          + 4 * n * block * 4)


def prefill_bytes(model: ModelConfig, mesh: AbstractMesh, rows: int, prefill_len: int) -> int:
  """The sampler's first prefill of `rows` x `prefill_len` tokens into an empty cache (forward only)."""
  b, t, c = _rows_per_device(mesh, rows), prefill_len, model.compute_dtype.itemsize
  new_kv = model.num_layers * t * model.num_kv_heads * model.head_dim * c  # one row's keys of every layer
  # The blocked attention holds one query block's scores at a time, cuDNN only softmax statistics.
  widths = {"dot_product": t, "cudnn": 0}
  scores = b * model.num_heads * t * (8 + widths.get(model.attention_impl, min(t, BLOCK)) * (8 + c))
  mlp = 4 * _rows_per_device(mesh, rows, ("data",)) * t * _local(mesh, "mlp", model.intermediate_size) * c
  return max(scores + 2 * b * new_kv, 3 * rows * new_kv, mlp)


def kv_cache_bytes(model: ModelConfig, mesh: AbstractMesh, rows: int, capacity: int) -> int:
  """The sampler's `KVCache` for `rows` x `capacity` slots, sharded as `transformer.cache_shardings` shards it."""
  cache = jax.eval_shape(lambda: transformer.KVCache.init(model, rows, capacity))
  return sharded_bytes(cache, transformer.cache_shardings(cache, mesh))


@dataclasses.dataclass(frozen=True)
class Workload:
  """What a run puts on the devices besides its weights (sizes over the whole mesh).

  rows x seq_len: one micro-batch of the train step; minibatch_rows: rows of the [A, m, T] mini-batch input, whose
  arrays hold `batch_bytes_per_token` bytes per token. sampler_rows x cache_capacity: the largest KV cache a
  rollout allocates, `live_caches` of them at once; prefill_len: the widest chunk the sampler prefills at once.
  """
  rows: int
  seq_len: int
  minibatch_rows: int
  score: ScoreConfig
  sampler_rows: int
  cache_capacity: int
  prefill_len: int
  batch_bytes_per_token: int = 24  # tokens, segment ids, positions (int32); loss mask, advantages, old log-probs
  live_caches: int = 1

  def __post_init__(self):
    for name in ("rows", "seq_len", "minibatch_rows", "sampler_rows", "cache_capacity", "prefill_len", "live_caches"):
      if getattr(self, name) < 1:
        raise ValueError(f"Workload.{name} must be >= 1, got {getattr(self, name)}")


@dataclasses.dataclass(frozen=True)
class Plan:
  """Per-device bytes of each part of a run; `peak(remat)` and `verdict(accelerator, remat)` summarise them."""
  mesh: Dict[str, int]
  params: int
  adapters: int  # LoRA's trained params (0 without)
  merged: int    # LoRA: the sampler's merged policy (0 without)
  opt_state: int
  reference: int
  teacher: int
  minibatch: int
  gradients: int
  optimizer_update: int
  activations: Dict[bool, int]  # remat off / on
  loss_head: int
  kv_cache: int  # one cache
  live_caches: int
  prefill: int
  remat: bool  # what the model config runs with

  @property
  def resident(self) -> int:
    return self.params + self.adapters + self.merged + self.opt_state + self.reference + self.teacher

  def train_step(self, remat: bool) -> int:
    # The backward pass (activations) and AdamW's update are not live at once; the gradients span both.
    return self.minibatch + self.gradients + max(self.activations[remat] + self.loss_head, self.optimizer_update)

  @property
  def rollout(self) -> int:
    return self.live_caches * self.kv_cache + self.prefill

  def peak(self, remat: bool) -> int:
    return self.resident + max(self.train_step(remat), self.rollout)

  def verdict(self, accelerator: str, remat: bool) -> str:
    hbm = accelerator_bytes(accelerator)
    spare = HEADROOM * hbm - self.peak(remat)
    if spare >= 0:
      return f"fits ({spare / GiB:.1f} GiB to spare under {HEADROOM:.0%} of {hbm / GiB:.0f} GiB)"
    return f"does not fit (over by {-spare / GiB:.1f} GiB at {HEADROOM:.0%} of {hbm / GiB:.0f} GiB)"

  def to_dict(self) -> dict:
    out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
    out["activations"] = {"no_remat": self.activations[False], "remat": self.activations[True]}
    out.update(resident=self.resident, rollout=self.rollout,
               train_step={"no_remat": self.train_step(False), "remat": self.train_step(True)},
               peak={"no_remat": self.peak(False), "remat": self.peak(True)})
    return out


def accelerator_bytes(name: str) -> int:
  if name not in ACCELERATORS:
    raise ValueError(f"unknown accelerator {name!r}; choose from {sorted(ACCELERATORS)}")
  return ACCELERATORS[name] * GiB


def plan(model: ModelConfig, mesh_shape: MeshShape, optimizer: optax.GradientTransformation, workload: Workload,
         with_reference: bool = False, with_teacher: bool = False, lora: Optional[LoraConfig] = None) -> Plan:
  """The per-device memory plan of training `model` with `optimizer` on a mesh of `mesh_shape` (no devices needed).

  with_reference: the KL reference copy is resident (loss.kl_coef > 0; with LoRA π_ref is the base, no copy);
  with_teacher: a teacher parameter copy of the same shapes is (objectives that score a teacher "params"); lora: the
  run trains LoRA adapters (rank > 0) on the frozen model.
  """
  mesh = abstract_mesh(mesh_shape)
  abstract = transformer.abstract_params(model)
  adapted = lora_lib.abstract_adapters(abstract, lora) if lora is not None and lora.rank else None
  shardings = state_shardings(model, optimizer, mesh, with_reference and adapted is None, adapted)
  base = shardings.params if adapted is None else shardings.base_params
  params = sharded_bytes(abstract, base)
  trained = params if adapted is None else sharded_bytes(adapted, shardings.params)
  opt_state = sharded_bytes(jax.eval_shape(optimizer.init, abstract if adapted is None else adapted),
                            shardings.opt_state)
  w = workload
  return Plan(
      mesh=dict(mesh.shape), params=params, adapters=0 if adapted is None else trained,
      merged=0 if adapted is None else params, opt_state=opt_state,
      reference=params if with_reference and adapted is None else 0, teacher=params if with_teacher else 0,
      minibatch=_rows_per_device(mesh, w.minibatch_rows) * w.seq_len * w.batch_bytes_per_token,
      gradients=2 * trained, optimizer_update=trained,
      activations={remat: activation_bytes(model, mesh, w.rows, w.seq_len, remat) for remat in (False, True)},
      loss_head=loss_head_bytes(model, mesh, w.rows, w.seq_len, w.score),
      kv_cache=kv_cache_bytes(model, mesh, w.sampler_rows, w.cache_capacity), live_caches=w.live_caches,
      prefill=prefill_bytes(model, mesh, w.sampler_rows, w.prefill_len), remat=model.remat)
