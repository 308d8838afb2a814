"""CheckpointPool: listing, best/retention, per-checkpoint records, bitwise and sharded restore, reopen, atomicity."""
import errno
import glob
import json
import logging
import os
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
import pytest
from jax.sharding import NamedSharding
from jax.sharding import PartitionSpec as P

from agentopd_jax.models import transformer
from agentopd_jax.models.config import preset
from agentopd_jax.parallel import sharding
from agentopd_jax.storage.checkpoints import CheckpointPool, DamagedCheckpointError

CONFIG = {"model": "tiny", "lr": 1e-6, "phase": "grpo"}


def _state(seed: int = 0):
  """A small train-step state: params (f32 + bf16), adamw state after one update, an int step and a typed key."""
  k1, k2 = jax.random.split(jax.random.key(seed))
  params = {"w": jax.random.normal(k1, (4, 8)), "b": jax.random.normal(k2, (8,)).astype(jnp.bfloat16)}
  opt = optax.adamw(1e-3)
  opt_state = opt.init(params)
  updates, opt_state = opt.update(jax.tree.map(jnp.ones_like, params), opt_state, params)
  return {"params": optax.apply_updates(params, updates), "opt_state": opt_state, "step": jnp.int32(seed),
          "rng": jax.random.fold_in(jax.random.key(7), seed)}


def _bits(x):
  if jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
    x = jax.random.key_data(x)
  a = np.asarray(x)
  return str(a.dtype), a.shape, a.tobytes()


def _assert_bitwise(a, b):
  assert jax.tree.structure(a) == jax.tree.structure(b)
  for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b)):
    assert x.dtype == y.dtype and _bits(x) == _bits(y)


def _save(pool, step, value, outcomes=None, state=None, **kw):
  pool.save(step, _state(step) if state is None else state, metrics={"val/success_rate": value, "val/len": 10.0},
            outcomes=outcomes, config=CONFIG, **kw)


@pytest.fixture
def pool(tmp_path):
  with CheckpointPool(tmp_path / "run") as p:
    _save(p, 10, 0.2, {"a": (1, 4), "b": (0, 4)}, extra={"data_pos": 10})
    _save(p, 20, 0.5, {"a": (4, 4), "c": (2, 4)}, extra={"data_pos": 20})
    _save(p, 30, 0.3, {"b": (3, 4)}, extra={"data_pos": 30, "phase": "grpo"})
    yield p


def test_steps_latest_best(pool):
  assert pool.steps() == [10, 20, 30]
  assert pool.latest_step() == 30
  assert pool.best_step() == 20


def test_best_ties_min_mode_and_missing_metric(tmp_path):
  with CheckpointPool(tmp_path / "ties") as p:
    assert p.best_step() is None and p.latest_step() is None
    for step, v in [(1, 0.5), (2, 0.7), (3, 0.7), (4, 0.1)]:
      _save(p, step, v)
    p.save(5, _state(), metrics={"other": 1.0}, outcomes=None, config=CONFIG)  # not validated: never best
    _save(p, 6, float("nan"))
    assert p.best_step() == 3  # tie 0.7 at steps 2 and 3 -> newer
  with CheckpointPool(tmp_path / "ties", best_mode="min") as p:
    _save(p, 7, 0.1)
    assert p.best_step() == 7  # tie 0.1 with step 4 -> newer
  with CheckpointPool(tmp_path / "ties", best_metric="val/len", best_mode="min") as p:
    assert p.best_step() == 7


def test_keep_k_keeps_newest_and_best(tmp_path):
  path = tmp_path / "keep"
  with CheckpointPool(path, keep=2) as p:
    for step, v in [(1, 0.9), (2, 0.1), (3, 0.2), (4, 0.3)]:
      _save(p, step, v)
      assert p.best_step() == 1
    assert p.steps() == [1, 3, 4]
    with pytest.raises(FileNotFoundError, match="step 2"):
      p.metadata(2)
  assert sorted(int(n) for n in os.listdir(path) if n.isdigit()) == [1, 3, 4]
  with CheckpointPool(path, keep=2) as p:  # the policy still knows the best after a reopen
    _save(p, 5, 0.95)
    assert p.steps() == [4, 5]
    _save(p, 6, 0.0)
    assert p.steps() == [5, 6] and p.best_step() == 5


def test_metadata_round_trip(pool):
  meta = pool.metadata(30)
  assert meta == {"step": 30, "metrics": {"val/success_rate": 0.3, "val/len": 10.0}, "outcomes": {"b": (3, 4)},
                  "config": CONFIG, "extra": {"data_pos": 30, "phase": "grpo"}, "prng_keys": {"rng": "threefry2x32"}}
  meta["config"]["lr"] = 0.0  # a copy: the pool's record is not mutated
  assert pool.metadata(30)["config"] == CONFIG
  _save(pool, 40, 0.1)
  assert pool.metadata(40)["outcomes"] is None and pool.metadata(40)["extra"] is None


def test_outcomes_matrix(pool):
  steps, problems, succ, att = pool.outcomes_matrix()
  assert steps == [10, 20, 30] and problems == ["a", "b", "c"]
  np.testing.assert_array_equal(succ, [[1, 0, 0], [4, 0, 2], [0, 3, 0]])
  np.testing.assert_array_equal(att, [[4, 4, 0], [4, 0, 4], [0, 4, 0]])
  assert succ.dtype.kind == "i" and att.dtype.kind == "i"
  steps, problems, succ, att = pool.outcomes_matrix([30, 10])
  assert steps == [30, 10] and problems == ["a", "b"]
  np.testing.assert_array_equal(succ, [[0, 3], [1, 0]])


def test_restore_is_bitwise(pool):
  saved = _state(20)
  abstract = jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), saved)
  restored = pool.restore(20, abstract)
  _assert_bitwise(restored, saved)
  assert jax.dtypes.issubdtype(restored["rng"].dtype, jax.dtypes.prng_key)
  assert isinstance(restored["opt_state"][0], optax.ScaleByAdamState)
  assert all(isinstance(x, jax.Array) for x in jax.tree.leaves(restored))
  _assert_bitwise(pool.restore(20, _state(0)), saved)  # concrete arrays as the template
  # A restored key continues the same random stream.
  np.testing.assert_array_equal(jax.random.uniform(restored["rng"], (3,)), jax.random.uniform(saved["rng"], (3,)))


def test_restore_onto_mesh(tmp_path):
  config = preset("tiny", vocab_size=64, num_layers=2, hidden_size=32, intermediate_size=64, num_heads=4,
                  num_kv_heads=2, head_dim=8)
  mesh = sharding.make_mesh((2, 2, 2))
  params = transformer.init_params(config, jax.random.key(0))
  state = {"params": params, "opt_state": optax.adamw(1e-3).init(params), "rng": jax.random.key(3)}
  shardings = transformer.param_shardings(config, mesh)
  abstract = jax.tree.map(lambda a, s: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=s),
                          transformer.abstract_params(config), shardings)
  with CheckpointPool(tmp_path / "mesh") as p:
    p.save(5, state, metrics={}, outcomes=None, config={})
    teacher = p.restore_params(5, abstract)
    _assert_bitwise(teacher, params)
    for arr, want in zip(jax.tree.leaves(teacher), jax.tree.leaves(shardings)):
      assert arr.sharding == want
    assert teacher["layers"]["attn"]["q_kernel"].sharding.spec == P(None, "fsdp", "tensor", None)
    # Full restore onto shardings too (key replicated over the mesh).
    target = {"params": abstract, "opt_state": jax.tree.map(lambda x: jax.ShapeDtypeStruct(
        x.shape, x.dtype, sharding=NamedSharding(mesh, P())), state["opt_state"]),
              "rng": jax.ShapeDtypeStruct((), state["rng"].dtype, sharding=NamedSharding(mesh, P()))}
    full = p.restore(5, target)
    _assert_bitwise(full, state)
    assert full["params"]["embedding"].sharding == shardings["embedding"]
    assert full["rng"].sharding.mesh.shape == mesh.shape
    with pytest.raises(KeyError, match="lacks"):
      p.restore_params(5, {**abstract, "not_there": abstract["embedding"]})
    with pytest.raises(KeyError, match="no state entry 'weights'"):
      p.restore_params(5, abstract, key="weights")


def test_reopen(pool):
  path = pool.directory
  pool.close()
  with CheckpointPool(path) as again:
    assert again.steps() == [10, 20, 30] and again.best_step() == 20
    assert again.metadata(10)["extra"] == {"data_pos": 10}
    saved = _state(30)
    _assert_bitwise(again.restore(30, jax.tree.map(lambda x: jax.ShapeDtypeStruct(x.shape, x.dtype), saved)), saved)
    _save(again, 40, 0.6)
  with CheckpointPool(path, read_only=True) as ro:
    assert ro.steps() == [10, 20, 30, 40] and ro.best_step() == 40
    with pytest.raises(PermissionError):
      _save(ro, 50, 0.1)


def test_missing_step_and_bad_saves(pool):
  with pytest.raises(FileNotFoundError, match=f"step 15 in {pool.directory}"):
    pool.restore(15, _state())
  with pytest.raises(FileNotFoundError, match="step 15"):
    pool.metadata(15)
  with pytest.raises(ValueError, match="already holds step 20"):
    _save(pool, 20, 0.1)
  with pytest.raises(ValueError, match="successes <= attempts"):
    _save(pool, 40, 0.1, {"a": (5, 4)})
  with pytest.raises(TypeError, match="extra must be JSON"):
    _save(pool, 40, 0.1, extra={"x": object()})
  assert pool.steps() == [10, 20, 30]
  _save(pool, 5, 0.0)  # a step below the latest is still written (orbax would skip it without force)
  assert pool.steps() == [5, 10, 20, 30]
  with pytest.raises(FileNotFoundError, match="no checkpoint pool"):
    CheckpointPool(os.path.join(pool.directory, "nope"), read_only=True)


def test_unfinished_save_is_not_listed(pool):
  # A crash mid-save leaves orbax's tmp directory; copy a complete step there to show the name alone decides.
  tmp = os.path.join(pool.directory, "40.orbax-checkpoint-tmp-1234567")
  shutil.copytree(os.path.join(pool.directory, "30"), tmp)
  os.remove(os.path.join(tmp, "commit_success.txt"))
  path = pool.directory
  pool.close()
  with CheckpointPool(path, read_only=True) as ro:
    assert ro.steps() == [10, 20, 30] and ro.latest_step() == 30
    with pytest.raises(FileNotFoundError):
      ro.metadata(40)
  assert os.path.isdir(tmp)  # a reader never deletes what may be another run's save in progress
  with CheckpointPool(path) as p:
    assert p.steps() == [10, 20, 30]
    _save(p, 40, 0.1)  # the writable pool has cleaned the leftover up by now
    assert p.steps() == [10, 20, 30, 40]
  assert not os.path.exists(tmp)


def test_disk_full_save_fails_clearly_and_leaves_the_earlier_steps(pool, monkeypatch):
  async def disk_full(self, *args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")

  with monkeypatch.context() as m:
    m.setattr(ocp.PyTreeCheckpointHandler, "async_save", disk_full)
    with pytest.raises(OSError, match=r"step 40: the disk is full writing .*steps \[10, 20, 30\] are intact"):
      _save(pool, 40, 0.9)
  assert not any(".orbax-checkpoint-tmp" in n for n in os.listdir(pool.directory))  # its debris is freed at once
  assert pool.steps() == [10, 20, 30] and pool.best_step() == 20
  with pytest.raises(FileNotFoundError):
    pool.metadata(40)
  _assert_bitwise(pool.restore(30, _state(0)), _state(30))
  _save(pool, 40, 0.9)  # space is back: the same step saves
  assert pool.steps() == [10, 20, 30, 40] and pool.best_step() == 40
  _assert_bitwise(pool.restore(40, _state(0)), _state(40))


def _newest_file(pool, step, pattern):
  return max(glob.glob(os.path.join(pool.directory, str(step), pattern), recursive=True), key=os.path.getsize)


def _flip(path):
  data = bytearray(open(path, "rb").read())
  data[len(data) // 2] ^= 0xFF
  open(path, "wb").write(bytes(data))


def _truncate(path):
  data = open(path, "rb").read()
  open(path, "wb").write(data[:len(data) // 2])


@pytest.mark.parametrize("damage, pattern", [
    (_flip, "state/**/d/*"),          # a flipped byte in a tensor file: orbax alone restores a wrong number
    (_truncate, "state/**/d/*"),      # a truncated tensor file
    (_truncate, "state/manifest.ocdbt"),
    (_truncate, "meta/metadata"),     # a half-written record
    (os.remove, "state/_METADATA"),
])
def test_resume_skips_a_damaged_newest_step_and_keeps_it(pool, caplog, damage, pattern):
  damage(_newest_file(pool, 30, pattern))
  with caplog.at_level(logging.WARNING, "agentopd_jax.storage.checkpoints"):
    step, state = pool.restore_newest(_state(0))
  assert step == 20
  _assert_bitwise(state, _state(20))
  assert "checkpoint step 30" in caplog.text and "resuming from an earlier step" in caplog.text
  assert pool.steps() == [10, 20]
  (moved,) = os.listdir(pool.directory + ".damaged")  # set aside, not deleted
  assert moved.startswith("30-") and os.path.isdir(os.path.join(pool.directory + ".damaged", moved, "state"))
  _save(pool, 30, 0.3)  # the resumed run writes step 30 afresh
  assert pool.restore_newest(_state(0))[0] == 30


def test_damage_without_a_checksum_is_found_by_restoring(pool, caplog):
  """A run killed between orbax's rename and the checksum record (or a pool from before checksums) still resumes
  from the newest step that restores; an unreadable checksums.json counts as none."""
  with open(os.path.join(pool.directory, "checksums.json"), "w") as f:
    f.write('{"10": "ab')  # a damaged file
  _truncate(_newest_file(pool, 30, "state/manifest.ocdbt"))
  with caplog.at_level(logging.WARNING, "agentopd_jax.storage.checkpoints"):
    assert pool.restore_newest(_state(0))[0] == 20
  assert "checksums.json does not read" in caplog.text and "checkpoint step 30" in caplog.text
  assert "DATA_LOSS" in caplog.text and "tensorstore_spec" not in caplog.text
  _save(pool, 30, 0.3)
  assert json.load(open(os.path.join(pool.directory, "checksums.json"))).keys() == {"30"}


def test_a_different_target_is_the_callers_error_not_damage(pool):
  wrong = _state(0)
  wrong["params"]["w"] = jnp.zeros((4, 9))
  with pytest.raises(ValueError, match=r"1 entries differ, e.g. 'params/w': saved \(4, 8\), asked for \(4, 9\)"):
    pool.restore_newest(wrong)
  assert pool.steps() == [10, 20, 30] and not os.path.exists(pool.directory + ".damaged")


def test_a_read_only_pool_reports_damage_and_moves_nothing(pool):
  _flip(_newest_file(pool, 30, "state/**/d/*"))
  pool.close()
  with CheckpointPool(pool.directory, read_only=True) as ro:
    with pytest.raises(DamagedCheckpointError, match=r"step 30 .*\(sha256 differs"):
      ro.restore_newest(_state(0))
    assert ro.steps() == [10, 20, 30]
