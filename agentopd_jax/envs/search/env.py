"""Search-QA behind the vector-env interface: `reset(task)` starts a question, `step(action)` searches or answers.

  env = SearchEnv(search_url="http://127.0.0.1:8000/retrieve")   # or no URL: in-process BM25, bundled corpus
  obs, infos = env.reset(task)                                     # obs: the question
  obs, score, done, infos = env.step("<search>Foia Haesson</search>")

`obs_format` picks whose episode rules and observation text the env reproduces (environments.md §4.2, §4.3):
  "verl-agent"  SkyRL-gym `SearchEnv`: every step is a turn; done when `max_turns` turns are used or the action holds
                `<answer>…</answer>`; the score at done is EM of the last `<answer>` in the episode's messages
                (actions and unstripped tool messages) joined with "", so a tag split over two turns counts as
                one; a search observation is the tool's JSON string in `<information>`; anything without a
                `<search>` block gets an empty observation.
  "search-r1"   Search-R1's loop: up to `max_turns` search rounds, then one final turn in which a search is not
                executed (so an episode has at most max_turns + 1 steps); an answer ends the episode with its EM;
                an unparsable action gets Search-R1's invalid-action message.
`action` may be a raw response or a projected action (`<search>q</search>`, `<answer>a</answer>`, ""): both parse
the same. infos: `won`, `question`, `data_source`, `tool_calls` (searches run), `turns`, `action` (search, answer
or invalid) and `subem`, Search-R1's sub-string EM of the answer the score judged (0.0 until the episode ends).

A search the retrieval server never answers (its retries spent, e.g. the server was killed) or refuses (4xx) ends the
episode as a *failed* one, as `VectorEnv` reports an env that raised: obs "", score 0, done, infos `won=False`,
`env_failed=True`, `error`. So the rollout drops it (it says nothing about the policy) and goes on, whether the env
runs in a worker process or in this one (SFT demonstrations, OPID's replays); SkyRL's env would instead show the
policy a "Search error" observation and train on what it does next.
"""
from __future__ import annotations

import copy
import functools
from typing import Any, Dict, List, Mapping, Optional, Tuple, Union

from agentopd_jax.envs.search import formats
from agentopd_jax.envs.search.scoring import last_answer, subem_check
from agentopd_jax.envs.search.client import RetrievalClient, RetrievalError
from agentopd_jax.envs.search.tasks import SearchTask, task_from_row
from agentopd_jax.envs.tags import Blocks
from agentopd_jax.envs.verl_agent.rewards import exact_match, search_reward

OBS_FORMATS = ("verl-agent", "search-r1")
_SEARCH_BLOCK = Blocks("search")


@functools.lru_cache(maxsize=4)
def _local_retriever(corpus: Optional[str], seed: int, topk: int):
  """One in-process index per (corpus, seed, topk) per process, shared by all envs a worker hosts."""
  from agentopd_jax.envs.search.server import load_retriever

  return load_retriever(corpus, seed, topk)


class SearchEnv:
  """One search-QA episode at a time. Retrieval goes to `search_url` over HTTP (as verl-agent's envs do), or, with
  no URL, to an in-process BM25 index over `corpus` (a wiki-18 JSONL; default the bundled encyclopedia of `seed`)."""

  def __init__(self, search_url: Optional[str] = None, corpus: Optional[str] = None, seed: int = 0, topk: int = 3,
               obs_format: str = "verl-agent", max_turns: int = 4, timeout_s: float = 60.0, retries: int = 6,
               search_api_key: Optional[str] = None):
    if obs_format not in OBS_FORMATS:
      raise ValueError(f"SearchEnv obs_format must be one of {OBS_FORMATS}, got {obs_format!r}")
    if max_turns < 1:
      raise ValueError(f"SearchEnv max_turns must be >= 1, got {max_turns}")
    self.obs_format, self.max_turns, self.topk = obs_format, max_turns, topk
    if search_url:
      self._client = RetrievalClient(search_url, topk=topk, timeout_s=timeout_s, retries=retries,
                                     api_key=search_api_key)
      self._retrieve = self._client.retrieve
    else:
      self._client = None
      self._retrieve = functools.partial(_local_retriever(corpus, seed, topk).retrieve, return_scores=True)
    self.task: Optional[SearchTask] = None
    self._history: List[str] = []
    self._turns = self._tool_calls = 0
    self._subem = 0.0
    self._done = True

  def reset(self, task: Union[SearchTask, Mapping[str, Any]]) -> Tuple[str, Dict[str, Any]]:
    self.task = task if isinstance(task, SearchTask) else task_from_row(task)
    self._history, self._turns, self._tool_calls, self._subem, self._done = [], 0, 0, 0.0, False
    return self.task.question, self._infos(False, "")

  def step(self, action: str) -> Tuple[str, float, bool, Dict[str, Any]]:
    if self._done:
      raise RuntimeError("SearchEnv.step called with no episode running; call reset first")
    self._turns += 1
    step = self._step_verl_agent if self.obs_format == "verl-agent" else self._step_search_r1
    try:
      obs, score, self._done, kind = step(action)
    except RetrievalError as e:
      self._done = True
      return "", 0.0, True, {**self._infos(False, "search"), "env_failed": True, "error": str(e)}
    return obs, score, self._done, self._infos(score >= 1.0 and self._done, kind)

  def copy(self) -> "SearchEnv":
    """An independent env in the same episode state (retrieval is shared): for looking ahead (OPID's oracle)."""
    other = copy.copy(self)
    other._history = list(self._history)
    return other

  def close(self):
    if self._client is not None:
      self._client.close()

  def _search(self, query: str) -> List[Any]:
    self._tool_calls += 1
    return self._retrieve([query], self.topk)[0]

  def _step_verl_agent(self, action: str) -> Tuple[str, float, bool, str]:
    self._history.append(action)
    answered = "<answer>" in action and "</answer>" in action
    if answered or self._turns >= self.max_turns:
      history = "".join(self._history)
      reward, _ = search_reward(history, self.task.golden_answers, done=True)
      answer = last_answer(history)
      self._subem = subem_check(answer, self.task.golden_answers) if answer is not None else 0.0
      return "", reward, True, "answer" if answered else "search" if "<search>" in action else "invalid"
    query = _SEARCH_BLOCK.first(action)
    if query is None:
      return "", 0.0, False, "invalid"
    result = formats.verl_agent_result([self._search(query.strip())])
    self._history.append(formats.verl_agent_message(result))  # scored unstripped, as SkyRL's chat history holds it
    return formats.verl_agent_information(result), 0.0, False, "search"

  def _step_search_r1(self, action: str) -> Tuple[str, float, bool, str]:
    kind, content = formats.search_r1_parse(action)
    final = self._turns > self.max_turns  # the last generation, after max_turns search rounds
    if kind == "answer":
      self._subem = subem_check(content, self.task.golden_answers)
      return "", exact_match(content, self.task.golden_answers), True, "answer"
    if kind == "search":
      hits = [] if final else self._search(content)  # Search-R1 does not search on the final turn
      return formats.search_r1_information(hits), 0.0, final, "search"
    return formats.INVALID_ACTION_MESSAGE, 0.0, final, "invalid"

  def _infos(self, won: bool, kind: str) -> Dict[str, Any]:
    return {"won": bool(won), "question": self.task.question, "data_source": self.task.data_source,
            "tool_calls": self._tool_calls, "turns": self._turns, "action": kind, "subem": self._subem}
