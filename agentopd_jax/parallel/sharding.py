"""Device mesh and the one table that maps logical parameter axes onto it.

Mesh axes: `data` (pure data parallel), `fsdp` (data parallel with parameters sharded over it) and `tensor`
(Megatron-style head/MLP/vocab sharding). A logical axis whose size does not divide the mesh axes it maps to is
replicated instead (e.g. Qwen2.5's 2 KV heads on tensor=4), so every preset runs on every mesh.
"""
from __future__ import annotations

import math
from typing import Optional, Sequence

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

MESH_AXES = ("data", "fsdp", "tensor")

# logical axis -> mesh axis (or tuple of mesh axes, or None for replicated).
LOGICAL_RULES = {
    "batch": ("data", "fsdp"),
    "layers": None,
    "vocab": "tensor",
    "embed": "fsdp",
    "q_heads": "tensor",
    "kv_heads": "tensor",
    "head_dim": None,
    "mlp": "tensor",
    "norm": None,
}


def make_mesh(shape: Sequence[int] = (-1, 1, 1), devices=None) -> Mesh:
  """Mesh over (data, fsdp, tensor); one -1 entry absorbs the remaining devices."""
  devices = list(jax.devices() if devices is None else devices)
  shape = list(shape)
  if len(shape) != 3:
    raise ValueError(f"mesh shape must have 3 entries (data, fsdp, tensor), got {shape}")
  if shape.count(-1) > 1:
    raise ValueError(f"mesh shape may contain at most one -1, got {shape}")
  known = math.prod(s for s in shape if s != -1)
  if -1 in shape:
    shape[shape.index(-1)] = len(devices) // known
  if math.prod(shape) != len(devices):
    raise ValueError(f"mesh shape {tuple(shape)} needs {math.prod(shape)} devices, {len(devices)} available")
  return Mesh(np.asarray(devices).reshape(shape), MESH_AXES)


def _mesh_axes_size(mesh: Mesh, axes) -> int:
  if axes is None:
    return 1
  axes = (axes,) if isinstance(axes, str) else axes
  return math.prod(mesh.shape[a] for a in axes)


def logical_to_spec(logical: P, shape: Sequence[int], mesh: Mesh, rules: Optional[dict] = None) -> P:
  """Mesh PartitionSpec for one array, replicating dims the mapped mesh axes do not divide."""
  rules = LOGICAL_RULES if rules is None else rules
  out, used = [], set()
  for name, size in zip(tuple(logical) + (None,) * (len(shape) - len(logical)), shape):
    axes = rules.get(name) if name is not None else None
    if name is not None and name not in rules:
      raise KeyError(f"logical axis {name!r} has no sharding rule; add it to LOGICAL_RULES")
    axes_t = () if axes is None else ((axes,) if isinstance(axes, str) else tuple(axes))
    axes_t = tuple(a for a in axes_t if a not in used and mesh.shape[a] > 1)
    if not axes_t or size % _mesh_axes_size(mesh, axes_t):
      out.append(None)
      continue
    used.update(axes_t)
    out.append(axes_t[0] if len(axes_t) == 1 else axes_t)
  return P(*out)


def param_shardings(logical_tree, abstract_tree, mesh: Mesh, rules: Optional[dict] = None):
  """NamedShardings for a parameter pytree from its logical specs and shapes."""
  return jax.tree.map(
      lambda spec, arr: NamedSharding(mesh, logical_to_spec(spec, arr.shape, mesh, rules)),
      logical_tree, abstract_tree, is_leaf=lambda x: isinstance(x, P))


def batch_sharding(mesh: Mesh, ndim: int = 2) -> NamedSharding:
  """Leading (batch) dim over data x fsdp, the rest replicated."""
  return NamedSharding(mesh, P(("data", "fsdp"), *([None] * (ndim - 1))))


def shard_batch(tree, mesh: Mesh):
  """device_put every array of a batch pytree with its leading dim split over data x fsdp."""
  return jax.tree.map(lambda x: jax.device_put(x, batch_sharding(mesh, np.ndim(x))), tree)
