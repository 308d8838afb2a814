"""Questions over the generated encyclopedia, under the seven data-source names of the Search-R1 tables.

Each source gets the question type and phrasing of the dataset it stands for (environments.md §4.6):
  nq, triviaqa, popqa            single-hop: NQ's lower-case queries without '?', TriviaQA's quiz style, PopQA's
                                 relation templates ("What is X's occupation?")
  hotpotqa, 2wikimultihopqa      two-hop bridge ("Where was the director of film X born?") and comparison
                                 ("Who was born first, A or B?", "Are A and B of the same nationality?")
  musique, bamboogle             two-hop compositional questions, phrased differently
A question never asks for something its subject's articles do not state, its answer is unique, and bridges that
lead back to their own subject are skipped. Train and test questions of a source are disjoint: a question's key
(its plan) decides its side of the split by a hash. Question i of (seed, source, split) depends only on those and
the world, so datasets are reproducible from the seed alone.
"""
from __future__ import annotations

import random
import zlib
from typing import List, Mapping, Optional, Tuple

from agentopd_jax.envs.search.tasks import DATA_SOURCES, Plan, SearchTask
from agentopd_jax.envs.search.world import ORGS, RELATIONS, World, generate_world

SPLITS = ("train", "test")
# Bundled sizes: Search-R1 trains on NQ + HotpotQA and tests on all seven (Bamboogle's real test set has 125).
DEFAULT_SIZES = {"train": {"nq": 1000, "hotpotqa": 1000},
                 "test": {**{s: 200 for s in DATA_SOURCES}, "bamboogle": 125}}
TEST_ONE_IN = 5  # one in five question keys belongs to the test side

_SINGLE = {
    "nq": {
        "birth_year": "when was {s} born", "birth_city": "where was {s} born",
        "occupation": "what is {s}'s profession", "alma_mater": "where did {s} go to college",
        "spouse": "who is {s} married to", "country": "what country is {s} in",
        "founded_year": "when was {s} founded", "capital": "what is the capital city of {s}",
        "currency": "what currency is used in {s}", "independence_year": "when did {s} become independent",
        "year/film": "when did the movie {s} come out", "year/book": "when was the book {s} published",
        "director": "who directed the movie {s}", "studio": "which studio made the film {s}",
        "star": "who plays the lead role in {s}", "author": "who wrote the book {s}",
        "publisher": "who published the book {s}", "founder": "who founded {s}", "headquarters": "where is {s} located",
    },
    "triviaqa": {
        "birth_year": "In which year was {s} born?", "birth_city": "In which city was {s} born?",
        "occupation": "What was the profession of {s}?", "alma_mater": "At which university did {s} study?",
        "spouse": "To whom is {s} married?", "country": "{s} is a city in which country?",
        "founded_year": "In which year was {s} founded?", "capital": "Which city is the capital of {s}?",
        "currency": "What is the official currency of {s}?",
        "independence_year": "In which year did {s} gain its independence?",
        "year/film": "In which year was the film '{s}' released?",
        "year/book": "In which year was the novel '{s}' first published?",
        "genre/film": "'{s}' belongs to which film genre?", "genre/book": "What genre of novel is '{s}'?",
        "director": "Which film-maker directed '{s}'?", "studio": "Which studio produced the film '{s}'?",
        "star": "Which actor played the lead role in the film '{s}'?", "author": "Who wrote the novel '{s}'?",
        "publisher": "Which publishing house first published '{s}'?", "founder": "Who founded {s}?",
        "headquarters": "In which city is {s} based?",
    },
    "popqa": {  # PopQA's own relation templates, for the relations our world has
        "occupation": "What is {s}'s occupation?", "birth_city": "In what city was {s} born?",
        "genre/film": "What genre is {s}?", "genre/book": "What genre is {s}?",
        "country": "In what country is {s}?", "studio": "Who was the producer of {s}?",
        "director": "Who was the director of {s}?", "author": "Who was the author of {s}?",
        "capital": "What is the capital of {s}?",
    },
}

_NOMINAL = {
    "director": "the director of {s}", "star": "the lead actor of {s}", "studio": "the studio that produced {s}",
    "author": "the author of {s}", "publisher": "the publisher of {s}",
    "birth_city": "the city where {s} was born", "alma_mater": "the university {s} attended",
    "spouse": "the spouse of {s}", "country": "the country where {s} is located",
    "headquarters": "the city where {s} is based", "founder": "the founder of {s}", "capital": "the capital of {s}",
}
_FRAME = {
    "birth_city": "Where was {x} born?", "birth_year": "When was {x} born?",
    "alma_mater": "Which university did {x} attend?", "spouse": "Who is {x} married to?",
    "occupation": "What is the occupation of {x}?", "founder": "Who founded {x}?",
    "headquarters": "In which city is {x} based?", "founded_year": "When was {x} founded?",
    "country": "In which country is {x}?", "capital": "What is the capital of {x}?",
    "currency": "What is the currency of {x}?",
}
# Per-source wording on top of the defaults above.
_BRIDGE_STYLE = {
    "hotpotqa": ({}, {"birth_city": "{X} was born in which city?", "alma_mater": "{X} attended which university?",
                      "headquarters": "{X} is based in which city?", "founded_year": "{X} was founded in what year?",
                      "country": "{X} is located in which country?", "capital": "Which city is the capital of {x}?",
                      "currency": "What currency is used in {x}?", "birth_year": "In what year was {x} born?"}),
    "2wikimultihopqa": ({"director": "the director of film {s}", "star": "the lead actor of film {s}",
                         "studio": "the production company of film {s}"},
                        {"spouse": "Who is the spouse of {x}?", "alma_mater": "Where did {x} study?",
                         "birth_year": "What is the year of birth of {x}?"}),
    "musique": ({"director": "the person who directed {s}", "publisher": "the company that published {s}",
                 "birth_city": "the place where {s} was born", "author": "the person who wrote {s}"},
                {"founder": "Who was the founder of {x}?", "headquarters": "Where is {x} headquartered?"}),
    "bamboogle": ({}, {"birth_year": "In what year was {x} born?", "founded_year": "In what year was {x} founded?"}),
}
_COMPARISONS = (  # (subject kinds, relation, op, template)
    (("person",), "birth_year", "min", "Who was born first, {a} or {b}?"),
    (("person",), "birth_year", "max", "Who was born later, {a} or {b}?"),
    (("film",), "year", "min", "Which film came out first, {a} or {b}?"),
    (("film",), "year", "max", "Which film was released more recently, {a} or {b}?"),
    (("book",), "year", "min", "Which novel was published first, {a} or {b}?"),
    (ORGS, "founded_year", "min", "Which was founded first, {a} or {b}?"),
    (("person",), "nationality", "same", "Are {a} and {b} of the same nationality?"),
    (("person",), "occupation", "same", "Do {a} and {b} have the same occupation?"),
    (("city",), "country", "same", "Are {a} and {b} in the same country?"),
    (("film",), "director", "same", "Were {a} and {b} directed by the same person?"),
)
_MIX = {  # question types per source, with weights
    "nq": {"single": 1.0}, "triviaqa": {"single": 1.0}, "popqa": {"single": 1.0},
    "hotpotqa": {"bridge": 0.75, "comparison": 0.25}, "2wikimultihopqa": {"bridge": 0.5, "comparison": 0.5},
    "musique": {"bridge": 1.0}, "bamboogle": {"bridge": 1.0},
}
_TRIVIAL_BRIDGES = {("spouse", "spouse"), ("director", "occupation"), ("star", "occupation"),
                    ("author", "occupation")}


def golden_answers(relation: str, value: str) -> Tuple[str, ...]:
  """Accepted answers: the stated value, plus the obvious short form for currencies and directors."""
  if relation == "currency":
    return value, value.split()[-1]
  if relation == "occupation" and value == "film director":
    return value, "director"
  return (value,)


def _in_test(key: str) -> bool:
  return zlib.crc32(key.encode()) % TEST_ONE_IN == 0


def _template(table: Mapping[str, str], relation: str, kind: str) -> Optional[str]:
  return table.get(f"{relation}/{kind}", table.get(relation))


def _capitalize(text: str) -> str:
  return text[:1].upper() + text[1:]


class _Pools:
  """All single-hop and bridge questions of one source, shuffled; comparisons are drawn on demand."""

  def __init__(self, world: World, source: str, test: bool, rng: random.Random):
    self.world, self.source, self.test, self.rng = world, source, test, rng
    self.seen: set = set()
    self.single = self._shuffled(self._singles()) if source in _SINGLE else []
    self.bridge = self._shuffled(self._bridges()) if source in _BRIDGE_STYLE else []

  def _shuffled(self, items: List[SearchTask]) -> List[SearchTask]:
    items = [t for t in items if _in_test(t.id) == self.test]
    self.rng.shuffle(items)
    return items

  def _singles(self) -> List[SearchTask]:
    out, table = [], _SINGLE[self.source]
    for e in self.world.entities.values():
      for relation, value in e.facts.items():
        template = _template(table, relation, e.kind)
        if template is None or e.kind not in RELATIONS[relation].subjects:
          continue
        question = template.format(s=e.name)
        question = question.lower() if self.source == "nq" else question
        out.append(SearchTask(question, golden_answers(relation, value), self.source, f"{e.name}|{relation}",
                              Plan("single", ((e.name, relation),))))
    return out

  def _bridges(self) -> List[SearchTask]:
    nominals, frames = _BRIDGE_STYLE[self.source]
    out = []
    for e in self.world.entities.values():
      for first, middle in e.facts.items():
        if first not in _NOMINAL or RELATIONS[first].object_kind is None or e.kind not in RELATIONS[first].subjects:
          continue
        hop = self.world.entities[middle]
        for second, value in hop.facts.items():
          if (second not in _FRAME or (first, second) in _TRIVIAL_BRIDGES or value == e.name
              or hop.kind not in RELATIONS[second].subjects):
            continue
          nominal = nominals.get(first, _NOMINAL[first]).format(s=e.name)
          frame = frames.get(second, _FRAME[second])
          question = frame.format(x=nominal, X=_capitalize(nominal))
          out.append(SearchTask(question, golden_answers(second, value), self.source, f"{e.name}|{first}|{second}",
                                Plan("bridge", ((e.name, first), ("", second)))))
    return out

  def comparison(self) -> SearchTask:
    for _ in range(10000):
      kinds, relation, op, template = self.rng.choice(_COMPARISONS)
      group = [e for e in self.world.of_kind(*kinds) if relation in e.facts]
      a = self.rng.choice(group)
      if op == "same" and self.rng.random() < 0.5:  # balance yes and no
        group = [e for e in group if e.facts[relation] == a.facts[relation]]
      b = self.rng.choice(group)
      va, vb = a.facts[relation], b.facts[relation]
      if a.name == b.name or (op != "same" and va == vb):
        continue
      key = f"{min(a.name, b.name)}|{max(a.name, b.name)}|{relation}|{op}"
      if key in self.seen or _in_test(key) != self.test:
        continue
      self.seen.add(key)
      if op == "same":
        answer = "yes" if va == vb else "no"
      else:
        first = (int(va) < int(vb)) == (op == "min")
        answer = a.name if first else b.name
      return SearchTask(template.format(a=a.name, b=b.name), (answer,), self.source, key,
                        Plan("comparison", ((a.name, relation), (b.name, relation)), op))
    raise RuntimeError(f"could not draw a new comparison question for {self.source}; the world is too small")

  def draw(self, kind: str) -> SearchTask:
    if kind == "comparison":
      return self.comparison()
    pool = self.single if kind == "single" else self.bridge
    if not pool:
      raise ValueError(f"{self.source}: no {kind} questions left on the {'test' if self.test else 'train'} side; "
                       "ask for fewer questions or generate a larger world (scale)")
    return pool.pop()


def generate_questions(world: World, source: str, split: str, n: int, seed: int = 0) -> List[SearchTask]:
  """`n` questions of `source` on the `split` side; ids are `{source}-{split}-{i}`."""
  if source not in DATA_SOURCES:
    raise ValueError(f"unknown data source {source!r}; expected one of {DATA_SOURCES}")
  if split not in SPLITS:
    raise ValueError(f"unknown split {split!r}; expected one of {SPLITS}")
  rng = random.Random(f"search-qa-{seed}-{world.seed}-{source}-{split}")
  pools = _Pools(world, source, split == "test", rng)
  kinds, weights = zip(*_MIX[source].items())
  out = []
  for i in range(n):
    task = pools.draw(rng.choices(kinds, weights)[0])
    out.append(SearchTask(task.question, task.golden_answers, source, f"{source}-{split}-{i}", task.plan))
  return out


def bundled_tasks(split: str, seed: int = 0, sizes: Optional[Mapping[str, int]] = None,
                  world: Optional[World] = None) -> List[SearchTask]:
  """The bundled split (sources in the papers' table order): `sizes` {source: count}, default `DEFAULT_SIZES`."""
  world = world or generate_world(seed)
  sizes = DEFAULT_SIZES[split] if sizes is None else sizes
  unknown = set(sizes) - set(DATA_SOURCES)
  if unknown:
    raise ValueError(f"unknown data sources {sorted(unknown)}; expected some of {DATA_SOURCES}")
  return [t for s in DATA_SOURCES if sizes.get(s) for t in generate_questions(world, s, split, sizes[s], seed)]

