"""VectorEnv's ray backend on a real local Ray: the same results and failure handling as the process backend.

One Ray instance serves the module, since starting one takes seconds. Env classes and checks are test_vector_env's.
"""
import gc
import os
import random
import signal
import time

import psutil
import pytest
import ray

from agentopd_jax.envs.countdown.env import CountdownEnv
from agentopd_jax.envs.vector import VectorEnv
from test_vector_env import (FAULTY, TIMEOUT_S, SerialEnvs, assert_failed, check_hang_times_out, play_out,
                             random_actions)

RAY_CPUS = 2


@pytest.fixture(scope="module")
def ray_for_module():
  yield
  ray.shutdown()


@pytest.fixture(autouse=True)
def local_ray(ray_for_module):
  """Starts Ray once for the module, again only after a test that ends it."""
  if not ray.is_initialized():
    # address="local": a fresh instance of our own even where RAY_ADDRESS or a `ray start`ed cluster exists.
    ray.init(address="local", num_cpus=RAY_CPUS, include_dashboard=False)


def wait_for(condition, timeout_s=10.0):
  """Ray frees processes and resources asynchronously: polls until `condition()` holds or the time is up."""
  deadline = time.monotonic() + timeout_s
  while not condition() and time.monotonic() < deadline:
    time.sleep(0.05)
  return condition()


def test_matches_process_backend():
  # 5 envs on 2 workers (blocks of 3 and 2), inactive envs, invalid actions, a second round on the same actors.
  rng = random.Random(0)
  with VectorEnv(CountdownEnv, num_workers=2, num_envs=5, backend="ray") as vec, \
       VectorEnv(CountdownEnv, num_workers=2, num_envs=5) as ref:
    for tasks in ([0, 1, 2, 3, 4], [10, 11, 12, 13, 14]):
      assert vec.reset(tasks) == ref.reset(tasks)
      dones = [False] * 5
      while not all(dones):
        actions = random_actions(rng, dones)
        got = vec.step(actions)
        assert got == ref.step(actions)
        dones = got[2]
    pids = {vec.worker_pid(i) for i in range(5)}
    assert len(pids) == 2 and os.getpid() not in pids  # two actor processes, not this one


def test_env_errors_are_reported_as_by_the_process_backend():
  with VectorEnv(FAULTY, num_workers=2, num_envs=4, step_timeout_s=TIMEOUT_S, backend="ray") as vec, \
       VectorEnv(FAULTY, num_workers=2, num_envs=4, step_timeout_s=TIMEOUT_S) as ref:
    assert vec.reset([1, 2, 3, 4]) == ref.reset([1, 2, 3, 4])
    pids = [vec.worker_pid(i) for i in (0, 2)]
    # Env code raising: the same failed episode, traceback included; its actor and the other envs carry on.
    got = vec.step(["raise", "add 1", "add 1", None])
    assert got == ref.step(["raise", "add 1", "add 1", None])
    assert_failed(*[x[0] for x in got], "Traceback", "RuntimeError", "on purpose")
    assert [vec.worker_pid(i) for i in (0, 2)] == pids
    # Env code killing its process: both of that worker's episodes fail, the fresh actor serves the next reset.
    got, want = vec.step([None, None, "crash", "add 1"]), ref.step([None, None, "crash", "add 1"])
    for i in (2, 3):
      assert_failed(*[x[i] for x in got], "ray actor 1 died", f"pid: {pids[1]}", "worker process has died")
      assert_failed(*[x[i] for x in want], "exit code 13")
    assert [x[1] for x in got] == [x[1] for x in want]  # worker 0's envs are untouched
    assert vec.worker_pid(2) != pids[1]
    assert vec.reset([5, 6, 7, 8]) == ref.reset([5, 6, 7, 8])


@pytest.mark.parametrize("kill", ["ray.kill", "SIGKILL"])
def test_killed_actor_fails_its_episodes_only_and_is_replaced(kill):
  # 4 envs on 2 actors: killing actor 0 takes envs 0 and 1 (even env 1, inactive this step) and spares 2 and 3.
  rng = random.Random(1)
  tasks = [20, 21, 22, 23]
  ref = SerialEnvs(4)
  with VectorEnv(CountdownEnv, num_workers=2, num_envs=4, step_timeout_s=TIMEOUT_S, backend="ray") as vec:
    vec.reset(tasks), ref.reset(tasks)
    assert vec.step(["add 1"] * 4) == ref.step(["add 1"] * 4)
    assert ref.dones[:2] == [False, False]
    old_pid, other_pid = vec.worker_pid(0), vec.worker_pid(2)
    if kill == "ray.kill":
      ray.kill(vec._backend._actors[0])  # the handle only the backend holds
    else:
      os.kill(old_pid, signal.SIGKILL)
    assert wait_for(lambda: not psutil.pid_exists(old_pid))  # both are asynchronous: the death is certain first
    obs, scores, dones, infos = vec.step(["add 1", None, "add 1", "add 1"])
    want = ref.step([None, None, "add 1", "add 1"])
    how = "killed by `ray.kill`" if kill == "ray.kill" else "worker process has died"
    for i in (0, 1):
      assert_failed(obs[i], scores[i], dones[i], infos[i], "ray actor 0 died", f"pid: {old_pid}", how,
                    "the worker was restarted")
    for i in (2, 3):
      assert [x[i] for x in (obs, scores, dones, infos)] == [x[i] for x in want]
    ref.dones[:2] = [True, True]  # the reference stops playing the lost episodes too
    play_out(vec, ref, rng, envs=(2, 3))
    assert vec.worker_pid(0) not in (old_pid, other_pid) and vec.worker_pid(2) == other_pid
    assert vec.reset(tasks) == ref.reset(tasks)  # the fresh actor hosts envs 0 and 1 again
    play_out(vec, ref, rng, envs=range(4))


def test_hung_actor_times_out_and_is_replaced():
  check_hang_times_out("ray", gone=lambda pid: wait_for(lambda: not psutil.pid_exists(pid)))


def free_cpus():
  return ray.available_resources().get("CPU", 0)


def test_close_releases_actors_and_their_resources():
  # A CPU reserved per actor makes the release visible in the cluster's resources, not only in the process table.
  with VectorEnv(CountdownEnv, num_workers=2, backend="ray", ray_actor_options={"num_cpus": 1}) as vec:
    vec.reset([1, 2])
    pids = [vec.worker_pid(0), vec.worker_pid(1)]
    assert wait_for(lambda: free_cpus() == 0)
  assert wait_for(lambda: free_cpus() == RAY_CPUS)
  assert wait_for(lambda: not any(psutil.pid_exists(pid) for pid in pids))
  vec.close()  # idempotent
  with pytest.raises(RuntimeError, match="closed"):
    vec.reset([1, 2])
  collected = VectorEnv(CountdownEnv, num_workers=1, backend="ray")  # never closed: garbage collection stops it
  pid = collected.worker_pid(0)
  del collected
  gc.collect()
  assert wait_for(lambda: not psutil.pid_exists(pid))


def test_actors_that_cannot_start_raise_at_construction(tmp_path, monkeypatch):
  with pytest.raises(RuntimeError, match=r"(?s)ray actors did not all start within 1 s.*options \{'num_cpus': 3\}"):
    VectorEnv(CountdownEnv, num_workers=1, reset_timeout_s=1.0, backend="ray",
              ray_actor_options={"num_cpus": RAY_CPUS + 1})  # more than the cluster has
  # An env module only this process can import: what a node without the package looks like.
  (tmp_path / "env_only_here.py").write_text("from agentopd_jax.envs.countdown.env import CountdownEnv\n"
                                             "class Env(CountdownEnv): pass\n")
  monkeypatch.syspath_prepend(str(tmp_path))
  from env_only_here import Env
  with pytest.raises(RuntimeError, match="No module named 'env_only_here'"):
    VectorEnv(Env, num_workers=1, backend="ray")
  with pytest.raises(ValueError, match="ray_actor_options needs backend='ray'"):
    VectorEnv(CountdownEnv, num_workers=1, ray_actor_options={"num_cpus": 1})


def test_close_after_ray_shutdown_leaves_ray_alone():
  # Ending Ray ends its actors. Touching their stale handles would start a new local Ray, and ray.kill on one
  # aborts the process; a VectorEnv collected after ray.shutdown() must do neither. (Last: it ends the module's Ray.)
  vec = VectorEnv(CountdownEnv, num_workers=1, backend="ray")
  pid = vec.worker_pid(0)
  ray.shutdown()
  vec.close()
  assert not ray.is_initialized()
  assert wait_for(lambda: not psutil.pid_exists(pid))
