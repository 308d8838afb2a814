"""OPID's oracle analyzer: skills from replaying an episode beside the env's expert, for the built-in envs, offline
and deterministic (no LLM), in place of `analysis.Analyzer`.

  analyzer = OracleAnalyzer(c.env.name, c.env, max_step_skills=5)
  results = analyzer.analyze([OracleEpisode(task, actions, valid, success), ...])   # one per trajectory
  # each an analysis.Analysis or an AnalysisFailure(kind="oracle"), as `Analyzer.analyze` returns them

Per episode the env's `EnvSpec.hindsight` replays the executed actions from the task's start state beside its expert
(`envs.hindsight.Review`); this module only turns that review into OPID's three fields, so it names no env:
  * step_skills: at the earliest steps that left the expert's plan or were malformed (candidates only, at most K),
    one imperative sentence built around the expert's action from that state: 'Go to countertop 1 next: "go to
    drawer 3" does not move toward the goal.' The earliest, because that is where the episode went wrong; later ones
    often follow from it.
  * episode_skill: on success a workflow, the order of the milestones (take, put, search, buy, ...) its on-plan steps
    reached; on failure an avoidance rule, the most repeated mistake (else the first) and the expert's action instead.
  * episode_summary: outcome, length, where the plan was left, malformed and unavailable actions.
Templates are fixed strings, so the same episode always gives the same text. A replay that raises, or that disagrees
with the rollout (ends before the last action, another outcome), is an `AnalysisFailure`: a skill about a different
episode than the one played would teach the wrong thing. `analyze` raises only for bad arguments.
"""
from __future__ import annotations

import dataclasses
import json
import time
from collections import Counter
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from agentopd_jax.envs.hindsight import Review, StepReview
from agentopd_jax.methods.opid.analysis import Analysis, AnalysisFailure, Result

MAX_QUOTE = 80  # characters of a policy action quoted in a skill (an invalid reply projects to its tail)
MAX_MILESTONES = 8  # a longer workflow keeps its first 4 and last 3 milestones around "..."


@dataclasses.dataclass(frozen=True)
class OracleEpisode:
  """One trajectory for the oracle: the env task it played (as the rollout got it: a game file, a goal index, a
  SearchTask), the env actions it executed in step order (`Sample.action`, i.e. `text_env.project(response)[0]`), the
  projection's validity flag per step (`Sample.action_valid`; () = all valid), the rollout's outcome (`Sample.won`;
  None = not checked) and the step indices that may get a step skill (None = all, OPID's candidate set)."""
  task: Any
  actions: Tuple[str, ...]
  valid: Tuple[bool, ...] = ()
  success: Optional[bool] = None
  candidates: Optional[Tuple[int, ...]] = None

  def __post_init__(self):
    object.__setattr__(self, "actions", tuple(str(a) for a in self.actions))
    object.__setattr__(self, "valid", tuple(bool(v) for v in self.valid))
    if self.candidates is not None:
      object.__setattr__(self, "candidates", tuple(int(c) for c in self.candidates))
    if not self.actions:
      raise ValueError("OracleEpisode.actions: an episode needs at least one action")
    if self.valid and len(self.valid) != len(self.actions):
      raise ValueError(f"OracleEpisode.valid: {len(self.valid)} flags for {len(self.actions)} actions")

  @classmethod
  def from_responses(cls, task: Any, responses: Sequence[str], project: Callable[[str], Tuple[str, int]],
                     success: Optional[bool] = None, candidates: Optional[Sequence[int]] = None) -> "OracleEpisode":
    """From the decoded replies, projected as the rollout projected them: `project` is the run's text env's
    (`engine.text_env_factory().project`; its prompt options decide the projection)."""
    pairs = [project(r) for r in responses]
    return cls(task, tuple(a for a, _ in pairs), tuple(bool(v) for _, v in pairs), success,
               None if candidates is None else tuple(candidates))


# ------------------------------------------------------------------------------------------------ the texts
def _quote(action: str) -> str:
  text = " ".join(action.split())
  if not text:
    return "an empty action"
  return '"' + (text if len(text) <= MAX_QUOTE else text[:MAX_QUOTE - 3] + "...") + '"'


def _lower_first(text: str) -> str:
  return text[:1].lower() + text[1:]


def _mistakes(review: Review, valid: Sequence[bool]) -> List[int]:
  """Steps where the expert had an action to offer and the policy left its plan or replied malformed (which costs
  the invalid-action penalty even when the env could act on it), in order."""
  return [t for t, s in enumerate(review.steps) if s.expert_action is not None and not (s.on_plan and valid[t])]


_WHY = {"malformed": "was not a well-formed action", "unavailable": "is not an available action here",
        "repeated": "was tried before and again made no progress", "detour": "does not move toward the goal"}
_WHY_SHORT = {"malformed": "malformed", "unavailable": "not available there", "detour": "no progress toward the goal"}


def _fault(step: StepReview, valid: bool, repeated: bool) -> str:
  """What was wrong with a mistaken step, most basic first."""
  if not valid:
    return "malformed"
  if not step.admissible:
    return "unavailable"
  return "repeated" if repeated else "detour"


def _what_went_wrong(step: StepReview, fault: str) -> str:
  return "the reply held no action" if not step.action.strip() else f"{_quote(step.action)} {_WHY[fault]}"


def step_skills(review: Review, valid: Sequence[bool], candidates: Sequence[int], max_step_skills: int
                ) -> Dict[int, str]:
  """The first `max_step_skills` mistakes among `candidates`: '<expert advice> next: "<action>" <why>.'"""
  allowed, seen, skills = set(candidates), set(), {}
  for t in _mistakes(review, valid):
    step = review.steps[t]
    if t in allowed and len(skills) < max_step_skills:
      skills[t] = f"{step.advice} next: {_what_went_wrong(step, _fault(step, valid[t], step.action in seen))}."
    seen.add(step.action)
  return skills


def _workflow(review: Review) -> str:
  milestones: List[str] = []
  for s in review.steps:
    if s.on_plan and s.milestone and (not milestones or milestones[-1] != s.milestone):
      milestones.append(s.milestone)
  if not milestones:
    milestones = [s.action for s in review.steps if s.on_plan] or [review.steps[-1].action]
  if len(milestones) > MAX_MILESTONES:
    milestones = milestones[:4] + ["..."] + milestones[-3:]
  detours = sum(not s.on_plan for s in review.steps)
  verdict = "was a detour; skip it" if detours == 1 else "were detours; skip them"
  tail = f" {detours} of {len(review.steps)} steps {verdict}." if detours else ""
  return f"Workflow that completed the task: {' -> '.join(milestones)}.{tail}"


def _avoidance(review: Review, valid: Sequence[bool]) -> str:
  mistakes = _mistakes(review, valid)
  if mistakes:
    counts = Counter(review.steps[t].action for t in mistakes)
    action = max(counts, key=lambda a: (counts[a], -min(t for t in mistakes if review.steps[t].action == a)))
    first = min(t for t in mistakes if review.steps[t].action == action)
    step, n = review.steps[first], counts[action]
    instead = _lower_first(step.advice)
    fault = _fault(step, valid[first], False)
    if n > 1 and fault == "malformed":
      return f"Avoid repeating {_quote(action)}: it was malformed {n} times; instead, {instead}."
    if n > 1:
      return (f"Avoid repeating {_quote(action)}: it was tried {n} times and never moved toward the goal; instead, "
              f"{instead}.")
    return f"Avoid {_quote(action)} ({_WHY_SHORT[fault]}); instead, {instead}."
  if not review.done:
    return (f"Avoid running out of steps: after {len(review.steps)} steps the task was still unfinished; head for "
            f"the goal directly and do not stop short.")
  return (f"Avoid ending the episode before the task is met: the final {_quote(review.steps[-1].action)} did not "
          f"complete it; check every requirement before the final action.")


def episode_skill(review: Review, valid: Sequence[bool]) -> str:
  """A workflow on success, an avoidance rule on failure."""
  return _workflow(review) if review.won else _avoidance(review, valid)


def episode_summary(review: Review, valid: Sequence[bool]) -> str:
  n = len(review.steps)
  left = [t for t, s in enumerate(review.steps) if not s.on_plan]
  where = f"{len(left)} step(s) left the expert's plan (first at step {left[0]})" if left else \
      "every step kept to the expert's plan"
  malformed = sum(not v for v in valid)
  unavailable = sum(v and not s.admissible for v, s in zip(valid, review.steps))
  outcome = "Succeeded" if review.won else "Failed"
  return (f"{outcome} after {n} step(s) on the task \"{review.task}\": {where}; {malformed} malformed and "
          f"{unavailable} unavailable action(s).")


def review_json(review: Review, valid: Sequence[bool]) -> str:
  """The review as JSON (`Analysis.raw`, for logs)."""
  steps = [dict(dataclasses.asdict(s), valid=bool(v)) for s, v in zip(review.steps, valid)]
  return json.dumps({"task": review.task, "won": review.won, "done": review.done, "steps": steps}, sort_keys=True)


def analysis_of(review: Review, valid: Sequence[bool], candidates: Sequence[int], max_step_skills: int) -> Analysis:
  """OPID's three fields from a review (`valid`: the projection's flags, one per step)."""
  valid = list(valid) or [True] * len(review.steps)
  return Analysis(episode_summary(review, valid), episode_skill(review, valid),
                  step_skills(review, valid, candidates, max_step_skills), raw=review_json(review, valid))


# ------------------------------------------------------------------------------------------------ the analyzer
class OracleAnalyzer:
  """`Analyzer`'s interface over the env's hindsight review instead of an LLM; never raises for a failed replay.

  Replays are CPU-bound Python and fast (milliseconds per episode), so they run one after another in the calling
  thread. `stats` holds the counts of the last `analyze` call in `Analyzer.stats`' keys: episodes, analysed,
  parse_failures (always 0), api_failures (episodes without an analysis: the replay raised or disagreed with the
  rollout; the replay is this analyzer's backend), api_calls (replays run), api_errors (replays that raised),
  repairs and null_step_skills (always 0) and latency_s (so run one `analyze` at a time, as with `Analyzer`)."""

  def __init__(self, env_name: str, env_cfg, max_step_skills: int):
    from agentopd_jax.envs import registry

    if int(max_step_skills) != max_step_skills or max_step_skills < 0:
      raise ValueError(f"opid.max_step_skills must be an integer >= 0, got {max_step_skills!r}")
    spec = registry.get(env_name)
    if spec.hindsight is None:
      raise ValueError(f"opid.analyzer: env {env_name!r} has no oracle (its EnvSpec.hindsight is None); use the LLM "
                       f"analyzer")
    self.env_name, self.max_step_skills = env_name, int(max_step_skills)
    self.review = spec.hindsight(env_cfg)
    self.stats: Dict[str, float] = self._zero_stats()

  @staticmethod
  def _zero_stats() -> Dict[str, float]:
    return dict(episodes=0, analysed=0, parse_failures=0, api_failures=0, api_calls=0, api_errors=0, repairs=0,
                null_step_skills=0, latency_s=0.0)

  def analyze_one(self, episode: OracleEpisode) -> Result:
    self.stats["api_calls"] += 1
    try:
      review = self.review(episode.task, episode.actions)
    except Exception as exc:  # a broken task or env: this trajectory gets no skill, training goes on
      self.stats["api_errors"] += 1
      self.stats["api_failures"] += 1
      return AnalysisFailure("oracle", f"{type(exc).__name__}: {exc}")
    if episode.success is not None and bool(episode.success) != review.won:
      self.stats["api_failures"] += 1
      return AnalysisFailure("oracle", f"the replay {'won' if review.won else 'did not win'} but the rollout "
                                       f"{'won' if episode.success else 'did not'}: it is not the episode played")
    candidates = range(len(episode.actions)) if episode.candidates is None else episode.candidates
    self.stats["analysed"] += 1
    return analysis_of(review, episode.valid, candidates, self.max_step_skills)

  def analyze(self, episodes: Sequence[OracleEpisode]) -> List[Result]:
    """One result per episode, in order; `stats` is reset to this call's counts."""
    episodes = list(episodes)
    for i, episode in enumerate(episodes):
      if not isinstance(episode, OracleEpisode):
        raise TypeError(f"OracleAnalyzer.analyze: episode {i} is a {type(episode).__name__}, not an OracleEpisode")
    start = time.perf_counter()
    self.stats = self._zero_stats()
    self.stats["episodes"] = len(episodes)
    results = [self.analyze_one(e) for e in episodes]
    self.stats["latency_s"] = time.perf_counter() - start
    return results
