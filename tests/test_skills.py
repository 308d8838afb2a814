"""SDAR's SkillBank and retrieval (`agentopd_jax.skills`): SDAR's on-disk layout, its keyword-matching rules with their
quirks (golden cases), the word-boundary variant, full / random / UCB, retriever state across a resume, and the banks
each env ships (loadable, complete, and their keywords true to our catalogue)."""
import json
import math
import pickle
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentopd_jax.envs import registry
from agentopd_jax.envs.search.tasks import SearchTask
from agentopd_jax.skills import (GENERAL, RETRIEVERS, SkillBank, SkillQuery, make_retriever, privileged_prefix,
                                 retriever_for)

ROOT = Path(__file__).resolve().parents[1]
ENVS = ("alfworld", "webshop", "search")


def write_bank(folder: Path, mapping: dict, texts: dict) -> Path:
  """A bank in SDAR's layout: skill_mapping.json and one markdown file per skill (text "<name> text\\n")."""
  folder.mkdir(parents=True, exist_ok=True)
  (folder / "skill_mapping.json").write_text(json.dumps(mapping))
  for name, filename in mapping["skill_files"].items():
    (folder / filename).write_text(texts.get(name, f"{name} text") + "\n")
  return folder


def sdar_like(tmp_path, name="bank", general=True) -> SkillBank:
  """SDAR's WebShop/ALFWorld mapping shapes with short keywords that fire inside longer words."""
  files = {"apparel": "apparel.md", "footwear": "footwear.md", "accessories": "accessories.md", "other": "other.md"}
  if general:
    files = {GENERAL: "general_skills.md", **files}
  mapping = {"skill_files": files,
             "task_to_skill": {"apparel": "apparel", "footwear": "footwear", "accessories": "accessories",
                               "other": "other", "pick_and_place": "apparel",
                               "pick_two_obj_and_place": "apparel", "look_at_obj_in_light": "footwear",
                               "pick_heat_then_place_in_recep": "accessories"},
             "task_keywords": {"apparel": ["shirt", "dress"], "footwear": ["shoe", "heel"],
                               "accessories": ["hat", "watch"], "other": []}}
  return SkillBank.load(write_bank(tmp_path / name, mapping, {}))


def km(bank, name="km", rule="keywords", **query):
  return make_retriever(name, bank, rule).retrieve(SkillQuery(**query), key=0)


# ------------------------------------------------------------------------------------------------ loading
def test_loads_sdar_layout_strips_texts_and_keeps_file_order(tmp_path):
  bank = sdar_like(tmp_path)
  assert bank.general == "general_skills text"  # SDAR reads every file .strip()ped
  assert list(bank.skills) == ["apparel", "footwear", "accessories", "other"]
  assert bank.task_keywords["footwear"] == ("shoe", "heel") and bank.claude is None
  got = km(bank, prompt="a shirt and a shoe")
  assert got.text == "general_skills text\n\napparel text\n\nfootwear text"
  assert got.skills == (GENERAL, "apparel", "footwear")


def test_a_bank_without_general_skills_still_joins_an_empty_general(tmp_path):
  """SDAR's `_get_skill_text` starts from `skill_contents.get("general_skills", "")` and joins with "\\n\\n"."""
  bank = sdar_like(tmp_path, general=False)
  assert bank.general == ""
  assert km(bank, prompt="a shirt").text == "\n\napparel text"
  assert km(bank, prompt="nothing").text == ""


def test_claude_style_only_folder_renders_markdown(tmp_path):
  folder = tmp_path / "claude"
  folder.mkdir()
  skill = {"skill_id": "g1", "title": "Look Around", "principle": "Check each place once",
           "when_to_apply": "After reading the goal."}
  (folder / "claude_style_skills_search.json").write_text(json.dumps({
      "general_skills": [skill, {**skill, "title": "Count", "when_to_apply": "Several objects are needed"}],
      "query_type_skills": {"heat": [{**skill, "title": "Heat First"}]},
      "common_mistakes": [{"mistake_id": "m1"}], "metadata": {"source": "test"}}))
  bank = SkillBank.load(folder)
  assert bank.general == ("### GENERAL SKILLS ###\n\nHere are some useful general strategies for completing tasks in "
                          "this environment:\n\n1. Look Around: Check each place once. Apply this after reading the "
                          "goal.\n\n2. Count: Check each place once. Apply this when several objects are needed.")
  assert bank.skills == {"heat": "### TASK: heat ###\n\nFor this heat task, apply these specific strategies:\n\n"
                                 "1. Heat First: Check each place once. Apply this after reading the goal."}
  assert bank.task_to_skill == {"heat": "heat"} and bank.task_keywords == {}
  assert bank.claude["common_mistakes"] == [{"mistake_id": "m1"}]
  assert km(bank, rule="gamefile", gamefile="json/pick_heat_then_place_in_recep-Egg/").skills == (GENERAL, "heat")


def test_claude_json_next_to_a_mapping_is_exposed_not_used(tmp_path):
  bank = sdar_like(tmp_path)
  (Path(bank.directory) / "claude_style_skills.json").write_text(json.dumps({"general_skills": [], "metadata": {}}))
  again = SkillBank.load(bank.directory)
  assert again.claude == {"general_skills": [], "metadata": {}} and again.general == bank.general


@pytest.mark.parametrize("breakage, message", [
    (lambda f: (f / "footwear.md").unlink(), r"skill_files\['footwear'\]: no such file .*footwear\.md"),
    (lambda f: (f / "skill_mapping.json").write_text("{oops"), r"skill_mapping\.json: not valid JSON"),
    (lambda f: _edit(f, lambda m: m["task_to_skill"].update(boots="boots")),
     r"task_to_skill\['boots'\] = 'boots' is not a skill_files name"),
    (lambda f: _edit(f, lambda m: m.pop("skill_files")), r"missing field 'skill_files'"),
    (lambda f: _edit(f, lambda m: m["task_keywords"].update(boots=["boot"])),
     r"task_keywords\['boots'\] names no task_to_skill task type"),
    (lambda f: _edit(f, lambda m: m["task_keywords"].update(other="boot")), r"task_keywords must map task types"),
    (lambda f: (f / "skill_mapping.json").unlink(), r"neither skill_mapping\.json nor claude_style_skills\.json"),
])
def test_a_broken_bank_is_one_error_naming_the_file_or_field(tmp_path, breakage, message):
  folder = Path(sdar_like(tmp_path).directory)
  breakage(folder)
  with pytest.raises(ValueError, match=message):
    SkillBank.load(folder)


def _edit(folder: Path, change) -> None:
  mapping = json.loads((folder / "skill_mapping.json").read_text())
  change(mapping)
  (folder / "skill_mapping.json").write_text(json.dumps(mapping))


def test_bad_names_are_errors(tmp_path):
  bank = sdar_like(tmp_path)
  with pytest.raises(ValueError, match=r"skills.retrieval must be one of \('km', 'km_words', 'full', 'random', 'ucb'"):
    make_retriever("bm25", bank, "keywords")
  with pytest.raises(ValueError, match="skill rule must be one of"):
    make_retriever("km", bank, "text")
  with pytest.raises(ValueError, match="skill bank: no such folder"):
    SkillBank.load(tmp_path / "missing")


# ------------------------------------------------------------------------------------------------ KM rules
def test_privileged_prefix_is_sdar_bytes():
  assert privileged_prefix("A\n\nB") == "[Privileged Skill Information]\nA\n\nB\n\n"


@pytest.mark.parametrize("task_type, skill", [
    ("pick_and_place_simple", "pick_and_place"), ("pick_two_obj_and_place", "pick_and_place"),
    ("look_at_obj_in_light", "look_at_obj_in_light"), ("pick_heat_then_place_in_recep", "heat"),
    ("pick_cool_then_place_in_recep", "cool"), ("pick_clean_then_place_in_recep", "clean")])
def test_alfworld_gamefile_rule_on_every_task_type(task_type, skill):
  path = f"/data/json_2.1.1/valid_seen/{task_type}-Mug-None-Shelf-225/trial_T20190907_000000_000001/game.tw-pddl"
  for name in ("km", "km_words"):
    retriever, query = retriever_for("alfworld", retrieval=name)
    assert retriever.retrieve(SkillQuery(**query(path)), 0).skills == (GENERAL, skill)


def test_gamefile_rule_first_key_substring_versus_path_fields(tmp_path):
  bank = sdar_like(tmp_path)
  # SDAR's key "pick_and_place" is a substring of ALFWorld's "pick_and_place_simple" folder, not a field of it.
  simple = "/d/train/pick_and_place_simple-Book-None-Sofa-225/trial_1/game.tw-pddl"
  assert km(bank, rule="gamefile", gamefile=simple).skills == (GENERAL, "apparel")
  assert km(bank, "km_words", rule="gamefile", gamefile=simple).skills == (GENERAL,)
  # The first key in mapping order wins under KM, even one that only occurs in the data folder's name.
  odd = "/runs/look_at_obj_in_light_data/pick_heat_then_place_in_recep-Egg-None-Shelf-5/t/game.tw-pddl"
  assert km(bank, rule="gamefile", gamefile=odd).skills == (GENERAL, "footwear")
  assert km(bank, "km_words", rule="gamefile", gamefile=odd).skills == (GENERAL, "accessories")
  assert km(bank, rule="gamefile", gamefile="").skills == (GENERAL,)


def test_webshop_keywords_fire_inside_longer_words_under_km_only(tmp_path):
  bank = sdar_like(tmp_path)
  prompt = "<|im_start|>user\nTask: i need a wheel cover that is black, and price lower than 30.00 dollars"
  assert km(bank, prompt=prompt).skills == (GENERAL, "footwear", "accessories")  # "heel" in wheel, "hat" in that
  assert km(bank, "km_words", prompt=prompt).skills == (GENERAL,)
  assert km(bank, prompt="a HAT and a Dress").skills == (GENERAL, "apparel", "accessories")  # mapping order
  assert km(bank, "km_words", prompt="hats and shoes").skills == (GENERAL,)  # whole words only
  assert km(bank, prompt="a hat").text == "general_skills text\n\naccessories text"


def test_webshop_goes_through_sdars_compare_gate_first(tmp_path):
  """SDAR types WebShop prompts with data_source "text": "which" + "or" without "for" is "compare", which WebShop's
  mapping lacks, so the context is the general skills only."""
  bank = sdar_like(tmp_path)
  assert km(bank, prompt="which shirt, red or blue?").skills == (GENERAL,)
  assert km(bank, prompt="which shirt, red or blue, for me?").skills == (GENERAL, "apparel")
  # "or" in "color" and "for" in "format": the gate differs between the substring and the word tests.
  assert km(bank, prompt="which color of shirt in this format").skills == (GENERAL, "apparel")
  assert km(bank, "km_words", prompt="which color of shirt in this format").skills == (GENERAL, "apparel")
  assert km(bank, "km_words", prompt="which shirt or dress in this format").skills == (GENERAL,)


@pytest.mark.parametrize("source, prompt, want, want_words", [
    ("popqa", "Which one or the other?", "entity_attribute_lookup", "entity_attribute_lookup"),
    ("nq", "which or", "direct_retrieval", "direct_retrieval"),
    ("triviaqa", "", "direct_retrieval", "direct_retrieval"),
    ("hotpotqa", "Which film came out first, A or B?", "multi_hop_reasoning", "multi_hop_reasoning"),
    ("2wikimultihopqa", "Which film came out first, A or B?", "compare", "compare"),
    ("bamboogle", "WHICH one, A OR B?", "compare", "compare"),
    ("musique", "Which director made The Quiet Harbor?", "compare", "multi_hop_reasoning"),  # "or" in director
    ("2wikimultihopqa", "Which was founded first, Ashford House or Kel Press?", "multi_hop_reasoning", "compare"),
    ("musique", "Who founded the studio?", "multi_hop_reasoning", "multi_hop_reasoning"),
    ("custom", "Which one, A or B?", "compare", "compare"),
    ("custom", "Who founded the studio?", None, None),
    ("text", "Which one is it?", None, None),  # the keyword path; the search bank has no task_keywords
])
def test_search_rule(source, prompt, want, want_words):
  for name, expected in (("km", want), ("km_words", want_words)):
    retriever, query = retriever_for("search", retrieval=name)
    task = SearchTask(prompt, ("x",), source, "id")
    got = retriever.retrieve(SkillQuery(prompt=prompt, **query(task)), 0)
    assert got.skills == (GENERAL,) + ((expected,) if expected else ()), name


def test_prompt_rule_is_keywords_alone(tmp_path):
  """SDAR's `get_privileged_info_from_prompt`: no compare test, no game file, no data source."""
  bank = sdar_like(tmp_path)
  assert km(bank, rule="prompt", prompt="which shirt, red or blue?").skills == (GENERAL, "apparel")
  assert km(bank, rule="prompt", prompt="nothing here", gamefile="pick_and_place/").skills == (GENERAL,)
  retriever, query = retriever_for("search")
  task = SearchTask("Which one, A or B?", ("x",), "nq", "id")
  assert retriever.retrieve(SkillQuery(prompt=task.question, **query(task)), 0).skills == (GENERAL, "direct_retrieval")
  assert retriever.retrieve(SkillQuery(prompt=task.question, **query(task)), 0, "prompt").skills == (GENERAL,)
  with pytest.raises(ValueError, match="skill rule"):
    retriever.retrieve(SkillQuery(), 0, "words")


def test_student_prompt_skills_match_by_keywords_like_sdars_skill_grpo_collector():
  """Skill-GRPO's student prompts: a search question gets the general skills alone whatever its data source (the
  search bank has no keywords); an ALFWorld prompt is typed by its words, not its game file. Placed raw, as the
  teacher reads them, the skills follow the env's rule."""
  from agentopd_jax.skills.context import SkillContext

  ctx = SkillContext("search")
  tasks = [SearchTask("Who founded the studio?", ("x",), "nq", "id")]
  context, used = ctx.prompt_context(tasks, key=0)
  assert context.prefix(0, "Your question: Who founded the studio?") == privileged_prefix(ctx.retriever.bank.general)
  assert used == {0: {GENERAL}}
  context, used = ctx.prompt_context(tasks, key=0, placement="raw")
  context.prefix(0, "Your question: Who founded the studio?")
  assert used == {0: {GENERAL, "direct_retrieval"}}
  ctx = SkillContext("alfworld")
  context, used = ctx.prompt_context(["json/pick_heat_then_place_in_recep-Egg/"], key=0)
  context.prefix(0, "Your task is to: clean some mug and put it in coffeemachine.")
  assert used == {0: {GENERAL, "clean", "pick_and_place"}}


# ------------------------------------------------------------------------------------ full, random, UCB, state
def test_full_is_general_and_every_task_skill_in_file_order(tmp_path):
  bank = sdar_like(tmp_path)
  got = km(bank, "full", prompt="anything")
  assert got.skills == (GENERAL, "apparel", "footwear", "accessories", "other")
  assert got.text == "\n\n".join(["general_skills text"] + [f"{n} text" for n in got.skills[1:]])


def test_random_is_one_task_skill_determined_by_seed_and_key(tmp_path):
  bank = sdar_like(tmp_path)
  draws = {seed: [make_retriever("random", bank, "keywords", seed=seed).retrieve(SkillQuery(), k).skills
                  for k in range(200)] for seed in (0, 1)}
  again = make_retriever("random", bank, "keywords", seed=0)
  assert [again.retrieve(SkillQuery(prompt="a shirt"), k).skills for k in range(200)] == draws[0]
  assert draws[0] != draws[1]
  assert {d[1] for d in draws[0]} == set(bank.skills) and all(len(d) == 2 and d[0] == GENERAL for d in draws[0])


def test_ucb_plays_unplayed_arms_in_bank_order_then_the_highest_bound(tmp_path):
  mapping = {"skill_files": {GENERAL: "g.md", "a": "a.md", "b": "b.md", "c": "c.md"},
             "task_to_skill": {"a": "a", "b": "b", "c": "c"}}
  ucb = make_retriever("ucb", SkillBank.load(write_bank(tmp_path / "abc", mapping, {})), "search", ucb_c=1.0)
  chosen = []
  for reward in (1.0, 0.0, 0.0, 0.0, 0.0):
    used = ucb.retrieve(SkillQuery(), key=len(chosen)).skills
    chosen.append(used[1])
    ucb.update([used], [reward])
  # a, b, c unplayed; then a: 1 + sqrt(ln 3) = 2.05 > 1.05; then a: 0.5 + sqrt(ln 4 / 2) = 1.33 > sqrt(ln 4) = 1.18
  assert chosen == ["a", "b", "c", "a", "a"]
  scores = ucb.scores()  # N = 5: a = 1/3 + sqrt(ln 5 / 3) = 1.07 < b = c = sqrt(ln 5) = 1.27, b first in the bank
  assert scores["a"] == pytest.approx(1 / 3 + math.sqrt(math.log(5) / 3))
  assert scores["b"] == scores["c"] == pytest.approx(math.sqrt(math.log(5)))
  assert ucb.retrieve(SkillQuery(), 9).skills == (GENERAL, "b")
  ucb.update([(GENERAL, "a", "b", "c")], [1.0])  # a full context rewards every skill in it
  assert ucb.counts == {"a": 4, "b": 2, "c": 2} and ucb.sums == {"a": 2.0, "b": 1.0, "c": 1.0}
  with pytest.raises(ValueError, match="2 contexts but 1 rewards"):
    ucb.update([("a",), ("b",)], [1.0])


@pytest.mark.parametrize("name", list(RETRIEVERS))
def test_state_round_trip_gives_the_same_next_choices(tmp_path, name):
  bank = SkillBank.load(registry.get("webshop").skills.bank)
  first = make_retriever(name, bank, "keywords", seed=3, ucb_c=0.5)
  for step in range(12):
    used = [first.retrieve(SkillQuery(prompt=f"a t-shirt and {step} sandals"), 100 * step + i).skills
            for i in range(3)]
    first.update(used, [float((step + i) % 3 == 0) for i in range(3)])
  state = json.loads(json.dumps(first.state_dict()))  # a checkpoint stores it as JSON
  second = make_retriever(name, bank, "keywords", seed=3, ucb_c=0.5)
  second.load_state_dict(state)
  assert second.hits == first.hits and sum(first.hits.values()) > 0
  for step in range(12, 20):
    a, b = (r.retrieve(SkillQuery(prompt="a hoodie"), step).skills for r in (first, second))
    assert a == b
    first.update([a], [1.0])
    second.update([b], [1.0])
  assert second.state_dict() == first.state_dict()
  other = "km" if name != "km" else "full"
  with pytest.raises(ValueError, match=f"skills state is of retrieval '{name}'"):
    make_retriever(other, bank, "keywords").load_state_dict(state)


# ------------------------------------------------------------------------------------------ shipped banks
@pytest.mark.parametrize("env", ENVS)
def test_each_env_ships_a_complete_bank(env):
  spec = registry.get(env).skills
  bank = SkillBank.load(spec.bank)
  folder = Path(spec.bank)
  assert folder == ROOT / "agentopd_jax" / "skills" / "banks" / env
  mapping = json.loads((folder / "skill_mapping.json").read_text())
  assert {p.name for p in folder.iterdir()} == set(mapping["skill_files"].values()) | {"skill_mapping.json"}
  assert bank.general.startswith("### GENERAL SKILLS ###\n\n") and set(bank.task_to_skill.values()) == set(bank.skills)
  for name, text in bank.skills.items():
    assert text.startswith(f"### TASK: {name} ###\n\n") and "\n\n1. " in text and "Apply this" in text
  pickle.dumps(spec.query)  # env workers and teacher processes may receive it


def test_alfworld_bank_covers_every_task_type_and_stays_short():
  from agentopd_jax.envs.alfworld.vocab import TASK_TYPES

  bank = SkillBank.load(registry.get("alfworld").skills.bank)
  assert set(bank.task_to_skill) == set(TASK_TYPES.values())
  assert list(bank.skills) == ["pick_and_place", "look_at_obj_in_light", "clean", "heat", "cool"]  # SDAR's files
  assert len(bank.general.split()) <= 135 and max(len(t.split()) for t in bank.skills.values()) <= 115


def test_alfworld_bank_placement_facts_hold_in_generated_games():
  """What "Tables First" and "Skip the Destination" say of the default games (scene 225): an object at its home is on
  coffeetable 2, or sidetable 1 when a coffeetable is the destination; none starts in a receptacle of the goal's type."""
  from agentopd_jax.envs.alfworld import generator
  from agentopd_jax.envs.alfworld.engine_fast import FastEngine

  bank = SkillBank.load(registry.get("alfworld").skills.bank)
  assert "coffeetable 2 (sidetable 1 when the goal is a coffeetable)" in bank.general
  assert "never starts in a receptacle of the goal's type" in bank.skills["pick_and_place"]
  for task_type in ("pick_and_place_simple", "look_at_obj_in_light"):
    for home_prob in (1.0, 0.0):
      for i in range(20):
        game = generator.make_game("train", 20, i, 0, (task_type,), (225,), (1, 2), home_prob)
        engine = FastEngine(generator.game_file(game, "2.1.3", None))
        engine.reset()
        names = engine.world.names
        starts = [names[r] for o, r in engine.facts["inreceptacle"] if names[o].startswith(game.task.obj.lower() + " ")]
        home = "sidetable 1" if game.task.target == "CoffeeTable" else "coffeetable 2"
        assert starts and (home_prob == 0 or set(starts) == {home}), (game.dirname, starts)
        if not game.task.is_look:
          assert not any(s.startswith(game.task.target.lower() + " ") for s in starts), (game.dirname, starts)


def test_search_bank_has_sdars_four_question_types():
  bank = SkillBank.load(registry.get("search").skills.bank)
  assert list(bank.task_to_skill) == ["direct_retrieval", "multi_hop_reasoning", "entity_attribute_lookup", "compare"]


def test_webshop_keywords_type_every_catalogue_noun_by_whole_words():
  """Each product noun of our generated catalogue is typed by `km_words` as its category and nothing else, but for the
  one overlap: a coffee table is furniture ("table") and names food ("coffee")."""
  from agentopd_jax.envs.webshop import vocab

  special = {"men's running shoes": "footwear", "women's sandals": "footwear", "necklaces for women": "accessories"}
  by_category = {"fashion": "apparel", "beauty": "beauty_health", "furniture": "home_decor",
                 "electronics": "electronics", "food": "other"}
  retriever, query = retriever_for("webshop", retrieval="km_words")
  assert list(retriever.bank.task_keywords) == ["apparel", "footwear", "home_decor", "electronics", "accessories",
                                                "beauty_health", "other"]
  for kind in vocab.TYPES:
    want = special.get(kind.query, by_category[kind.category])
    for noun in kind.nouns:
      got = retriever.retrieve(SkillQuery(prompt=f"Task: find me some {noun} for home", **query(0)), 0).skills
      assert got[1:] == ((want, "other") if "coffee table" in noun else (want,)), (noun, got)


def test_query_fields_of_each_env():
  assert registry.get("alfworld").skills.query("/g/game.tw-pddl") == {"gamefile": "/g/game.tw-pddl"}
  assert registry.get("webshop").skills.query(7) == {}
  assert registry.get("search").skills.query(SearchTask("q", ("a",), "nq", "i")) == {"data_source": "nq"}
  assert [registry.get(e).skills.rule for e in ENVS] == ["gamefile", "keywords", "search"]


def test_retriever_for_takes_a_bank_dir_and_rejects_envs_without_a_bank(tmp_path, monkeypatch):
  bank = sdar_like(tmp_path)
  retriever, _ = retriever_for("webshop", bank_dir=bank.directory, retrieval="full")
  assert list(retriever.bank.skills) == ["apparel", "footwear", "accessories", "other"]
  with pytest.raises(ValueError, match="skills.bank_dir: no such folder"):
    retriever_for("webshop", bank_dir=str(tmp_path / "nowhere"))
  plain = registry.EnvSpec(name="plain", tasks=None, worker=None, text_env=None, experts=(), expert=None)
  monkeypatch.setitem(registry._SPECS, "plain", plain)
  with pytest.raises(ValueError, match="env 'plain' has no skill bank"):
    retriever_for("plain")


def test_looking_specs_up_does_not_import_skills():
  code = ("import sys\nfrom agentopd_jax.envs import registry\nregistry.names()\n"
          "print(registry.get('webshop').skills.rule, 'agentopd_jax.skills' in sys.modules)")
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
  assert out.returncode == 0, out.stderr[-2000:]
  assert out.stdout.split() == ["keywords", "False"]


# ------------------------------------------------------------------------------------------------ properties
@settings(max_examples=150, deadline=None)
@given(st.text(max_size=80), st.sampled_from(["", "nq", "popqa", "musique", "text", "other"]),
       st.sampled_from(ENVS))
def test_km_never_raises_and_word_matches_are_substring_matches(text, source, env):
  """A whole-word match is a substring match: with the compare gate shut in both (a word "for"), km_words' keyword
  types are a subset of km's; and any path field that is a key is a substring of the path."""
  spec = registry.get(env).skills
  bank = SkillBank.load(spec.bank)
  for name in ("km", "km_words"):
    got = make_retriever(name, bank, spec.rule).retrieve(SkillQuery(gamefile=text, prompt=text, data_source=source), 1)
    assert got.text.startswith(bank.general) and got.skills[0] == GENERAL
  words, subs = (set(km(bank, n, prompt=text + " for ").skills) for n in ("km_words", "km"))
  assert words <= subs
  if len(km(bank, "km_words", rule="gamefile", gamefile=text).skills) > 1:
    assert len(km(bank, rule="gamefile", gamefile=text).skills) > 1
