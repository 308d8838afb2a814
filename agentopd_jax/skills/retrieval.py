"""Which skills the teacher reads: SDAR's keyword matching (KM) and the paper's ablations, by name (`skills.retrieval`).

  km        SDAR's `SkillProvider`, rule for rule and quirk for quirk (below).
  km_words  the same rules with keywords and "which"/"or"/"for" matched as whole words, game files by path fields.
  full      general + every task skill (SDAR `skill_all=True`).
  random    general + one task skill drawn uniformly; the draw depends only on (seed, key).
  ucb       general + the task skill of highest r̄(e) + c·sqrt(ln N / n(e)), a bandit over the task skills.

Every context is `"\\n\\n".join([general, task skill, ...])`, SDAR's join, even when the general text is empty.

KM's rules (`rlsd_utils.SkillProvider`; an env's `rule` says how its teacher tells its tasks apart):
  gamefile  (ALFWorld) the first `task_to_skill` key that is a substring of the game-file path, case-sensitive.
  keywords  (WebShop) SDAR reaches it through its data-source rule with data_source "text", so the compare test
            below runs first: a prompt with "which" and "or" but no "for" is typed "compare", which WebShop's mapping
            does not have, so it gets the general skills only. Otherwise every `task_keywords` type (mapping order)
            with ANY keyword a substring of the lower-cased prompt; none -> general only.
  search    popqa -> entity_attribute_lookup; nq, triviaqa -> direct_retrieval; hotpotqa -> multi_hop_reasoning;
            else "which" and "or" and not "for" in the lower-cased prompt -> compare; else 2wikimultihopqa, musique,
            bamboogle -> multi_hop_reasoning; else general only.
  prompt    (every env, the skills in the student's own prompt) `get_privileged_info_from_prompt`, which SDAR's
            Skill-GRPO collector calls on each observation text: every `task_keywords` type (mapping order) with ANY
            keyword a substring of the lower-cased prompt, without the compare test; none -> general only. A bank
            without keywords (search) thus always gives the general skills alone.
The prompt is the chat-templated student prompt, so KM's substrings fire inside longer words ("hat" in "that",
"heel" in "wheel", "or" in "for" or "director") and on the template's own words; `km_words` measures what that costs
(experiments/skill_matching.py). Keywords are used as written: SDAR lower-cases the prompt, never the keywords.
"""
from __future__ import annotations

import abc
import dataclasses
import math
import random
import re
from typing import Dict, List, Optional, Sequence, Tuple

from agentopd_jax.skills.bank import GENERAL, SkillBank

RULES = ("gamefile", "keywords", "search", "prompt")
PRIVILEGED_HEADER = "[Privileged Skill Information]\n"


def privileged_prefix(text: str) -> str:
  """SDAR's teacher prefix (`build_teacher_batch`), put before the chat-templated student prompt."""
  return f"{PRIVILEGED_HEADER}{text}\n\n"


@dataclasses.dataclass(frozen=True)
class SkillQuery:
  """What a rule may read: the ALFWorld game file, the chat-templated prompt as the student sees it, the data source."""
  gamefile: str = ""
  prompt: str = ""
  data_source: str = ""


@dataclasses.dataclass(frozen=True)
class Retrieved:
  text: str
  skills: Tuple[str, ...]  # the skill names in the context, in order, general first


def _has(text: str, word: str, words: bool) -> bool:
  """KM: substring. km_words: not inside a longer word (\\b for words that start and end with a word character)."""
  return re.search(rf"(?<!\w){re.escape(word)}(?!\w)", text) is not None if words else word in text


def _is_compare(prompt: str, words: bool) -> bool:
  text = prompt.lower()
  return _has(text, "which", words) and _has(text, "or", words) and not _has(text, "for", words)


def _keyword_types(bank: SkillBank, prompt: str, words: bool) -> List[str]:
  text = prompt.lower()
  return [t for t, kws in bank.task_keywords.items() if kws and any(_has(text, kw, words) for kw in kws)]


def _search_types(bank: SkillBank, data_source: str, prompt: str, words: bool) -> List[str]:
  """SDAR's `get_privileged_info_from_data_source`, which also serves WebShop (data_source "text")."""
  task_type = {"popqa": "entity_attribute_lookup", "nq": "direct_retrieval", "triviaqa": "direct_retrieval",
               "hotpotqa": "multi_hop_reasoning"}.get(data_source)
  if task_type is None:
    if _is_compare(prompt, words):
      task_type = "compare"
    elif data_source in ("2wikimultihopqa", "musique", "bamboogle"):
      task_type = "multi_hop_reasoning"
  if task_type is None and data_source == "text":
    return _keyword_types(bank, prompt, words)
  return [task_type] if task_type else []


def _gamefile_types(bank: SkillBank, gamefile: str, words: bool) -> List[str]:
  """KM: first key that is a substring of the path. km_words: first key equal to a '/'- or '-'-separated field of it
  (ALFWorld folders are `<task_type>-<object>-<movable>-<receptacle>-<scene>`), so SDAR's own key "pick_and_place"
  matches only under KM ("pick_and_place_simple" is the field)."""
  fields = set(re.split(r"[/-]", gamefile))
  for task_type in bank.task_to_skill:
    if task_type in (fields if words else gamefile):
      return [task_type]
  return []


class Retriever(abc.ABC):
  """Base: composes contexts and counts hits; subclasses pick the task skills (`_pick`). `update` is a no-op and the
  state is the hit counts, except for `ucb`."""
  name = ""

  def __init__(self, bank: SkillBank, rule: str, seed: int = 0):
    if rule not in RULES:
      raise ValueError(f"skill rule must be one of {RULES}, got {rule!r}")
    self.bank, self.rule, self.seed = bank, rule, seed
    self.hits: Dict[str, int] = {}

  @abc.abstractmethod
  def _pick(self, query: SkillQuery, key: int, rule: str) -> List[str]:
    """The task skills (names) of the context, general excluded."""

  def retrieve(self, query: SkillQuery, key: int, rule: Optional[str] = None) -> Retrieved:
    """The context for `query`; `rule` (one of RULES) replaces the env's rule for this query."""
    if rule is not None and rule not in RULES:
      raise ValueError(f"skill rule must be one of {RULES}, got {rule!r}")
    names = (GENERAL, *self._pick(query, key, rule or self.rule))
    for name in dict.fromkeys(names):
      self.hits[name] = self.hits.get(name, 0) + 1
    return Retrieved("\n\n".join([self.bank.general] + [self.bank.skills[n] for n in names[1:]]), names)

  def update(self, used: Sequence[Tuple[str, ...]], rewards: Sequence[float]) -> None:
    if len(used) != len(rewards):
      raise ValueError(f"update: {len(used)} contexts but {len(rewards)} rewards")

  def state_dict(self) -> dict:
    return {"retrieval": self.name, "hits": dict(self.hits)}

  def load_state_dict(self, state: dict) -> None:
    if state.get("retrieval") != self.name:
      raise ValueError(f"skills state is of retrieval {state.get('retrieval')!r}, this retriever is {self.name!r}")
    self.hits = {k: int(v) for k, v in state["hits"].items()}


class KeywordMatch(Retriever):
  name = "km"
  words = False

  def _pick(self, query: SkillQuery, key: int, rule: str) -> List[str]:
    if rule == "gamefile":
      types = _gamefile_types(self.bank, query.gamefile, self.words)
    elif rule == "keywords":
      types = _search_types(self.bank, "text", query.prompt, self.words)
    elif rule == "prompt":
      types = _keyword_types(self.bank, query.prompt, self.words)
    else:
      types = _search_types(self.bank, query.data_source, query.prompt, self.words)
    return [self.bank.task_to_skill[t] for t in types if t in self.bank.task_to_skill]


class WordMatch(KeywordMatch):
  name = "km_words"
  words = True


class Full(Retriever):
  name = "full"

  def _pick(self, query: SkillQuery, key: int, rule: str) -> List[str]:
    return list(self.bank.skills)


class RandomSkill(Retriever):
  """Uniform over the task skills; `random.Random` seeded with a string is the same in every process."""
  name = "random"

  def _pick(self, query: SkillQuery, key: int, rule: str) -> List[str]:
    arms = list(self.bank.skills)
    return [random.Random(f"skills/{self.seed}/{key}").choice(arms)] if arms else []


class UCB(Retriever):
  """UCB1 over the task skills: score(e) = r̄(e) + c·sqrt(ln N / n(e)), N = Σ n(e); unplayed arms first, ties by
  bank order. The reward of a skill is the episode's success whenever it was in that episode's teacher context
  (`update`), whichever retriever put it there. Choices depend only on the learned state, so every query between
  two updates (a whole rollout batch) gets the same arm."""
  name = "ucb"

  def __init__(self, bank: SkillBank, rule: str, seed: int = 0, c: float = 1.0):
    super().__init__(bank, rule, seed)
    self.c = c
    self.counts = {arm: 0 for arm in bank.skills}
    self.sums = {arm: 0.0 for arm in bank.skills}

  def scores(self) -> Dict[str, float]:
    total = sum(self.counts.values())
    return {arm: (math.inf if n == 0 else self.sums[arm] / n + self.c * math.sqrt(math.log(total) / n))
            for arm, n in self.counts.items()}

  def _pick(self, query: SkillQuery, key: int, rule: str) -> List[str]:
    scores = self.scores()
    return [max(scores, key=scores.get)] if scores else []  # max keeps the first of equal scores: bank order

  def update(self, used: Sequence[Tuple[str, ...]], rewards: Sequence[float]) -> None:
    """Each task skill in a context gains one play and that episode's reward (success: 0 or 1)."""
    super().update(used, rewards)
    for names, reward in zip(used, rewards):
      for arm in dict.fromkeys(names):
        if arm in self.counts:
          self.counts[arm] += 1
          self.sums[arm] += float(reward)

  def state_dict(self) -> dict:
    return {**super().state_dict(), "counts": dict(self.counts), "sums": dict(self.sums)}

  def load_state_dict(self, state: dict) -> None:
    super().load_state_dict(state)
    if set(state["counts"]) != set(self.counts):
      raise ValueError(f"skills state: UCB arms {sorted(state['counts'])} differ from the bank's {sorted(self.counts)}")
    self.counts = {arm: int(state["counts"][arm]) for arm in self.counts}
    self.sums = {arm: float(state["sums"][arm]) for arm in self.counts}


RETRIEVERS = {cls.name: cls for cls in (KeywordMatch, WordMatch, Full, RandomSkill, UCB)}


@dataclasses.dataclass(frozen=True)
class SkillsConfig:
  """The run config's `skills` section: SDAR's SkillBank and its retrieval (docs/skills.md)."""
  bank_dir: str = ""                   # "" -> the env's shipped bank; or the SDAR authors' skills/<env>/ folder
  retrieval: str = "km"                # km (the authors' keyword matching), km_words, full, random, ucb
  ucb_c: float = 1.0                   # ucb: exploration constant c of r̄(e) + c·sqrt(ln N / n(e))

  def __post_init__(self):
    if self.retrieval not in RETRIEVERS:
      raise ValueError(f"skills.retrieval must be one of {sorted(RETRIEVERS)}, got {self.retrieval!r}")


def make_retriever(name: str, bank: SkillBank, rule: str, seed: int = 0, ucb_c: float = 1.0) -> Retriever:
  """The retriever registered as `name` (the config's `skills.retrieval`)."""
  if name not in RETRIEVERS:
    raise ValueError(f"skills.retrieval must be one of {tuple(RETRIEVERS)}, got {name!r}")
  if name == "ucb":
    return UCB(bank, rule, seed, ucb_c)
  return RETRIEVERS[name](bank, rule, seed)
