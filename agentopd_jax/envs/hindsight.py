"""Hindsight review of a finished episode beside an env's expert: what OPID's oracle analyzer
(`methods.opid.oracle`) reads.

An env's `EnvSpec.hindsight(env_cfg)` returns `review(task, actions) -> Review`: the episode's actions replayed from
the task's start state, each next to the action the env's expert takes from that same state. This module is the
env-neutral part: the records, the `Replay` interface an env implements (its engine plus its expert, a few lines
each) and `replay`, the driver every env shares, so "left the expert's plan" means the same thing in every env.

Why a step is judged by progress and not by equality alone: many states have several equally good actions (either of
two mugs, another query that also finds the product). A step keeps to the plan when it is the expert's action, or when
the expert still wins from the state after it and in fewer steps than from the state before (`Outlook`). Only where the
expert cannot win from either state does it come down to equality. The expert is a function of the state, so after
its own action the outlook is the old one a step shorter, and only a deviation costs a new look ahead.
"""
from __future__ import annotations

import abc
import dataclasses
from typing import Optional, Sequence, Tuple

Outlook = Optional[Tuple[bool, int]]  # (the expert wins, steps it takes to finish) from a state; None: it gets stuck


class ReplayError(RuntimeError):
  """The replay does not match the episode (e.g. the env ended it before its last action): no review of it holds."""


@dataclasses.dataclass(frozen=True)
class StepReview:
  """One step: the policy's env action, whether the env could act on it, the expert's action from the same state
  (None: the expert has none there), and whether the step kept to the expert's plan (True when there is no expert
  action to compare with). `advice`: the expert's action as an imperative the policy can follow ("Go to countertop
  1"); `milestone`: what the step achieved toward the task ("take mug 1 from countertop 2"), "" for moves that only
  lead there (walking, paging, a step the env ignored)."""
  action: str
  admissible: bool
  expert_action: Optional[str]
  on_plan: bool
  advice: str = ""
  milestone: str = ""


@dataclasses.dataclass(frozen=True)
class Review:
  """A replayed episode: the task as the env states it, its steps in order, whether it was won, and whether the env
  ended it (False: it stopped with the env still running, e.g. at the rollout's step budget)."""
  task: str
  steps: Tuple[StepReview, ...]
  won: bool
  done: bool


class Replay(abc.ABC):
  """One episode's env state and its expert; each env subclasses it in its `hindsight.py`.

  task: the task's text. done / won: the env's flags for the state reached. horizon: the most expert steps a look
  ahead takes before it counts the expert as stuck. Subclasses implement `copy`, `expert` and `step`; `advice`
  phrases an expert action for the policy (default: the action, capitalised)."""
  task: str = ""
  done: bool = False
  won: bool = False
  horizon: int = 100

  @abc.abstractmethod
  def copy(self) -> "Replay":
    """An independent replay in the same state (for looking ahead)."""
    raise NotImplementedError

  @abc.abstractmethod
  def expert(self) -> Optional[str]:
    """The expert's action from the current state; None where it has none (no plan, a state it cannot act from)."""
    raise NotImplementedError

  @abc.abstractmethod
  def step(self, action: str) -> Tuple[bool, str]:
    """Plays `action`: (whether the env could act on it, the step's milestone phrase or "")."""
    raise NotImplementedError

  def advice(self, action: str) -> str:
    return action[:1].upper() + action[1:]


def outlook(game: Replay) -> Outlook:
  """How the expert finishes from `game`'s state (on a copy): (wins, steps), or None when it has no action or does
  not finish within `game.horizon` steps."""
  if game.done:
    return game.won, 0
  sim = game.copy()
  for n in range(1, game.horizon + 1):
    action = sim.expert()
    if action is None:
      return None
    sim.step(action)
    if sim.done:
      return sim.won, n
  return None


def kept_plan(action: str, expert: Optional[str], before: Outlook, after: Outlook) -> bool:
  """Whether a step kept to the expert's plan (module docstring): no expert action to compare with, the expert's own
  action, or a winning finish after it that is shorter than before (or a winning one where there was none)."""
  if expert is None or action == expert:
    return True
  if after is None or not after[0]:
    return False
  return before is None or not before[0] or after[1] < before[1]


def replay(game: Replay, actions: Sequence[str]) -> Review:
  """Replays `actions` on `game` (at the task's start state) beside its expert. ReplayError when the env ends the
  episode before the last action, which a rollout never plays past: the actions belong to another task."""
  actions = [str(a) for a in actions]
  steps, before = [], outlook(game)
  for t, action in enumerate(actions):
    if game.done:
      raise ReplayError(f"the replay ended after {t} of {len(actions)} actions: they do not belong to this task")
    expert = game.expert()
    advice = game.advice(expert) if expert is not None else ""
    admissible, milestone = game.step(action)
    if expert is not None and action == expert and before is not None and not game.done:
      after: Outlook = (before[0], max(before[1] - 1, 1))  # the expert is a function of the state: its own path
    else:
      after = outlook(game)
    steps.append(StepReview(action, bool(admissible), expert, kept_plan(action, expert, before, after), advice,
                            milestone))
    before = after
  return Review(game.task, tuple(steps), bool(game.won), bool(game.done))
