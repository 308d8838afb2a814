"""The policy's side of a WebShop episode: verl-agent prompts, projection and reward, with `AlfworldText`'s
interface (`agentopd_jax.rollout.text_envs`), so the rollout engine drives WebShop unchanged.

What verl-agent's WebShop env manager does, per episode: the task is the reset page's instruction; every page is
shown reformatted (`'field' [SEP] 'field'` after the instruction), which is also what the history stores; the
admissible actions come from `infos['available_actions']`; the reward is 10 only for a purchase scoring 1.0.
`reward="score"` pays 10 x WebShop's own graded score instead (the reward the WebShop paper's RL agent trains on):
a purchase that matches the goal in part earns in part, so GRPO's groups differ even when no episode is perfect.
"""
from __future__ import annotations

from typing import Mapping, Tuple

from agentopd_jax.envs import verl_agent
from agentopd_jax.envs.verl_agent.rewards import WIN_REWARD
from agentopd_jax.envs.webshop import prompts

_NO_ACTIONS = {"has_search_bar": False, "clickables": []}
REWARDS = ("success", "score")  # verl-agent's 10 iff the purchase scores 1.0; 10 x the purchase's score


class WebshopText:
  """WebShop under verl-agent's WebShop template (or our compact one, which asks for no <think> block)."""

  name = "webshop"

  def __init__(self, history_length: int = 2, compact: bool = False, flavor: str = "verl-agent",
               invalid_penalty: float = verl_agent.INVALID_ACTION_PENALTY_COEF["webshop"], reward: str = "success"):
    if reward not in REWARDS:
      raise ValueError(f"env.reward must be one of {REWARDS} for WebShop, got {reward!r}")
    self.reward_kind = reward
    self.history_length = history_length
    self.compact = compact
    self.flavor = flavor
    self.invalid_penalty = invalid_penalty
    self.memory = verl_agent.SimpleMemory()
    self.task, self.observation, self.available = "", "", _NO_ACTIONS

  def begin(self, observation: str, infos: Mapping) -> None:
    self.memory.reset()
    self.task = prompts.webshop_task(observation)
    self._show(observation, infos)

  def step_prompt(self) -> str:
    """This step's prompt with the text history (step-wise layout)."""
    return prompts.render(self.observation, self.available, self.task, self.memory, self.history_length,
                          compact=self.compact, flavor=self.flavor)

  def turn_prompt(self) -> str:
    """This step's prompt without history (whole-trajectory layout: the history is the conversation itself)."""
    return prompts.render(self.observation, self.available, self.task, verl_agent.SimpleMemory(), 0,
                          compact=self.compact, flavor=self.flavor)

  def project(self, response: str) -> Tuple[str, int]:
    return prompts.project(response, compact=self.compact)

  def demo_reply(self, action: str) -> str:
    """How a demonstration step is written as a reply (SFT warm start)."""
    if self.compact:
      return f"<action>{action}</action>"
    return f"<think>I should {action} next.</think><action>{action}</action>"

  def observe(self, action: str, observation: str, infos: Mapping) -> None:
    self.memory.store(self.observation, action)
    self._show(observation, infos)

  def reward(self, score: float, done: bool, infos: Mapping) -> Tuple[float, bool]:
    reward, won = verl_agent.webshop_reward(score, done)
    if self.reward_kind == "score":
      reward = WIN_REWARD * score if done else 0.0
    return reward, won

  def _show(self, observation: str, infos: Mapping) -> None:
    self.observation = prompts.webshop_observation(observation, self.task)
    self.available = infos.get("available_actions", _NO_ACTIONS)
