"""The warm start and its step-0 validation, computed once and reused by the runs that share them
(`training/reuse.py`): a run that reuses them equals a run that computes them, bit for bit.

Runs (the tiny ALFWorld setting of conftest, one iteration, shared store in a temp folder):
  first   computes the SFT warm start and the step-0 validation and stores both;
  again   another workdir, same config: restores both (SFT and the panel play at step 0 are made to fail if called);
  alone   reuse off: computes both itself;
  seed 1  the same warm start restored, but its own step-0 validation (the run seed picks the validation's keys).
"""
import json
import os

import jax
import numpy as np
import pytest

from conftest import TEST_MODEL, tiny_alfworld_config
from agentopd_jax.models import config as model_config, transformer
from agentopd_jax.storage.checkpoints import CheckpointPool
from agentopd_jax.storage.logs import read_metrics, untimed
from agentopd_jax.training import reuse, trainer, warm_start


def _record(workdir):
  """(params of the last checkpoint, per-step (untimed metrics, outcomes), untimed log records)."""
  with CheckpointPool(os.path.join(workdir, "checkpoints"), read_only=True) as pool:
    steps = pool.steps()
    params = pool.restore_params(steps[-1], transformer.abstract_params(model_config.preset(TEST_MODEL)))
    meta = {s: (untimed(pool.metadata(s)["metrics"]), pool.metadata(s)["outcomes"]) for s in steps}
  logs = [untimed(r) for r in read_metrics(os.path.join(workdir, "logs"))]
  return params, meta, logs


def _same(a, b):
  for x, y in zip(jax.tree.leaves(a[0]), jax.tree.leaves(b[0])):
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
  assert a[1] == b[1]
  assert a[2] == b[2]


@pytest.fixture(scope="module")
def runs(tmp_path_factory, alfworld_games_root):
  root = tmp_path_factory.mktemp("reuse")
  monkey = pytest.MonkeyPatch()
  monkey.setenv("AGENTOPD_WARM_STARTS", str(root / "store"))
  played = []
  play = trainer.Trainer.play_panel

  def counting(self, params, context_of=None, traces=None):
    played.append(self.cfg.workdir)
    return play(self, params, context_of, traces)

  monkey.setattr(trainer.Trainer, "play_panel", counting)
  try:
    def run(name, **overrides):
      trainer.train(tiny_alfworld_config("", root / name, alfworld_games_root, grpo__iterations=1, **overrides))
      return str(root / name)

    out = {"first": run("first")}
    with monkey.context() as m:
      def no_sft(parts):
        raise AssertionError("SFT ran although its warm start was stored")
      m.setattr(warm_start, "sft", no_sft)
      out["again"] = run("again")
    out["alone"] = run("alone", reuse_warm_start=False)
    out["seed1"] = run("seed1", seed=1)
  finally:
    monkey.undo()
  out["played"] = played
  out["store"] = root / "store"
  return out


def test_a_reused_start_gives_the_same_run(runs):
  first, again, alone = (_record(runs[k]) for k in ("first", "again", "alone"))
  _same(first, alone)  # storing changes nothing
  _same(again, alone)  # restoring changes nothing: params, metrics, outcomes and every log line but the timings
  assert [r["step"] for r in again[2] if r["phase"] == "sft"] == [1, 2]  # SFT's lines are in the reused run's log


def test_the_panel_is_played_at_step_0_once_per_seed(runs):
  played = runs["played"]
  assert played.count(runs["first"]) == 2 and played.count(runs["alone"]) == 2  # steps 0 and 1
  assert played.count(runs["again"]) == 1  # step 1 only: step 0 came from the store
  assert played.count(runs["seed1"]) == 2  # another seed: other validation keys, played again


def test_the_store_holds_one_warm_start_and_one_validation_per_seed(runs):
  (folder,) = [p for p in runs["store"].iterdir()]
  assert (folder / "sft_log.json").exists() and len(json.loads((folder / "sft_log.json").read_text())) == 2
  assert len(list((folder / "val0").iterdir())) == 2  # seeds 0 and 1


def test_the_key_follows_what_sft_reads():
  base = tiny_alfworld_config("", "/tmp/x", "/tmp/games")
  from agentopd_jax.training.config import from_config_dict
  cfg = from_config_dict(base)
  key = reuse.warm_start_key(cfg, 0)
  assert reuse.warm_start_key(from_config_dict(tiny_alfworld_config("", "/tmp/y", "/tmp/games", seed=3,
                                                                    grpo__iterations=5)), 0) == key
  for override in ({"sft__steps": 3}, {"model__dtype": "bfloat16"}, {"optim__weight_decay": 0.5}):
    assert reuse.warm_start_key(from_config_dict(tiny_alfworld_config("", "/tmp/x", "/tmp/games", **override)),
                                0) != key
  assert reuse.warm_start_key(cfg, 1) != key  # another warm-start seed
  # SFT computing in sft.dtype: RL arms in f32 and bf16 share it; the key moves with sft.dtype itself
  pinned = lambda model, sft="float32": reuse.warm_start_key(from_config_dict(  # noqa: E731
      tiny_alfworld_config("", "/tmp/x", "/tmp/games", model__dtype=model, sft__dtype=sft)), 0)
  assert pinned("bfloat16") == pinned("float32") != pinned("float32", sft="bfloat16")


def test_sft_trains_in_sft_dtype_whatever_the_runs_model_dtype(monkeypatch):
  """The warm start's train step and state are built for `sft.dtype`, not for the run's `model.dtype`."""
  import types
  from agentopd_jax.training.config import from_config_dict
  built = []

  def record(model, *args, **kwargs):
    built.append(model.dtype)
    raise StopIteration  # enough: what follows is the ordinary SFT loop

  monkeypatch.setattr(warm_start, "demonstrations", lambda parts: [])
  monkeypatch.setattr(warm_start, "cached_train_step", record)
  for sft_dtype, expected in (("float32", "float32"), ("", "bfloat16")):
    cfg = from_config_dict(tiny_alfworld_config("", "/tmp/x", "/tmp/games", model__dtype="bfloat16",
                                                sft__dtype=sft_dtype))
    parts = types.SimpleNamespace(cfg=cfg, model=model_config.preset(TEST_MODEL).replace(dtype="bfloat16"), mesh=None)
    with pytest.raises(StopIteration):
      warm_start.sft(parts)
    assert built[-1] == expected
  with pytest.raises(ValueError, match="sft.dtype must be"):
    from_config_dict(tiny_alfworld_config("", "/tmp/x", "/tmp/games", sft__dtype="float64"))


def test_a_run_start_without_a_recorded_checksum_is_not_shared(tmp_path):
  (tmp_path / "checkpoints").mkdir()
  assert reuse.run_start_key(str(tmp_path), 0) is None
  (tmp_path / "checkpoints" / "checksums.json").write_text(json.dumps({"0": "ab"}))
  assert reuse.run_start_key(str(tmp_path), 0) is not None and reuse.run_start_key(str(tmp_path), 4) is None
