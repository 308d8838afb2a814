"""CountdownEnv: a tiny deterministic number game, the smallest env of the interface `VectorEnv` runs.

The interface is the one the ALFWorld, WebShop and search envs follow, so this game also stands in for them in the
vector env's tests and in docs/architecture.md's worked example of a new env:

  env = CountdownEnv(max_steps=8)
  obs, infos = env.reset(task)                 # task: an int seed; the same seed is always the same game
  obs, score, done, infos = env.step("double")

`infos` carries `admissible_commands` and `won`, like ALFWorld's; the score is 1 once won, else 0. As in ALFWorld,
an action that is not admissible changes nothing ("Nothing happens.") but still uses a move.

With `faults=True` three extra actions misbehave on purpose so tests can exercise the vector env's recovery:
"crash" kills the process, "hang" blocks forever, "raise" raises. They are off by default so a policy playing the
game can never trip them.
"""
from __future__ import annotations

import os
import random
import time
from collections import deque
from typing import Any, Dict, List, Tuple

FAULT_ACTIONS = ("crash", "hang", "raise")
COMMANDS = ("add 1", "double")
MAX_MOVES = 5  # a target is at most this many moves from its start, so any horizon >= 5 can win every game


def apply(value: int, command: str) -> int:
  """The number after one move."""
  return value + 1 if command == "add 1" else 2 * value


def game(task: int) -> Tuple[int, int]:
  """(start, target) of game `task`: a start in 1..4 and the number 1..MAX_MOVES seeded random moves make of it.

  The game depends on the seed alone, not on the horizon, so a task is the same game to every worker, expert and
  report whatever `rollout.max_steps` says."""
  rng = random.Random(task)
  start = target = rng.randint(1, 4)
  for _ in range(rng.randint(1, MAX_MOVES)):
    target = apply(target, rng.choice(COMMANDS))
  return start, target


def solve(task: int) -> List[str]:
  """The shortest winning moves of game `task` (breadth-first; ties go to "add 1" first). No move decreases the
  number, so values past the target are never explored."""
  start, target = game(task)
  queue, seen = deque([(start, [])]), {start}
  while queue:
    value, moves = queue.popleft()
    if value == target:
      return moves
    for command in COMMANDS:
      nxt = apply(value, command)
      if nxt <= target and nxt not in seen:
        seen.add(nxt)
        queue.append((nxt, moves + [command]))
  raise AssertionError(f"game {task} has no solution")  # unreachable: the target was built from the start


class CountdownEnv:
  """Start from a small number and reach the target exactly with "add 1" and "double" within `max_steps` moves.

  Every game is winnable within MAX_MOVES moves (its target was built from its start); overshooting is a loss
  because no move decreases the number.
  """
  COMMANDS = COMMANDS

  def __init__(self, max_steps: int = 8, faults: bool = False):
    if max_steps < 1:
      raise ValueError(f"CountdownEnv.max_steps must be >= 1, got {max_steps}")
    self.max_steps = max_steps
    self.faults = faults
    self._value = self._target = self._moves_left = None
    self._done = True

  def reset(self, task: int) -> Tuple[str, Dict[str, Any]]:
    self._value, self._target = game(task)
    self._moves_left = self.max_steps
    self._done = False
    obs = (f"You have {self._value}. Reach exactly {self._target} in at most {self.max_steps} moves. "
           f"Each move is 'add 1' or 'double'.")
    return obs, self._infos(won=False)

  def step(self, action: str) -> Tuple[str, int, bool, Dict[str, Any]]:
    if self._done:
      raise RuntimeError("CountdownEnv.step called with no episode running; call reset first")
    if self.faults and action in FAULT_ACTIONS:
      self._fault(action)
    self._moves_left -= 1
    if action in COMMANDS:
      self._value = apply(self._value, action)
      obs = f"You have {self._value}."
    else:
      obs = f"Nothing happens. You have {self._value}."
    won = self._value == self._target
    if won:
      obs += f" You reached {self._target}: you win!"
    elif self._value > self._target:
      obs += f" That is past {self._target}: you lose."
    elif self._moves_left == 0:
      obs += " No moves left: you lose."
    else:
      obs += f" {self._moves_left} moves left to reach {self._target}."
    self._done = won or self._value > self._target or self._moves_left == 0
    return obs, int(won), self._done, self._infos(won)

  def _infos(self, won: bool) -> Dict[str, Any]:
    return {"admissible_commands": [] if self._done else list(COMMANDS), "won": won}

  @staticmethod
  def _fault(action: str):
    if action == "crash":
      os._exit(13)  # no cleanup, no exception: what a segfaulting or OOM-killed env looks like from outside
    if action == "hang":
      while True:
        time.sleep(3600)
    raise RuntimeError("CountdownEnv: the 'raise' action raises on purpose (fault injection)")
