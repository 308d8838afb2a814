"""verl-agent prompt templates and the renderers that fill them, byte for byte as its env managers do.

Every step of an episode is an independent single-user-message prompt: the template holds the task, the last few
(observation, action) records as text, the current observation and the admissible actions. Rewards and the
policy's behaviour depend on these exact bytes, so the templates are copied verbatim (leading newline, trailing
spaces after "tags. ", U+2011 in "e‑commerce"; environments.md §2.1) and the renderers follow env_manager.py (§2.2).

Flavours: "verl-agent" (upstream at 796ed31) and "opid" (the OPID/SDAR/SkillRL copies, methods.md §5), whose
ALFWorld/WebShop *history* templates lack three trailing spaces. The compact ALFWorld template is ours, for tiny
CPU models that cannot afford the long instructions or a <think> block.

Renderers take a memory from `memory.py` (anything with `len()` and `fetch(k) -> (text, count)`); an empty memory
means the first step, which uses the no-history template, as does `history_length <= 0`.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

# --------------------- ALFWorld --------------------- #
ALFWORLD_TEMPLATE_NO_HIS = """
You are an expert agent operating in the ALFRED Embodied Environment.
Your current observation is: {current_observation}
Your admissible actions of the current situation are: [{admissible_actions}].

Now it's your turn to take an action.
You should first reason step-by-step about the current situation. This reasoning process MUST be enclosed within <think> </think> tags. 
Once you've finished your reasoning, you should choose an admissible action for current step and present it within <action> </action> tags.
"""

ALFWORLD_TEMPLATE = """
You are an expert agent operating in the ALFRED Embodied Environment. Your task is to: {task_description}
Prior to this step, you have already taken {step_count} step(s). Below are the most recent {history_length} observations and the corresponding actions you took: {action_history}
You are now at step {current_step} and your current observation is: {current_observation}
Your admissible actions of the current situation are: [{admissible_actions}].

Now it's your turn to take an action.
You should first reason step-by-step about the current situation. This reasoning process MUST be enclosed within <think> </think> tags. 
Once you've finished your reasoning, you should choose an admissible action for current step and present it within <action> </action> tags.
"""

# --------------------- WebShop --------------------- #
WEBSHOP_TEMPLATE_NO_HIS = """
You are an expert autonomous agent operating in the WebShop e\u2011commerce environment. 
Your task is to: {task_description}.
Your current observation is: {current_observation}.
Your admissible actions of the current situation are: 
[
{available_actions}
].

Now it's your turn to take one action for the current step.
You should first reason step-by-step about the current situation, then think carefully which admissible action best advances the shopping goal. This reasoning process MUST be enclosed within <think> </think> tags. 
Once you've finished your reasoning, you should choose an admissible action for current step and present it within <action> </action> tags.
"""

WEBSHOP_TEMPLATE = """
You are an expert autonomous agent operating in the WebShop e\u2011commerce environment.
Your task is to: {task_description}.
Prior to this step, you have already taken {step_count} step(s). Below are the most recent {history_length} observations and the corresponding actions you took: {action_history}
You are now at step {current_step} and your current observation is: {current_observation}.
Your admissible actions of the current situation are: 
[
{available_actions}
].

Now it's your turn to take one action for the current step.
You should first reason step-by-step about the current situation, then think carefully which admissible action best advances the shopping goal. This reasoning process MUST be enclosed within <think> </think> tags. 
Once you've finished your reasoning, you should choose an admissible action for current step and present it within <action> </action> tags.
"""

# --------------------- Search --------------------- #
SEARCH_TEMPLATE_NO_HIS = """
You are an expert agent tasked with answering the given question step-by-step.
Your question: {task_description}

Now it's your turn to respond for the current step.
You should first conduct reasoning process. This process MUST be enclosed within <think> </think> tags. 
After completing your reasoning, choose only one of the following actions (do not perform both):
(1) If you find you lack some knowledge, you can call a search engine to get more external information using format: <search> your query </search>.
(2) If you have enough knowledge to answer the question confidently, provide your final answer within <answer> </answer> tags, without detailed illustrations. For example, <answer>Beijing</answer>.
"""

SEARCH_TEMPLATE = """
You are an expert agent tasked with answering the given question step-by-step.
Your question: {task_description}

Prior to this step, you have already taken {step_count} step(s). Below is the interaction history where <search> </search> wrapped your past search queries and <information> </information> wrapped the corresponding search results returned by the external search engine. History:
{memory_context}

Now it's your turn to respond for the current step.
You should first conduct reasoning process. This process MUST be enclosed within <think> </think> tags. 
After completing your reasoning, choose only one of the following actions (do not perform both):
(1) If you find you lack some knowledge, you can call a search engine to get more external information using format: <search> your query </search>.
(2) If you have enough knowledge to answer the question confidently, provide your final answer within <answer> </answer> tags, without detailed illustrations. For example, <answer>Beijing</answer>.
"""

# OPID/SDAR (SkillRL-derived) history templates: identical except for the trailing spaces dropped here.
ALFWORLD_TEMPLATE_OPID = ALFWORLD_TEMPLATE.replace("tags. \n", "tags.\n")
WEBSHOP_TEMPLATE_OPID = WEBSHOP_TEMPLATE.replace("tags. \n", "tags.\n").replace("are: \n", "are:\n")

# Compact ALFWorld (ours): same information, one-line instruction, no <think> block; pair with check_think=False.
ALFWORLD_COMPACT_TEMPLATE_NO_HIS = """Observation: {current_observation}
Admissible actions: [{admissible_actions}]
Reply with one admissible action inside <action> </action> tags.
"""

ALFWORLD_COMPACT_TEMPLATE = """Task: {task_description}
Last {history_length} of {step_count} step(s): {action_history}
Step {current_step} observation: {current_observation}
Admissible actions: [{admissible_actions}]
Reply with one admissible action inside <action> </action> tags.
"""

@dataclasses.dataclass(frozen=True)
class PromptAnchors:
  """Where a prompt template states its task and asks for the reply, as regexes and strings: `task` finds the task
  sentence (group 1), `task_lines` the line after which a section about the whole episode goes, `turns` the text
  before which a section about the current step goes (first found wins in each). A method that adds sections to the
  env's prompt (OPID's skills, `methods/opid/injection.py`) splices them there. verl-agent's templates need none:
  OPID's own anchors ("Your task is to:", "Now it's your turn") are written for them. Our compact templates state
  the task as "Task: ..." on their first line and close with their reply instruction, so they name their own."""
  task: tuple
  task_lines: tuple
  turns: tuple


# The compact ALFWorld prompts: "Task: ..." heads the history template; the no-history one has only the reset
# observation, whose task sentence is ALFWorld's "Your task is to: ...".
ALFWORLD_COMPACT_ANCHORS = PromptAnchors(
    task=(r"^Task:\s*(.+?)(?:\n|$)", r"Your task is to:\s*(.+?)(?:\n|$)"),
    task_lines=(r"^Task: .*(?:\n|$)", r"^.*\bYour task is to:\s*.*(?:\n|$)"),
    turns=("Reply with one admissible action",))

FLAVORS = ("verl-agent", "opid")
_TASK_MARKER = "Your task is to: "


def _history_wanted(memory, history_length: int) -> bool:
  return history_length > 0 and len(memory) > 0


def _check_flavor(flavor: str):
  if flavor not in FLAVORS:
    raise ValueError(f"unknown prompt flavor {flavor!r}; expected one of {FLAVORS}")


# --------------------- ALFWorld --------------------- #


def alfworld_task(initial_observation: str) -> str:
  """The task sentence after 'Your task is to: ' in the reset observation, trailing period kept (verl-agent)."""
  start = initial_observation.find(_TASK_MARKER)
  if start == -1:
    raise ValueError("no 'Your task is to: ' in the ALFWorld reset observation")
  return initial_observation[start + len(_TASK_MARKER):].strip()


def format_admissible(admissible: Sequence[str]) -> str:
  """`'a'\\n 'b'` with 'help' dropped: inside the template's brackets this reads like numpy's comma-less repr."""
  return "\n ".join(f"'{a}'" for a in admissible if a != "help")


def render_alfworld(observation: str, admissible: Sequence[str], task: str, memory, history_length: int = 2,
                    compact: bool = False, flavor: str = "verl-agent") -> str:
  """The prompt for the current ALFWorld step; `memory` holds the steps taken so far (SimpleMemory)."""
  _check_flavor(flavor)
  actions = format_admissible(admissible)
  if not _history_wanted(memory, history_length):
    template = ALFWORLD_COMPACT_TEMPLATE_NO_HIS if compact else ALFWORLD_TEMPLATE_NO_HIS
    return template.format(current_observation=observation, admissible_actions=actions)
  if compact:
    template = ALFWORLD_COMPACT_TEMPLATE
  else:
    template = ALFWORLD_TEMPLATE_OPID if flavor == "opid" else ALFWORLD_TEMPLATE
  history, shown = memory.fetch(history_length)
  return template.format(task_description=task, step_count=len(memory), history_length=shown,
                         action_history=history, current_step=len(memory) + 1, current_observation=observation,
                         admissible_actions=actions)


# --------------------- WebShop --------------------- #


def webshop_task(reset_observation: str) -> str:
  """The instruction: third ' [SEP] ' field of the start page, whose second field must be 'Instruction:'."""
  parts = reset_observation.split(" [SEP] ")
  if len(parts) < 3 or parts[1] != "Instruction:":
    raise ValueError("WebShop reset observation is not 'WebShop [SEP] Instruction: [SEP] <task> ...'")
  return parts[2]


def webshop_observation(raw: str, task: str) -> str:
  """Page text after the instruction, each field quoted: `'a' [SEP] 'b'`; the raw text if the task is absent.

  This is what the prompt and the history show, and what GiGPO groups anchor states by.
  """
  parts = raw.split(" [SEP] ")
  if task not in parts:
    return raw
  return " [SEP] ".join(f"'{p}'" for p in parts[parts.index(task) + 1:])


def format_available_actions(available: Mapping) -> str:
  """`{'has_search_bar', 'clickables'}` -> one `'action',` per line: search[<your query>] first, then clicks."""
  unknown = set(available) - {"has_search_bar", "clickables"}
  if unknown:
    raise ValueError(f"unknown keys in WebShop available actions: {sorted(unknown)}")
  actions = ["search[<your query>]"] if available["has_search_bar"] else []
  actions += [f"click[{c}]" for c in available["clickables"]]
  return "\n".join(f"'{a}'," for a in actions)


def render_webshop(observation: str, available: Mapping, task: str, memory, history_length: int = 2,
                   max_chars: int = 13000, flavor: str = "verl-agent") -> str:
  """The prompt for the current WebShop step; `observation` is already `webshop_observation`-formatted.

  A history prompt longer than `max_chars` characters falls back to the no-history one (verl-agent: 13,000;
  methods.md reports 20,000 for OPID/SDAR).
  """
  _check_flavor(flavor)
  actions = format_available_actions(available)
  short = WEBSHOP_TEMPLATE_NO_HIS.format(task_description=task, current_observation=observation,
                                         available_actions=actions)
  if not _history_wanted(memory, history_length):
    return short
  history, shown = memory.fetch(history_length)
  template = WEBSHOP_TEMPLATE_OPID if flavor == "opid" else WEBSHOP_TEMPLATE
  prompt = template.format(task_description=task, step_count=len(memory), history_length=shown,
                           action_history=history, current_step=len(memory) + 1, current_observation=observation,
                           available_actions=actions)
  return short if len(prompt) > max_chars else prompt


# --------------------- Search --------------------- #


def render_search(question: str, memory, history_length: int = 4) -> str:
  """The prompt for the current Search step; `memory` is a SearchMemory of (information, action) records."""
  if not _history_wanted(memory, history_length):
    return SEARCH_TEMPLATE_NO_HIS.format(task_description=question)
  history, _ = memory.fetch(history_length)
  return SEARCH_TEMPLATE.format(task_description=question, step_count=len(memory), memory_context=history)
