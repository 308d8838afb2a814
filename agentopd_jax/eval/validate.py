"""Validation episodes on a fixed panel of problems: episode records for metrics, and a per-problem outcome record.

The panel and the sampling key are fixed for a whole run, so two checkpoints are compared on the same games with
the same random numbers (common random numbers make their difference far less noisy). The outcome record
{problem id: (successes, attempts)} is what each checkpoint carries for Agentic-OPD's coverage-based scheduling.
"""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import jax

from agentopd_jax.batching.samples import EpisodeResult, Sample
from agentopd_jax.envs.verl_agent.metrics import EpisodeRecord
from agentopd_jax.rollout.engine import PromptContext, Rollout, RolloutEngine
from agentopd_jax.sampling.sampler import SamplingParams


def episode_record(ep: EpisodeResult, group: Optional[str]) -> EpisodeRecord:
  """The episode for verl-agent's metrics; `group`: its task's group (`EnvSpec.group_of`), which names its
  `<group>_success_rate`; WebShop's score and a question's source, searches and sub-string EM come from the env's
  infos."""
  return EpisodeRecord(problem=ep.problem_id, group=group, won=ep.won, reward=ep.reward, length=max(ep.length, 1),
                       valid_actions=min(ep.valid_actions, max(ep.length, 1)), task_score=ep.info.get("task_score"),
                       data_source=ep.info.get("data_source"), tool_calls=ep.info.get("tool_calls"),
                       subem=ep.info.get("subem"))


def outcomes_of(episodes: Sequence[EpisodeResult]) -> Dict[str, Tuple[int, int]]:
  """problem id -> (successes, attempts); failed env episodes are not attempts (the policy never played them)."""
  out: Dict[str, Tuple[int, int]] = {}
  for ep in episodes:
    if ep.env_failed:
      continue
    s, a = out.get(ep.problem_id, (0, 0))
    out[ep.problem_id] = (s + int(ep.won), a + 1)
  return out


def episode_traces(rollout: Rollout) -> List[Dict]:
  """What each episode did, for reading a policy's failures: problem, outcome, the env's infos and, per step, the
  prompt (before the chat template), the reply and its validity (step layout; a whole-trajectory sample is one
  entry)."""
  steps: Dict[int, List[Sample]] = {}
  for sample in rollout.samples:
    steps.setdefault(sample.traj_id, []).append(sample)
  return [{"problem": ep.problem_id, "won": ep.won, "reward": ep.reward, "length": ep.length, "info": ep.info,
           "error": ep.error,
           "steps": [{"prompt": s.prompt_text, "reply": s.response_text, "valid": s.action_valid}
                     for s in sorted(steps.get(ep.traj_id, []), key=lambda s: s.step_index)]}
          for ep in rollout.episodes]


def validate(engine: RolloutEngine, params, panel: Sequence[str], attempts: int, key: jax.Array,
             sampling: SamplingParams, traces: Optional[List[Dict]] = None, context: Optional[PromptContext] = None,
             first_problem: int = 0, *, group_of: Callable[[Any], Optional[str]]
             ) -> Tuple[List[EpisodeRecord], Dict[str, Tuple[int, int]], Dict[str, float]]:
  """Plays each panel problem `attempts` times (the engine's vector env must host len(panel) * attempts envs);
  `traces`, when given, receives `episode_traces` of the episodes; `context` adds to every prompt (e.g. skills);
  `group_of`: task -> its group (`EnvSpec.group_of`), for the per-group metrics.
  `first_problem`: where `panel` starts in the whole panel when this process plays a share of it (multi-host), so
  each episode draws the random numbers it would draw in one process."""
  tasks = [p for p in panel for _ in range(attempts)]
  groups = [g for g in range(len(panel)) for _ in range(attempts)]
  result = engine.run(params, tasks, tasks, groups, key, sampling, context=context,
                      first_episode=first_problem * attempts)
  if traces is not None:
    traces.extend(episode_traces(result))
  played = [ep for ep in result.episodes if not ep.env_failed]
  return [episode_record(ep, group_of(tasks[ep.traj_id])) for ep in played], outcomes_of(result.episodes), result.stats
