"""VectorEnv: parallel results equal serial stepping, GRPO groups, and recovery from crashed, hung and raising envs.

Every failure path is checked for three things: the affected episode is reported failed (never dropped or hung on),
the other envs' episodes are unaffected, and the vector env is usable afterwards.
"""
import functools
import gc
import multiprocessing
import os
import random
import signal
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from agentopd_jax.envs.countdown.env import CountdownEnv
from agentopd_jax.envs.vector import VectorEnv, group_tasks

FAULTY = functools.partial(CountdownEnv, faults=True)
TIMEOUT_S = 2.0


class SerialEnvs:
  """The reference: the same envs stepped one by one in this process, with VectorEnv's inactive-env semantics."""

  def __init__(self, n, **kwargs):
    self.envs = [CountdownEnv(**kwargs) for _ in range(n)]

  def reset(self, tasks):
    results = [env.reset(task) for env, task in zip(self.envs, tasks)]
    self.obs, self.infos = [r[0] for r in results], [r[1] for r in results]
    self.scores, self.dones = [0] * len(tasks), [False] * len(tasks)
    return list(self.obs), list(self.infos)

  def step(self, actions):
    for i, action in enumerate(actions):
      if action is not None and not self.dones[i]:
        self.obs[i], self.scores[i], self.dones[i], self.infos[i] = self.envs[i].step(action)
    return list(self.obs), list(self.scores), list(self.dones), list(self.infos)


def random_actions(rng, dones, p_inactive=0.2):
  """Mostly game moves, some invalid ones, some None (inactive); None for finished episodes as a trainer would."""
  return [None if done or rng.random() < p_inactive else rng.choice(["add 1", "double", "add 1", "look"])
          for done in dones]


def assert_failed(obs, score, done, infos, *needles):
  assert (obs, score, done) == ("", 0, True)
  assert infos["env_failed"] is True and infos["won"] is False
  for needle in needles:
    assert needle in infos["error"], infos["error"]


def play_out(vec, ref, rng, envs):
  """Steps both until the episodes of `envs` are over, checking those envs agree at every step."""
  while not all(ref.dones[i] for i in envs):
    actions = random_actions(rng, ref.dones)
    got, want = vec.step(actions), ref.step(actions)
    for i in envs:
      assert [x[i] for x in got] == [x[i] for x in want]


def test_group_tasks():
  assert group_tasks(["a.tw", "b.tw"], 3) == (["a.tw"] * 3 + ["b.tw"] * 3, [0, 0, 0, 1, 1, 1])
  with pytest.raises(ValueError):
    group_tasks(["a.tw"], 0)


@pytest.mark.parametrize("start_method", ["spawn", "forkserver"])
def test_matches_serial_stepping(start_method):
  # 5 envs on 2 workers: uneven blocks (3 + 2), several envs per worker, inactive envs and invalid actions.
  rng = random.Random(0)
  ref = SerialEnvs(5)
  with VectorEnv(CountdownEnv, num_workers=2, num_envs=5, start_method=start_method) as vec:
    for tasks in ([0, 1, 2, 3, 4], [10, 11, 12, 13, 14]):  # a second round reuses the workers' envs
      assert vec.reset(tasks) == ref.reset(tasks)
      while not all(ref.dones):
        actions = random_actions(rng, ref.dones)
        assert vec.step(actions) == ref.step(actions)
      assert vec.step([None] * 5) == ref.step([None] * 5)  # all finished: nothing moves


def test_group_members_play_the_same_game():
  tasks, groups = group_tasks([3, 11], 3)
  with VectorEnv(CountdownEnv, num_workers=2, num_envs=len(tasks)) as vec:
    obs, infos = vec.reset(tasks)
    assert obs[0] != obs[3]
    for g in (0, 1):
      members = [i for i, gid in enumerate(groups) if gid == g]
      assert len({obs[i] for i in members}) == 1 and all(infos[i] == infos[members[0]] for i in members)
    obs = vec.step(["double"] * 6)[0]
    assert len(set(obs[:3])) == 1 and len(set(obs[3:])) == 1


def test_inactive_envs_are_untouched():
  with VectorEnv(CountdownEnv, num_workers=2) as vec:
    obs0, infos0 = vec.reset([5, 6])
    for _ in range(3):
      obs, scores, dones, infos = vec.step([None, "add 1"])
      assert (obs[0], scores[0], dones[0], infos[0]) == (obs0[0], 0, False, infos0[0])
    ref = SerialEnvs(2)
    ref.reset([5, 6])
    assert vec.step(["double", None])[0][0] == ref.step(["double", None])[0][0]  # env 0 starts only now
    with pytest.raises(ValueError, match="needs 2 actions"):
      vec.step(["add 1"] * 3)


def test_killed_worker_fails_its_episodes_only_and_is_replaced():
  # 4 envs on 2 workers: killing worker 0 takes envs 0 and 1 (even env 1, inactive this step) and spares 2 and 3.
  rng = random.Random(1)
  tasks = [20, 21, 22, 23]
  ref = SerialEnvs(4)
  with VectorEnv(CountdownEnv, num_workers=2, num_envs=4, step_timeout_s=TIMEOUT_S) as vec:
    vec.reset(tasks), ref.reset(tasks)
    assert vec.step(["add 1"] * 4) == ref.step(["add 1"] * 4)
    assert ref.dones[:2] == [False, False]
    old_pid, other_pid = vec.worker_pid(0), vec.worker_pid(2)
    os.kill(old_pid, signal.SIGKILL)
    obs, scores, dones, infos = vec.step(["add 1", None, "add 1", "add 1"])
    want = ref.step([None, None, "add 1", "add 1"])
    for i in (0, 1):
      assert_failed(obs[i], scores[i], dones[i], infos[i], f"pid {old_pid}", "died", "exit code -9")
    for i in (2, 3):
      assert [x[i] for x in (obs, scores, dones, infos)] == [x[i] for x in want]
    ref.dones[:2] = [True, True]  # the reference stops playing the lost episodes too
    play_out(vec, ref, rng, envs=(2, 3))
    assert vec.worker_pid(0) != old_pid and vec.worker_pid(2) == other_pid
    assert vec.reset(tasks) == ref.reset(tasks)  # the fresh worker hosts envs 0 and 1 again
    play_out(vec, ref, rng, envs=range(4))


def test_crash_action_fails_that_episode():
  ref = SerialEnvs(2, faults=True)
  with VectorEnv(FAULTY, num_workers=2, step_timeout_s=TIMEOUT_S) as vec:
    vec.reset([1, 2]), ref.reset([1, 2])
    obs, scores, dones, infos = vec.step(["crash", "add 1"])
    assert_failed(obs[0], scores[0], dones[0], infos[0], "exit code 13")
    assert obs[1] == ref.step([None, "add 1"])[0][1]
    assert vec.step(["add 1", None])[0][0] == ""  # a failed episode is done: later actions are ignored
    assert vec.reset([1, 2]) == ref.reset([1, 2])


def check_hang_times_out(backend: str = "process", gone=lambda pid: not psutil.pid_exists(pid)):
  """A hung worker times out without blocking the trainer: its episode fails, the other env steps, the hung process
  is killed (`gone(pid)`: at once for a process worker; Ray frees an actor asynchronously) and reset works."""
  ref = SerialEnvs(2, faults=True)
  with VectorEnv(FAULTY, num_workers=2, step_timeout_s=TIMEOUT_S, backend=backend) as vec:
    vec.reset([1, 2]), ref.reset([1, 2])
    hung_pid = vec.worker_pid(0)
    start = time.monotonic()
    obs, scores, dones, infos = vec.step(["hang", "add 1"])
    assert time.monotonic() - start < TIMEOUT_S + 1.5
    assert_failed(obs[0], scores[0], dones[0], infos[0], "did not answer within 2 s")
    assert obs[1] == ref.step([None, "add 1"])[0][1]
    assert gone(hung_pid)
    assert vec.reset([3, 4]) == ref.reset([3, 4])


def test_hang_times_out_without_blocking_the_trainer():
  check_hang_times_out()


def test_raising_env_fails_with_traceback_and_worker_survives():
  ref = SerialEnvs(2, faults=True)
  with VectorEnv(FAULTY, num_workers=1, num_envs=2, step_timeout_s=TIMEOUT_S) as vec:
    vec.reset([1, 2]), ref.reset([1, 2])
    pid = vec.worker_pid(0)
    obs, scores, dones, infos = vec.step(["raise", "add 1"])
    assert_failed(obs[0], scores[0], dones[0], infos[0], "Traceback", "RuntimeError", "on purpose")
    assert obs[1] == ref.step([None, "add 1"])[0][1]  # same worker, other env: unaffected
    assert vec.worker_pid(0) == pid
    assert vec.reset([1, 2]) == ref.reset([1, 2])


def test_factory_that_raises_fails_the_reset():
  with VectorEnv(functools.partial(CountdownEnv, max_steps=0), num_workers=1) as vec:
    obs, infos = vec.reset([1])
    assert infos[0]["env_failed"] and "max_steps must be >= 1" in infos[0]["error"]
    assert vec.step(["add 1"])[2] == [True]  # reported done, so the trainer does not wait on it


def worker_pids(vec):
  return [vec.worker_pid(i) for i in range(vec.num_envs)]


def test_close_leaves_no_child_processes():
  with VectorEnv(CountdownEnv, num_workers=2) as vec:
    vec.reset([1, 2])
    pids = worker_pids(vec)
  vec.close()  # idempotent
  with pytest.raises(RuntimeError, match="closed"):
    vec.reset([1, 2])
  collected = VectorEnv(CountdownEnv, num_workers=1)  # never closed: garbage collection stops its worker
  pids += worker_pids(collected)
  del collected
  gc.collect()
  assert not multiprocessing.active_children()
  assert not any(psutil.pid_exists(pid) for pid in pids)


def test_interpreter_exit_stops_unclosed_workers():
  script = textwrap.dedent("""
      from agentopd_jax.envs.countdown.env import CountdownEnv
      from agentopd_jax.envs.vector import VectorEnv
      if __name__ == "__main__":
        vec = VectorEnv(CountdownEnv, num_workers=2)
        vec.reset([1, 2])
        print(vec.worker_pid(0), vec.worker_pid(1))
  """)
  out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=30, check=True)
  assert not any(psutil.pid_exists(int(pid)) for pid in out.stdout.split())


@pytest.mark.parametrize("start_method", ["spawn", "forkserver"])
def test_workers_do_not_rerun_the_main_script_unless_its_env_lives_there(tmp_path, start_method):
  """A script's top level (a trainer's imports: JAX, transformers) is not rerun in the workers of a package env; a
  script that defines its env class itself still gets it rerun, so that the class unpickles there, and plays."""
  marks = tmp_path / "marks"
  script = tmp_path / "main.py"
  script.write_text(textwrap.dedent(f"""
      import os
      with open({str(marks)!r}, "a") as f:
        f.write(f"{{os.getpid()}}\\n")
      from agentopd_jax.envs.countdown.env import CountdownEnv
      from agentopd_jax.envs.vector import VectorEnv

      class ScriptEnv(CountdownEnv):
        pass

      if __name__ == "__main__":
        factory = ScriptEnv if os.environ["ENV_IN_SCRIPT"] == "1" else CountdownEnv
        with VectorEnv(factory, num_workers=2, start_method={start_method!r}) as vec:
          obs, _ = vec.reset([1, 2])
          assert all(obs), obs
        print(__spec__, __file__)
  """))
  for in_script, reruns in (("0", 0), ("1", 2)):
    marks.write_text("")
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60, check=True,
                         env=dict(os.environ, ENV_IN_SCRIPT=in_script))
    assert out.stdout.split() == ["None", str(script)]  # the parent's main module is left as it was
    assert len(marks.read_text().split()) == 1 + reruns, (in_script, out.stderr[-2000:])


def test_ray_backend_without_ray_says_how_to_install(monkeypatch):
  monkeypatch.setitem(sys.modules, "ray", None)  # as if not installed, even where it is
  with pytest.raises(ImportError, match="pip install"):
    VectorEnv(CountdownEnv, num_workers=1, backend="ray")
