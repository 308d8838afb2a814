"""Env rewards as verl-agent defines them, and the per-step invalid-action penalty (environments.md §2.4, 4.3, 4.7).

Only full success is rewarded (ALFWorld 10·won, WebShop 10 only for a perfect purchase, Search exact match), so
GRPO compares episodes by outcome; the small penalty for malformed steps is what teaches the output format early.
"""
from __future__ import annotations

import re
import string
from collections.abc import Sequence

from agentopd_jax.envs.tags import Blocks

WIN_REWARD = 10.0
# Coefficients in verl-agent's shipped run scripts (the yaml default is 0.1).
INVALID_ACTION_PENALTY_COEF = {"alfworld": 0.1, "webshop": 0.1, "search": 0.01}

_ANSWER = Blocks("answer")
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = frozenset(string.punctuation)


def alfworld_reward(won: bool) -> float:
  """10 for a won step, else 0 (text env; the THOR env's goal-condition bonus does not apply)."""
  return WIN_REWARD * float(won)


def webshop_reward(score: float, done: bool) -> tuple[float, bool]:
  """(reward, won): 10 only when the episode ends with a perfect purchase; partial scores earn nothing.

  `score` is WebShop's own reward in [0, 1] (kept by verl-agent as `task_score`).
  """
  won = bool(done) and score == 1.0
  return (WIN_REWARD if won else 0.0), won


def normalize_answer(text: str) -> str:
  """Search-R1 normalisation: lower-case, drop ASCII punctuation, drop a/an/the, collapse whitespace."""
  text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
  return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(prediction: str, golden_answers: str | Sequence[str]) -> float:
  """1.0 if the normalised prediction equals any normalised golden answer, else 0.0."""
  golden = [golden_answers] if isinstance(golden_answers, str) else golden_answers
  target = normalize_answer(prediction)
  return float(any(normalize_answer(g) == target for g in golden))


def search_reward(history: str, golden_answers: str | Sequence[str], done: bool) -> tuple[float, bool]:
  """(reward, won) for a Search step: at the end of the episode, exact match of the *last* `<answer>` in `history`
  (all projected actions and observations concatenated, as SkyRL-gym's SearchEnv scores); 0 before the end.
  """
  answers = _ANSWER.findall(history) if done else []
  reward = exact_match(answers[-1].strip(), golden_answers) if answers else 0.0
  return reward, reward >= 1.0


def apply_invalid_action_penalty(scores: Sequence[float], valids: Sequence[int], coef: float = 0.1) -> list[float]:
  """Per step sample: score − coef·(1 − valid). verl-agent subtracts this at the response's last token."""
  if len(scores) != len(valids):
    raise ValueError(f"{len(scores)} scores but {len(valids)} validity flags")
  return [float(s) - coef * (1.0 - float(v)) for s, v in zip(scores, valids)]
