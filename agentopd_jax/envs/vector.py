"""VectorEnv: N text environments stepped in parallel worker processes, for GRPO rollouts.

Why processes: ALFWorld/TextWorld keep global state and are not thread-safe, and env code can crash, hang or leak;
a worker process isolates all of that from the trainer, which must never hang or lose an episode silently.

Env interface (see `countdown.env.CountdownEnv`): `env = factory()`, `obs, infos = env.reset(task)`,
`obs, score, done, infos = env.step(action)`; `factory` is a picklable zero-arg callable (a module-level class or
a `functools.partial` of one), `task` any picklable game spec (a game file, a seed), `infos` a dict.

Layout: the envs are split into `num_workers` contiguous blocks and each worker hosts one block, stepping its envs
one after another; so 128 envs can run on 16 workers (one per core) instead of 128 processes. Contiguous blocks
keep a GRPO group (consecutive envs, see `group_tasks`) on as few workers as possible, so a worker failure costs a
few whole groups rather than one member of many groups.

A step sends every worker its batch first and only then collects the replies, so workers run in parallel and one
call costs about the slowest worker's time. Failures are all reported per env as a *failed episode* (obs "",
score 0, done True, infos `won=False`, `env_failed=True`, `error`: the reason or the traceback), never raised:
  * env code raises (in factory, reset or step): only that env's episode fails; the worker lives on, and the env
    object is rebuilt with the factory at the next reset since an env that raised may be half-updated.
  * a worker dies (killed, segfault, `os._exit`) or does not answer within the timeout: it is killed and a fresh
    worker started; every episode that worker was running fails, since its env state died with it. The timeout
    bounds the whole call, so with several envs per worker it must cover a block of envs stepped in sequence.
An env whose reset failed counts as done: its failure is in the reset infos and the next step reports it again.

Backends: "process" (stdlib `multiprocessing`, default) and "ray" (one actor per worker, same API and failure
handling, imported only when chosen; for envs spread over a cluster, see docs/scale_out.md). A Ray actor that is
killed or whose process dies is a dead worker as above. Ray alone can fail to start a worker at all (the package
missing on a node, resources no node has), so the ray backend waits for its actors at construction and raises then,
rather than failing every episode later.
"""
from __future__ import annotations

import atexit
import contextlib
import logging
import multiprocessing
import multiprocessing.connection
import os
import pickle
import signal
import sys
import time
import traceback
import weakref
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

logger = logging.getLogger(__name__)


def group_tasks(tasks: Sequence[Any], group_size: int) -> Tuple[List[Any], List[int]]:
  """GRPO groups: each task repeated `group_size` times consecutively, and the group id of every copy.

  The G members of a group play the same game, so their returns are comparable and the group baseline is fair.
  """
  if group_size < 1:
    raise ValueError(f"group_size must be >= 1, got {group_size}")
  return ([task for task in tasks for _ in range(group_size)],
          [g for g in range(len(tasks)) for _ in range(group_size)])


class _WorkerLost(Exception):
  """A worker that died or did not answer in time; its message ends up in the failed episodes' infos."""


class _EnvHost:
  """The envs one worker owns; the process worker loop and the Ray actor both wrap it, so they behave the same.

  Envs are created at their first reset, inside the error handling, so a factory that raises fails that env's
  episode instead of the worker.
  """

  def __init__(self, factory: Callable[[], Any], num_envs: int):
    self._factory = factory
    self._envs: List[Any] = [None] * num_envs

  def handle(self, kind: str, batch: List[Tuple[int, Any]]) -> List[Tuple[bool, Any]]:
    """Runs `reset(task)` or `step(action)` for each (local env index, argument); (True, result) or
    (False, traceback text) per env."""
    out = []
    for j, arg in batch:
      try:
        if kind == "reset":
          if self._envs[j] is None:
            self._envs[j] = self._factory()
          out.append((True, self._envs[j].reset(arg)))
        else:
          obs, score, done, infos = self._envs[j].step(arg)
          out.append((True, (obs, score, bool(done), infos)))
      except Exception:
        self._envs[j] = None
        out.append((False, traceback.format_exc()))
    return out

  def pid(self) -> int:
    return os.getpid()

  def close(self):
    for env in self._envs:
      try:
        getattr(env, "close", lambda: None)()
      except Exception:  # best effort: the worker is exiting anyway, and a broken env must not block the others
        logger.exception("env close() raised")


def _worker_main(conn, factory, num_envs: int):
  # Ctrl-C reaches the whole process group; the trainer owns shutdown and closes its workers itself.
  signal.signal(signal.SIGINT, signal.SIG_IGN)
  host = _EnvHost(factory, num_envs)
  try:
    while True:
      try:
        kind, batch = conn.recv()
      except EOFError:  # the trainer is gone without closing us
        break
      if kind == "close":
        break
      conn.send(host.handle(kind, batch))
  finally:
    host.close()


@contextlib.contextmanager
def _main_not_rerun(factory):
  """While a worker starts: spawn (and forkserver) rerun the parent's main script in every worker, as `__mp_main__`,
  so that objects defined there unpickle. For `experiments/train.py` that is the whole trainer's imports, JAX and
  transformers among them: seconds of CPU and hundreds of MB in each worker, for env code that needs none of it. The
  main module is hidden from the start unless the factory's pickle names `__main__` (an env defined in a script)."""
  main = sys.modules.get("__main__")
  hidden = {name: getattr(main, name) for name in ("__file__", "__spec__") if getattr(main, name, None) is not None}
  if not hidden or b"__main__" in pickle.dumps(factory):
    yield
    return
  main.__spec__ = None
  if "__file__" in hidden:
    del main.__file__
  try:
    yield
  finally:
    for name, value in hidden.items():
      setattr(main, name, value)


class _ProcessBackend:
  """One `multiprocessing` process per worker, talking over a pipe.

  Workers are not daemonic, so env code may start processes of its own (TextWorld's async batch env does);
  `VectorEnv` closes them at interpreter exit instead.
  """

  def __init__(self, factory, sizes: List[int], start_method: str):
    self._ctx = multiprocessing.get_context(start_method)
    self._factory, self._sizes = factory, sizes
    self._procs: List[Any] = [None] * len(sizes)
    self._conns: List[Any] = [None] * len(sizes)
    for w in range(len(sizes)):
      self._start(w)

  def _start(self, w: int):
    conn, child_conn = self._ctx.Pipe()
    proc = self._ctx.Process(target=_worker_main, args=(child_conn, self._factory, self._sizes[w]),
                             name=f"VectorEnv-worker-{w}")
    with _main_not_rerun(self._factory):
      proc.start()
    child_conn.close()  # only the worker holds its end now, so its death reads as EOF here
    self._procs[w], self._conns[w] = proc, conn

  def submit(self, w: int, kind: str, batch):
    try:
      self._conns[w].send((kind, batch))
    except OSError:  # the worker is already dead: collect() sees the EOF and reports it
      pass

  def collect(self, workers: List[int], timeout_s: float) -> Dict[int, Any]:
    deadline = time.monotonic() + timeout_s
    waiting, out = set(workers), {}
    while waiting and (remaining := deadline - time.monotonic()) > 0:
      multiprocessing.connection.wait(
          [h for w in waiting for h in (self._conns[w], self._procs[w].sentinel)], remaining)
      for w in list(waiting):
        if self._conns[w].poll():  # read before checking liveness: a reply sent just before dying still counts
          try:
            out[w] = self._conns[w].recv()
          except (EOFError, OSError):
            out[w] = _WorkerLost(self._death(w))
        elif self._procs[w].exitcode is not None:
          out[w] = _WorkerLost(self._death(w))
        else:
          continue
        waiting.discard(w)
    for w in waiting:
      out[w] = _WorkerLost(f"worker {w} (pid {self._procs[w].pid}) did not answer within {timeout_s:g} s")
    return out

  def _death(self, w: int) -> str:
    self._procs[w].join(1.0)  # EOF can come a moment before the exit status
    return f"worker {w} (pid {self._procs[w].pid}) died with exit code {self._procs[w].exitcode}"

  def restart(self, w: int):
    self._procs[w].kill()
    self._procs[w].join(5.0)
    self._conns[w].close()
    self._start(w)

  def pid(self, w: int) -> int:
    return self._procs[w].pid

  def close(self):
    for conn in self._conns:
      try:
        conn.send(("close", None))
      except OSError:
        pass
    deadline = time.monotonic() + 5.0  # lets envs run close(); a worker stuck in env code is killed after it
    for proc in self._procs:
      proc.join(max(0.0, deadline - time.monotonic()))
      if proc.exitcode is None:
        proc.kill()
        proc.join(5.0)
    for conn in self._conns:
      conn.close()


class _RayBackend:
  """One Ray actor per worker. Ray is imported here only, so the default backend never needs it.

  Uses the running Ray if this process already called `ray.init` (e.g. with a `runtime_env`), else `ray.init()`,
  which joins the cluster in RAY_ADDRESS or one `ray start`ed on this machine, or starts a local one.
  `actor_options` go to `.options()` of every actor (`num_cpus`, `resources`, `scheduling_strategy`, ...).
  """

  def __init__(self, factory, sizes: List[int], actor_options: Dict[str, Any], start_timeout_s: float):
    try:
      import ray
      from ray.exceptions import RayError
    except ImportError as e:
      raise ImportError(f"VectorEnv(backend='ray') needs Ray, which could not be imported ({e}): install it with "
                        "`pip install .[ray]` in this repository, or use the default backend='process'") from e
    self._ray, self._ray_error = ray, RayError
    if not ray.is_initialized():
      ray.init()
    # close() must not use this session's handles in a later one: a call on a stale handle starts a new local Ray,
    # and ray.kill on one aborts the process. A new local Ray has a new node id, a new connection a new job id.
    self._session = self._session_id()
    self._actor_cls = ray.remote(_EnvHost).options(**actor_options)
    self._factory, self._sizes = factory, sizes
    self._actors: List[Any] = [None] * len(sizes)
    self._pids: List[Any] = [None] * len(sizes)  # refs to each actor's pid, which also tell when it is up
    self._refs: Dict[int, Any] = {}
    for w in range(len(sizes)):
      self._start(w)
    try:
      ray.get(self._pids, timeout=start_timeout_s)
    except RayError as e:
      for actor in self._actors:  # pending ones too, or they would start (and hold resources) later
        ray.kill(actor)
      raise RuntimeError(f"VectorEnv's {len(sizes)} ray actors did not all start within {start_timeout_s:g} s: {e}\n"
                         "Each needs a node with agentopd_jax installed and the resources of its options "
                         f"{actor_options} (1 CPU by default); the cluster has {ray.cluster_resources()}") from e

  def _session_id(self) -> Tuple[str, str]:
    context = self._ray.get_runtime_context()
    return context.get_node_id(), context.get_job_id()

  def _start(self, w: int):
    self._actors[w] = self._actor_cls.remote(self._factory, self._sizes[w])
    self._pids[w] = self._actors[w].pid.remote()

  def submit(self, w: int, kind: str, batch):
    self._refs[w] = self._actors[w].handle.remote(kind, batch)

  def collect(self, workers: List[int], timeout_s: float) -> Dict[int, Any]:
    refs = {w: self._refs.pop(w) for w in workers}
    ready, _ = self._ray.wait(list(refs.values()), num_returns=len(refs), timeout=timeout_s)
    ready = set(ready)
    out = {}
    for w, ref in refs.items():
      if ref not in ready:
        out[w] = _WorkerLost(f"ray actor {w} did not answer within {timeout_s:g} s")
        continue
      try:
        out[w] = self._ray.get(ref)
      except self._ray_error as e:  # Ray's message says how the actor died, with its pid and node
        out[w] = _WorkerLost(f"ray actor {w} died: {e}")
    return out

  def restart(self, w: int):
    self._ray.kill(self._actors[w])  # also stops one still running a hung env step
    self._start(w)

  def pid(self, w: int) -> int:
    return self._ray.get(self._pids[w])

  def close(self):
    ray = self._ray
    if not ray.is_initialized() or self._session_id() != self._session:
      return  # this Ray session has ended, and its actors (never detached) ended with it
    refs = [actor.close.remote() for actor in self._actors]
    ray.wait(refs, num_returns=len(refs), timeout=5.0)  # lets envs run close(); a stuck actor is killed after it
    for actor in self._actors:
      ray.kill(actor)


class VectorEnv:
  """`num_envs` envs made by `factory`, hosted by `num_workers` workers (default: one env per worker).

  reset(tasks) -> (obs, infos); step(actions) -> (obs, scores, dones, infos); lists of length `num_envs`. A `None`
  action, or an env whose episode is done, is left alone and returns its last values. See the module docstring for
  the failure semantics. `start_method` is "spawn" (safe with a JAX/threaded parent) or "forkserver" (same safety,
  faster worker starts); `fork` is refused because forking a process that runs JAX threads can deadlock.
  `ray_actor_options` (backend "ray" only) are Ray's `.options()` for every worker actor, to place workers on
  other nodes, e.g. `{"num_cpus": 1}` to reserve a core each or `{"resources": {"env_node": 1}}`; the actors must
  start within `reset_timeout_s`.
  """

  def __init__(self, factory: Callable[[], Any], num_workers: int, num_envs: Optional[int] = None, *,
               step_timeout_s: float = 60.0, reset_timeout_s: float = 300.0, start_method: str = "spawn",
               backend: str = "process", ray_actor_options: Optional[Dict[str, Any]] = None):
    num_envs = num_workers if num_envs is None else num_envs
    if num_workers < 1 or num_envs < 1:
      raise ValueError(f"VectorEnv needs num_workers >= 1 and num_envs >= 1, got {num_workers} and {num_envs}")
    if start_method not in ("spawn", "forkserver"):
      raise ValueError(f"VectorEnv start_method must be 'spawn' or 'forkserver', got {start_method!r}")
    if backend not in ("process", "ray"):
      raise ValueError(f"VectorEnv backend must be 'process' or 'ray', got {backend!r}")
    if ray_actor_options and backend != "ray":
      raise ValueError(f"VectorEnv ray_actor_options needs backend='ray', got backend={backend!r}")
    self.num_envs = num_envs
    self.num_workers = min(num_workers, num_envs)  # a worker with no env would only cost a process
    self.step_timeout_s, self.reset_timeout_s = step_timeout_s, reset_timeout_s
    base, extra = divmod(num_envs, self.num_workers)
    sizes = [base + (w < extra) for w in range(self.num_workers)]
    self._slots = [(w, j) for w, n in enumerate(sizes) for j in range(n)]  # env i -> (worker, index in worker)
    self._hosted = [[i for i, (v, _) in enumerate(self._slots) if v == w] for w in range(self.num_workers)]
    self._backend = (_RayBackend(factory, sizes, ray_actor_options or {}, reset_timeout_s) if backend == "ray" else
                     _ProcessBackend(factory, sizes, start_method))
    # Closed when this object is collected, by close(), or at interpreter exit. The exit hook is our own atexit
    # entry, not weakref's (whose place in the atexit order is wherever the process's first finalizer put it), so
    # that it runs before multiprocessing's exit hook, which would otherwise wait forever on our non-daemonic
    # workers. It holds the backend only, never self.
    self._finalizer = weakref.finalize(self, self._backend.close)
    self._finalizer.atexit = False
    atexit.register(self._finalizer)
    self._obs: List[Any] = [""] * num_envs
    self._scores: List[Any] = [0] * num_envs
    self._dones: List[bool] = [True] * num_envs
    self._infos: List[Dict[str, Any]] = [{} for _ in range(num_envs)]
    self._started = False

  def reset(self, tasks: Sequence[Any]) -> Tuple[List[Any], List[Dict[str, Any]]]:
    """Starts an episode in every env, env i on `tasks[i]` (see `group_tasks` for GRPO groups)."""
    if len(tasks) != self.num_envs:
      raise ValueError(f"VectorEnv.reset needs {self.num_envs} tasks, got {len(tasks)}")
    self._check_open()
    self._scores = [0] * self.num_envs
    self._dones = [False] * self.num_envs
    self._run("reset", dict(enumerate(tasks)), self.reset_timeout_s)
    self._started = True
    return list(self._obs), list(self._infos)

  def reset_envs(self, tasks: Dict[int, Any]) -> Tuple[List[Any], List[Dict[str, Any]]]:
    """Starts a new episode in env i on `tasks[i]` for each key i only; the other envs keep theirs (continuous
    refill: a slot whose episode ended takes the next queued one). Returns every env's (obs, infos), as `reset`."""
    if any(not 0 <= i < self.num_envs for i in tasks):
      raise ValueError(f"VectorEnv.reset_envs: env indices must be in [0, {self.num_envs}), got {sorted(tasks)}")
    self._check_open()
    for i in tasks:
      self._scores[i], self._dones[i] = 0, False
    self._run("reset", dict(tasks), self.reset_timeout_s)
    self._started = True
    return list(self._obs), list(self._infos)

  def step(self, actions: Sequence[Optional[str]]) -> Tuple[List[Any], List[Any], List[bool], List[Dict[str, Any]]]:
    """Steps every env whose action is not None and whose episode is running; the others keep their last values."""
    if len(actions) != self.num_envs:
      raise ValueError(f"VectorEnv.step needs {self.num_envs} actions (None for inactive envs), got {len(actions)}")
    return self.step_wait(self.step_async(actions))

  def step_async(self, actions: Sequence[Optional[str]]) -> Dict[int, List[Tuple[int, Any]]]:
    """Sends the step to the workers and returns at once, so the caller can work (decode another batch) while the
    envs step; `step_wait` of the returned handle collects it. One step may be in flight per env: step the other
    envs meanwhile, and wait before stepping these again."""
    if len(actions) != self.num_envs:
      raise ValueError(f"VectorEnv.step needs {self.num_envs} actions (None for inactive envs), got {len(actions)}")
    self._check_open()
    if not self._started:
      raise RuntimeError("VectorEnv.step called before reset")
    return self._submit("step", {i: a for i, a in enumerate(actions) if a is not None and not self._dones[i]})

  def step_wait(self, pending: Dict[int, List[Tuple[int, Any]]]
                ) -> Tuple[List[Any], List[Any], List[bool], List[Dict[str, Any]]]:
    """The envs' state after the step `pending` (from `step_async`) collected, as `step` returns it."""
    self._collect("step", pending, self.step_timeout_s)
    return list(self._obs), list(self._scores), list(self._dones), list(self._infos)

  def worker_pid(self, i: int) -> int:
    """Process id of the worker hosting env i (for monitoring, and for tests that kill it); with Ray, on the node
    running that actor."""
    return self._backend.pid(self._slots[i][0])

  def close(self):
    """Stops the workers (envs' own close() runs first); idempotent, and also done at interpreter exit."""
    self._finalizer()
    atexit.unregister(self._finalizer)

  def __enter__(self) -> "VectorEnv":
    return self

  def __exit__(self, *exc):
    self.close()

  def _check_open(self):
    if not self._finalizer.alive:
      raise RuntimeError("VectorEnv is closed")

  def _run(self, kind: str, args: Dict[int, Any], timeout_s: float):
    """Sends each worker its envs' batch, then collects the replies into the per-env state."""
    self._collect(kind, self._submit(kind, args), timeout_s)

  def _submit(self, kind: str, args: Dict[int, Any]) -> Dict[int, List[Tuple[int, Any]]]:
    batches: Dict[int, List[Tuple[int, Any]]] = {}
    for i, arg in args.items():
      w, j = self._slots[i]
      batches.setdefault(w, []).append((j, arg))
    for w, batch in batches.items():
      self._backend.submit(w, kind, batch)
    return batches

  def _collect(self, kind: str, batches: Dict[int, List[Tuple[int, Any]]], timeout_s: float):
    try:
      replies = self._backend.collect(list(batches), timeout_s) if batches else {}
    except BaseException:  # e.g. Ctrl-C in a notebook: replies still in flight would be read as the next call's
      for w in batches:
        self._restart(w, "interrupted while waiting for this worker")
      raise
    for w, reply in replies.items():
      if isinstance(reply, _WorkerLost):
        self._restart(w, str(reply))
        continue
      for (j, _), (ok, value) in zip(batches[w], reply):
        i = self._hosted[w][j]
        if not ok:
          self._fail(i, f"env {i} raised in {kind}():\n{value}")
          logger.warning("VectorEnv: %s", self._infos[i]["error"])
        elif kind == "reset":
          self._obs[i], self._infos[i] = value
        else:
          self._obs[i], self._scores[i], self._dones[i], self._infos[i] = value

  def _restart(self, w: int, reason: str):
    """Replaces worker w and fails each of its running episodes, whose env state died with it."""
    logger.warning("VectorEnv: %s; restarting it", reason)
    self._backend.restart(w)
    for i in self._hosted[w]:
      if not self._dones[i]:
        self._fail(i, f"{reason}; the worker was restarted")

  def _fail(self, i: int, error: str):
    self._obs[i], self._scores[i], self._dones[i] = "", 0, True
    self._infos[i] = {"won": False, "env_failed": True, "error": error}
