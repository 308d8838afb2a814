"""A fictional encyclopedia generated from a seed: entities with facts, written as wiki-18-style passages.

Search-R1 retrieves from Wikipedia (wiki-18), which we cannot ship; this world stands in for it. Every fact exists
only in the generated passages, so a question about it can be answered by retrieval and never from a pretrained
model's memory, and the same seed always gives byte-identical passages.

Entities: people, cities, countries, films, books and organisations (film studios, publishers, universities).
Facts link them (a film's director is a person, born in a city, in a country), which is what the multi-hop
questions walk. Each entity has an article: one sentence per fact (a few phrasings each) plus filler sentences
that mention other entities, so keyword search has distractors, cut into passages of at most four sentences.
Passages look like wiki-18 lines: `{"id": "7", "contents": "\\"Title\\"\\nTitle text..."}`, the text repeating the
title at its start as the real lines do.

`RELATIONS` pairs every fact with the patterns that read it back from its article's text; the oracle answers
through retrieval with them, and the generator checks each article against them, so phrasing and reading cannot
drift apart.
"""
from __future__ import annotations

import dataclasses
import random
import re
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

ORGS = ("studio", "publisher", "university")


@dataclasses.dataclass(frozen=True)
class Relation:
  """A fact type: whose fact it is, what kind of entity its value names (None: a literal such as a year), the
  words a searcher adds to the subject's name to find it, and the patterns (group `o`) that read it from text."""
  subjects: Tuple[str, ...]
  object_kind: Optional[str]
  keywords: str
  patterns: Tuple[re.Pattern, ...]

  def read(self, text: str) -> Optional[str]:
    for pattern in self.patterns:
      found = pattern.search(text)
      if found:
        return found.group("o").strip()
    return None


def _rel(subjects, object_kind, keywords, *patterns) -> Relation:
  subjects = (subjects,) if isinstance(subjects, str) else tuple(subjects)
  return Relation(subjects, object_kind, keywords, tuple(re.compile(p) for p in patterns))


RELATIONS: Dict[str, Relation] = {
    "birth_year": _rel("person", None, "born", r"\(born (?P<o>\d{4})\)"),
    "nationality": _rel("person", None, "born", r"\(born \d{4}\) is an? (?P<o>[A-Z]\w+) "),
    "occupation": _rel("person", None, "born", r"\(born \d{4}\) is an? [A-Z]\w+ (?P<o>[a-z][a-z ]*)\."),
    "birth_city": _rel("person", "city", "born in", r"(?:was born in|grew up in) (?P<o>[^,.]+),"),
    "alma_mater": _rel("person", "university", "studied at university",
                       r"(?:studied at|graduated from) (?P<o>[^.]+?)(?: in \d{4})?\."),
    "spouse": _rel("person", "person", "married", r"(?:is married to|married) (?P<o>[^.]+?)\."),
    "country": _rel("city", "country", "city in country", r"is an? (?:city|town) in (?P<o>[^,.]+)\."),
    "founded_year": _rel(("city",) + ORGS, None, "founded", r"founded in (?P<o>\d{4})"),
    "capital": _rel("country", "city", "capital", r"(?:Its capital is|capital and largest city is) (?P<o>[^,.]+)\."),
    "currency": _rel("country", None, "official currency", r"official currency is the (?P<o>[^.]+)\."),
    "independence_year": _rel("country", None, "became independent", r"independent in (?P<o>\d{4})"),
    "year": _rel(("film", "book"), None, "released published", r"is an? (?P<o>\d{4}) ", r"published in (?P<o>\d{4})"),
    "genre": _rel(("film", "book"), None, "genre", r"is an? \d{4} (?P<o>[\w -]+?) (?:film|novel)",
                  r"is an? (?P<o>[\w -]+?) novel written"),
    "director": _rel("film", "person", "film directed by", r"directed by (?P<o>[^.]+)\."),
    "studio": _rel("film", "studio", "film produced by", r"produced by (?P<o>[^.]+)\."),
    "star": _rel("film", "person", "lead role", r"stars (?P<o>[^.]+?) in the lead role",
                 r"lead role is played by (?P<o>[^.]+)\."),
    "author": _rel("book", "person", "novel by", r"novel by (?P<o>[^.]+)\.",
                   r"novel written by (?P<o>[^.]+?) and published"),
    "publisher": _rel("book", "publisher", "published by", r"published by (?P<o>[^.]+)\.", r"issued by (?P<o>[^.]+)\."),
    "founder": _rel(ORGS, "person", "founded by", r"founded in \d{4} by (?P<o>[^.]+)\."),
    "headquarters": _rel(ORGS, "city", "headquarters campus", r"(?:headquarters are|main campus is) in (?P<o>[^.]+)\."),
}

_ONSETS = ("b", "br", "c", "d", "dr", "f", "g", "gr", "h", "k", "l", "m", "n", "p", "r", "s", "st", "t", "th", "v",
           "w", "z", "sh", "cl", "fl")
_VOWELS = ("a", "e", "i", "o", "u", "ae", "ia", "ou", "ei")
_CODAS = ("", "", "n", "r", "l", "s", "nd", "rn", "th")
_FIRST_ENDINGS = ("", "a", "o", "en", "ia", "el", "is")
_SURNAME_ENDINGS = ("son", "ley", "ford", "wick", "er", "by", "ton", "ard", "ski", "mann", "ez", "ov")
_CITY_ENDINGS = ("ora", "heim", "port", "burg", "mouth", "vale", "stead", "grad", "polis", "ton", "wick")
_COUNTRY_ENDINGS = ("ia", "land", "mark", "onia", "ary", "istan")
_RIVER_ENDINGS = ("an", "el", "is", "ore", "une")
_REGIONS = ("the Amber Coast", "the Northern Reach", "the Salt Steppes", "the Verdant Isles", "the High Marches",
            "the Eastern Basin")
_CURRENCY_UNITS = ("crown", "mark", "florin", "thaler", "dinar", "real", "ducat", "shilling", "peso", "lira")
_OCCUPATIONS = ("painter", "composer", "architect", "physicist", "chemist", "sculptor", "poet", "journalist",
                "engineer", "economist", "mathematician", "photographer", "politician", "chess player")
_FILM_GENRES = ("drama", "comedy", "thriller", "western", "musical", "war", "science fiction", "horror", "romance",
                "adventure")
_BOOK_GENRES = ("mystery", "historical", "fantasy", "satirical", "gothic", "crime", "coming-of-age", "picaresque",
                "epistolary", "dystopian")
_FILM_ADJ = ("Silent", "Crimson", "Hidden", "Broken", "Golden", "Last", "Distant", "Burning", "Quiet", "Frozen",
             "Wandering", "Forgotten", "Hollow", "Restless", "Scarlet", "Bitter", "Endless", "Savage", "Gentle",
             "Lonely", "Midnight", "Northern", "Secret", "Shattered", "Velvet", "Wild", "Electric", "Paper")
_FILM_NOUNS = ("Harbor", "Orchard", "Lantern", "Season", "Kingdom", "Frontier", "Mirror", "Garden", "Voyage",
               "Covenant", "Horizon", "Empire", "Shadow", "Promise", "Bridge", "Circus", "Monsoon", "Station", "Tide",
               "Crown", "Valley", "Witness", "Parade", "Signal", "Carnival", "Compass", "Harvest", "Express")
_BOOK_NOUNS = ("Lighthouse", "Cartographer", "Widow", "Apprentice", "Clockmaker", "Orphan", "Ferryman", "Archivist",
               "Glassblower", "Beekeeper", "Heiress", "Stranger", "Pilgrim", "Alchemist", "Tailor", "Gardener",
               "Keeper", "Navigator", "Weaver", "Bellringer", "Lamplighter", "Astronomer", "Botanist", "Falconer")
_BOOK_ADJ = ("Winter", "Summer", "Drowned", "Patient", "Unquiet", "Painted", "Lost", "Second", "Invisible", "Reluctant",
             "Faithful", "Sleeping", "Salt", "Amber", "Little", "Long")
_BRANDS = ("Silverline", "Northgate", "Bluewater", "Redstone", "Goldleaf", "Ironbridge", "Starlight", "Oakridge",
           "Meridian", "Beacon", "Summit", "Crescent", "Granite", "Evergreen", "Lodestar", "Kingfisher")
_AWARDS = ("Prize", "Medal", "Award", "Laurel")


@dataclasses.dataclass(frozen=True)
class Entity:
  """One article subject. `facts` maps a relation name to its value, always a string (years as digits); a value
  naming another entity is that entity's exact name."""
  name: str
  kind: str
  facts: Mapping[str, str]


@dataclasses.dataclass(frozen=True)
class World:
  seed: int
  entities: Mapping[str, Entity]
  passages: Tuple[Dict[str, str], ...]  # wiki-18 rows: {"id", "contents"}

  def of_kind(self, *kinds: str) -> List[Entity]:
    return [e for e in self.entities.values() if e.kind in kinds]


def passage_title(contents: str) -> str:
  """The title of a wiki-18 passage (first line, quotes removed), as Search-R1's BM25 index stores it."""
  return contents.split("\n", 1)[0].strip('"')


def passage_text(contents: str) -> str:
  return contents.split("\n", 1)[1] if "\n" in contents else ""


def _article(word: str) -> str:
  return "an" if word[:1].lower() in "aeiou" or word.startswith("18") or word.startswith("11") else "a"


def _join(names: Sequence[str]) -> str:
  return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


class _Builder:
  """Draws entities in dependency order (places, then people, then works and organisations) from one RNG."""

  def __init__(self, seed: int, scale: float):
    self.rng = random.Random(f"search-world-{seed}")
    self.scale = scale
    self.used: set = set()
    self.facts: Dict[str, Dict[str, str]] = {}
    self.kinds: Dict[str, str] = {}
    self.extra: Dict[str, Dict] = {}  # generation-only details: pronouns, filler, works lists

  def n(self, base: int) -> int:
    return max(2, round(base * self.scale))

  def unique(self, make) -> str:
    for _ in range(1000):
      name = make()
      if name not in self.used and name.lower() not in self.used:
        self.used.update((name, name.lower()))
        return name
    raise RuntimeError("the name space is exhausted; lower the world scale")

  def syllables(self, k: int) -> str:
    r = self.rng
    return "".join(r.choice(_ONSETS) + r.choice(_VOWELS) + r.choice(_CODAS) for _ in range(k))

  def word(self, endings: Sequence[str], k: int = 1) -> str:
    return (self.syllables(k) + self.rng.choice(endings)).capitalize()

  def add(self, name: str, kind: str, **facts):
    self.kinds[name] = kind
    self.facts[name] = {k: str(v) for k, v in facts.items()}
    self.extra[name] = {}

  # ------------------------------------------------------------------------------------------ places
  def places(self):
    self.cities: Dict[str, List[str]] = {}
    for _ in range(self.n(10)):
      name = self.unique(lambda: self.word(_COUNTRY_ENDINGS))
      adjective = (name + "n" if name.endswith("ia") else name + "ic" if name.endswith("land") else
                   name + "i" if name.endswith("istan") else name[:-1] + "ian" if name.endswith("ary") else
                   name + "ish")
      currency = f"{adjective} {self.rng.choice(_CURRENCY_UNITS)}"
      self.add(name, "country", currency=currency, independence_year=self.rng.randint(1780, 1975))
      self.extra[name].update(adjective=adjective, region=self.rng.choice(_REGIONS))
      self.cities[name] = []
      for _ in range(self.n(6)):
        city = self.unique(lambda: self.word(_CITY_ENDINGS))
        self.add(city, "city", country=name, founded_year=self.rng.randint(1000, 1900))
        self.extra[city].update(river=self.word(_RIVER_ENDINGS) + " River", population=self.rng.randint(8, 900) * 997)
        self.cities[name].append(city)
      self.facts[name]["capital"] = self.cities[name][0]
    self.all_cities = [c for cs in self.cities.values() for c in cs]

  # ------------------------------------------------------------------------------------------ people
  def people(self):
    r = self.rng
    roles = (["film director"] * self.n(45) + ["actor"] * self.n(70) + ["novelist"] * self.n(60))
    roles += [r.choice(_OCCUPATIONS) for _ in range(self.n(400) - len(roles))]
    r.shuffle(roles)
    self.people_by_role: Dict[str, List[str]] = {}
    for occupation in roles:
      name = self.unique(lambda: f"{self.word(_FIRST_ENDINGS)} {self.word(_SURNAME_ENDINGS)}")
      city = r.choice(self.all_cities)
      country = self.facts[city]["country"]
      self.add(name, "person", birth_year=r.randint(1850, 1985), birth_city=city, occupation=occupation,
               nationality=self.extra[country]["adjective"])
      self.extra[name]["he"] = r.choice(("He", "She"))
      self.people_by_role.setdefault(occupation, []).append(name)
    people = [n for n, k in self.kinds.items() if k == "person"]
    shuffled = people[:]
    r.shuffle(shuffled)
    couples = self.n(60)
    for a, b in zip(shuffled[:couples], shuffled[couples:2 * couples]):
      self.facts[a]["spouse"], self.facts[b]["spouse"] = b, a
    self.people = people

  # ------------------------------------------------------------------------------------------ organisations
  def organisations(self):
    r = self.rng
    makers = {
        "studio": lambda: r.choice((f"{self.word(_SURNAME_ENDINGS)} Pictures", f"{r.choice(_BRANDS)} Films",
                                    f"{r.choice(self.all_cities)} Studios")),
        "publisher": lambda: r.choice((f"{self.word(_SURNAME_ENDINGS)} House", f"{r.choice(_BRANDS)} Press",
                                       f"{r.choice(self.all_cities)} Books")),
        "university": lambda: r.choice((f"{self.word(_SURNAME_ENDINGS)} University",
                                        f"University of {r.choice(self.all_cities)}")),
    }
    self.orgs: Dict[str, List[str]] = {}
    for kind, count in (("studio", 25), ("publisher", 25), ("university", 20)):
      self.orgs[kind] = []
      for _ in range(self.n(count)):
        name = self.unique(makers[kind])
        home = name[len("University of "):] if name.startswith("University of ") else r.choice(self.all_cities)
        if name.endswith(" Studios") or name.endswith(" Books"):
          home = name.rsplit(" ", 1)[0]
        year = r.randint(1800, 1980)
        elders = [p for p in self.people if int(self.facts[p]["birth_year"]) <= year - 20] or self.people
        self.add(name, kind, founded_year=year, founder=r.choice(elders), headquarters=home)
        self.extra[name]["size"] = r.randint(12, 400)
        self.orgs[kind].append(name)
    for person in self.people:
      if r.random() < 0.45:
        self.facts[person]["alma_mater"] = r.choice(self.orgs["university"])
        self.extra[person]["graduated"] = int(self.facts[person]["birth_year"]) + r.randint(20, 26)

  # ------------------------------------------------------------------------------------------ works
  def works(self):
    r = self.rng
    for kind, count, genres, role in (("film", 220, _FILM_GENRES, "film director"),
                                      ("book", 200, _BOOK_GENRES, "novelist")):
      for _ in range(self.n(count)):
        if kind == "film":
          title = self.unique(lambda: r.choice((f"The {r.choice(_FILM_ADJ)} {r.choice(_FILM_NOUNS)}",
                                                f"{r.choice(_FILM_ADJ)} {r.choice(_FILM_NOUNS)}")))
        else:
          title = self.unique(lambda: r.choice((f"The {r.choice(_BOOK_ADJ)} {r.choice(_BOOK_NOUNS)}",
                                                f"The {r.choice(_BOOK_NOUNS)} of {r.choice(self.all_cities)}")))
        maker = r.choice(self.people_by_role[role])
        year = int(self.facts[maker]["birth_year"]) + r.randint(22, 60)
        facts = dict(year=year, genre=r.choice(genres))
        if kind == "film":
          facts.update(director=maker, studio=r.choice(self.orgs["studio"]),
                       star=r.choice(self.people_by_role["actor"]))
        else:
          facts.update(author=maker, publisher=r.choice(self.orgs["publisher"]))
        self.add(title, kind, **facts)
        self.extra[title].update(variant=r.randrange(2), setting=r.choice(self.all_cities))
        self.extra[maker].setdefault("works", []).append(title)
        if kind == "film":
          self.extra[facts["star"]].setdefault("roles", []).append(title)


def _person_sentences(b: _Builder, name: str, f: Mapping[str, str], x: Mapping) -> List[str]:
  r, he = b.rng, x["he"]
  country = b.facts[f["birth_city"]]["country"]
  out = [f"{name} (born {f['birth_year']}) is {_article(f['nationality'])} {f['nationality']} {f['occupation']}.",
         r.choice((f"{he} was born in {f['birth_city']}, {country}.",
                   f"{he} grew up in {f['birth_city']}, {country}, where {he.lower()} was born."))]
  if "alma_mater" in f:
    out.append(r.choice((f"{he} studied at {f['alma_mater']}.",
                         f"{he} graduated from {f['alma_mater']} in {x['graduated']}.")))
  if x.get("works"):
    verb = "directed" if f["occupation"] == "film director" else "wrote"
    out.append(f"{he} {verb} {_join(x['works'][:3])}.")
  if x.get("roles"):
    out.append(f"{he} appeared in {_join(x['roles'][:3])}.")
  if "spouse" in f:
    year = int(f["birth_year"]) + r.randint(20, 40)
    out.append(r.choice((f"{he} is married to {f['spouse']}.", f"In {year}, {he.lower()} married {f['spouse']}.")))
  if r.random() < 0.4:
    award = f"{b.word(_SURNAME_ENDINGS)} {r.choice(_AWARDS)}"
    out.append(f"{he} received the {award} in {int(f['birth_year']) + r.randint(30, 60)}.")
  return out


def _sentences(b: _Builder, name: str) -> List[str]:
  """The article of one entity, one sentence per fact (phrasing drawn from the RNG) plus fillers."""
  r, kind, f, x = b.rng, b.kinds[name], b.facts[name], b.extra[name]
  if kind == "person":
    return _person_sentences(b, name, f, x)
  if kind == "city":
    out = [f"{name} is {r.choice(('a city', 'a town'))} in {f['country']}."]
    if b.facts[f["country"]]["capital"] == name:
      out.append(f"It is the capital of {f['country']}.")
    out.append(r.choice((f"It was founded in {f['founded_year']}.",
                         f"The settlement was founded in {f['founded_year']}.")))
    out.append(f"{name} lies on the {x['river']} and has about {x['population']:,} inhabitants.")
    return out
  if kind == "country":
    return [f"{name} is a country in {x['region']}.",
            r.choice((f"Its capital is {f['capital']}.", f"The capital and largest city is {f['capital']}.")),
            f"The official currency is the {f['currency']}.",
            f"{name} became independent in {f['independence_year']}."]
  if kind == "film":
    return [f"{name} is {_article(f['year'])} {f['year']} {f['genre']} film directed by {f['director']}.",
            r.choice((f"It was produced by {f['studio']}.", f"The film was produced by {f['studio']}.")),
            r.choice((f"The film stars {f['star']} in the lead role.", f"The lead role is played by {f['star']}.")),
            f"It premiered in {x['setting']}."]
  if kind == "book":
    first = (f"{name} is {_article(f['year'])} {f['year']} {f['genre']} novel by {f['author']}." if x["variant"] else
             f"{name} is {_article(f['genre'])} {f['genre']} novel written by {f['author']} and published in "
             f"{f['year']}.")
    return [first, r.choice((f"It was first published by {f['publisher']}.",
                             f"The first edition was issued by {f['publisher']}.")),
            f"The story is set in {x['setting']}."]
  what = {"studio": "a film studio", "publisher": "a publishing house", "university": "a university"}[kind]
  where = "Its main campus is in" if kind == "university" else "Its headquarters are in"
  size = {"studio": f"It has released more than {x['size']} films.",
          "publisher": f"It publishes about {x['size']} titles a year.",
          "university": f"It enrols about {x['size'] * 100:,} students."}[kind]
  return [f"{name} is {what} founded in {f['founded_year']} by {f['founder']}.", f"{where} {f['headquarters']}.", size]


def _check_readable(name: str, kind: str, facts: Mapping[str, str], text: str):
  """Every fact must read back from its own article, or the oracle (and any reader) could not find it."""
  for relation, value in facts.items():
    if kind in RELATIONS[relation].subjects and RELATIONS[relation].read(text) != value:
      raise AssertionError(f"{name}: {relation}={value!r} does not read back from its article: {text!r}")


def generate_world(seed: int = 0, scale: float = 1.0, sentences_per_passage: int = 4) -> World:
  """The encyclopedia of `seed`; `scale` multiplies every entity count (1.0: 960 entities, 1028 passages)."""
  b = _Builder(seed, scale)
  b.places()
  b.people()
  b.organisations()
  b.works()
  entities, passages = {}, []
  for name, kind in b.kinds.items():
    sentences = _sentences(b, name)
    _check_readable(name, kind, b.facts[name], " ".join(sentences))
    entities[name] = Entity(name, kind, dict(b.facts[name]))
    for start in range(0, len(sentences), sentences_per_passage):
      text = " ".join(sentences[start:start + sentences_per_passage])
      passages.append({"id": str(len(passages)), "contents": f'"{name}"\n{name} {text}'})
  return World(seed=seed, entities=entities, passages=tuple(passages))
