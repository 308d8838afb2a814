"""Search-QA's hindsight review (`EnvSpec.hindsight`, `envs.hindsight`): an episode's actions replayed on the run's
`SearchEnv` from the question, each beside the oracle's next action given what the policy's searches had shown so far
(`oracle.advise`).

The oracle reads facts out of the passages retrieval returns, so a replay retrieves again: in-process BM25 is
deterministic, and a search server must be too for the replay to be the episode; a search it fails to answer makes the
replay raise, so the episode gets no review rather than a wrong one. Questions without a plan (real datasets) have no
expert action at any step. The turn budget is the env's own, so the oracle answers in time. Milestones are the searches
and the answer: a workflow is their order.
"""
from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

from agentopd_jax.envs.hindsight import Replay, Review, replay
from agentopd_jax.envs.search import formats
from agentopd_jax.envs.search.client import RetrievalError
from agentopd_jax.envs.search.oracle import advise


class SearchReplay(Replay):
  """A `SearchEnv` in some episode state, with the (query, observation) pairs of the episode's searches so far."""

  def __init__(self, env, task, searches: List[Tuple[str, str]]):
    self.env, self.task_spec, self.task, self.searches = env, task, task.question, searches
    self.done, self.won, self.turns = False, False, 0

  def copy(self) -> "SearchReplay":
    other = SearchReplay(self.env.copy(), self.task_spec, list(self.searches))
    other.done, other.won, other.turns = self.done, self.won, self.turns
    return other

  def expert(self) -> Optional[str]:
    if self.done or self.task_spec.plan is None:
      return None
    turns_left = self.env.max_turns - self.turns + (self.env.obs_format == "search-r1")  # Search-R1's final turn
    return advise(self.task_spec, self.searches, turns_left - 1)

  def step(self, action: str) -> Tuple[bool, str]:
    obs, _, self.done, infos = self.env.step(action)
    if infos.get("env_failed"):
      raise RetrievalError(infos["error"])
    self.won, self.turns = bool(infos["won"]), int(infos["turns"])
    kind, content = formats.search_r1_parse(action)
    if kind == "search" and infos["action"] == "search":
      self.searches.append((content, obs))
    admissible = infos["action"] != "invalid"
    return admissible, (f'search "{content}"' if kind == "search" else f'answer "{content}"') if admissible else ""

  def advice(self, action: str) -> str:
    kind, content = formats.search_r1_parse(action)
    return f'Search for "{content}"' if kind == "search" else f'Answer "{content}"'


def reviewer(kwargs: dict):
  """(SearchTask, executed actions) -> Review, on a `SearchEnv` built from the run's `kwargs` (`spec.env_kwargs`)."""
  from agentopd_jax.envs.search import SearchEnv

  def review(task, actions: Sequence[str]) -> Review:
    env = SearchEnv(**kwargs)
    try:
      env.reset(task)
      return replay(SearchReplay(env, env.task, []), actions)
    finally:
      env.close()
  return review
