"""Batches concurrent requests into few sampler calls: a queue, and one worker thread running `Sampler.generate`.

The analyzer sends 100+ requests at once; served one by one, each would pay a whole decode loop for a single row.
`Sampler.generate` takes per-row max new tokens and stop strings but one temperature / top-p (greedy is even a
compile-time switch) and one PRNG key per call, so a batch holds requests of one (temperature, top_p, seed) group,
up to `max_batch` of them. The oldest waiting request always leads the next batch, so no group starves. A batch is
padded with one-token dummy rows to a power of two (at most `max_batch`), as the rollout engine pads its live envs,
so the sampler compiles a few batch shapes rather than one per request count.

Keys: a seeded group samples with `jax.random.key(seed)`, others with a fresh fold of the server's key. A sampled
reply also depends on its batch companions and row, so a seed is best effort, as OpenAI's is; greedy replies
(temperature 0) are deterministic whatever the batch.
"""
from __future__ import annotations

import collections
import dataclasses
import logging
import threading
import time
from typing import Deque, List, Optional, Sequence, Tuple

import jax

from agentopd_jax.sampling.sampler import Sampler, SamplingParams

logger = logging.getLogger(__name__)


class Closed(RuntimeError):
  """The batcher stopped before this job ran."""


@dataclasses.dataclass(eq=False)
class Job:
  """One request: its prompt ids and sampling settings in; its sampled ids and finish reason out."""
  prompt: Sequence[int]
  max_new_tokens: int
  temperature: float = 0.0
  top_p: float = 1.0
  seed: Optional[int] = None
  stop: Tuple[str, ...] = ()
  tokens: Optional[List[int]] = None
  finish_reason: Optional[str] = None   # "stop" | "length"
  error: Optional[BaseException] = None
  done: threading.Event = dataclasses.field(default_factory=threading.Event)

  @property
  def group(self) -> tuple:
    """Jobs of one group can share a generate call."""
    if self.temperature == 0.0:
      return (0.0, 1.0, None)  # greedy ignores top_p and the key
    return (self.temperature, self.top_p, self.seed)


def batch_width(n: int, max_batch: int) -> int:
  """The padded batch size of n jobs: the next power of two, at most max_batch."""
  return min(max_batch, 1 << (n - 1).bit_length())


class Batcher:
  """Runs submitted jobs in batches on one worker thread.

  sampler, params: what generates. stop_token_ids: added to every call (the chat EOS; the sampler adds the model's
  own stop ids). wait_s: after the first job of a batch arrives, how long to wait for companions while the batch is
  not full (a burst of requests arrives over a few milliseconds, not at once).
  """

  def __init__(self, sampler: Sampler, params, stop_token_ids: Sequence[int], max_batch: int = 16,
               wait_s: float = 0.01, seed: int = 0):
    if max_batch < 1:
      raise ValueError(f"max_batch must be >= 1, got {max_batch}")
    self.sampler, self.params, self.max_batch, self.wait_s = sampler, params, max_batch, wait_s
    self.stop_token_ids = tuple(sorted(set(stop_token_ids)))
    self.generate_calls = 0   # sampler calls made so far
    self.batch_sizes: List[int] = []  # jobs per call, in order
    self._key = jax.random.key(seed)
    self._pending: Deque[Job] = collections.deque()
    self._cv = threading.Condition()
    self._closed = False
    self._thread: Optional[threading.Thread] = None

  def start(self) -> None:
    self._thread = threading.Thread(target=self._loop, name="serve-batcher", daemon=True)
    self._thread.start()

  def stop(self) -> None:
    """Stops the worker after its current batch; jobs still waiting fail with `Closed`."""
    with self._cv:
      self._closed = True
      left = list(self._pending)
      self._pending.clear()
      self._cv.notify_all()
    for job in left:
      job.error = Closed("the server is shutting down")
      job.done.set()
    if self._thread is not None:
      self._thread.join()

  def submit(self, job: Job) -> Job:
    """Queues `job` and blocks until it is done (check `job.error`)."""
    with self._cv:
      if self._closed:
        raise Closed("the server is shutting down")
      self._pending.append(job)
      self._cv.notify_all()
    job.done.wait()
    return job

  # --- worker ----------------------------------------------------------------------------------------------

  def _loop(self) -> None:
    while True:
      batch = self._take()
      if batch is None:
        return
      try:
        self._run(batch)
      except Exception as e:  # the worker must survive a failed call; its jobs get the error
        logger.exception("generate failed for a batch of %d requests", len(batch))
        for job in batch:
          job.error = e
      for job in batch:
        job.done.set()

  def _take(self) -> Optional[List[Job]]:
    """The next batch: the oldest job and the next jobs of its group, after waiting up to wait_s for a full one."""
    with self._cv:
      while not self._pending and not self._closed:
        self._cv.wait()
      if self._closed:
        return None
      deadline = time.monotonic() + self.wait_s
      while len(self._pending) < self.max_batch and not self._closed:
        left = deadline - time.monotonic()
        if left <= 0:
          break
        self._cv.wait(left)
      if self._closed:
        return None
      group = self._pending[0].group
      batch = [job for job in self._pending if job.group == group][:self.max_batch]
      taken = set(map(id, batch))
      self._pending = collections.deque(job for job in self._pending if id(job) not in taken)
      return batch

  def _run(self, batch: List[Job]) -> None:
    n = len(batch)
    dummies = batch_width(n, self.max_batch) - n
    head = batch[0]
    sampling = SamplingParams(max_new_tokens=max(job.max_new_tokens for job in batch), temperature=head.temperature,
                              top_p=head.top_p, stop_token_ids=self.stop_token_ids)
    if head.seed is not None and head.temperature > 0:
      key = jax.random.key(head.seed)
    else:
      key = jax.random.fold_in(self._key, self.generate_calls)
    stops = [job.stop for job in batch] + [()] * dummies
    out = self.sampler.generate(
        self.params, [list(job.prompt) for job in batch] + [[self.sampler.pad_id]] * dummies, key, sampling,
        row_max_new_tokens=[job.max_new_tokens for job in batch] + [1] * dummies,
        row_stop_strings=stops if any(stops) else None)
    self.generate_calls += 1
    self.batch_sizes.append(n)
    for b, job in enumerate(batch):
      job.tokens, job.finish_reason = out.row(b), out.finish_reasons[b]
