"""The single-process side of multi-host runs (tests/test_multihost.py runs two real processes): launcher detection,
config errors, shares, mini-batches padded to shapes agreed with other processes, π_old recomputation, and the
host-side exchanges (skill feedback, teacher and OPID metrics) in two threads that gather like two processes."""
import dataclasses
import json
import threading
from concurrent.futures import ThreadPoolExecutor

import jax
import ml_collections
import numpy as np
import pytest

from agentopd_jax.batching.collate import TeacherSignal
from agentopd_jax.batching.samples import Sample
from agentopd_jax.models import transformer
from agentopd_jax.methods.opid.advantage import opid_advantages, shift_metrics
from agentopd_jax.models.config import preset
from agentopd_jax.parallel import distributed
from agentopd_jax.parallel.sharding import make_mesh
from agentopd_jax.scoring.teacher_signals import recompute_behaviour
from agentopd_jax.methods.sdar.teacher import signal_metrics
from agentopd_jax.skills.context import SkillContext
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
  # The teacher's top-k, the shape, then the most loss targets of a row (`TrainBatch.scored`'s width).
  most = max(int((mb.loss_mask[..., 1:] > 0).sum(-1).max()) for mb in mine)
  assert seen[0] == (2,) and seen[2] == (most,) and len(seen) == 3
  assert padded[0].scored.shape == padded[0].tokens.shape[:2] + (384 // 4,)
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
  assert not blank.segment_ids.any()   # padding rows, no sample: the loss normaliser counts no sequence in them


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


def _as_two_processes(monkeypatch, work):
  """[work(0), work(1)] run in two threads that exchange `distributed.allgather` (and see their own
  `jax.process_index`) as two processes do: the host-side half of a multi-host run, without a coordinator. The test's
  own thread stays one process."""
  barrier, slots, me = threading.Barrier(2, timeout=60), [None, None], threading.local()

  def allgather(obj):
    if not hasattr(me, "rank"):
      return [obj]
    slots[me.rank] = json.loads(json.dumps(obj))
    barrier.wait()
    every = list(slots)
    barrier.wait()
    return every

  monkeypatch.setattr(distributed, "allgather", allgather)
  monkeypatch.setattr(jax, "process_index", lambda: getattr(me, "rank", 0))
  results = [None, None]

  def run(rank):
    me.rank = rank
    results[rank] = work(rank)

  with ThreadPoolExecutor(2) as pool:
    list(pool.map(run, (0, 1)))
  return results


def test_fake_processes_number_their_items_over_the_whole_list(monkeypatch):
  assert _as_two_processes(monkeypatch, lambda rank: distributed.offset([3, 5][rank])) == [0, 3]
  totals = _as_two_processes(monkeypatch, lambda rank: distributed.sum_over_processes(
      {"a": [1.0, rank], **({"b": [2.0]} if rank else {})}))
  for got in totals:  # a name only one process has counts as zeros in the other
    assert got["a"].tolist() == [2.0, 1.0] and got["b"].tolist() == [2.0]


def _gap_samples(n=6, seed=0):
  rng = np.random.default_rng(seed)
  samples = [dataclasses.replace(_sample(4, 3 + i % 3, i), traj_id=i // 2, step_index=i % 2) for i in range(n)]
  signals = [TeacherSignal(np.asarray(s.behaviour_logprobs) + rng.normal(size=len(s.completion_ids)))
             for s in samples]
  return samples, signals


def test_teacher_signal_metrics_of_two_shares_are_the_whole_batchs(monkeypatch):
  samples, signals = _gap_samples()
  whole = signal_metrics(samples, signals, gate_beta=5.0)
  shares = _as_two_processes(monkeypatch, lambda r: signal_metrics(samples[4 * r:4 + 2 * r], signals[4 * r:4 + 2 * r],
                                                                    gate_beta=5.0))
  for got in shares:
    assert got.keys() == whole.keys()
    for k in whole:
      assert got[k] == pytest.approx(whole[k], rel=1e-9, abs=1e-12), k


def test_opid_shift_normalised_and_measured_over_two_shares_is_the_whole_batchs(monkeypatch):
  rng = np.random.default_rng(1)
  mask = (rng.random((6, 5)) > 0.2).astype(np.float32)
  old, teacher = -rng.random((6, 5)), -rng.random((6, 5))
  use_ep, use_step = np.asarray([1, 0, 1, 1, 0, 1.0]), np.asarray([0, 1, 0, 1, 1, 0.0])
  episode = rng.normal(size=6)

  def opid(rows, totals=None):
    return (np.asarray(opid_advantages(episode[rows], mask[rows], old[rows], teacher[rows], use_ep[rows],
                                       teacher[rows] * 0.5, use_step[rows], 0.1, 0.2, normalize=True,
                                       totals=totals)),
            shift_metrics(mask[rows], old[rows], teacher[rows], use_ep[rows], teacher[rows] * 0.5, use_step[rows],
                          totals=totals))

  whole_adv, whole_metrics = opid(slice(0, 6))
  shares = _as_two_processes(monkeypatch, lambda r: opid(slice(2 * r, 2 + 4 * r), distributed.totals))
  np.testing.assert_allclose(np.concatenate([shares[0][0], shares[1][0]]), whole_adv, rtol=1e-5, atol=1e-6)
  for _, got in shares:
    for k in whole_metrics:
      assert got[k] == pytest.approx(whole_metrics[k], rel=1e-6, abs=1e-9), k


GAMES = [f"/g/{t}-Obj-None-Recep-{i}/trial/game.tw-pddl" for i, t in enumerate(
    ["pick_and_place_simple", "look_at_obj_in_light", "pick_clean_then_place_in_recep", "pick_two_obj_and_place"] * 2)]


def test_skill_draws_and_bandit_feedback_of_two_shares_are_one_processs(monkeypatch):
  """Shares number their episodes over the batch (a `random` draw is the same whichever process makes it), and the
  UCB feedback and hit counts are gathered, so both processes hold the one-process retriever's state."""
  def play(ctx, tasks, first):
    context, used = ctx.prompt_context(tasks, key=3, first_episode=first)
    texts = [context.prefix(e, "<|im_start|>user\nYour task is to: look.") for e in range(len(tasks))]
    return texts, used

  whole = SkillContext("alfworld", retrieval="random", seed=5)
  texts, _ = play(whole, GAMES, 0)
  shares = _as_two_processes(monkeypatch, lambda r: play(SkillContext("alfworld", retrieval="random", seed=5),
                                                         GAMES[5 * r:5 + 3 * r], 5 * r)[0])
  assert shares[0] + shares[1] == texts and len(set(texts)) > 1

  def bandit(tasks, first, rounds=3):
    ctx = SkillContext("alfworld", retrieval="ucb", seed=0)
    hits = []
    for k in range(rounds):
      _, used = play(ctx, tasks, first)
      ctx.update({e: (names, float((first + e + k) % 3 == 0)) for e, names in used.items()}, first)
      hits.append(ctx.take_hits())
    return ctx.state_dict(), hits

  state, hits = bandit(GAMES, 0)
  for got_state, got_hits in _as_two_processes(monkeypatch, lambda r: bandit(GAMES[5 * r:5 + 3 * r], 5 * r)):
    assert got_state == state and got_hits == hits
  assert sum(state["counts"].values()) == 3 * len(GAMES)
