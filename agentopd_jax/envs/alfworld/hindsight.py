"""ALFWorld's hindsight review (`EnvSpec.hindsight`, `envs.hindsight`): an episode's actions replayed on the fast
engine from the game file's start, each beside the state-based expert's `next_action` from the same state.

The fast engine prints the real engine's text and applies its rules (pinned by tests/test_alfworld_engines.py), so
the replay is the episode whichever engine played it. It runs without the step limit: the rollout's own budget already
cut the actions, and the expert's look ahead should measure the distance to the goal, not the steps left.
Milestones are the steps that change an object (take, put, heat, cool, clean, use, slice): a workflow is their order.
"""
from __future__ import annotations

import re
from typing import Optional, Sequence, Tuple

from agentopd_jax.envs.alfworld.engine_fast import FastEngine
from agentopd_jax.envs.alfworld.expert import Expert
from agentopd_jax.envs.hindsight import Replay, Review, replay

MILESTONE_VERBS = ("take", "put", "move", "heat", "cool", "clean", "use", "slice")
NO_LIMIT = 10**9
_TASK = re.compile(r"Your task is to:\s*", re.IGNORECASE)


class AlfworldReplay(Replay):
  """A fast engine at some state of a game, and the expert for its goal."""

  def __init__(self, engine: FastEngine, expert: Expert, task: str):
    self.engine, self._expert, self.task = engine, expert, task

  @classmethod
  def start(cls, gamefile: str) -> "AlfworldReplay":
    engine = FastEngine(gamefile, max_steps=NO_LIMIT)
    engine.reset()
    task = _TASK.sub("", engine.world.task_text).strip().rstrip(".")
    return cls(engine, Expert(engine), task)

  @property
  def done(self) -> bool:
    return self.engine.done

  @property
  def won(self) -> bool:
    return self.engine.won

  def copy(self) -> "AlfworldReplay":
    return AlfworldReplay(self.engine.copy(), self._expert, self.task)

  def expert(self) -> Optional[str]:
    """None in the rare states the expert's rules do not cover (its `min`/`next` over an empty choice)."""
    try:
      return self._expert.next_action(self.engine)
    except (ValueError, StopIteration):
      return None

  def step(self, action: str) -> Tuple[bool, str]:
    command = action.strip()
    admissible = command in self.engine.admissible_commands
    self.engine.step(action)
    return admissible, command if admissible and command.split(" ", 1)[0] in MILESTONE_VERBS else ""


def reviewer(env_cfg):
  """(game file, executed actions) -> Review."""
  def review(gamefile: str, actions: Sequence[str]) -> Review:
    return replay(AlfworldReplay.start(gamefile), actions)
  return review
