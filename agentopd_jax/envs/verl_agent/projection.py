"""Turn raw model responses into env actions plus a validity flag, exactly as verl-agent's projections do (§2.3).

The flag feeds the invalid-action penalty and `valid_action_ratio`, so its quirks matter and are kept:
  * ALFWorld/WebShop: the text between the first `<action>` and the first `</action>` of the lower-cased response
    (empty when `</action>` comes first, and still valid); without both tags, the response's last 30 (ALFWorld) or
    20 (WebShop) lower-cased characters, invalid, which the env then executes as a no-op.
  * Valid also needs `<think>` and `</think>` somewhere in the *original* response (case-sensitive, any order) and
    no CJK ideograph; admissibility is never checked, an inadmissible action just yields "Nothing happens."
  * Search: see `search_projection`; no <think> or CJK rule there.
Every function accepts any strings and never raises on them; inputs are not modified.
"""
from __future__ import annotations

import re
from collections.abc import Sequence

from agentopd_jax.envs.tags import Blocks

_CJK = re.compile("[\u4e00-\u9fff]")
_SEARCH_BLOCK = Blocks("search", ignore_case=True)
_ANSWER_BLOCK = Blocks("answer", ignore_case=True)
_SEARCH_TAG = re.compile(r"<search>", re.IGNORECASE)
_ANSWER_TAG = re.compile(r"<answer>", re.IGNORECASE)


def _tagged_action(response: str, tail: int, check_think: bool) -> tuple[str, int]:
  lowered = response.lower()
  start, end = lowered.find("<action>"), lowered.find("</action>")
  if start == -1 or end == -1:
    return lowered[-tail:], 0
  action = lowered[start + len("<action>"):end].strip()
  thought = "<think>" in response and "</think>" in response
  valid = (thought or not check_think) and _CJK.search(response) is None
  return action, int(valid)


def _project(responses: Sequence[str], tail: int, check_think: bool) -> tuple[list[str], list[int]]:
  pairs = [_tagged_action(r, tail, check_think) for r in responses]
  return [a for a, _ in pairs], [v for _, v in pairs]


def tagged_projection(responses: Sequence[str], tail: int, check_think: bool = True) -> tuple[list[str], list[int]]:
  """(actions, valids) under the ALFWorld/WebShop rules with a `tail`-character fallback, for an env of our own whose
  replies follow the same `<action>` convention (Countdown)."""
  return _project(responses, tail, check_think)


def alfworld_projection(responses: Sequence[str], check_think: bool = True) -> tuple[list[str], list[int]]:
  """(actions, valids) for ALFWorld; `check_think=False` for the compact template, which asks for no <think>."""
  return _project(responses, 30, check_think)


def webshop_projection(responses: Sequence[str], check_think: bool = True) -> tuple[list[str], list[int]]:
  """(actions, valids) for WebShop; same rules as ALFWorld with a 20-character fallback."""
  return _project(responses, 20, check_think)


def _search_action(response: str) -> tuple[str, int]:
  cut = response
  for close in ("</search>", "</answer>"):  # case-sensitive cut, as upstream; the regexes below are not
    if close in response:
      cut = response.split(close, 1)[0] + close
      break
  found = _SEARCH_BLOCK.first(cut)
  if found is not None:
    action = f"<search>{found.strip()}</search>"
  else:
    found = _ANSWER_BLOCK.first(cut)
    action = f"<answer>{found.strip()}</answer>" if found is not None else ""
  searches, answers = len(_SEARCH_TAG.findall(response)), len(_ANSWER_TAG.findall(response))
  valid = found is not None and not (searches and answers) and searches <= 1 and answers <= 1
  return action, int(valid)


def search_projection(responses: Sequence[str]) -> tuple[list[str], list[int]]:
  """(actions, valids) for Search: the first `<search>q</search>` block (else `<answer>a</answer>`) of the response
  cut after its first `</search>` (else `</answer>`), rebuilt with the content stripped; `""` if none.

  Invalid when nothing was found, or when the whole response opens both tag kinds or one kind more than once.
  """
  pairs = [_search_action(r) for r in responses]
  return [a for a, _ in pairs], [v for _, v in pairs]
