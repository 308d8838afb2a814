"""Multi-host training for real: two processes x 4 CPU devices on localhost (JAX's CPU collectives) run the same
command as one process on 8 devices and end with the same parameters, metrics and per-problem outcomes.

The mesh is (data 1, fsdp 8, tensor 1), so the parameters are sharded across both processes: each one gathers
them onto its own devices to sample, plays half of the tasks and of the validation panel, and the update's batch is
assembled from both halves. GRPO does SFT (2 steps) then one iteration (measured: parameters within 5.4e-8); then,
from its checkpoint, SDAR with UCB-retrieved skills plus OPID's hindsight advantage, and Agentic-OPD distilling its
pool, one iteration each, compared by their gradients (Adam's first moment): OPID's z-scored shift multiplies the
~1e-7 differences between two meshes' scores by 1/std (~130 here), and Adam's first step moves any weight whose
gradient is near its epsilon by up to ±lr either way, so their parameters differ in a few hundred such weights.
Measured: SDAR + OPID gradients within 5.0e-5 of each tensor's largest entry. The model is the tests' `nano`
preset (conftest.TEST_MODEL).
"""
import json
import os
import socket
import subprocess
import sys

import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest

from agentopd_jax.storage.checkpoints import CheckpointPool
from conftest import TEST_MODEL

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FLAGS = {"model.preset": TEST_MODEL, "env.num_workers": 1, "mesh_shape": "(1,8,1)", "sft.steps": 2, "sft.demos": 4, "sft.batch_size": 8,
         "sft.micro_batch_size": 8, "sft.max_demo_steps": 50, "grpo.iterations": 1, "grpo.tasks_per_iteration": 2,
         "grpo.group_size": 2, "grpo.mini_batch_size": 16, "grpo.micro_batch_size": 8, "rollout.max_steps": 3,
         "rollout.max_response_tokens": 8, "validation.num_tasks": 4, "validation.attempts": 2,
         "validation.every": 1, "logging.plot": False, "logging.tensorboard": False,
         # A barely trained policy earns the same (zero) reward in every episode, so GRPO's advantages are 0: the
         # entropy bonus at a high rate makes the update move every weight, through the same gradient path.
         "loss.entropy_coef": 0.01, "optim.learning_rate": 1e-3,
         # Several processes train whole rows (no shared prompt heads); so does the one-process run they must match.
         "share_prefixes": False}
# From the GRPO run's last checkpoint, no SFT. SDAR + OPID: a UCB retriever (its feedback is gathered), OPID's shift
# at weight 1 and normalised over the whole batch. Agentic-OPD: every sample distilled (LAD off: the tiny teacher
# wins nothing, so LAD would route none).
SKILLS = {"skills.retrieval": "ucb", "method": "sdar+opid", "opid.w_episode": 1.0, "opid.w_step": 1.0,
          "opid.normalize": True, "sft.skill_fraction": 0.0, "warm_start_step": 1}
OPD = {"agentic_opd.lad": "off", "grpo.group_size": 2, "grpo.tasks_per_iteration": 2, "sft.steps": 0}


def _command(workdir, games_root, variant="", **extra):
  flags = dict(FLAGS, workdir=workdir, **{"env.data_root": games_root}, **extra)
  return [sys.executable, os.path.join(ROOT, "experiments", "train.py"),
          f"--config={os.path.join(ROOT, 'configs', 'alfworld.py')}{variant}"] + [
              f"--config.{k}={v}" for k, v in flags.items()]


def _env(devices: int):
  env = dict(os.environ, JAX_PLATFORMS="cpu", AGENTOPD_PROGRESS="0")
  env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
  return env


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def _finish(proc, what):
  out, err = proc.communicate(timeout=900)
  assert proc.returncode == 0, f"{what} failed:\n{err[-4000:]}"
  return out


def _state(workdir, step):
  """A saved train state as host arrays, whatever mesh saved it."""
  path = os.path.join(workdir, "checkpoints", str(step), "state")
  checkpointer = ocp.PyTreeCheckpointer()
  device = jax.sharding.SingleDeviceSharding(jax.devices()[0])
  target = jax.tree.map(lambda m: jax.ShapeDtypeStruct(m.shape, m.dtype, sharding=device),
                        checkpointer.metadata(path).item_metadata.tree)
  restored = checkpointer.restore(path, args=ocp.args.PyTreeRestore(
      target, restore_args=ocp.checkpoint_utils.construct_restore_args(target)))
  return jax.tree.map(np.asarray, restored)


def _records(workdir):
  with CheckpointPool(os.path.join(workdir, "checkpoints"), read_only=True) as pool:
    return {s: pool.metadata(s) for s in (0, 1)}


def _launch(root, games_root, variant="", **extra):
  """Starts the two-process run (root/multi) and the one-process run (root/single) of one command, all at once:
  their compilations, single-threaded, overlap on the 2 cores."""
  single, multi = os.path.join(root, "single"), os.path.join(root, "multi")
  address = f"127.0.0.1:{_free_port()}"
  procs = [subprocess.Popen(_command(multi, games_root, variant, **extra, **{
      "distributed.coordinator_address": address, "distributed.num_processes": 2, "distributed.process_id": i}),
      cwd=ROOT, env=_env(4), text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE) for i in range(2)]
  procs.append(subprocess.Popen(_command(single, games_root, variant, **extra), cwd=ROOT, env=_env(8), text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE))
  return single, multi, procs


def _wait(launched):
  single, multi, procs = launched
  outs = [_finish(p, what) for p, what in zip(procs, ("process 0", "process 1", "the one-process run"))]
  return single, multi, outs


def _same_params(single, multi, step):
  """The two runs' saved params at `step` agree; returns how far the last iteration moved them."""
  one, two = _state(single, step), _state(multi, step)
  assert int(one["step"]) == int(two["step"])
  flat_one, flat_two = (dict(ocp.tree.to_flat_dict(s["params"])) for s in (one, two))
  assert flat_one.keys() == flat_two.keys()
  for name in flat_one:
    np.testing.assert_allclose(flat_two[name], flat_one[name], rtol=2e-5, atol=2e-6, err_msg=str(name))
  return max(float(np.abs(a - b).max()) for a, b in zip(
      ocp.tree.to_flat_dict(_state(single, step - 1)["params"]).values(), flat_one.values()))


def _same_gradients(single, multi, step, tolerance=2e-4):
  """The two runs' gradients of the update that made `step` (Adam's first moment after one step: 0.1 x gradient)
  agree to `tolerance` x each tensor's largest entry; returns the worst such ratio."""
  mu = [{k: v for k, v in ocp.tree.to_flat_dict(_state(w, step)["opt_state"]).items() if "mu" in k}
        for w in (single, multi)]
  assert mu[0] and mu[0].keys() == mu[1].keys()
  worst = 0.0
  for name, one in mu[0].items():
    scale = float(np.abs(one).max())
    assert scale > 0, name  # every tensor got a gradient
    worst = max(worst, float(np.abs(mu[1][name] - one).max()) / scale)
  assert worst < tolerance, worst
  return worst


def _train_lines(workdir):
  return [json.loads(line) for line in open(os.path.join(workdir, "logs", "metrics.jsonl"))
          if '"phase": "train"' in line]


def _same_metrics(one, two, keys):
  for key in keys:
    assert abs(two[key] - one[key]) <= 1e-5 * max(1.0, abs(one[key])), (key, one[key], two[key])


@pytest.fixture(scope="module")
def grpo(tmp_path_factory, alfworld_games_root):
  return _wait(_launch(str(tmp_path_factory.mktemp("grpo")), alfworld_games_root))


@pytest.fixture(scope="module")
def methods(tmp_path_factory, alfworld_games_root, grpo):
  """SDAR + OPID and Agentic-OPD, both from the GRPO run's one-process checkpoints, launched together."""
  teacher = grpo[0]
  skills = _launch(str(tmp_path_factory.mktemp("sdar_opid")), alfworld_games_root, ":sdar", warm_start_run=teacher,
                   **SKILLS)
  opd = _launch(str(tmp_path_factory.mktemp("opd")), alfworld_games_root, ":agentic_opd",
                **{"agentic_opd.teacher_run": teacher}, **OPD)
  return {"skills": _wait(skills), "opd": _wait(opd)}


def test_two_processes_train_like_one_process(grpo):
  single, multi, outs = grpo
  # Process 0 alone prints the summary and writes the logs (gloo's own connection lines aside).
  assert json.loads(outs[0].strip().splitlines()[-1])["steps"] == [0, 1]
  assert not any(line.startswith("{") for line in outs[1].splitlines())
  assert _same_params(single, multi, 1) > 1e-4  # the GRPO update did change the parameters being compared

  # Every process played half of each validation; the gathered records equal the one-process run's.
  rec_one, rec_two = _records(single), _records(multi)
  for s in (0, 1):
    # 3 panel problems (the games of the two task types): shares of 1 and 2
    assert rec_two[s]["outcomes"] == rec_one[s]["outcomes"] and len(rec_one[s]["outcomes"]) == 3
    shared = [k for k in rec_one[s]["metrics"] if not k.startswith("timing_s/")]
    assert "val/success_rate" in shared
    _same_metrics(rec_one[s]["metrics"], rec_two[s]["metrics"], shared)
  train_one, train_two = _train_lines(single), _train_lines(multi)
  assert len(train_two) == 1  # one writer
  _same_metrics(train_one[0], train_two[0], ("batch/samples", "batch/tokens", "episode/success_rate", "actor/loss"))


def test_sdar_with_skills_and_opid_train_like_one_process(methods):
  """The teacher's privileged prompts, the UCB bandit fed by both processes' episodes, OPID's analysis of each
  process's trajectories with the shift normalised over both: the same update and the same retriever state."""
  single, multi, _ = methods["skills"]
  _same_gradients(single, multi, 1)
  rec_one, rec_two = _records(single), _records(multi)
  assert rec_two[1]["outcomes"] == rec_one[1]["outcomes"]
  skills = rec_one[1]["extra"]["skills"]
  assert rec_two[1]["extra"]["skills"] == skills and sum(skills["counts"].values()) == 4  # 2 tasks x 2 episodes
  one, two = _train_lines(single)[0], _train_lines(multi)[0]
  keys = [k for k in one if k.startswith(("teacher/", "opid/", "skills/hits/", "actor/", "batch/", "episode/"))
          and k not in ("opid/analyzer_latency_s",)]
  assert {"teacher/gap_mean", "opid/delta_step_std", "opid/route_episode", "actor/sdar/loss"} <= set(keys)
  assert set(keys) <= set(two)
  _same_metrics(one, two, keys)


def test_agentic_opd_trains_like_one_process(methods):
  """Each process rolls out the student on its tasks; the one distillation step (the resident teacher scored on the
  global mesh) is the same, and so are the scheduler's records."""
  single, multi, _ = methods["opd"]
  _same_gradients(single, multi, 1)
  rec_one, rec_two = _records(single), _records(multi)
  for s in (0, 1):
    assert rec_two[s]["outcomes"] == rec_one[s]["outcomes"]
    assert rec_two[s]["extra"]["scheduler"] == rec_one[s]["extra"]["scheduler"]
  one, two = _train_lines(single)[0], _train_lines(multi)[0]
  _same_metrics(one, two, [k for k in one if k.startswith(("opd/", "actor/", "batch/samples", "episode/"))])
