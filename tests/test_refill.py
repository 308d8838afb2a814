"""Continuous refill's schedule (`rollout.refill`), on a scripted engine whose episodes last a known number of turns:
which episode starts in which slot and when, which groups a batch holds, what carries over and what is dropped.
The same episodes token for token as lock-step, with a real model and env: tests/test_rollout.py."""
import collections
import os
import types

import jax
import pytest

from agentopd_jax.batching.samples import Sample
from agentopd_jax.rollout.engine import RolloutConfig
from agentopd_jax.rollout.refill import RefillRollouts
from agentopd_jax.sampling.sampler import SamplingParams
from agentopd_jax.training.config import from_config_dict
from agentopd_jax.training.sweep import load_run_config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class _View:
  def begin(self, observation, infos):
    pass

  def reward(self, score, done, infos):
    return float(done), bool(done)

  def observe(self, action, observation, infos):
    pass


class _Env:
  """Slots whose episode on task "<name>:<turns>" ends after that many steps."""

  def __init__(self, num_envs):
    self.num_envs, self.task, self.t = num_envs, [None] * num_envs, [0] * num_envs

  def reset_envs(self, tasks):
    for i, task in tasks.items():
      self.task[i], self.t[i] = task, 0
    return [""] * self.num_envs, [{} for _ in range(self.num_envs)]


class _Engine:
  """The engine's surface that refill drives: `_turn` records one 2-token sample per live row, `_step_envs` ends an
  episode after its task's turns. `turns` logs each turn's live rows as (task, member, step) per slot."""

  def __init__(self, slots, max_steps=10):
    self.config = RolloutConfig(max_steps=max_steps)
    self.env, self.text_env_factory, self.turns = _Env(slots), _View, []

  def reply_sampling(self, sampling):
    return sampling

  def _turn(self, params, episodes, live, keys, sampling, timer, context):
    self.turns.append({i: (episodes[i].problem_id, episodes[i].length) for i in live})
    for i in live:
      ep = episodes[i]
      ep.samples.append(Sample(prompt_ids=[1], completion_ids=[2, 3], completion_mask=[1, 1],
                               behaviour_logprobs=[0.0, 0.0], group_id=ep.group_id, problem_id=ep.problem_id,
                               traj_id=ep.traj_id, step_index=ep.length, action_valid=1.0))
      ep.length += 1
    return {i: "go" for i in live}

  def _step_envs(self, episodes, actions, timer):
    for i in actions:
      self.env.t[i] += 1
      ep = episodes[i]
      ep.done = ep.won = self.env.t[i] >= int(self.env.task[i].split(":")[1])
      ep.reward = float(ep.won)


def _refill(slots, draws, group_size=2, max_staleness=0, max_steps=10):
  engine = _Engine(slots, max_steps)
  draw = lambda d: (draws.get(d, [f"z{d}:1"]), jax.random.key(d), 0)  # noqa: E731
  return engine, RefillRollouts(engine, group_size, draw, max_staleness)


def _groups(rollout):
  """Each batch group's (problem id, number of samples of each member) by group id."""
  out = {}
  for ep in rollout.episodes:
    out.setdefault(ep.group_id, []).append((ep.problem_id, ep.traj_id, ep.length))
  return out


def test_on_policy_refill_plays_the_draw_in_fewer_slots_and_never_decodes_an_ended_episode():
  engine, refill = _refill(3, {0: ["a:2", "b:3"], 1: ["c:1"]})
  rollout, tasks = refill.run(None, 0, 2, SamplingParams())
  assert tasks == ["a:2", "b:3"]  # draw 0's groups only (staleness 0 never starts draw 1), in order of completion
  # Turns 1-2: a, a, b in the three slots; a's pair ends, the queued b starts in a freed slot and the other idles.
  assert [sorted(t.values()) for t in engine.turns] == [
      [("a:2", 0), ("a:2", 0), ("b:3", 0)], [("a:2", 1), ("a:2", 1), ("b:3", 1)], [("b:3", 0), ("b:3", 2)],
      [("b:3", 1)], [("b:3", 2)]]
  assert _groups(rollout) == {0: [("a:2", 0, 2), ("a:2", 1, 2)], 1: [("b:3", 2, 3), ("b:3", 3, 3)]}
  assert len(rollout.samples) == sum(map(len, engine.turns)) == 10  # a sample for every decoded row
  assert {(s.group_id, s.traj_id) for s in rollout.samples} == {(0, 0), (0, 1), (1, 2), (1, 3)}
  assert all(s.won and s.episode_reward == 1.0 for s in rollout.samples)
  assert rollout.stats["refill_carried_episodes"] == rollout.stats["refill_stale_samples"] == 0
  assert refill.queue == collections.deque() and refill.complete == [] and refill.slots == [None] * 3


def test_stale_refill_closes_at_n_groups_carries_one_version_and_drops_what_would_be_older():
  engine, refill = _refill(3, {0: ["a:2"], 1: ["b:5"], 2: ["c:1"], 3: ["d:1"]}, max_staleness=1)
  first, tasks = refill.run(None, 0, 1, SamplingParams())
  # The third slot starts draw 1 at once; the batch closes when a's group ends, and b's first member carries over.
  assert tasks == ["a:2"] and first.stats["refill_carried_episodes"] == 1 and first.stats["refill_starts"] == 3
  assert len(first.samples) == 4 and first.stats["refill_stale_samples"] == 0
  second, tasks = refill.run(None, 1, 1, SamplingParams())
  # Version 1: b's second member and c's group start; c (one turn each) completes first and is the batch. b's first
  # member sampled two turns under version 0 and would be trained at version 2 or later: b's group is dropped.
  assert tasks == ["c:1"] and _groups(second) == {0: [("c:1", 0, 1), ("c:1", 1, 1)]}
  assert second.stats["refill_dropped_episodes"] == 2
  assert second.stats["refill_wasted_tokens"] == 2 * (4 + 2)  # b's members: 4 and 2 turns of 2 tokens
  assert all(ep is None or ep.problem_id != "b:5" for ep in refill.slots)
  third, tasks = refill.run(None, 2, 1, SamplingParams())
  assert tasks == ["d:1"] and third.stats["refill_stale_samples"] == 0


def test_a_complete_group_beyond_the_batch_waits_for_the_next_one_as_stale_samples():
  engine, refill = _refill(4, {0: ["a:1"], 1: ["b:1"], 2: ["c:3"]}, max_staleness=1)
  first, tasks = refill.run(None, 0, 1, SamplingParams())
  assert tasks == ["a:1"] and [g.task for g in refill.complete] == ["b:1"]  # both ended in the same turn
  second, tasks = refill.run(None, 1, 1, SamplingParams())
  assert tasks == ["b:1"] and second.stats["refill_stale_samples"] == 2 and second.stats["refill_max_staleness"] == 1


def test_refill_config_errors_name_the_field():
  with pytest.raises(ValueError, match="rollout.refill needs layout 'step'"):
    RolloutConfig(layout="trajectory", refill=True)
  with pytest.raises(ValueError, match="rollout.refill and rollout.overlap_env"):
    RolloutConfig(refill=True, overlap_env=True)
  with pytest.raises(ValueError, match=r"rollout.max_staleness=1 needs rollout.refill=True"):
    RolloutConfig(max_staleness=1)
  with pytest.raises(ValueError, match=r"rollout.refill_slots must be >= 0"):
    RolloutConfig(refill=True, refill_slots=-1)
  base = load_run_config(os.path.join(ROOT, "configs", "alfworld.py"), "test")
  base.rollout.refill = True
  base.rollout.max_staleness = 1
  with pytest.raises(ValueError, match="rollout.max_staleness=1: stale samples need π_old recomputed"):
    from_config_dict(base)
  base.rollout.recompute_old_logprobs = True
  base.rollout_correction.is_level = "token"
  assert from_config_dict(base).rollout.max_staleness == 1
  skill = load_run_config(os.path.join(ROOT, "configs", "alfworld.py:skill_grpo"), "test")
  skill.rollout.refill = True
  with pytest.raises(ValueError, match="rollout.refill: method 'skill_grpo' reads the iteration's task draw"):
    from_config_dict(skill)


def test_refill_needs_the_step_layout_engine():
  engine = types.SimpleNamespace(config=RolloutConfig(layout="trajectory"), env=_Env(2))
  with pytest.raises(ValueError, match="rollout.refill needs layout 'step'"):
    RefillRollouts(engine, 2, lambda d: ([], None, 0))
