"""The skills behind a run's prompts: retrieval per prompt with the retriever's state and hit counts, SDAR's
privileged teacher prompt (`SkillContext.privileged`) and the skills in the student's own prompt
(`SkillContext.prompt_context`)."""
from __future__ import annotations

import dataclasses
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from agentopd_jax.batching.samples import Sample
from agentopd_jax.parallel import distributed
from agentopd_jax.rollout.chat import raw_prefixed_ids, templated_text
from agentopd_jax.rollout.engine import PromptContext
from agentopd_jax.skills import SkillQuery, privileged_prefix, retriever_for


class SkillContext:
  """Retrieved skills per prompt, with the retriever's state and the hit counts since the last `take_hits`.

  `retrieve(task, templated, key)` -> (the privileged prefix, the skill names); the retriever, a registry string of
  `skills.retrieval`, reads the env's own query fields of `task` (its game file, data source) and the prompt.

  Multi-host: each process retrieves for its own share, numbering samples and episodes over the whole batch (`first`,
  `first_episode`), so a draw does not depend on which process makes it; `update` and `take_hits` gather every
  process's feedback and counts, so every process holds the run's retriever state.
  """

  def __init__(self, env_name: str, bank_dir: str = "", retrieval: str = "km", seed: int = 0, ucb_c: float = 1.0):
    self.retriever, self.query_fields = retriever_for(env_name, bank_dir, retrieval, seed, ucb_c)
    self._taken = dict(self.retriever.hits)

  def retrieve(self, task: Any, templated: str, key: int, rule: Optional[str] = None
               ) -> Tuple[str, Tuple[str, ...]]:
    """`rule`: the retriever's matching rule for this query (None: the env's, the teacher's)."""
    got = self.retriever.retrieve(SkillQuery(prompt=templated, **self.query_fields(task)), key, rule)
    return privileged_prefix(got.text), tuple(got.skills)

  def privileged(self, samples: Sequence[Sample], task_of: Callable[[Sample], Any], key: int, tokenizer,
                 max_prompt_tokens: int, first: int = 0) -> Tuple[List[Sample], List[Tuple[str, ...]]]:
    """The samples behind SDAR's privileged prompt (`chat.raw_prefixed_ids`: the retrieved skills as a raw prefix
    of the chat-templated prompt, left-truncated), the same completions; and the skills each one read. `first`: the
    index of samples[0] in the whole batch (multi-host)."""
    out, used = [], []
    for i, s in enumerate(samples, first):
      text = templated_text(tokenizer, s.prompt_ids)
      prefix, names = self.retrieve(task_of(s), text, key * 1_000_003 + i)
      out.append(dataclasses.replace(s, prompt_ids=raw_prefixed_ids(tokenizer, prefix, text, max_prompt_tokens)))
      used.append(names)
    return out, used

  def take_hits(self) -> Dict[str, int]:
    """{skill: retrievals that included it, in every process} since the previous call."""
    mine = {name: n - self._taken.get(name, 0) for name, n in self.retriever.hits.items()
            if n != self._taken.get(name, 0)}
    new: Dict[str, int] = {}
    for part in distributed.allgather(mine):
      for name, n in part.items():
        new[name] = new.get(name, 0) + n
    self._taken = {name: self._taken.get(name, 0) + new.get(name, 0) for name in {**self._taken, **new}}
    self.retriever.hits = dict(self._taken)
    return new

  def update(self, episodes: Dict[int, Tuple[set, float]], first_episode: int = 0) -> None:
    """Bandit feedback (UCB): {episode: (the skills in any of its contexts, its success)}, episodes numbered from
    `first_episode` of the whole batch; with every process's feedback, each skill an episode read is rewarded with
    the episode's success, in episode order."""
    every: Dict[int, Tuple[Tuple[str, ...], float]] = {}
    for part in distributed.allgather([[first_episode + e, sorted(names), float(won)]
                                       for e, (names, won) in episodes.items()]):
      every.update({e: (tuple(names), won) for e, names, won in part})
    order = sorted(every)
    self.retriever.update([every[e][0] for e in order], [every[e][1] for e in order])

  def prompt_context(self, tasks: Sequence[Any], key: int, placement: str = "user", first_episode: int = 0
                     ) -> Tuple[PromptContext, Dict[int, set]]:
    """The skills in the student's own prompts (Skill-GRPO, skill-prompted evaluation): a `PromptContext` for
    `RolloutEngine.run` over `tasks` (one per env instance, the first being episode `first_episode` of the whole
    batch), and {episode (of `tasks`): skills read}, filled as it plays.

    Each placement reproduces one of SDAR's inputs whole. "user" is its Skill-GRPO collector, which matches by the
    prompt's keywords alone (rule "prompt", every env: no game file or data source, so a search prompt gets the
    general skills only); "raw" is its privileged teacher's prompt, matched by the env's rule."""
    used: Dict[int, set] = {}
    rule = "prompt" if placement == "user" else None

    def prefix(episode: int, templated: str) -> str:
      text, names = self.retrieve(tasks[episode], templated, key * 1_000_003 + first_episode + episode, rule)
      used.setdefault(episode, set()).update(names)
      return text
    return PromptContext(prefix=prefix, placement=placement), used

  def state_dict(self) -> Dict:
    return self.retriever.state_dict()

  def load_state_dict(self, state: Dict) -> None:
    self.retriever.load_state_dict(state)
    self._taken = dict(self.retriever.hits)
