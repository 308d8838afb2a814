"""An oracle policy for bundled questions: it searches the right queries, reads the answers out of the returned
documents, and answers; it never sees the golden answers.

It knows each question's plan (which entity and fact every hop looks up) but finds the values only in what the
retriever returns, reading a hop's fact from the passage titled with that hop's subject with the same patterns the
generator checked its articles with. So its success rate measures the corpus, the retriever and the env plumbing
together (server, client, observation formats): a fact that retrieval does not surface is a failed question.

  actions, score, infos = play(env, task)      # e.g. for demonstrations: replaying `actions` gives the same episode
  actions, score, infos = play(env, task, style="question")   # the searcher that knows none of the shipped skills
  action = advise(task, searches, searches_left)   # its next action in a policy's episode (OPID's oracle review)
"""
from __future__ import annotations

import re
from typing import Any, Dict, List, Optional, Sequence, Tuple

from agentopd_jax.envs.search.formats import read_documents
from agentopd_jax.envs.search.tasks import SearchTask
from agentopd_jax.envs.search.world import RELATIONS


STYLES = ("oracle", "question")


class Oracle:
  """Acts on one task; call `act(observation)` with the reset observation, then with each step's observation.

  style "oracle" does what the shipped search skills say (`skills/banks/search`): each hop searched by its subject's
  name plus the fact's words, a missed hop searched again by the name alone, a multi-hop question hopped by the
  found name. style "question" knows none of that: every search is the question as written, once per hop, with no
  retry, so it wins where the question's own words retrieve every fact it needs (a warm start's demonstrations
  without skills, beside the oracle's behind SDAR's privileged skill prompt). Both read facts the same way.
  `max_searches` bounds the searches so the answer still fits in the episode (verl-agent: max_turns - 1;
  Search-R1: max_turns).
  """

  def __init__(self, task: SearchTask, max_searches: int = 3, style: str = "oracle"):
    if task.plan is None:
      raise ValueError(f"task {task} has no plan; the oracle answers bundled questions only")
    if style not in STYLES:
      raise ValueError(f"search expert style must be one of {STYLES}, got {style!r}")
    self.plan, self.max_searches, self.question, self.style = task.plan, max_searches, task.question, style
    self.values: List[Optional[str]] = []
    self.searches = 0
    self._attempt = 0  # searches for the current hop
    self._waiting = False

  def _subject(self) -> str:
    subject, _ = self.plan.hops[len(self.values)]
    return subject or (self.values[-1] or "")

  def _query(self) -> str:
    """A query a policy that reads only the question and the passages can copy: the hop's subject as the question
    writes it (NQ's questions are lower-case; BM25 ignores case), else as the passage it was read from does, plus
    the relation's keywords on a hop's first search."""
    if self.style == "question":
      return self.question.rstrip(" ?")
    relation = self.plan.hops[len(self.values)][1]
    words = RELATIONS[relation].keywords if self._attempt == 0 else ""
    subject = self._subject()
    written = re.search(re.escape(subject), self.question, re.IGNORECASE) if subject else None
    return f"{written.group(0) if written else subject} {words}".strip()

  def _read(self, observation: str) -> Optional[str]:
    subject, relation = self._subject(), self.plan.hops[len(self.values)][1]
    for title, text in read_documents(observation):
      if title == subject:
        value = RELATIONS[relation].read(text)
        if value is not None:
          return value
    return None

  def act(self, observation: str) -> str:
    if self._waiting:
      self._waiting = False
      value = self._read(observation)
      retries = 2 if self.style == "oracle" else 1
      if value is not None or self._attempt >= retries or self.searches >= self.max_searches:
        self.values.append(value)
        self._attempt = 0
    if len(self.values) < len(self.plan.hops) and self.searches < self.max_searches:
      query = self._query()
      self._attempt += 1
      self.searches += 1
      self._waiting = True
      return f"<search>{query}</search>"
    return f"<answer>{self.answer()}</answer>"

  def answer(self) -> str:
    values = self.values + [None] * (len(self.plan.hops) - len(self.values))
    if self.plan.kind != "comparison":
      return values[-1] or "unknown"
    (a, _), (b, _) = self.plan.hops
    va, vb = values
    if self.plan.op == "same":
      return "yes" if va is not None and va == vb else "no"
    if va is None or vb is None or not (va.isdigit() and vb.isdigit()):
      return a
    return a if (int(va) < int(vb)) == (self.plan.op == "min") else b


def advise(task: SearchTask, searches: Sequence[Tuple[str, str]], searches_left: int) -> str:
  """The oracle's next action in an episode a policy has been playing (OPID's oracle review): `act`'s choice had its
  searches been the episode's (query, observation) pairs so far. As in `act`, each observation is read for the hop
  open when it came, and a hop whose two queries (with the relation's keywords, then the subject alone) were both
  searched without showing its fact is given up. Then the first query of the open hop not searched yet, or the answer
  when no hop is open or no search is left."""
  oracle = Oracle(task)
  hops = len(oracle.plan.hops)
  for _, observation in searches:
    if len(oracle.values) < hops:
      value = oracle._read(observation)
      if value is not None:
        oracle.values.append(value)
  searched = {" ".join(query.lower().split()) for query, _ in searches}
  while len(oracle.values) < hops:
    queries = []
    for attempt in (0, 1):
      oracle._attempt = attempt
      queries.append(oracle._query())
    fresh = [q for q in queries if " ".join(q.lower().split()) not in searched]
    if fresh:
      return f"<search>{fresh[0]}</search>" if searches_left > 0 else f"<answer>{oracle.answer()}</answer>"
    oracle.values.append(None)
  return f"<answer>{oracle.answer()}</answer>"


def play(env, task: SearchTask, style: str = "oracle") -> Tuple[List[str], float, Dict[str, Any]]:
  """Plays one episode of `env` (a `SearchEnv`) with the oracle of `style`: (actions, final score, final infos)."""
  obs, infos = env.reset(task)
  budget = env.max_turns - 1 if env.obs_format == "verl-agent" else env.max_turns
  oracle = Oracle(task, max_searches=budget, style=style)
  actions, score, done = [], 0.0, False
  while not done:
    action = oracle.act(obs)
    actions.append(action)
    obs, score, done, infos = env.step(action)
  return actions, score, infos
