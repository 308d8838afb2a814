"""The policy's side of a Countdown episode: prompts, action projection and reward (the `TextEnv` interface, see
`rollout.text_envs`; the history and demonstration replies come from `verl_agent.text.HistoryText`), so the rollout
engine drives the game like any other env.

The game follows verl-agent's ALFWorld conventions, so a model (or a reader) that knows those knows this: the same
templates with the game named instead of ALFRED (verl-agent's with a <think> block, or our compact one for tiny
models), the last `history_length` steps as `[Observation n: '...', Action n: '...']` records, the reply's action
inside `<action> </action>`, 10 for a win, and the invalid-action penalty for a reply without the tags (or, with
the full template, without a <think> block). An action that is not a move is executed anyway, as in ALFWorld: the
game answers "Nothing happens." and the move is spent.
"""
from __future__ import annotations

import re
from typing import Mapping, Tuple

from agentopd_jax.envs.verl_agent import SimpleMemory, prompts, tagged_projection
from agentopd_jax.envs.verl_agent.rewards import WIN_REWARD
from agentopd_jax.envs.verl_agent.text import HistoryText

PROJECTION_TAIL = 30  # without <action> tags, the action is the reply's last 30 characters (invalid), as ALFWorld's
_ALFRED, _GAME = "operating in the ALFRED Embodied Environment", "playing a number game"
TEMPLATE_NO_HIS = prompts.ALFWORLD_TEMPLATE_NO_HIS.replace(_ALFRED, _GAME)
TEMPLATES = {"verl-agent": prompts.ALFWORLD_TEMPLATE.replace(_ALFRED, _GAME),
             "opid": prompts.ALFWORLD_TEMPLATE_OPID.replace(_ALFRED, _GAME)}
_GOAL = re.compile(r"Reach exactly .*", re.DOTALL)


def render(observation: str, admissible, task: str, memory: SimpleMemory, history_length: int, compact: bool,
           flavor: str) -> str:
  """The prompt for the current step: the no-history template on the first step (or with `history_length` <= 0),
  else the history one with the last `history_length` records of `memory`."""
  actions = prompts.format_admissible(admissible)
  if history_length <= 0 or not len(memory):
    template = prompts.ALFWORLD_COMPACT_TEMPLATE_NO_HIS if compact else TEMPLATE_NO_HIS
    return template.format(current_observation=observation, admissible_actions=actions)
  history, shown = memory.fetch(history_length)
  template = prompts.ALFWORLD_COMPACT_TEMPLATE if compact else TEMPLATES[flavor]
  return template.format(task_description=task, step_count=len(memory), history_length=shown,
                         action_history=history, current_step=len(memory) + 1, current_observation=observation,
                         admissible_actions=actions)


class CountdownText(HistoryText):
  """Countdown under verl-agent's ALFWorld-style template (or our compact one, which asks for no <think> block)."""

  name = "countdown"
  compact_anchors = prompts.ALFWORLD_COMPACT_ANCHORS  # its compact prompts are ALFWorld's

  def __init__(self, history_length: int = 2, compact: bool = False, flavor: str = "verl-agent",
               invalid_penalty: float = 0.1):
    if flavor not in TEMPLATES:
      raise ValueError(f"env.prompt_flavor must be one of {tuple(TEMPLATES)} for Countdown, got {flavor!r}")
    super().__init__(history_length, compact, flavor, invalid_penalty)
    self.admissible = ()

  def begin(self, observation: str, infos: Mapping) -> None:
    """A new game: its goal sentence of the reset text is the task the history template restates."""
    self.memory.reset()
    goal = _GOAL.search(observation)
    self.task = goal.group(0) if goal else observation
    self._show(observation, infos)

  def _show(self, observation: str, infos: Mapping) -> None:
    self.observation, self.admissible = observation, tuple(infos.get("admissible_commands", ()))

  def _render(self, memory: SimpleMemory, history_length: int) -> str:
    return render(self.observation, self.admissible, self.task, memory, history_length, self.compact, self.flavor)

  def project(self, response: str) -> Tuple[str, int]:
    actions, valids = tagged_projection([response], PROJECTION_TAIL, check_think=not self.compact)
    return actions[0], valids[0]

  @staticmethod
  def reward(score: float, done: bool, infos: Mapping) -> Tuple[float, bool]:
    """10 for the winning step, else 0 (verl-agent's ALFWorld reward)."""
    won = bool(infos.get("won", False))
    return WIN_REWARD * won, won
