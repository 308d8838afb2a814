"""Episode metrics under verl-agent's key names (environments.md §2.7), so curves compare with published runs.

verl-agent logs them as `episode/<key>` (training) and `val/<key>` (validation); pass that as `prefix`.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from statistics import fmean

WEBSHOP_SCORE_KEY = "webshop_task_score (not success_rate)"  # sic: verl-agent's key, spaces and all


@dataclasses.dataclass(frozen=True)
class EpisodeRecord:
  """One finished episode. `problem`: its problem id (None: unknown); `group`: its task's group, as the env's
  `EnvSpec.task_group` names it (ALFWorld's task type, search-QA's data source; None: none), which gives the
  `<group>_success_rate` key. `reward` sums env rewards over its active steps; `length` counts those steps and
  `valid_actions` the ones whose projected action was valid. Optional fields add env-specific metrics: WebShop
  `task_score` (raw score in [0, 1]), Search `data_source`, `tool_calls` and `subem` (Search-R1's sub-string EM of
  the final answer, reported beside EM, which is `won`).
  """
  problem: str | None
  group: str | None
  won: bool
  reward: float
  length: int
  valid_actions: int
  task_score: float | None = None
  data_source: str | None = None
  tool_calls: int | None = None
  subem: float | None = None

  def __post_init__(self):
    if self.length < 1 or not 0 <= self.valid_actions <= self.length:
      raise ValueError(f"need 1 <= length and 0 <= valid_actions <= length, got {self.length}, {self.valid_actions}")


def _success_rates(episodes: Sequence[EpisodeRecord]) -> dict[str, float]:
  """Success overall and per group; a group's key appears only when it has episodes (as verl-agent's dict)."""
  groups: dict[str, list[float]] = {"success_rate": [float(e.won) for e in episodes]}
  for e in episodes:
    if e.group:
      groups.setdefault(f"{e.group}_success_rate", []).append(float(e.won))
  return {k: fmean(v) for k, v in groups.items()}


def episode_metrics(episodes: Sequence[EpisodeRecord], prefix: str = "") -> dict[str, float]:
  """Aggregate finished episodes into verl-agent's metrics.

  `valid_action_ratio` is over steps, not episodes (verl-agent averages the flag over all step samples), so long
  episodes weigh more. Tool-call means and sub-string EM (`subem`, `<source>_subem`) appear only when every episode
  reports them.
  """
  if not episodes:
    raise ValueError("episode_metrics needs at least one episode")
  out = _success_rates(episodes)
  scores = [e.task_score for e in episodes if e.task_score is not None]
  if scores:
    out[WEBSHOP_SCORE_KEY] = fmean(scores)
  out["valid_action_ratio"] = sum(e.valid_actions for e in episodes) / sum(e.length for e in episodes)
  for name, values in (("reward", [e.reward for e in episodes]), ("length", [e.length for e in episodes])):
    out.update({f"{name}/mean": fmean(values), f"{name}/max": float(max(values)), f"{name}/min": float(min(values))})
  if all(e.tool_calls is not None for e in episodes):
    out["tool_call_count/mean"] = fmean(e.tool_calls for e in episodes)
    for source in sorted({e.data_source for e in episodes if e.data_source}):
      out[f"{source}/tool_call_count/mean"] = fmean(e.tool_calls for e in episodes if e.data_source == source)
  if all(e.subem is not None for e in episodes):
    out["subem"] = fmean(e.subem for e in episodes)
    for source in sorted({e.data_source for e in episodes if e.data_source}):
      out[f"{source}_subem"] = fmean(e.subem for e in episodes if e.data_source == source)
  return {prefix + k: float(v) for k, v in out.items()}
