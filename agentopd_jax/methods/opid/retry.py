"""Does a policy read OPID's skills? A hindsight retry of the validation panel (`evaluate.py --opid_hindsight`).

OPID's advantage is the log-prob shift that the analyzer's skill causes, so it carries signal only for a policy whose
behaviour the skill text changes. The check, Skill-Prompt style, asks it of success: every panel episode is played
once plainly, the oracle analyzer reviews it (a workflow when it was won, an avoidance rule when it was lost), and
the episode is played again with that episode skill spliced into every prompt where OPID's router puts it
(`injection.augment_observation`, after the task line). The second play draws the first play's random numbers, so
without the skill it would be the first play token for token: the paired difference per problem is the skill's
effect alone. Step skills are judged at the step of the play they were written for, which a second play does not
revisit, so the retry carries the episode skill only (OPID routes it to every step without a step skill).
"""
from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from agentopd_jax.eval.compare import paired_ci
from agentopd_jax.methods.opid.analysis import Analysis
from agentopd_jax.methods.opid.injection import OPID_ANCHORS, Anchors, augment_observation
from agentopd_jax.methods.opid.oracle import OracleAnalyzer, OracleEpisode
from agentopd_jax.rollout.engine import PromptContext


def hindsight_skills(traces: Sequence[Dict], tasks: Sequence[Any], analyzer: OracleAnalyzer,
                     project: Callable[[str], Tuple[str, int]]) -> List[Optional[str]]:
  """Per episode of `traces` (`validate`'s, one per task of `tasks` in order): the oracle's episode skill for it, or
  None where there is none (no step played, a failed review)."""
  if len(traces) != len(tasks):
    raise ValueError(f"hindsight_skills: {len(traces)} traces for {len(tasks)} tasks")
  played = [i for i, t in enumerate(traces) if t["steps"] and not t.get("error")]
  results = analyzer.analyze([OracleEpisode.from_responses(tasks[i], [s["reply"] for s in traces[i]["steps"]],
                                                           project, success=bool(traces[i]["won"]))
                              for i in played])
  skills: List[Optional[str]] = [None] * len(traces)
  for i, result in zip(played, results):
    if isinstance(result, Analysis) and str(result.episode_skill or "").strip():
      skills[i] = result.episode_skill
  return skills


def retry_context(skills: Sequence[Optional[str]], anchors: Anchors = OPID_ANCHORS) -> PromptContext:
  """Every prompt of episode e with `skills[e]` spliced in as OPID's episode skill at `anchors` (the env's prompt
  format's, as training splices it; unchanged where the skill is None)."""
  def rewrite(episode: int, text: str) -> str:
    skill = skills[episode]
    return augment_observation(text, episode_skill=skill, anchors=anchors) if skill else text
  return PromptContext(rewrite=rewrite)


def retry_summary(first: Sequence[Dict], second: Sequence[Dict], skills: Sequence[Optional[str]]) -> Dict[str, Any]:
  """Success without and with the skill (percent), overall and by the first play's outcome; the paired difference
  over panel problems with its 95 % t interval; the number of episodes without a skill (they replay unchanged); and
  per problem the second play's [successes, attempts] (`outcomes`; the first play's are the report's own)."""
  def rate(eps: Sequence[int], plays: Sequence[Dict]) -> Optional[float]:
    return 100.0 * sum(bool(plays[i]["won"]) for i in eps) / len(eps) if eps else None

  everything = range(len(first))
  out: Dict[str, Any] = {"episodes": len(first), "without_skill": sum(s is None for s in skills),
                         "success_without": rate(everything, first), "success_with": rate(everything, second)}
  for name, won in (("first_won", True), ("first_lost", False)):
    eps = [i for i in everything if bool(first[i]["won"]) == won]
    out[name] = {"episodes": len(eps), "success_without": rate(eps, first), "success_with": rate(eps, second)}
  by_problem: Dict[str, List[int]] = {}
  for i in everything:
    by_problem.setdefault(str(first[i]["problem"]), []).append(i)
  diffs = [rate(eps, second) - rate(eps, first) for eps in by_problem.values()]
  mean, low, high = paired_ci(diffs)
  # None, not nan, where one problem gives no interval (reports are strict JSON)
  out["paired_difference"] = {"problems": len(diffs), "mean": mean,
                              "ci95": [None if b != b else b for b in (low, high)]}
  out["outcomes"] = {p: [sum(bool(second[i]["won"]) for i in eps), len(eps)] for p, eps in sorted(by_problem.items())}
  return out
