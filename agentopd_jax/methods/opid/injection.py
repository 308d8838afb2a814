"""OPID's skill injection and critical-first routing (`opid/prompting.py`, methods.md §3.1 item 3 and §3.4).

The teacher of OPID is the rollout policy itself reading a different prompt: the step's own prompt text (before
templating, history included) with the analyzer's skill spliced in. The splice points and section texts are the
authors' to the byte, because Δ = log π(y | ĥ) − log π(y | h) is measured on exactly this text:

  episode skill   right after the task line, else before "Now it's your turn to"/"Now it's your turn", else appended
  step skill      right before "Now it's your turn to"/"Now it's your turn", else appended

Those anchors are the ones verl-agent's templates have. A prompt template without them (our compact ones) names its
own (`Anchors.of(text_env.prompt_anchors)`): its task line and its reply instruction take the same places, so the
sections sit where OPID puts them on every step, not inside the history or after the reply instruction.

`route` decides which of the two prompts a step sample is scored under (`step_priority`: a critical step gets only
its step skill; `additive`: it gets both). A failed analysis routes nothing, so that trajectory gets no skill signal.
"""
from __future__ import annotations

import dataclasses
import re
from typing import Optional, Sequence, Tuple

ROUTES = ("step_priority", "additive")
TURN_ANCHORS = ("Now it's your turn to", "Now it's your turn")

# What the analyzer is told the task is (`opid/analysis.py::_TASK_DESCRIPTION_PATTERNS`): case-insensitive, first
# pattern in this order whose match is not blank.
TASK_PATTERNS = tuple(re.compile(p, re.IGNORECASE | re.DOTALL) for p in (
    r"Your task is to:\s*(.+?)(?:\n|$)", r"Your task is:\s*(.+?)(?:\n|$)", r"Your current task is:\s*(.+?)(?:\n|$)",
    r"Your question:\s*(.+?)(?:\n|$)"))
# Where the episode skill goes (`build_augmented_observation_text`): a different list, case-sensitive and in another
# order. `\s*` may cross a newline, so a task line ending in "to:" takes the next line with it, as in OPID.
TASK_LINE_PATTERNS = tuple(re.compile(p, re.MULTILINE) for p in (
    r"^.*\bYour task is to:\s*.*(?:\n|$)", r"^.*\bYour current task is:\s*.*(?:\n|$)",
    r"^.*\bYour task is:\s*.*(?:\n|$)", r"^.*\bYour question:\s*.*(?:\n|$)"))

EPISODE_SECTION = ("Episode-Level Skill",
                   "Refer to this episode-level skill when deciding what action to take in the current episode")
STEP_SECTION = ("Critical-Step Skill", "Use this current-step skill for this decision only")


@dataclasses.dataclass(frozen=True)
class Anchors:
  """The splice points of a prompt format (module docstring), compiled: the task patterns, the task-line patterns
  and the turn anchors. The default is OPID's own."""
  task: Tuple[re.Pattern, ...] = TASK_PATTERNS
  task_lines: Tuple[re.Pattern, ...] = TASK_LINE_PATTERNS
  turns: Tuple[str, ...] = TURN_ANCHORS

  @classmethod
  def of(cls, prompt_anchors) -> "Anchors":
    """A text env's `prompt_anchors` (`envs.verl_agent.prompts.PromptAnchors`) compiled; OPID's own for None."""
    if prompt_anchors is None:
      return cls()
    return cls(tuple(re.compile(p, re.MULTILINE) for p in prompt_anchors.task),
               tuple(re.compile(p, re.MULTILINE) for p in prompt_anchors.task_lines), tuple(prompt_anchors.turns))


OPID_ANCHORS = Anchors()


def task_description(text: object, anchors: Anchors = OPID_ANCHORS) -> str:
  """The task a prompt states, whitespace collapsed; "" when no pattern finds one."""
  text = str(text or "")
  for pattern in anchors.task:
    match = pattern.search(text)
    if match:
      task = " ".join(match.group(1).split())
      if task:
        return task
  return ""


def _section(title: str, instruction: str, body: Optional[str]) -> str:
  body = str(body or "").strip()
  return f"**{title}**\n{instruction}:\n[{body}]" if body else ""


def _splice(text: str, at: int, block: str) -> str:
  prefix, suffix = text[:at].rstrip(), text[at:].lstrip()
  if prefix and suffix:
    return f"{prefix}\n\n{block}\n\n{suffix}"
  return f"{prefix}\n\n{block}" if prefix else f"{block}\n\n{suffix}"


def _before_anchor(text: str, block: str, anchors: Sequence[str]) -> str:
  for anchor in anchors:
    at = text.find(anchor)
    if at != -1:
      return _splice(text, at, block)
  return f"{text}\n\n{block}" if text else block


def _after_task_line(text: str, block: str, anchors: Anchors) -> str:
  for pattern in anchors.task_lines:
    match = pattern.search(text)
    if match is not None:
      return _splice(text, match.end(), block)
  return _before_anchor(text, block, anchors.turns)


def augment_observation(text: str, episode_skill: Optional[str] = None, step_skill: Optional[str] = None,
                        anchors: Anchors = OPID_ANCHORS) -> str:
  """The teacher's prompt text: `text` stripped, with a section for each non-blank skill (blank: text unchanged),
  spliced at `anchors` (the prompt format's; OPID's own by default)."""
  out = str(text).strip()
  episode = _section(*EPISODE_SECTION, episode_skill)
  if episode:
    out = _after_task_line(out, episode, anchors)
  step = _section(*STEP_SECTION, step_skill)
  return _before_anchor(out, step, anchors.turns) if step else out


def route(step_index: int, result: object, w_ep: float, w_step: float, mode: str = "step_priority"
          ) -> Tuple[Optional[str], Optional[str]]:
  """(episode skill or None, step skill or None) to score step `step_index` of a trajectory under.

  `result` is the analyzer's outcome for the trajectory: anything without a non-blank `episode_skill` (a failure
  record, None) routes nothing. A step skill counts only when non-blank and w_step > 0; the episode skill needs
  w_ep > 0 and, in `step_priority`, no step skill."""
  if mode not in ROUTES:
    raise ValueError(f"opid.route must be one of {ROUTES}, got {mode!r}")
  episode_skill = str(getattr(result, "episode_skill", "") or "")
  if not episode_skill.strip():
    return None, None
  step_skill = str((getattr(result, "step_skills", None) or {}).get(int(step_index), "") or "")
  use_step = bool(step_skill.strip()) and w_step > 0
  use_episode = w_ep > 0 and (mode == "additive" or not use_step)
  return (episode_skill if use_episode else None), (step_skill if use_step else None)
