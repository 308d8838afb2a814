"""verl-agent's WebShop text layer in one place: templates, task/observation/action formatting, the prompt renderer
with its 13,000-character fallback, action projection and the 15-step episode limit (research notes §2.1-2.3, 2.6).

The verl-agent pieces live in `envs.verl_agent` (shared with ALFWorld and Search) and are re-exported here, not
copied, so there is one byte-exact copy of each template. Added here: a compact template for tiny models (no
<think> block, one action per line without quotes, a history of actions only), with its projection that does not
require <think>.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Tuple

from agentopd_jax.envs.verl_agent.projection import webshop_projection
from agentopd_jax.envs.verl_agent.prompts import (
    WEBSHOP_TEMPLATE,
    WEBSHOP_TEMPLATE_NO_HIS,
    WEBSHOP_TEMPLATE_OPID,
    PromptAnchors,
    format_available_actions,
    render_webshop,
    webshop_observation,
    webshop_task,
)

__all__ = ["WEBSHOP_TEMPLATE", "WEBSHOP_TEMPLATE_NO_HIS", "WEBSHOP_TEMPLATE_OPID", "WEBSHOP_COMPACT_TEMPLATE",
           "WEBSHOP_COMPACT_TEMPLATE_NO_HIS", "MAX_PROMPT_CHARS", "MAX_STEPS", "PROJECTION_TAIL",
           "format_available_actions", "format_compact_actions", "project", "render", "webshop_observation",
           "webshop_task"]

MAX_STEPS = 15  # verl-agent run_webshop.sh: env.max_steps=15
MAX_PROMPT_CHARS = 13000  # a longer history prompt is replaced by the no-history one
PROJECTION_TAIL = 20  # without <action> tags, the action is the response's last 20 characters (invalid)

# Compact WebShop (ours): task, page and actions only; reply with a bare <action> block (pair with compact projection).
WEBSHOP_COMPACT_TEMPLATE_NO_HIS = """Task: {task_description}
Observation: {current_observation}
Actions:
{available_actions}
Reply with one action inside <action> </action> tags.
"""

# Where the compact templates state the task and ask for the reply (`PromptAnchors`): "Task: ..." heads both.
WEBSHOP_COMPACT_ANCHORS = PromptAnchors(task=(r"^Task:\s*(.+?)(?:\n|$)",), task_lines=(r"^Task: .*(?:\n|$)",),
                                        turns=("Reply with one action",))

# Its history lists the last actions without the pages they were taken on: a results page is ~200 tokens, and
# repeating it made the item-page prompts of the CPU default twice as long, while what the policy needs from its past
# (the query it searched, the options it already chose) is in the actions.
WEBSHOP_COMPACT_TEMPLATE = """Task: {task_description}
Last {history_length} of {step_count} action(s): {action_history}
Step {current_step} observation: {current_observation}
Actions:
{available_actions}
Reply with one action inside <action> </action> tags.
"""


def format_compact_actions(available: Mapping) -> str:
  """The same actions as `format_available_actions`, one per line, unquoted."""
  actions = ["search[<your query>]"] if available["has_search_bar"] else []
  return "\n".join(actions + [f"click[{c}]" for c in available["clickables"]])


def render(observation: str, available: Mapping, task: str, memory, history_length: int = 2,
           compact: bool = False, flavor: str = "verl-agent", max_chars: int = MAX_PROMPT_CHARS) -> str:
  """The prompt for the current step: verl-agent's (see `render_webshop`) or the compact one, which follows the
  same rules (no-history template on the first step or with history_length <= 0, fallback past `max_chars`) with the
  last `history_length` actions as its history."""
  if not compact:
    return render_webshop(observation, available, task, memory, history_length, max_chars, flavor)
  actions = format_compact_actions(available)
  short = WEBSHOP_COMPACT_TEMPLATE_NO_HIS.format(task_description=task, current_observation=observation,
                                                 available_actions=actions)
  if history_length <= 0 or len(memory) == 0:
    return short
  taken = [action for _, action in memory.records]
  shown = min(history_length, len(taken))
  history = ", ".join(taken[len(taken) - shown:])
  prompt = WEBSHOP_COMPACT_TEMPLATE.format(task_description=task, history_length=shown, step_count=len(memory),
                                           action_history=history, current_step=len(memory) + 1,
                                           current_observation=observation, available_actions=actions)
  return short if len(prompt) > max_chars else prompt


def project(response: str, compact: bool = False) -> Tuple[str, int]:
  """(action, valid) for one response: verl-agent's `webshop_projection`, or for the compact template the same
  rules without the <think> requirement."""
  actions, valids = webshop_projection([response], check_think=not compact)
  return actions[0], valids[0]
