"""Search-R1's answer scoring (`verl/utils/reward_score/qa_em.py`), on top of the shared `normalize_answer`/EM.

`normalize_answer` and `exact_match` (= Search-R1's `em_check`) live in `verl_agent.rewards`, which verl-agent's
search reward also uses; this module adds Search-R1's whole-sequence extraction and the sub-string EM variant
(`subem_check`, `compute_score_subem`), which Search-R1 reports beside EM: a golden answer inside a longer answer
("Paris, France" for "Paris") counts.
"""
from __future__ import annotations

from typing import Mapping, Optional, Sequence, Union

from agentopd_jax.envs.tags import Blocks
from agentopd_jax.envs.verl_agent.rewards import exact_match, normalize_answer

__all__ = ["compute_score_em", "compute_score_subem", "exact_match", "extract_solution", "last_answer",
           "normalize_answer", "subem_check"]

_ANSWER = Blocks("answer")


def extract_solution(solution_str: str) -> Optional[str]:
  """The last `<answer>` of a whole sequence, or None when it has at most one match. Search-R1 scores prompt +
  response, and its prefix already holds two matches (`<answer> and </answer>`, `<answer> Beijing </answer>`), so an
  answer-less response extracts "Beijing" there; kept as upstream."""
  matches = _ANSWER.findall(solution_str)
  return matches[-1].strip() if len(matches) > 1 else None


def last_answer(text: str) -> Optional[str]:
  """The last `<answer>` of `text`, stripped, or None: what verl-agent's search reward scores in an episode's joined
  actions and observations."""
  matches = _ANSWER.findall(text)
  return matches[-1].strip() if matches else None


def _score(check, solution_str: str, ground_truth: Mapping[str, Union[str, Sequence[str]]], format_score: float,
           score: float) -> float:
  answer = extract_solution(solution_str)
  if answer is None:
    return 0.0
  return score if check(answer, ground_truth["target"]) else format_score


def compute_score_em(solution_str: str, ground_truth: Mapping[str, Union[str, Sequence[str]]],
                     format_score: float = 0.0, score: float = 1.0) -> float:
  """`score` if the extracted answer matches `ground_truth["target"]`, `format_score` if it does not, 0 if none."""
  return _score(exact_match, solution_str, ground_truth, format_score, score)


def compute_score_subem(solution_str: str, ground_truth: Mapping[str, Union[str, Sequence[str]]],
                        format_score: float = 0.0, score: float = 1.0) -> float:
  """`compute_score_em` with `subem_check`: `score` if a golden answer is inside the extracted answer."""
  return _score(subem_check, solution_str, ground_truth, format_score, score)


def subem_check(prediction: str, golden_answers: Union[str, Sequence[str]]) -> float:
  """1.0 if some normalised golden answer is a substring of the normalised prediction."""
  golden = [golden_answers] if isinstance(golden_answers, str) else golden_answers
  target = normalize_answer(prediction)
  return float(any(normalize_answer(g) in target for g in golden))
