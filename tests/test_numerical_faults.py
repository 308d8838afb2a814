"""Numerical faults: a non-finite update is skipped and logged with its samples' ids; `optim.max_bad_updates` in a
row stop the run with a clear error; the checkpoints saved before hold the last good parameters."""
import logging

import jax
import numpy as np
import pytest

from agentopd_jax.batching.samples import Sample
from agentopd_jax.training.train_step import BadUpdates, minibatch_samples


def _samples(n):
  return [Sample(prompt_ids=[1], completion_ids=[2], completion_mask=[1], behaviour_logprobs=[0.0], group_id=i // 2,
                 problem_id=f"game{i // 2}", traj_id=i, step_index=i % 3, action_valid=1.0) for i in range(n)]


def test_bad_updates_are_logged_counted_and_stop_the_run(caplog):
  guard = BadUpdates(limit=3)
  batch = minibatch_samples(_samples(10), 4, 1)  # mini-batch 1 of size 4: samples 4..7
  assert [s.traj_id for s in batch] == [4, 5, 6, 7]
  good, bad = {"skipped": 0.0, "loss": 1.0, "grad_norm": 2.0}, {"skipped": 1.0, "loss": float("nan"),
                                                                   "grad_norm": float("inf")}
  with caplog.at_level(logging.WARNING, "agentopd_jax.training.train_step"):
    guard.observe(bad, batch, "iteration 7")
    guard.observe(bad, batch, "iteration 7")
    assert guard.count == 2
    guard.observe(good, batch, "iteration 8")  # a finite update ends the streak
    assert guard.count == 0
    guard.observe(bad, batch, "iteration 9")
    guard.observe(bad, batch, "iteration 9")
    with pytest.raises(FloatingPointError, match=r"iteration 10: 3 updates in a row .*optim.max_bad_updates=3"):
      guard.observe(bad, batch, "iteration 10")
  assert "iteration 7: update skipped (loss nan, grad norm inf" in caplog.text
  assert "game2#4.1 game2#5.2 game3#6.0 game3#7.1" in caplog.text  # problem#episode.step of each sample
  with pytest.raises(ValueError, match="optim.max_bad_updates must be >= 1"):
    BadUpdates(limit=0)


@pytest.fixture
def games_root(request):
  pytest.importorskip("alfworld", reason="generating games needs the alfworld wheel's domain files ([envs] extra)")
  return request.getfixturevalue("alfworld_games_root")


def test_a_run_whose_updates_turn_non_finite_stops_with_good_checkpoints(tmp_path, games_root, monkeypatch, caplog):
  """Every update's advantages are NaN (as a broken reward would make them): iteration 1's update is skipped and its
  checkpoint holds the warm start's params; iteration 2's skip is the second in a row and stops the run."""
  from conftest import tiny_alfworld_config
  from agentopd_jax.training import trainer
  from agentopd_jax.storage.checkpoints import CheckpointPool

  batches = trainer.make_minibatches

  def poisoned(*args, **kwargs):
    out = batches(*args, **kwargs)
    for b in out:
      b.advantages[...] = np.nan
    return out

  monkeypatch.setattr(trainer, "make_minibatches", poisoned)
  c = tiny_alfworld_config("", tmp_path, games_root, sft__steps=0, optim__max_bad_updates=2)
  with caplog.at_level(logging.WARNING, "agentopd_jax.training.train_step"):
    with pytest.raises(FloatingPointError, match=r"iteration 2: 2 updates in a row .*optim.max_bad_updates=2"):
      trainer.train(c)
  assert "iteration 1: update skipped" in caplog.text and "#0.0" in caplog.text
  with CheckpointPool(tmp_path / "checkpoints", read_only=True) as pool:
    assert pool.steps() == [0, 1] and pool.metadata(1)["extra"]["bad_updates"] == 1
    first, last = (pool.restore_params(s, _abstract()) for s in (0, 1))
  for a, b in zip(jax.tree.leaves(first), jax.tree.leaves(last)):
    assert np.isfinite(np.asarray(b)).all()
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def _abstract():
  from agentopd_jax.models import config as model_config, transformer
  from conftest import TEST_MODEL
  return transformer.abstract_params(model_config.preset(TEST_MODEL))
