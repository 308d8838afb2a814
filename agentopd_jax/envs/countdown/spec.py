"""Countdown's run spec (`envs.registry`): seeds as tasks, `CountdownEnv` workers, `CountdownText`, the shortest-moves
expert, the number of moves a target needs as the task group and one report column per number.

A task is an int seed and a seed is a game (`env.game`). Some games are held out: validation plays only those, and
training never sees them, so the validation success is on games the policy has not trained on. Nothing here needs
a download or a cache, so the env's CPU default starts at once.
"""
from __future__ import annotations

import dataclasses
import functools
import zlib
from typing import List, Optional, Tuple

from agentopd_jax.envs.countdown.env import MAX_MOVES, CountdownEnv, game, solve
from agentopd_jax.envs.countdown.text import CountdownText
from agentopd_jax.envs.registry import EnvCommon, EnvSpec, ReportSpec, register

HELD_OUT = 4  # a game is a validation game when the CRC-32 of "start target" is divisible by this: ~1/4 of them
EXPERTS = ("shortest",)
# One column per number of moves the target needs, easiest first; the headline is success over every episode.
REPORT = ReportSpec(columns=tuple((f"{n} move{'s' * (n > 1)}", f"moves_{n}") for n in range(1, MAX_MOVES + 1)),
                    headline="All")


@dataclasses.dataclass(frozen=True)
class CountdownConfig(EnvCommon):
  """The run config's `env` section for Countdown."""
  name: str = "countdown"
  num_train: int = 1000                # training seeds (the game has ~100 distinct training games; seeds repeat them)
  num_valid: int = 200                 # validation seeds; `validation.num_tasks` plays the first of them

  def __post_init__(self):
    super().__post_init__()
    for field in ("num_train", "num_valid"):
      value = getattr(self, field)
      if type(value) is not int or value < 1:
        raise ValueError(f"env.{field} must be an integer >= 1, got {value!r}")


def held_out(task: int) -> bool:
  """Whether game `task` is a validation game (decided by the game, so two seeds of one game agree)."""
  start, target = game(task)
  return zlib.crc32(f"{start} {target}".encode()) % HELD_OUT == 0


def tasks(env_cfg) -> Tuple[List[int], List[int]]:
  """(training seeds, validation seeds): the first `env.num_train` seeds from 0 up whose game is not held out, and
  the first `env.num_valid` whose game is; fixed across run seeds, and disjoint as games, not only as seeds."""
  train, valid, seed = [], [], 0
  while len(train) < env_cfg.num_train or len(valid) < env_cfg.num_valid:
    pool, size = (valid, env_cfg.num_valid) if held_out(seed) else (train, env_cfg.num_train)
    if len(pool) < size:
      pool.append(seed)
    seed += 1
  return train, valid


def worker(env_cfg, max_steps: Optional[int] = None):
  """`CountdownEnv` with the rollout's horizon (the env's own, 8, when `max_steps` is None)."""
  return functools.partial(CountdownEnv, **({} if max_steps is None else {"max_steps": max_steps}))


def expert(env_cfg, name: str):
  """"shortest": the fewest moves that reach the target (`env.solve`), what the SFT warm start imitates."""
  return solve


def moves_needed(task: int) -> str:
  """A game's group: the fewest moves its target needs (`val/moves_<n>_success_rate`)."""
  return f"moves_{len(solve(task))}"


SPEC = register(EnvSpec(
    name="countdown", config=CountdownConfig, tasks=tasks, worker=worker, text_env=CountdownText, experts=EXPERTS,
    expert=expert, task_group=moves_needed, report=REPORT))
