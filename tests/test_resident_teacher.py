"""ResidentTeacher: exactly one teacher's arrays alive through swaps, bitwise restores, no-op reloads, shardings."""
import collections
import gc

import jax
import numpy as np
import pytest

from agentopd_jax.models import transformer
from agentopd_jax.models.config import preset
from agentopd_jax.parallel import sharding
from agentopd_jax.methods.agentic_opd.resident import ResidentTeacher
from agentopd_jax.storage.checkpoints import CheckpointPool

NUM_CHECKPOINTS = 20
CONFIG = preset("tiny")
_init = jax.jit(lambda key: transformer.init_params(CONFIG, key))  # one compile for all 20 checkpoints


@pytest.fixture(scope="module")
def pool_dir(tmp_path_factory):
  """20 checkpoints of the tiny model; returns (their folder, {step: numpy copy of the saved params})."""
  path = tmp_path_factory.mktemp("teachers") / "checkpoints"
  saved = {}
  with CheckpointPool(path) as pool:
    for step in range(NUM_CHECKPOINTS):
      params = _init(jax.random.key(step))
      pool.save(step, {"params": params}, metrics={"val/success_rate": step / 100}, outcomes={}, config={})
      saved[step] = jax.tree.map(np.array, params)  # copies, not views of the deleted buffers
      for x in jax.tree.leaves(params):
        x.delete()
  return path, saved


def _param_arrays_alive() -> int:
  """Live jax arrays with the shape and dtype of some parameter (a Counter, so repeated shapes count once each).
  Unreachable arrays (in reference cycles left by earlier tests of the worker) are collected first, so that the count
  does not depend on when the garbage collector last ran."""
  gc.collect()
  kinds = collections.Counter((a.shape, a.dtype) for a in jax.tree.leaves(transformer.abstract_params(CONFIG)))
  return sum(1 for x in jax.live_arrays() if (x.shape, x.dtype) in kinds)


def _assert_equal(params, want):
  assert jax.tree.structure(params) == jax.tree.structure(want)
  for x, y in zip(jax.tree.leaves(params), jax.tree.leaves(want)):
    np.testing.assert_array_equal(np.asarray(x), y)


def test_one_teacher_alive_through_random_swaps(pool_dir):
  path, saved = pool_dir
  n_leaves = len(jax.tree.leaves(transformer.abstract_params(CONFIG)))
  baseline = _param_arrays_alive()
  order = np.random.default_rng(0).permutation(NUM_CHECKPOINTS).tolist()
  with ResidentTeacher(path, transformer.abstract_params(CONFIG)) as teacher:
    assert teacher.step is None and teacher.swaps == 0
    previous = None
    for i, step in enumerate(order):
      params = teacher.load(step)
      assert teacher.step == step and teacher.swaps == i + 1 and teacher.last_swap_s > 0
      assert _param_arrays_alive() == baseline + n_leaves  # this teacher's arrays, and nothing of the last one
      if previous is not None:
        assert all(x.is_deleted() for x in jax.tree.leaves(previous))
      _assert_equal(params, saved[step])
      previous = params
    assert teacher.load(order[-1]) is previous and teacher.swaps == NUM_CHECKPOINTS  # same step: no swap
    assert _param_arrays_alive() == baseline + n_leaves
    del params
  assert all(x.is_deleted() for x in jax.tree.leaves(previous))  # close() frees the last teacher
  del previous
  assert _param_arrays_alive() == baseline


def test_params_before_load_and_missing_step(pool_dir):
  path, _ = pool_dir
  with ResidentTeacher(path, transformer.abstract_params(CONFIG)) as teacher:
    with pytest.raises(RuntimeError, match="no teacher is resident"):
      teacher.params
    teacher.load(3)
    with pytest.raises(FileNotFoundError, match="no checkpoint for step 99"):
      teacher.load(99)
    assert teacher.step is None  # the old teacher was freed before the failed restore


def test_restores_onto_shardings(pool_dir):
  path, saved = pool_dir
  mesh = sharding.make_mesh((1, 2, 4))
  shardings = transformer.param_shardings(CONFIG, mesh)
  with ResidentTeacher(path, transformer.abstract_params(CONFIG), shardings) as teacher:
    params = teacher.load(7)
    _assert_equal(params, saved[7])
    for arr, want in zip(jax.tree.leaves(params), jax.tree.leaves(shardings)):
      assert arr.sharding == want
  replicated = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())
  with ResidentTeacher(path, transformer.abstract_params(CONFIG), replicated) as teacher:
    assert all(x.sharding == replicated for x in jax.tree.leaves(teacher.load(1)))
