"""Search prompts: Search-R1's prefix, verl-agent's search templates, and our compact one, plus their renderers.

The policy is trained on these exact bytes, so they are reproduced verbatim (environments.md §2.1, §4.1): the
Search-R1 prefix keeps its typo "as your want" and the spaces in `<answer> Beijing </answer>`; verl-agent's templates
(leading newline, trailing space after "tags. ") are imported from `verl_agent.prompts`, which holds them once.

Flavours: "verl-agent" and "opid" (SkillRL's copy of the search templates is identical) render verl-agent's per-step
prompt with the last k (information, action) records; "search-r1" renders Search-R1's single rolling context, the
prefix followed by every action and observation so far. The compact template is ours, for tiny CPU models: no
<think>, one line of instructions.
"""
from __future__ import annotations

from agentopd_jax.envs.verl_agent.prompts import (SEARCH_TEMPLATE, SEARCH_TEMPLATE_NO_HIS, PromptAnchors,
                                                  render_search)

__all__ = ["SEARCH_TEMPLATE", "SEARCH_TEMPLATE_NO_HIS", "SEARCH_R1_PREFIX", "SEARCH_COMPACT_TEMPLATE",
           "SEARCH_COMPACT_TEMPLATE_NO_HIS", "FLAVORS", "make_prefix", "render"]

# Search-R1 `make_prefix`, template "base" (scripts/data_process/qa_search_*_merge.py): one line and a newline.
SEARCH_R1_PREFIX = (
    "Answer the given question. You must conduct reasoning inside <think> and </think> first every time you get "
    "new information. After reasoning, if you find you lack some knowledge, you can call a search engine by "
    "<search> query </search> and it will return the top searched results between <information> and "
    "</information>. You can search as many times as your want. If you find no further external knowledge needed, "
    "you can directly provide the answer inside <answer> and </answer>, without detailed illustrations. For "
    "example, <answer> Beijing </answer>. Question: {question}\n")

SEARCH_COMPACT_TEMPLATE_NO_HIS = """Question: {task_description}
Reply <search> query </search> to search, or <answer> answer </answer> to answer.
"""

SEARCH_COMPACT_TEMPLATE = """Question: {task_description}
History:
{memory_context}
Reply <search> query </search> to search, or <answer> answer </answer> to answer.
"""

# Where the compact templates state the question and ask for the reply (`PromptAnchors`): "Question: ..." heads both.
SEARCH_COMPACT_ANCHORS = PromptAnchors(task=(r"^Question:\s*(.+?)(?:\n|$)",),
                                       task_lines=(r"^Question: .*(?:\n|$)",), turns=("Reply <search>",))

FLAVORS = ("verl-agent", "opid", "search-r1")


def make_prefix(question: str) -> str:
  """Search-R1's user message: the question stripped, with '?' appended when it does not end with one."""
  question = question.strip()
  if not question.endswith("?"):
    question += "?"
  return SEARCH_R1_PREFIX.format(question=question)


def render(question: str, memory, history_length: int = 4, compact: bool = False, flavor: str = "verl-agent") -> str:
  """This step's prompt. `memory` is a `verl_agent.SearchMemory` of (information, action) records.

  The compact template takes precedence over the flavour's. "search-r1" ignores `history_length`: its context is
  never windowed (the rollout's prompt limit truncates it instead).
  """
  if flavor not in FLAVORS:
    raise ValueError(f"unknown search prompt flavor {flavor!r}; expected one of {FLAVORS}")
  if compact:
    if history_length <= 0 or not len(memory):
      return SEARCH_COMPACT_TEMPLATE_NO_HIS.format(task_description=question)
    history, _ = memory.fetch(history_length)
    return SEARCH_COMPACT_TEMPLATE.format(task_description=question, memory_context=history)
  if flavor == "search-r1":
    return make_prefix(question) + "".join(action + information for information, action in memory.records)
  return render_search(question, memory, history_length)
