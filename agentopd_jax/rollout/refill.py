"""Continuous refill (`rollout.refill`, step layout): an env slot whose episode ended starts the next queued one at
once, and a batch closes as soon as it holds N complete GRPO groups (every member of a group together), which it
numbers in stream order.

The queue is the run's stream of task draws, one per iteration (`draw(d)`: draw d's tasks, its key and the index of
its first episode), each task queued `group_size` times. An episode samples with the key lock-step would give it,
fold_in(draw key, its index in the draw), folded with its turn (`RolloutEngine._turn`), so its tokens never depend on
which slot, batch or neighbours it was played with.

  * max_staleness 0 (strictly on-policy): call v plays draw v's episodes only, in however many slots the env has; the
    batch closes when all of them have ended, and holds the same episodes as a lock-step call, token for token. With
    fewer slots than episodes, no slot idles while episodes wait and no row decodes for an ended episode.
  * max_staleness k >= 1: free slots also start later draws' episodes, and the batch closes at the first N complete
    groups. Episodes still running continue under the next policy; a sample is trained at most k policy versions
    after the one that sampled it. An episode that would exceed that is dropped with its whole group (counted in
    `refill_dropped_episodes` and `refill_wasted_tokens`). The trainer recomputes π_old and corrects for the
    sampler's older policy (`rollout.recompute_old_logprobs`, `rollout_correction`).

The carried episodes live in this object and in the env workers, not in checkpoints: a run resumed with
max_staleness >= 1 restarts the stream at the resumed iteration's draw.
"""
from __future__ import annotations

import collections
import dataclasses
import time
from typing import Any, Callable, Deque, Dict, List, Optional, Sequence, Tuple

import jax
import jax.numpy as jnp

from agentopd_jax.rollout.engine import Rollout, RolloutEngine, _Episode, check_played, new_timer

# draw(d) -> (draw d's tasks, its key, the index of its first episode): what lock-step iteration d plays.
Draw = Callable[[int], Tuple[Sequence[Any], jax.Array, int]]


@dataclasses.dataclass
class _Group:
  task: Any
  members: List[_Episode]
  order: Tuple[int, int]               # (draw, index in the draw): its place in the stream
  ended: int = 0

  @property
  def oldest(self) -> Optional[int]:
    """The oldest policy version among its members' samples (None: none sampled yet)."""
    return min((ep.versions[0] for ep in self.members if ep.versions), default=None)


class RefillRollouts:
  """Plays `engine`'s env slots (`engine.env.num_envs` of them) with continuous refill; `run` is one batch."""

  def __init__(self, engine: RolloutEngine, group_size: int, draw: Draw, max_staleness: int = 0):
    if engine.config.layout != "step":
      raise ValueError(f"rollout.refill needs layout 'step' (a slot takes a new episode between turns), got "
                       f"{engine.config.layout!r}")
    if max_staleness < 0:
      raise ValueError(f"rollout.max_staleness must be >= 0, got {max_staleness}")
    self.engine, self.group_size, self.draw, self.max_staleness = engine, group_size, draw, max_staleness
    self.slots: List[Optional[_Episode]] = [None] * engine.env.num_envs
    self.queue: Deque[_Episode] = collections.deque()
    self.complete: List[_Group] = []      # ended groups not yet in a batch, in order of completion
    self.open: Dict[int, _Group] = {}     # groups with a started member, not yet in a batch or dropped
    self.next_draw: Optional[int] = None
    self._prefix_key = 0                  # a unique shared-prefill key per queued group

  def run(self, params, version: int, groups: int, sampling) -> Tuple[Rollout, List[Any]]:
    """Plays until `groups` groups are complete under policy `version` (the iteration); returns the batch, the first
    `groups` groups to complete, in stream order (group j's members are traj_ids j·G .. j·G + G - 1; on-policy, the
    lock-step call's numbering), and each batch group's task."""
    timer = dict(new_timer(), refill_starts=0.0, refill_dropped_episodes=0.0, refill_wasted_tokens=0.0)
    idle = not (self.queue or self.open)
    if self.next_draw is None or (idle and self.next_draw < version):
      self.next_draw = version  # the stream starts (or, nothing in flight, goes on) at this iteration's draw
    sampling = self.engine.reply_sampling(sampling)
    while len(self.complete) < groups:
      self._fill(version, timer)
      if len(self.complete) >= groups:
        break  # resets that failed completed the last groups
      live = [i for i, ep in enumerate(self.slots) if ep is not None and not ep.done]
      if not live:
        if None in self.slots and self._can_start(version):
          continue  # every start failed at reset: start the next ones
        break  # max_staleness 0 and the draw has fewer complete groups than asked for
      keys = jnp.stack([(ep or self.slots[live[0]]).key for ep in self.slots])
      actions = self.engine._turn(params, self.slots, live, keys, sampling, timer, None)
      for i in actions:
        self.slots[i].versions.append(version)
      self.engine._step_envs(self.slots, actions, timer)
      for i in actions:
        if self.slots[i].done or self.slots[i].length >= self.engine.config.max_steps:
          self._end(i)
    return self._close(version, groups, timer)

  # ------------------------------------------------------------------------------------------------ the queue
  def _enqueue(self, d: int):
    tasks, key, first = self.draw(d)
    keys = jax.vmap(jax.random.fold_in, (None, 0))(key, first + jnp.arange(len(tasks) * self.group_size))
    for g, task in enumerate(tasks):
      group = _Group(task, [], (d, g))
      for m in range(self.group_size):
        ep = _Episode(self.engine.text_env_factory(), str(task), self._prefix_key, 0)
        ep.key, ep.group, ep.versions = keys[g * self.group_size + m], group, []  # versions: each sample's policy
        group.members.append(ep)
        self.queue.append(ep)
      self._prefix_key += 1

  def _can_start(self, version: int) -> bool:
    """Whether an episode may start under `version`: one is queued, or a draw may be pulled (this call's own;
    later ones only where staleness is allowed)."""
    return bool(self.queue) or bool(self.max_staleness) or self.next_draw <= version

  def _fill(self, version: int, timer: Dict[str, float]):
    """Starts queued episodes in the free slots, pulling later draws where staleness allows."""
    starts = {}
    for i, ep in enumerate(self.slots):
      if ep is not None:
        continue
      if not self.queue and self._can_start(version):
        self._enqueue(self.next_draw)
        self.next_draw += 1
      if not self.queue:
        break
      self.slots[i] = self.queue.popleft()
      starts[i] = self.slots[i].group.task
      self.open[id(self.slots[i].group)] = self.slots[i].group
    if not starts:
      return
    t0 = time.perf_counter()
    obs, infos = self.engine.env.reset_envs(starts)
    timer["env_s"] += time.perf_counter() - t0
    timer["refill_starts"] += len(starts)
    for i in starts:
      self.slots[i].begin(obs[i], infos[i])
      if self.slots[i].done:  # the reset failed
        self._end(i)

  def _end(self, i: int):
    """Slot i's episode has ended: its slot frees, and its group completes with its last member."""
    ep, self.slots[i] = self.slots[i], None
    ep.close()
    ep.group.ended += 1
    if ep.group.ended == self.group_size:
      self.complete.append(ep.group)

  # ------------------------------------------------------------------------------------------------ the batch
  def _close(self, version: int, groups: int, timer: Dict[str, float]) -> Tuple[Rollout, List[Any]]:
    batch, self.complete = self.complete[:groups], self.complete[groups:]
    batch.sort(key=lambda g: g.order)  # in stream order: on-policy, exactly the lock-step batch
    for group in batch:
      del self.open[id(group)]
    stale = [0, 0]  # stale samples, the largest staleness
    for j, group in enumerate(batch):
      for m, ep in enumerate(group.members):
        ep.group_id, ep.traj_id = j, j * self.group_size + m
        for s, v in zip(ep.samples, ep.versions):
          s.group_id, s.traj_id = ep.group_id, ep.traj_id
          stale = [stale[0] + (v < version), max(stale[1], version - v)]
    # What would be trained more than max_staleness versions after it was sampled goes, with its group.
    late = [g for g in self.open.values() if g.oldest is not None and version + 1 - g.oldest > self.max_staleness]
    for group in late:
      self._drop(group, timer)
    episodes = [ep for group in batch for ep in group.members]
    check_played(episodes)
    samples = [s for ep in episodes if not ep.failed for s in ep.samples]
    carried = sum(bool(ep.versions) for g in self.open.values() for ep in g.members)  # running, or ended unbatched
    timer.update(samples=float(len(samples)), refill_stale_samples=float(stale[0]),
                 refill_max_staleness=float(stale[1]), refill_carried_episodes=float(carried))
    return Rollout(samples=samples, episodes=[ep.result() for ep in episodes], stats=timer), [g.task for g in batch]

  def _drop(self, group: _Group, timer: Dict[str, float]):
    """Drops every member of `group`: running ones free their slots, queued ones leave the queue."""
    members = set(map(id, group.members))
    self.slots = [None if ep is not None and id(ep) in members else ep for ep in self.slots]
    self.queue = collections.deque(ep for ep in self.queue if id(ep) not in members)
    self.complete = [g for g in self.complete if g is not group]
    del self.open[id(group)]
    timer["refill_dropped_episodes"] += len(group.members)
    timer["refill_wasted_tokens"] += sum(len(s.completion_ids) for ep in group.members for s in ep.samples)
