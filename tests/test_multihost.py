"""Multi-host training for real: two processes x 4 CPU devices on localhost (JAX's CPU collectives) run the same
command as one process on 8 devices and end with the same parameters, metrics and per-problem outcomes.

The mesh is (data 1, fsdp 8, tensor 1), so the parameters are sharded across both processes: each one gathers
them onto its own devices to sample, plays half of the tasks and of the validation panel, and the update's batch is
assembled from both halves. Both runs do SFT (2 steps) then one GRPO iteration; measured: parameters within 2.2e-7.
"""
import json
import os
import socket
import subprocess
import sys

import jax
import numpy as np
import orbax.checkpoint as ocp

from agentopd_jax.training.checkpoints import CheckpointPool

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FLAGS = {"env.num_workers": 1, "mesh_shape": "(1,8,1)", "sft.steps": 2, "sft.demos": 4, "sft.batch_size": 8,
         "sft.micro_batch_size": 8, "sft.max_demo_steps": 50, "grpo.iterations": 1, "grpo.tasks_per_iteration": 2,
         "grpo.group_size": 2, "grpo.mini_batch_size": 16, "grpo.micro_batch_size": 8, "rollout.max_steps": 3,
         "rollout.max_response_tokens": 8, "validation.num_tasks": 4, "validation.attempts": 2,
         "validation.every": 1, "logging.plot": False, "logging.tensorboard": False,
         # A barely trained policy earns the same (zero) reward in every episode, so GRPO's advantages are 0: the
         # entropy bonus at a high rate makes the update move every weight, through the same gradient path.
         "loss.entropy_coef": 0.01, "optim.learning_rate": 1e-3}


def _command(workdir, games_root, **extra):
  flags = dict(FLAGS, workdir=workdir, **{"env.data_root": games_root}, **extra)
  return [sys.executable, os.path.join(ROOT, "experiments", "train.py"),
          f"--config={os.path.join(ROOT, 'configs', 'alfworld.py')}"] + [f"--config.{k}={v}" for k, v in flags.items()]


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


def test_two_processes_train_like_one_process(tmp_path, alfworld_games_root):
  single, multi = str(tmp_path / "single"), str(tmp_path / "multi")
  address = f"127.0.0.1:{_free_port()}"
  # All three at once: their compilations, single-threaded, overlap on the 2 cores.
  procs = [subprocess.Popen(_command(multi, alfworld_games_root, **{
      "distributed.coordinator_address": address, "distributed.num_processes": 2, "distributed.process_id": i}),
      cwd=ROOT, env=_env(4), text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE) for i in range(2)]
  reference = subprocess.Popen(_command(single, alfworld_games_root), cwd=ROOT, env=_env(8), text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
  outs = [_finish(p, f"process {i}") for i, p in enumerate(procs)]
  _finish(reference, "the one-process run")
  # Process 0 alone prints the summary and writes the logs (gloo's own connection lines aside).
  assert json.loads(outs[0].strip().splitlines()[-1])["steps"] == [0, 1]
  assert not any(line.startswith("{") for line in outs[1].splitlines())

  one, two = _state(single, 1), _state(multi, 1)
  assert int(one["step"]) == int(two["step"]) == 1
  flat_one, flat_two = (dict(ocp.tree.to_flat_dict(s["params"])) for s in (one, two))
  assert flat_one.keys() == flat_two.keys()
  for name in flat_one:
    np.testing.assert_allclose(flat_two[name], flat_one[name], rtol=2e-5, atol=2e-6, err_msg=str(name))
  moved = max(float(np.abs(a - b).max()) for a, b in zip(
      ocp.tree.to_flat_dict(_state(single, 0)["params"]).values(), flat_one.values()))
  assert moved > 1e-4  # the GRPO update did change the parameters being compared

  # Every process played half of each validation; the gathered records equal the one-process run's.
  rec_one, rec_two = _records(single), _records(multi)
  for s in (0, 1):
    # 3 panel problems (the games of the two task types): shares of 1 and 2
    assert rec_two[s]["outcomes"] == rec_one[s]["outcomes"] and len(rec_one[s]["outcomes"]) == 3
    shared = [k for k in rec_one[s]["metrics"] if not k.startswith("val/time")]
    assert "val/success_rate" in shared
    for key in shared:
      assert abs(rec_two[s]["metrics"][key] - rec_one[s]["metrics"][key]) < 1e-9, key
  lines = [json.loads(line) for line in open(os.path.join(multi, "logs", "metrics.jsonl"))]
  train_one = [json.loads(line) for line in open(os.path.join(single, "logs", "metrics.jsonl"))
               if '"phase": "train"' in line]
  train_two = [r for r in lines if r["phase"] == "train"]
  assert len(train_two) == 1  # one writer
  for key in ("batch/samples", "batch/tokens", "episode/success_rate", "actor/loss"):
    assert abs(train_two[0][key] - train_one[0][key]) <= 1e-5 * max(1.0, abs(train_one[0][key])), key
