"""OPID's trajectory analyzer (`opid/analysis.py`, methods.md §3.4): an external chat LLM reads each finished
trajectory and writes an episode skill plus skills for at most K critical steps, which become the teacher contexts.

  analyzer = Analyzer(OpenAIBackend(model="gemini-2.5-flash"), max_step_skills=5)
  results = analyzer.analyze([EpisodeRecord(steps, success=False, task=task_description(prompt_0)), ...])
  # each an Analysis or an AnalysisFailure; analyzer.stats counts them

Why the pieces look as they do:
  * The prompt, the JSON-repair prompt and the parse-error messages are OPID's to the byte: the analyzer model only
    sees text, so any drift changes the skills and with them the teacher signal.
  * The parser is OPID's recovery chain, step for step, because a chat model's JSON is often wrapped or sloppy
    (`extract_object`); one repair round (parse_attempts=2) recovers most of the rest. An answer on which OPID's
    parser raises something other than ValueError ends that trajectory's analysis without a repair round, as OPID's
    analyze loop lets it through (`ParseAbort`). One deliberate difference: a null (None) skill or summary is no
    text, where OPID writes str(None) == "None" and would teach the policy the word "None" (`parse_analysis`).
  * Training never waits on a broken analyzer: a backend that keeps failing (5 tries with exponential backoff, as
    OPID's `chat_completion_with_retry`) or an answer that never parses yields an `AnalysisFailure`, and that
    trajectory simply gets no skill signal. `analyze` raises only for bad arguments.
  * `select_critical_steps_by_stats` is OPID's statistical selector: shipped but unused by the paper (its config
    requires the LLM selector); kept as a no-LLM fallback.
"""
from __future__ import annotations

import ast
import dataclasses
import json
import logging
import os
import re
import threading
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np

from agentopd_jax.methods.opid.injection import task_description

logger = logging.getLogger(__name__)

Messages = List[Dict[str, str]]
Backend = Callable[[Messages], str]  # chat messages in, the assistant's text out; any exception is an API failure

EPISODE_SKILL_INSTRUCTIONS = {
    "success": ("Write one episode_skill that extracts the successful trajectory into workflow: the core decision rule "
                "and action ordering that made this trajectory work. "),
    "failure": ("Write one episode_skill that extracts the failed trajectory into avoidance rules: the core mistake "
                "and warning signs that agent should avoid. "),
    "unknown": ("Write one episode_skill distilled from the trajectory. If it succeeded, extract the successful "
                "workflow; if it failed, extract the avoidance rules. "),
}

PROMPT_TEMPLATE = """Analyze the following agent episode and return ONLY valid JSON.

You need to complete all three fields:
1. Write a concise episode_summary.
2. {episode_skill_instruction}
3. Provide concise, action-oriented decision skills for at most {max_skills} critical step(s) from the candidate set \
as entries in step_skills; use the full episode to infer the skill, but phrase each skill as advice the policy can act \
on at that step.

Important constraints:
- Step indexing is 0-based: step 0 is the first step of the trajectory.
- Use the task description together with the episode context to judge progress and mistakes.
- Use the full episode context to identify what each critical step should have done better.
- Each step_skills value should be one short imperative sentence for the policy at that step.
- Write step_skills as policy-facing skills, not as retrospective explanation of the trajectory.
- Return only these top-level fields: episode_summary, episode_skill, step_skills.
- The chosen steps are exactly the keys present in step_skills.

Return format:
{{
  "episode_summary": "string",
  "episode_skill": "string",
  "step_skills": {{
    "0": "skill for step 0",
    "2": "skill for step 2"
  }}
}}

Episode context:
- Task description: {task}
- episode_success: {outcome}
- Candidate step indices: {candidates}
- Interaction trajectory: {trajectory}
"""

REPAIR_TEMPLATE = """{prompt}

The previous answer could not be parsed as the required JSON object.
Parse error: {error}

Previous answer:
{bad_answer}

Return ONLY one valid JSON object with this exact shape:
{{
  "episode_summary": "string",
  "episode_skill": "string",
  "step_skills": {{}}
}}
"""
REPAIR_TAIL_CHARS = 2000

NO_OBJECT = "No JSON object found in OPID analyzer response."
BAD_OBJECT = "Could not parse JSON object in OPID analyzer response: {}"
NO_EPISODE_SKILL = "OPID analyzer response missing required field: episode_skill"


@dataclasses.dataclass(frozen=True)
class StepRecord:
  """One env step as the analyzer reads it: the raw env observation (the anchor observation, not the templated
  prompt), the decoded response, and the discounted return from this step (None: no "Return:" line)."""
  step_index: int
  observation: str
  response: str
  step_return: Optional[float] = None


@dataclasses.dataclass(frozen=True)
class EpisodeRecord:
  """One trajectory: its steps in order, success (None = unknown; OPID's 0/1 floats work too, >= 1.0 is success),
  and the task ("" = look for it in the observations; pass `task_description(first step prompt)` as OPID does)."""
  steps: Tuple[StepRecord, ...]
  success: Optional[bool] = None
  task: str = ""

  def __post_init__(self):
    object.__setattr__(self, "steps", tuple(self.steps))
    if not self.steps:
      raise ValueError("EpisodeRecord.steps: an episode needs at least one step")

  @property
  def candidates(self) -> List[int]:
    """The steps the analyzer may pick: all of them, as in OPID."""
    return [int(s.step_index) for s in self.steps]


@dataclasses.dataclass(frozen=True)
class Analysis:
  """A usable analysis: a non-blank episode skill and the step skills kept (candidate keys, first K, non-blank)."""
  episode_summary: str
  episode_skill: str
  step_skills: Dict[int, str]
  raw: str = ""  # the answer it was parsed from
  null_step_skills: int = 0  # step skills among the first K that were null: dropped (OPID would route "None")


@dataclasses.dataclass(frozen=True)
class AnalysisFailure:
  """No skill for this trajectory: kind "api" (the backend kept failing) or "parse" (no usable JSON)."""
  kind: str
  error: str
  raw: str = ""  # the last answer, for a parse failure


Result = Union[Analysis, AnalysisFailure]


def discounted_returns(rewards: Sequence[float], gamma: float = 0.95) -> List[float]:
  """G_t = r_t + γ G_{t+1} over one trajectory, with verl-agent's own NumPy expressions
  (`compute_step_discounted_returns`) so "Return: %.6f" prints the same digits: float32 values, and under NumPy 2
  (NEP 50) float32 arithmetic too. Under NumPy 1 its running sum was float64, which can move the last float32 bit."""
  values = np.asarray(rewards, dtype=np.float32)
  out = np.zeros_like(values)
  running = 0
  for t in reversed(range(len(values))):
    running = values[t] + gamma * running
    out[t] = running
  return [float(x) for x in out]


def _outcome(success: Optional[float]) -> str:
  """OPID's label: unknown when not known, success when >= 1.0 (True), else failure."""
  return "unknown" if success is None else ("success" if float(success) >= 1.0 else "failure")


def _trajectory(steps: Sequence[StepRecord]) -> str:
  parts = []
  for s in steps:
    ret = "" if s.step_return is None else f"\nReturn: {s.step_return:.6f}"
    parts.append(f"Step {s.step_index}\nObservation: {s.observation}\nResponse: {s.response}{ret}\n")
  return "".join(parts)


def analysis_prompt(episode: EpisodeRecord, max_step_skills: int) -> str:
  """OPID's analyzer prompt (`_build_episode_analysis_prompt`), sent as the single user message."""
  task = " ".join(str(episode.task or "").split())
  if not task:
    task = next((t for t in map(task_description, (s.observation for s in episode.steps)) if t), "")
  candidates = episode.candidates
  return PROMPT_TEMPLATE.format(
      episode_skill_instruction=EPISODE_SKILL_INSTRUCTIONS[_outcome(episode.success)],
      max_skills=min(max(int(max_step_skills), 0), len(candidates)), task=task or "(not available)",
      outcome=_outcome(episode.success), candidates=candidates, trajectory=_trajectory(episode.steps))


def repair_prompt(prompt: str, error: object, bad_answer: str) -> str:
  """The retry prompt after an unusable answer: the original prompt, the error, the answer's last 2000 chars."""
  return REPAIR_TEMPLATE.format(prompt=prompt, error=error, bad_answer=str(bad_answer or "")[-REPAIR_TAIL_CHARS:])


# ------------------------------------------------------------------------------------------------ parsing
_FENCE = re.compile(r"```(?:json|JSON)?\s*(.*?)```", re.DOTALL)
_TRAILING_COMMA = re.compile(r",\s*([}\]])")


class ParseAbort(ValueError):
  """An answer on which OPID's parser raises something other than ValueError (its cause, chained: a TypeError from
  an unhashable Python-literal key, an OverflowError from an infinite step key, a RecursionError or MemoryError
  from deep nesting). OPID's analyze loop catches only ValueError, so there the exception ends that trajectory's
  analysis: no repair round, no skill. The message is the cause's text, which OPID records as the analysis error."""


def _balanced_slices(text: str) -> List[str]:
  """Top-level {...} spans, skipping braces inside '...' or "..." strings (for the Python-literal fallback)."""
  slices, start, depth, quote, escape = [], 0, 0, "", False
  for i, ch in enumerate(text):
    if escape:
      escape = False
    elif quote:
      if ch == "\\":
        escape = True
      elif ch == quote:
        quote = ""
    elif ch in "'\"":
      quote = ch
    elif ch == "{":
      start = i if depth == 0 else start
      depth += 1
    elif ch == "}" and depth > 0:
      depth -= 1
      if depth == 0:
        slices.append(text[start:i + 1])
  return slices


def _decode_objects(text: str) -> Tuple[List[dict], Optional[BaseException]]:
  """Every dict that JSON-decodes from some `{` of `text`; only if there is none, the balanced spans that are
  Python literals (single quotes, True/None, int keys). Returns them and the last error seen.

  Only OPID's errors are skipped: a JSONDecodeError, and a SyntaxError or ValueError from literal_eval. Any other
  exception propagates: a ValueError that is not a decode error (an integer over Python's digit limit) fails the
  whole answer with its own text, and anything else becomes a `ParseAbort` in `parse_analysis`."""
  objects, error = [], None
  decoder = json.JSONDecoder(strict=False)
  for i, ch in enumerate(text):
    if ch == "{":
      try:
        obj, _ = decoder.raw_decode(text, i)
      except json.JSONDecodeError as exc:
        error = exc
        continue
      if isinstance(obj, dict):
        objects.append(obj)
  if objects:
    return objects, error
  for span in _balanced_slices(text):
    try:
      obj = ast.literal_eval(span)
    except (SyntaxError, ValueError) as exc:
      error = exc
      continue
    if isinstance(obj, dict):
      objects.append(obj)
  return objects, error


def extract_object(text: str) -> dict:
  """The answer's object, by OPID's chain: the texts are the fenced blocks, then the whole text; each text is tried
  as it is, then with trailing commas removed (also inside strings, as OPID does); each variant yields every dict
  that decodes from one of its `{` (so the first of several objects, and a complete inner object of a truncated
  answer), or only if none does, its balanced spans that are Python literals. Of all these, in that order, the
  first object holding "episode_skill" is returned, else the first object. ValueError with OPID's messages when
  there is none, chained from the last decode error."""
  text = str(text or "")
  texts = [b.strip() for b in _FENCE.findall(text) if b.strip()] + [text.strip()]
  objects, error = [], None
  for candidate in texts:
    repaired = _TRAILING_COMMA.sub(r"\1", candidate)
    for variant in (candidate,) if repaired == candidate else (candidate, repaired):
      found, err = _decode_objects(variant)
      objects += found
      error = err if err is not None else error
  for obj in objects:
    if "episode_skill" in obj:
      return obj
  if objects:
    return objects[0]
  if not any("{" in t for t in texts):
    raise ValueError(NO_OBJECT)
  raise ValueError(BAD_OBJECT.format(error)) from error


def _text(value: object) -> Optional[str]:
  return None if value is None else str(value)


def parse_analysis(text: str, candidates: Sequence[int], max_step_skills: int) -> Analysis:
  """The analyzer's answer as an Analysis, or ValueError: its message goes into the repair prompt, except for a
  `ParseAbort`, after which OPID sends no repair prompt.

  Every value is read as OPID reads it, str(value) (0 is the skill "0", [] is "[]", false is "False"), except
  null (None): a null episode skill is a missing one (an error, as a blank one: that trajectory would get no
  signal), a null summary is "", and a null step skill is none (counted in `null_step_skills`); OPID writes "None"
  for each. Step keys are cast with int() (keys that are not integers are dropped), kept only if candidates, then
  the first K in answer order; blank and null step skills are dropped after that cut, which routes a blank one
  exactly as OPID (it keeps it but never uses a blank skill)."""
  try:
    obj = extract_object(text)
    raw_steps = obj.get("step_skills", {}) or {}
    steps: Dict[int, Optional[str]] = {}
    if isinstance(raw_steps, dict):
      for key, skill in raw_steps.items():
        try:
          index = int(key)
        except (TypeError, ValueError):
          continue
        steps[index] = _text(skill)
    summary, episode_skill = _text(obj.get("episode_summary", "")), _text(obj.get("episode_skill", ""))
  except ValueError:
    raise
  except Exception as exc:  # what OPID's analyze loop does not catch
    raise ParseAbort(str(exc)) from exc
  if not (episode_skill or "").strip():
    raise ValueError(NO_EPISODE_SKILL)
  allowed = set(int(c) for c in candidates)
  kept = [(k, v) for k, v in steps.items() if k in allowed][:max(int(max_step_skills), 0)]
  return Analysis(summary or "", episode_skill, {k: v for k, v in kept if v is not None and v.strip()},
                  raw=str(text or ""), null_step_skills=sum(v is None for _, v in kept))


def failure_text(error: BaseException) -> str:
  """A parse error as a failure records and logs it: its message, and the type of the exception it was raised
  from (the decode error behind OPID's "Could not parse" message, the cause of a `ParseAbort`)."""
  cause = error.__cause__
  return str(error) if cause is None else f"{error} [{type(cause).__name__}]"


# ------------------------------------------------------------------------------------------------ the analyzer
class Analyzer:
  """Analyses episodes concurrently with a backend; never raises for a backend or parse failure.

  Per episode: up to `parse_attempts` answers (the first from the prompt, each later one from the repair prompt
  of the previous answer); each answer takes up to `api_retries` calls, sleeping retry_delay·backoff^i (at most
  max_delay) between them. A blank answer counts as a failed call, as in OPID. An unusable answer is logged as a
  warning (as OPID logs it) with `failure_text`; a `ParseAbort` ends the episode's analysis at once, as in OPID.
  `stats` holds the counts of the last `analyze` call: episodes, analysed, parse_failures, api_failures, api_calls,
  api_errors, repairs, null_step_skills (`Analysis.null_step_skills` summed), latency_s (so run one `analyze` at a
  time, e.g. from the trainer's single async worker)."""

  def __init__(self, backend: Backend, max_step_skills: int, parse_attempts: int = 2, api_retries: int = 5,
               retry_delay: float = 1.0, backoff: float = 2.0, max_delay: float = 30.0, workers: int = 128,
               sleep: Callable[[float], None] = time.sleep):
    for field, value, low in (("max_step_skills", max_step_skills, 0), ("parse_attempts", parse_attempts, 1),
                              ("api_retries", api_retries, 1), ("workers", workers, 1)):
      if int(value) != value or value < low:
        raise ValueError(f"opid.{field} must be an integer >= {low}, got {value!r}")
    if retry_delay < 0 or backoff < 1 or max_delay < 0:
      raise ValueError(f"opid.retry_delay/backoff/max_delay must be >= 0 / >= 1 / >= 0, got {retry_delay!r}, "
                       f"{backoff!r}, {max_delay!r}")
    self.backend, self.max_step_skills = backend, int(max_step_skills)
    self.parse_attempts, self.api_retries, self.workers = int(parse_attempts), int(api_retries), int(workers)
    self.retry_delay, self.backoff, self.max_delay, self.sleep = retry_delay, backoff, max_delay, sleep
    self._lock = threading.Lock()
    self.stats: Dict[str, float] = self._zero_stats()

  @staticmethod
  def _zero_stats() -> Dict[str, float]:
    return dict(episodes=0, analysed=0, parse_failures=0, api_failures=0, api_calls=0, api_errors=0, repairs=0,
                null_step_skills=0, latency_s=0.0)

  def _count(self, **deltas) -> None:
    with self._lock:
      for key, delta in deltas.items():
        self.stats[key] += delta

  def _complete(self, prompt: str) -> str:
    """The backend's answer, retried with backoff; the last error propagates once the tries are spent."""
    for attempt in range(self.api_retries):
      self._count(api_calls=1)
      try:
        text = self.backend([{"role": "user", "content": prompt}])
        if not str(text or "").strip():
          raise ValueError("Empty response from model.")
        return str(text)
      except Exception:
        self._count(api_errors=1)
        if attempt == self.api_retries - 1:
          raise
        self.sleep(min(self.max_delay, self.retry_delay * self.backoff ** attempt))
    raise AssertionError("unreachable")

  def analyze_one(self, episode: EpisodeRecord) -> Result:
    prompt = analysis_prompt(episode, self.max_step_skills)
    answer, error = "", None
    for attempt in range(self.parse_attempts):
      if attempt:
        self._count(repairs=1)
      try:
        answer = self._complete(prompt if attempt == 0 else repair_prompt(prompt, error, answer))
      except Exception as exc:
        self._count(api_failures=1)
        return AnalysisFailure("api", f"{type(exc).__name__}: {exc}")
      try:
        result = parse_analysis(answer, episode.candidates, self.max_step_skills)
      except ValueError as exc:
        error = exc
        logger.warning("OPID analyzer JSON parse failed on attempt %s/%s: %s", attempt + 1, self.parse_attempts,
                       failure_text(exc))
        if isinstance(exc, ParseAbort):
          break
        continue
      self._count(analysed=1, null_step_skills=result.null_step_skills)
      return result
    self._count(parse_failures=1)
    logger.warning("OPID analyzer gave no usable answer; skipping teacher skill for this trajectory: %s",
                   failure_text(error))
    return AnalysisFailure("parse", failure_text(error), raw=answer)

  def analyze(self, episodes: Sequence[EpisodeRecord]) -> List[Result]:
    """One result per episode, in order; `stats` is reset to this call's counts."""
    episodes = list(episodes)
    start = time.perf_counter()
    with self._lock:
      self.stats = self._zero_stats()
      self.stats["episodes"] = len(episodes)
    if not episodes:
      return []
    with ThreadPoolExecutor(max_workers=min(self.workers, len(episodes)), thread_name_prefix="opid-analysis") as pool:
      results = list(pool.map(self.analyze_one, episodes))
    self._count(latency_s=time.perf_counter() - start)
    return results


class OpenAIBackend:
  """An OpenAI-compatible chat endpoint (the official `openai` client, imported here so the package does not need
  it). Key: `api_key` or $OPENAI_API_KEY (a local server takes any string, e.g. "EMPTY"); base URL: `base_url` or
  $OPENAI_BASE_URL, else OpenAI's. The client never retries itself: the Analyzer does. Like OPID, a reply's
  `reasoning_content` (if any) comes first, joined to the content by a newline."""

  def __init__(self, model: str, base_url: Optional[str] = None, api_key: Optional[str] = None,
               timeout: float = 600.0, max_completion_tokens: Optional[int] = 4096,
               temperature: Optional[float] = None):
    from openai import OpenAI

    if not model:
      raise ValueError("opid.analyzer_model: no model name given")
    key = api_key or os.environ.get("OPENAI_API_KEY")
    if not key:
      raise ValueError('opid.analyzer "openai": no API key: set $OPENAI_API_KEY ("EMPTY" for a server that needs '
                       'none)')
    if timeout is None or timeout <= 0:
      raise ValueError(f"opid.analyzer_timeout must be > 0 seconds, got {timeout!r}")
    self.model, self.max_completion_tokens, self.temperature = model, max_completion_tokens, temperature
    self.client = OpenAI(api_key=key, base_url=base_url or os.environ.get("OPENAI_BASE_URL") or None,
                         timeout=timeout, max_retries=0)

  def __call__(self, messages: Messages) -> str:
    request = dict(model=self.model, messages=messages)
    if self.max_completion_tokens is not None:
      request["max_completion_tokens"] = self.max_completion_tokens
    if self.temperature is not None:
      request["temperature"] = self.temperature
    response = self.client.chat.completions.create(**request)
    choices = getattr(response, "choices", None)
    message = getattr(choices[0], "message", None) if choices else None
    if message is None:
      return ""
    parts = [getattr(message, "reasoning_content", None), _content_text(getattr(message, "content", None))]
    return "\n".join(str(p) for p in parts if p)


def _content_text(content: object) -> str:
  """A message's content as text: a string, or OPID's reading of a list of parts (text parts, "content" fields)."""
  if content is None or isinstance(content, str):
    return content or ""
  if not isinstance(content, (list, tuple)):
    return str(content)
  parts = []
  for part in content:
    if not isinstance(part, dict):
      parts.append(str(part))
    elif part.get("type") == "text" and "text" in part:
      parts.append(str(part["text"]))
    elif "content" in part:
      parts.append(str(part["content"]))
  return "\n".join(p for p in parts if p)


# ------------------------------------------------------------------------------------------------ stats selector
def select_critical_steps_by_stats(returns: Sequence[float], observations: Sequence[object], groups: Sequence[object],
                                   trajs: Sequence[object], topk_per_traj: int = 1, min_group_size: int = 2,
                                   var_quantile: float = 0.75, below_mean_only: bool = True
                                   ) -> Tuple[np.ndarray, Dict[str, float]]:
  """OPID's unused no-LLM selector, one entry per step sample (any order): a boolean mask of critical steps and
  metrics (num_groups, eligible_groups, selected_steps, variance_cutoff).

  Steps of one task group (`groups`) with the same observation form a step group (GiGPO `build_step_group`,
  exact match). Groups of size >= min_group_size with population variance (float32) >= the `var_quantile`
  quantile (linear) of those groups' variances, and > 0, are eligible; a step in one scores var·(dev + 1e-6),
  dev = max(mean − return, 0) (steps at or above the mean are skipped) or |return − mean| with
  below_mean_only=False. Each trajectory keeps its top `topk_per_traj` scores; ties go to the later step."""
  n = len(returns)
  if not len(observations) == len(groups) == len(trajs) == n:
    raise ValueError(f"select_critical_steps_by_stats: returns ({n}), observations ({len(observations)}), groups "
                     f"({len(groups)}) and trajs ({len(trajs)}) must have equal lengths")
  if topk_per_traj <= 0 or n == 0:
    return np.zeros(n, dtype=bool), {"num_groups": 0.0, "eligible_groups": 0.0, "selected_steps": 0.0}
  rewards = np.asarray(returns, dtype=np.float32)
  members: Dict[tuple, List[int]] = defaultdict(list)
  counters: Dict[object, int] = defaultdict(int)
  step_index = np.zeros(n, dtype=np.int64)
  for i in range(n):
    members[(groups[i], _hashable(observations[i]))].append(i)
    step_index[i] = counters[trajs[i]]
    counters[trajs[i]] += 1
  stats = {g: (float(np.mean(rewards[ix])), float(np.var(rewards[ix])), len(ix)) for g, ix in members.items()}
  sized = [var for _, var, size in stats.values() if size >= min_group_size]
  cutoff = (float(np.quantile(np.asarray(sized, dtype=np.float32), min(max(var_quantile, 0.0), 1.0)))
            if sized else float("inf"))
  eligible = {g for g, (_, var, size) in stats.items() if size >= min_group_size and var >= cutoff and var > 0.0}
  scores = np.zeros(n, dtype=np.float32)
  by_traj: Dict[object, List[int]] = defaultdict(list)
  for g in eligible:
    mean, var, _ = stats[g]
    for i in members[g]:
      dev = max(mean - rewards[i], 0.0) if below_mean_only else abs(rewards[i] - mean)  # OPID's NumPy expressions
      if below_mean_only and dev <= 0.0:
        continue
      scores[i] = var * (dev + 1e-6)
      by_traj[trajs[i]].append(i)
  mask = np.zeros(n, dtype=bool)
  for ix in by_traj.values():
    mask[sorted(ix, key=lambda i: (scores[i], step_index[i]), reverse=True)[:topk_per_traj]] = True
  return mask, {"num_groups": float(len(members)), "eligible_groups": float(len(eligible)),
                "selected_steps": float(mask.sum()), "variance_cutoff": cutoff if np.isfinite(cutoff) else 0.0}


def _hashable(x: object) -> object:
  """GiGPO's `to_hashable`: observations are grouped by value."""
  if isinstance(x, np.ndarray):
    return tuple(x.flatten().tolist())
  if isinstance(x, (list, tuple)):
    return tuple(_hashable(e) for e in x)
  if isinstance(x, dict):
    return tuple(sorted((k, _hashable(v)) for k, v in x.items()))
  return x.item() if isinstance(x, np.generic) else x
