"""What verl-agent's ALFWorld and WebShop env managers share on the policy's side (the `TextEnv` interface, see
`rollout.text_envs`): the text history of (observation, action) pairs, the step-wise prompt with the last
`history_length` steps or the turn prompt without them, and how a demonstration step is written as a reply. Each env
subclass says how a page is shown (`_show`) and rendered (`_render`), how a reply is projected and rewarded."""
from __future__ import annotations

import abc
from typing import Mapping

from agentopd_jax.envs.verl_agent.memory import SimpleMemory


class HistoryText(abc.ABC):
  """A verl-agent text env with a `SimpleMemory` history (see the module docstring)."""

  name = ""
  compact_anchors = None  # the compact template's `PromptAnchors` (each env's own)

  def __init__(self, history_length: int, compact: bool, flavor: str, invalid_penalty: float):
    self.history_length = history_length
    self.compact = compact
    self.flavor = flavor
    self.invalid_penalty = invalid_penalty
    self.memory = SimpleMemory()
    self.task, self.observation = "", ""

  @abc.abstractmethod
  def _render(self, memory: SimpleMemory, history_length: int) -> str:
    """The prompt of the current page with `history_length` steps of `memory`."""

  @abc.abstractmethod
  def _show(self, observation: str, infos: Mapping) -> None:
    """Makes `observation` (and its admissible actions in `infos`) the current page."""

  @property
  def prompt_anchors(self):
    """Where this env's prompts state the task and ask for the reply (`verl_agent.prompts.PromptAnchors`); None for
    verl-agent's templates, whose anchors are the ones OPID was written for."""
    return self.compact_anchors if self.compact else None

  def step_prompt(self) -> str:
    """This step's prompt with the text history (step-wise layout)."""
    return self._render(self.memory, self.history_length)

  def turn_prompt(self) -> str:
    """This step's prompt without history (whole-trajectory layout: the history is the conversation itself)."""
    return self._render(SimpleMemory(), 0)

  def demo_reply(self, action: str) -> str:
    """How a demonstration step is written as a reply (SFT warm start)."""
    if self.compact:
      return f"<action>{action}</action>"
    return f"<think>I should {action} next.</think><action>{action}</action>"

  def observe(self, action: str, observation: str, infos: Mapping) -> None:
    self.memory.store(self.observation, action)
    self._show(observation, infos)
