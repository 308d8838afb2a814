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
from agentopd_jax.envs.verl_agent.text import HistoryText
from agentopd_jax.envs.webshop import prompts

_NO_ACTIONS = {"has_search_bar": False, "clickables": []}
REWARDS = ("success", "score")  # verl-agent's 10 iff the purchase scores 1.0; 10 x the purchase's score


class WebshopText(HistoryText):
  """WebShop under verl-agent's WebShop template (or our compact one, which asks for no <think> block)."""

  name = "webshop"
  compact_anchors = prompts.WEBSHOP_COMPACT_ANCHORS

  def __init__(self, history_length: int = 2, compact: bool = False, flavor: str = "verl-agent",
               invalid_penalty: float = verl_agent.INVALID_ACTION_PENALTY_COEF["webshop"], reward: str = "success"):
    if reward not in REWARDS:
      raise ValueError(f"env.reward must be one of {REWARDS} for WebShop, got {reward!r}")
    super().__init__(history_length, compact, flavor, invalid_penalty)
    self.reward_kind = reward
    self.available = _NO_ACTIONS

  def begin(self, observation: str, infos: Mapping) -> None:
    self.memory.reset()
    self.task = prompts.webshop_task(observation)
    self._show(observation, infos)

  def _render(self, memory, history_length: int) -> str:
    return prompts.render(self.observation, self.available, self.task, memory, history_length,
                          compact=self.compact, flavor=self.flavor)

  def project(self, response: str) -> Tuple[str, int]:
    return prompts.project(response, compact=self.compact)

  def reward(self, score: float, done: bool, infos: Mapping) -> Tuple[float, bool]:
    reward, won = verl_agent.webshop_reward(score, done)
    if self.reward_kind == "score":
      reward = WIN_REWARD * score if done else 0.0
    return reward, won

  def _show(self, observation: str, infos: Mapping) -> None:
    self.observation = prompts.webshop_observation(observation, self.task)
    self.available = infos.get("available_actions", _NO_ACTIONS)
