"""The policy's side of an ALFWorld episode: verl-agent's ALFWorld prompts, action projection and reward (the
`TextEnv` interface, see `rollout.text_envs`), so the rollout engine drives ALFWorld like any other env."""
from __future__ import annotations

from typing import Mapping, Tuple

from agentopd_jax.envs import verl_agent


class AlfworldText:
  """ALFWorld under verl-agent's ALFWorld template (or our compact one, which asks for no <think> block)."""

  name = "alfworld"

  def __init__(self, history_length: int = 2, compact: bool = False, flavor: str = "verl-agent",
               invalid_penalty: float = verl_agent.INVALID_ACTION_PENALTY_COEF["alfworld"]):
    self.history_length = history_length
    self.compact = compact
    self.flavor = flavor
    self.invalid_penalty = invalid_penalty
    self.memory = verl_agent.SimpleMemory()
    self.task, self.observation, self.admissible = "", "", ()

  def begin(self, observation: str, infos: Mapping) -> None:
    self.memory.reset()
    self.task = verl_agent.alfworld_task(observation)
    self.observation, self.admissible = observation, tuple(infos.get("admissible_commands", ()))

  def step_prompt(self) -> str:
    """This step's prompt with the text history (step-wise layout)."""
    return verl_agent.render_alfworld(self.observation, self.admissible, self.task, self.memory, self.history_length,
                                      compact=self.compact, flavor=self.flavor)

  def turn_prompt(self) -> str:
    """This step's prompt without history (whole-trajectory layout: the history is the conversation itself)."""
    return verl_agent.render_alfworld(self.observation, self.admissible, self.task, verl_agent.SimpleMemory(), 0,
                                      compact=self.compact, flavor=self.flavor)

  def project(self, response: str) -> Tuple[str, int]:
    actions, valids = verl_agent.alfworld_projection([response], check_think=not self.compact)
    return actions[0], valids[0]

  def demo_reply(self, action: str) -> str:
    """How a demonstration step is written as a reply (SFT warm start)."""
    if self.compact:
      return f"<action>{action}</action>"
    return f"<think>I should {action} next.</think><action>{action}</action>"

  def observe(self, action: str, observation: str, infos: Mapping) -> None:
    self.memory.store(self.observation, action)
    self.observation, self.admissible = observation, tuple(infos.get("admissible_commands", ()))

  @staticmethod
  def reward(score: float, done: bool, infos: Mapping) -> Tuple[float, bool]:
    won = bool(infos.get("won", False))
    return verl_agent.alfworld_reward(won), won
