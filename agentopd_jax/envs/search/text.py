"""The policy's side of a search episode: prompts, action projection and rewards (`TextEnv`, see rollout.text_envs).

Same interface as `AlfworldText`. Flavours (`prompts.FLAVORS`):
  "verl-agent"/"opid"  verl-agent's per-step template with the last `history_length` (4 in its search script)
                       `Step n:{action} {information}` records; actions by `verl_agent.search_projection`.
  "search-r1"          Search-R1's prefix followed by the whole transcript so far; actions by Search-R1's parse
                       (cut after the first `</search>`/`</answer>`, first block wins), invalid when nothing parses.
`compact=True` swaps in our short no-<think> template (any flavour). In the trajectory layout the first turn is the
no-history prompt and each later turn is the env's observation text itself, as Search-R1 appends it.
"""
from __future__ import annotations

from typing import Mapping, Tuple

from agentopd_jax.envs.search import formats, prompts
from agentopd_jax.envs.verl_agent import INVALID_ACTION_PENALTY_COEF, SearchMemory, search_projection


class SearchText:
  """Search-QA under verl-agent's search template, Search-R1's prefix, or our compact one."""

  name = "search"
  compact_anchors = prompts.SEARCH_COMPACT_ANCHORS

  def __init__(self, history_length: int = 4, compact: bool = False, flavor: str = "verl-agent",
               invalid_penalty: float = INVALID_ACTION_PENALTY_COEF["search"]):
    if flavor not in prompts.FLAVORS:
      raise ValueError(f"unknown search prompt flavor {flavor!r}; expected one of {prompts.FLAVORS}")
    self.history_length = history_length
    self.compact = compact
    self.flavor = flavor
    self.invalid_penalty = invalid_penalty
    self.memory = SearchMemory()
    self.task, self.observation = "", ""

  def begin(self, observation: str, infos: Mapping) -> None:
    self.memory.reset()
    self.task = infos.get("question", observation)
    self.observation = ""

  @property
  def prompt_anchors(self):
    """Where the prompts state the question and ask for the reply (`PromptAnchors`); None for the authors'
    templates, whose "Your question:" / "Now it's your turn" anchors OPID was written for."""
    return self.compact_anchors if self.compact else None

  def step_prompt(self) -> str:
    """This step's prompt with the text history (step-wise layout)."""
    return prompts.render(self.task, self.memory, self.history_length, self.compact, self.flavor)

  def turn_prompt(self) -> str:
    """The first prompt, then the latest observation (whole-trajectory layout: the conversation is the history)."""
    if not len(self.memory):
      return prompts.render(self.task, SearchMemory(), 0, self.compact, self.flavor)
    return self.observation

  def project(self, response: str) -> Tuple[str, int]:
    if self.flavor == "search-r1":
      kind, content = formats.search_r1_parse(response)
      return (f"<{kind}>{content}</{kind}>", 1) if kind else ("", 0)
    actions, valids = search_projection([response])
    return actions[0], valids[0]

  def demo_reply(self, action: str) -> str:
    """How a demonstration step (a projected action) is written as a reply (SFT warm start): with a space inside
    each tag, as the prompts' own examples write them (`<search> query </search>`, `<answer> Beijing </answer>`).

    Why the spaces: a byte-level BPE token carries its leading space ("Ġstotho" in the question, "stotho" right
    after `<search>`), so an unspaced reply's first word is a different token from the one in the prompt, and a
    model trained from scratch must learn that mapping name by name instead of copying. Projection strips them."""
    tag = "search" if action.startswith("<search>") else "answer"
    spaced = f"<{tag}> {action[len(tag) + 2:-(len(tag) + 3)]} </{tag}>"
    if self.compact:
      return spaced
    if tag == "search":
      thought = f"I need more information, so I will search for {action[len('<search>'):-len('</search>')]}."
    else:
      thought = "The retrieved information is enough to answer the question."
    return f"<think>{thought}</think>\n{spaced}"

  def observe(self, action: str, observation: str, infos: Mapping) -> None:
    self.memory.store(observation, action)
    self.observation = observation

  @staticmethod
  def reward(score: float, done: bool, infos: Mapping) -> Tuple[float, bool]:
    """Raw EM at the end of the episode (no ×10, verl-agent's search reward); won = EM of 1 at the end."""
    return float(score), bool(infos.get("won", False))
