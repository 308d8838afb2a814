"""The policy's side of an ALFWorld episode: verl-agent's ALFWorld prompts, action projection and reward (the
`TextEnv` interface, see `rollout.text_envs`), so the rollout engine drives ALFWorld like any other env."""
from __future__ import annotations

from typing import Mapping, Tuple

from agentopd_jax.envs import verl_agent
from agentopd_jax.envs.verl_agent.text import HistoryText


class AlfworldText(HistoryText):
  """ALFWorld under verl-agent's ALFWorld template (or our compact one, which asks for no <think> block)."""

  name = "alfworld"
  compact_anchors = verl_agent.prompts.ALFWORLD_COMPACT_ANCHORS

  def __init__(self, history_length: int = 2, compact: bool = False, flavor: str = "verl-agent",
               invalid_penalty: float = verl_agent.INVALID_ACTION_PENALTY_COEF["alfworld"]):
    super().__init__(history_length, compact, flavor, invalid_penalty)
    self.admissible = ()

  def begin(self, observation: str, infos: Mapping) -> None:
    self.memory.reset()
    self.task = verl_agent.alfworld_task(observation)
    self._show(observation, infos)

  def _show(self, observation: str, infos: Mapping) -> None:
    self.observation, self.admissible = observation, tuple(infos.get("admissible_commands", ()))

  def _render(self, memory, history_length: int) -> str:
    return verl_agent.render_alfworld(self.observation, self.admissible, self.task, memory, history_length,
                                      compact=self.compact, flavor=self.flavor)

  def project(self, response: str) -> Tuple[str, int]:
    actions, valids = verl_agent.alfworld_projection([response], check_think=not self.compact)
    return actions[0], valids[0]

  @staticmethod
  def reward(score: float, done: bool, infos: Mapping) -> Tuple[float, bool]:
    won = bool(infos.get("won", False))
    return verl_agent.alfworld_reward(won), won
