"""The single resident teacher: exactly one teacher checkpoint's parameters in accelerator memory at a time.

Agentic-OPD keeps one teacher loaded next to the student and hot-swaps it from disk when the HCN scheduler picks
another (the authors load it in verl's reference worker; research/methods.md §2.1). With K teachers of the
student's size, holding all of them would take K model copies; holding one takes one. So a swap frees the previous
teacher's arrays *before* restoring the next: their references are dropped and each jax array is `.delete()`d,
which releases its device buffer at once instead of whenever Python's garbage collector gets to it. The peak is
therefore one teacher, not two, at the price that a failed restore leaves no teacher resident (`step` is None).

Callers must not keep `params` across a `load` of another step: those arrays are deleted by the swap.
"""
from __future__ import annotations

import os
import time

import jax

from agentopd_jax.models.loading import pool_params
from agentopd_jax.storage.checkpoints import CheckpointPool


def _targets(abstract_params, sharding):
  """ShapeDtypeStructs to restore into: `sharding` may be None (each leaf's own sharding, else device 0), one
  Sharding for every leaf, or a pytree of shardings matching `abstract_params`."""
  if sharding is None:
    return jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=getattr(a, "sharding", None)),
                        abstract_params)
  if isinstance(sharding, jax.sharding.Sharding):
    return jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=sharding), abstract_params)
  return jax.tree.map(lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s), abstract_params, sharding)


class ResidentTeacher:
  """Holds one checkpoint's params from the checkpoint pool in `pool_dir` (a run's `checkpoints/` folder).

  abstract_params: the params pytree (`transformer.abstract_params(config)` or concrete arrays as a template).
  sharding: where the params land (see `_targets`). `swaps` counts restores from disk (the first load included),
  `last_swap_s` is the wall time of the latest one (free + restore, until the arrays are ready).
  """

  def __init__(self, pool_dir: str | os.PathLike, abstract_params, sharding=None):
    self._pool = CheckpointPool(pool_dir, read_only=True)
    self._target = _targets(abstract_params, sharding)
    self._params = None
    self._step: int | None = None
    self.swaps = 0
    self.last_swap_s: float | None = None

  @property
  def params(self):
    if self._params is None:
      raise RuntimeError(f"no teacher is resident (pool {self._pool.directory}); call load(step) first")
    return self._params

  @property
  def step(self) -> int | None:
    return self._step

  def load(self, step: int):
    """Makes checkpoint `step` the resident teacher and returns its params; a no-op when it already is."""
    step = int(step)
    if step == self._step:
      return self._params
    start = time.perf_counter()
    self.release()
    params = jax.block_until_ready(pool_params(self._pool, step, self._target))
    self._params, self._step = params, step
    self.swaps += 1
    self.last_swap_s = time.perf_counter() - start
    return params

  def release(self) -> None:
    """Frees the resident teacher's arrays now (no teacher stays resident)."""
    leaves = jax.tree.leaves(self._params)
    self._params, self._step = None, None
    for x in leaves:
      x.delete()

  def close(self) -> None:
    self.release()
    self._pool.close()

  def __enter__(self) -> ResidentTeacher:
    return self

  def __exit__(self, *exc) -> None:
    self.close()
