"""The single-process side of multi-host runs (tests/test_multihost.py runs two real processes): launcher detection,
config errors, shares, mini-batches padded to shapes agreed with other processes, and π_old recomputation."""
import jax
import ml_collections
import numpy as np
import pytest

from agentopd_jax.models import transformer
from agentopd_jax.models.config import preset
from agentopd_jax.parallel import distributed
from agentopd_jax.parallel.sharding import make_mesh
from agentopd_jax.rollout.batch import TeacherSignal
from agentopd_jax.rollout.types import Sample
from agentopd_jax.scoring.teacher_signals import recompute_behaviour
from agentopd_jax.training.train_step import make_minibatches


def test_cluster_environment_names_the_launcher():
  assert distributed.cluster_environment({}) is None
  assert distributed.cluster_environment({"SLURM_JOB_ID": "7", "SLURM_NTASKS": "1"}) is None  # one task: one host
  assert distributed.cluster_environment({"SLURM_JOB_ID": "7", "SLURM_NTASKS": "4"}) == "slurm"
  assert distributed.cluster_environment({"OMPI_COMM_WORLD_SIZE": "2"}) == "mpi"
  assert distributed.cluster_environment({"TPU_WORKER_HOSTNAMES": "10.0.0.1"}) is None  # a single-host TPU VM
  assert distributed.cluster_environment({"TPU_WORKER_HOSTNAMES": "10.0.0.1,10.0.0.2"}) == "tpu"
  assert distributed.cluster_environment({"JAX_COORDINATOR_ADDRESS": "h:1234"}) == "env"


def _cfg(**kw):
  return ml_collections.ConfigDict(dict(dict(coordinator_address="", num_processes=1, process_id=0, auto=True), **kw))


def test_initialize_on_one_host_does_nothing_and_bad_ids_are_named(monkeypatch):
  for name in ("JAX_COORDINATOR_ADDRESS", "SLURM_JOB_ID", "OMPI_COMM_WORLD_SIZE", "TPU_WORKER_HOSTNAMES",
               "MEGASCALE_COORDINATOR_ADDRESS"):
    monkeypatch.delenv(name, raising=False)
  assert distributed.initialize(_cfg()) is False
  monkeypatch.setenv("SLURM_JOB_ID", "7")
  monkeypatch.setenv("SLURM_NTASKS", "2")
  assert distributed.initialize(_cfg(auto=False)) is False  # auto off: a launcher is not enough
  with pytest.raises(ValueError, match="distributed.process_id"):
    distributed.initialize(_cfg(coordinator_address="127.0.0.1:1", num_processes=2, process_id=2))


def test_one_process_holds_every_share_and_its_mesh():
  assert distributed.share(6, "grpo.tasks_per_iteration") == slice(0, 6)
  assert distributed.allgather({"a": 1}) == [{"a": 1}]
  assert distributed.global_max([3, 1]) == (3, 1)
  mesh = make_mesh((2, 4, 1))
  assert distributed.local_mesh(mesh) is mesh
  tree = {"w": jax.device_put(np.ones((4, 4), np.float32))}
  assert distributed.to_local(tree, mesh) is tree


def _sample(n_prompt, n_completion, seed=0):
  rng = np.random.default_rng(seed)
  return Sample(prompt_ids=rng.integers(1, 50, n_prompt).tolist(), completion_ids=rng.integers(1, 50, n_completion).tolist(),
                completion_mask=[1] * n_completion, behaviour_logprobs=(-rng.random(n_completion)).tolist(),
                group_id=0, problem_id="p", traj_id=0, step_index=0, action_valid=1.0)


@pytest.mark.parametrize("pack_width", [0, 256])
def test_minibatches_padded_to_the_shape_other_processes_need(pack_width):
  """A process pads its share to the mini-batch count, width and rows agreed over processes: the extra rows,
  columns and mini-batches are masked out, and its own rows are unchanged."""
  samples = [_sample(20, 10, i) for i in range(3)]
  teacher = [TeacherSignal(np.full(10, -1.0, np.float32), np.ones((10, 2), np.int32), np.zeros((10, 2), np.float32))
             for _ in samples]
  mine = make_minibatches(samples, [1.0] * 3, 4, 2, pack_width, teacher=teacher)
  seen = []

  def agree(values):  # another process needs 2 mini-batches of 384 tokens and 8 rows
    seen.append(tuple(values))
    return tuple(max(v, o) for v, o in zip(values, {1: (2,), 3: (2, 384, 8)}[len(values)]))

  padded = make_minibatches(samples, [1.0] * 3, 4, 2, pack_width, teacher=teacher, agree=agree)
  assert seen[0] == (2,) and len(seen) == 2  # the teacher's top-k, then the shape
  assert len(padded) == 2 and padded[0].tokens.shape[-1] == 384
  rows = padded[0].tokens.shape[0] * padded[0].tokens.shape[1]
  assert rows == (8 if pack_width else 4)
  a, m, t = mine[0].tokens.shape
  for name in ("tokens", "loss_mask", "advantages", "old_logprobs", "teacher_logprobs", "teacher_topk_ids"):
    new = getattr(padded[0], name).reshape(rows, 384, -1)
    old = getattr(mine[0], name).reshape(a * m, t, -1)
    np.testing.assert_array_equal(new[:a * m, :t], old, err_msg=name)
    assert not new[:, t:].any() and not new[a * m:].any(), name
  assert not any(np.asarray(x).any() for x in padded[1].values() if x is not None)


def test_a_process_without_samples_brings_a_blank_share():
  def agree(values):  # the others train with a top-4 teacher on one mini-batch of 8 packed rows
    return tuple(max(v, o) for v, o in zip(values, {1: (4,), 3: (1, 128, 8)}[len(values)]))

  (blank,) = make_minibatches([], [], 4, 2, 256, teacher=[], agree=agree)
  assert blank.tokens.shape == (4, 2, 256) and blank.teacher_topk_ids.shape == (4, 2, 256, 4)
  assert not blank.loss_mask.any() and not blank.advantages.any()


def test_recomputed_behaviour_logprobs_are_the_trainers_and_the_drift_is_logged():
  config = preset("tiny", vocab_size=64, num_layers=1, hidden_size=32, intermediate_size=64, num_heads=2,
                  num_kv_heads=1, head_dim=16)
  params = transformer.init_params(config, jax.random.key(0))
  samples = [_sample(5, 4, i) for i in range(3)]
  samples[1].completion_mask[2] = 0  # an observation token: no log-prob, no drift
  samples[1].behaviour_logprobs[2] = 0.0
  fixed, drift = recompute_behaviour(config, params, samples, temperature=0.7, pack_width=64)
  again, none = recompute_behaviour(config, params, fixed, temperature=0.7)
  assert none["rollout/old_logprob_drift_max"] < 1e-5  # the recomputed values are the trainer's own
  for s, f, g in zip(samples, fixed, again):
    assert f.completion_ids == s.completion_ids and f.prompt_ids == s.prompt_ids
    np.testing.assert_allclose(f.behaviour_logprobs, g.behaviour_logprobs, atol=1e-5)
  assert fixed[1].behaviour_logprobs[2] == 0.0
  gaps = np.concatenate([np.abs(np.asarray(s.behaviour_logprobs) - f.behaviour_logprobs)[np.asarray(s.completion_mask) > 0]
                         for s, f in zip(samples, fixed)])
  assert drift["rollout/old_logprob_drift_mean"] == pytest.approx(gaps.mean(), rel=1e-5)
  assert drift["rollout/old_logprob_drift_max"] == pytest.approx(gaps.max(), rel=1e-5) and gaps.max() > 0.1
