"""Per-environment step history, rendered as text for the prompt (verl-agent `SimpleMemory` / `SearchMemory`).

verl-agent puts the history *inside* each step's prompt instead of concatenating turns, so the policy sees only
the last few records. One memory per environment instance; `reset()` it at the start of every episode.

What a record's observation is differs by env, as in verl-agent: ALFWorld/WebShop store the observation the
action was taken in (for step 1 the reset text), Search stores the information returned *after* the action.
Actions are the projected action strings, not the raw responses.
"""
from __future__ import annotations


class SimpleMemory:
  """(observation, action) records; fetch renders `[Observation n: '...', Action n: '...']` lines (ALFWorld/WebShop).

  Step numbers are absolute (1-based over the whole episode), so a truncated window still says which steps it shows.
  """

  def __init__(self):
    self.records: list[tuple[str, str]] = []

  def __len__(self) -> int:
    return len(self.records)

  def reset(self):
    self.records = []

  def store(self, observation: str, action: str):
    self.records.append((observation, action))

  def fetch(self, history_length: int = 2) -> tuple[str, int]:
    """The last `history_length` records as text, and how many were shown (fewer early in the episode).

    `history_length <= 0` shows nothing; verl-agent's `[-0:]` slice would show everything, but it never fetches
    then (it switches to the no-history template instead), so the two agree wherever verl-agent is defined.
    """
    shown = min(max(history_length, 0), len(self.records))
    first = len(self.records) - shown
    lines = [self._line(first + j + 1, obs, act) for j, (obs, act) in enumerate(self.records[first:])]
    return "\n".join(lines), shown

  @staticmethod
  def _line(step: int, observation: str, action: str) -> str:
    return f"[Observation {step}: '{observation}', Action {step}: '{action}']"


class SearchMemory(SimpleMemory):
  """(information, action) records; fetch renders `Step n:{action} {information}\\n` lines joined by '\\n'.

  Each line already ends in a newline and the join adds another, so records are separated by a blank line.
  """

  @staticmethod
  def _line(step: int, observation: str, action: str) -> str:
    return f"Step {step}:{action} {observation}\n"


def make_memory(env: str) -> SimpleMemory:
  """The memory verl-agent pairs with `env` ("alfworld", "webshop" or "search")."""
  kinds = {"alfworld": SimpleMemory, "webshop": SimpleMemory, "search": SearchMemory}
  if env not in kinds:
    raise ValueError(f"unknown env {env!r}; expected one of {sorted(kinds)}")
  return kinds[env]()
