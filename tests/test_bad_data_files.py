"""Damaged or foreign data files stop a run with one `DataFileError` (a ValueError) that names the file, and the line
or record and the field at fault, never with a bare KeyError, IndexError or JSONDecodeError from inside a loader.

Each case writes a good file of the loader's own format (a generated ALFWorld game, a generated WebShop catalogue, a
wiki-18 corpus, a question file), damages it one way (truncated, wrong type, a required field missing, empty, bytes
that are not UTF-8) and loads it the way a run does.
"""
import json
import os
import shutil

import pytest

from agentopd_jax.envs.datafiles import DataFileError
from agentopd_jax.envs.search.retriever import read_corpus
from agentopd_jax.envs.search.tasks import SearchTask, load_tasks, to_row, write_rows

NOT_UTF8 = b"\xff\xfe\x80 caf\xe9"


def check(error: pytest.ExceptionInfo, path, *needles: str) -> None:
  """One error, not a chain ending in a raw one; its message names the file and every needle."""
  err = error.value
  assert isinstance(err, ValueError) and err.__cause__ is None and (err.__context__ is None or err.__suppress_context__)
  message = str(err)
  assert str(path) in message and all(n in message for n in needles), message


def damage(path, how: str, edit=None) -> None:
  """Rewrite a JSON file: "truncate" it mid-way, "empty" it, make it "not-utf8", or "edit" its parsed value."""
  raw = open(path, "rb").read()
  if how == "edit":
    value = json.loads(raw)
    edit(value)
    raw = json.dumps(value).encode()
  out = {"truncate": raw[:len(raw) // 2], "empty": b"", "not-utf8": NOT_UTF8 + raw, "edit": raw}[how]
  with open(path, "wb") as f:
    f.write(out)


# ---------------------------------------------------------------------------------------------------- ALFWorld
@pytest.fixture
def alfworld_game(tmp_path):
  """A fresh generated game: (data root, its game.tw-pddl, its traj_data.json)."""
  pytest.importorskip("alfworld")
  from agentopd_jax.envs.alfworld import generator

  gamefile = generator.generate(str(tmp_path), sizes={"train": 1})["train"][0]
  return str(tmp_path), gamefile, os.path.join(os.path.dirname(gamefile), "traj_data.json")


@pytest.mark.parametrize("how, edit, needles", [
    ("truncate", None, ["not valid JSON", "line "]),
    ("empty", None, ["not valid JSON"]),
    ("not-utf8", None, ["not UTF-8"]),
    ("edit", lambda t: t.pop("task_type"), ["'task_type'"]),
    ("edit", lambda t: t.update(task_type=["pick_and_place_simple"]), ["'task_type'", "expected str, got list"]),
])
def test_alfworld_traj_data(alfworld_game, how, edit, needles):
  from agentopd_jax.envs.alfworld import data

  root, _, traj = alfworld_game
  damage(traj, how, edit)
  with pytest.raises(DataFileError) as error:
    data.game_files("train", root)
  check(error, traj, *needles)


def _replace_rules(game):
  game["grammar"] = game["grammar"].replace('"task"', '"tusk"')


@pytest.mark.parametrize("how, edit, needles", [
    ("truncate", None, ["not valid JSON"]),
    ("empty", None, ["not valid JSON"]),
    ("not-utf8", None, ["not UTF-8"]),
    ("edit", lambda g: g.pop("pddl_problem"), ["'pddl_problem'"]),
    ("edit", lambda g: g.update(grammar=None), ["'grammar'"]),
    ("edit", lambda g: g.update(grammar=7), ["'grammar'", "expected str, got int"]),
    ("edit", lambda g: g.update(pddl_problem=g["pddl_problem"][:len(g["pddl_problem"]) // 2]),
     ["'pddl_problem'", "unclosed '('"]),
    ("edit", lambda g: g.update(pddl_problem=g["pddl_problem"] + ")"), ["'pddl_problem'", "unbalanced ')'"]),
    ("edit", lambda g: g.update(pddl_problem=g["pddl_problem"].replace("(:goal", "(:gaol")),
     ["'pddl_problem'", ":goal"]),
    ("edit", lambda g: g.update(pddl_problem=g["pddl_problem"].replace("(atLocation", "(nowhere")),
     ["'pddl_problem'", "atLocation"]),
    ("edit", lambda g: g.update(grammar=g["grammar"].replace('grammar :: """', 'grammar :: """{{', 1)),
     ["'grammar'"]),
    ("edit", _replace_rules, ["'grammar'", "'task'"]),
])
def test_alfworld_game_file(alfworld_game, how, edit, needles):
  """Read as an episode reads it (`AlfworldEnv.reset`, the fast engine); a damaged file must not be listed as a
  playable game either when it cannot be parsed at all."""
  from agentopd_jax.envs.alfworld import data
  from agentopd_jax.envs.alfworld.env import AlfworldEnv

  root, gamefile, _ = alfworld_game
  damage(gamefile, how, edit)
  with pytest.raises(DataFileError) as error:
    AlfworldEnv("fast").reset(gamefile)
  check(error, gamefile, *needles)
  if how != "edit":
    with pytest.raises(DataFileError) as error:
      data.game_files("train", root)
    check(error, gamefile)


def test_alfworld_walkthrough(alfworld_game):
  from agentopd_jax.envs.alfworld.spec import expert_actions

  _, gamefile, _ = alfworld_game
  damage(gamefile, "edit", lambda g: g.update(walkthrough="go to cabinet 1"))
  with pytest.raises(DataFileError) as error:
    expert_actions(gamefile, "planner")
  check(error, gamefile, "'walkthrough'", "expected list, got str")


# ----------------------------------------------------------------------------------------------------- WebShop
@pytest.fixture(scope="module")
def webshop_files(tmp_path_factory):
  """A generated five-product catalogue written as WebShop's small files, plus a human-instructions file."""
  pytest.importorskip("bm25s")
  pytest.importorskip("rapidfuzz")
  from agentopd_jax.envs.webshop import catalog

  folder = tmp_path_factory.mktemp("webshop_good")
  items, attributes = catalog.generate(5, seed=3)
  catalog.write_files(str(folder), items, attributes)
  human = {items[0]["asin"]: [{"instruction": "i want a thing.", "instruction_attributes": ["x"],
                               "instruction_options": ["blue"]}]}
  (folder / catalog.HUMAN_FILE).write_text(json.dumps(human))
  return folder, items[0]["asin"]


def _item(i, key, value):
  def edit(items):
    if value is KeyError:
      del items[i][key]
    else:
      items[i][key] = value
  return edit


@pytest.mark.parametrize("which, how, edit, needles", [
    (0, "truncate", None, ["not valid JSON"]),
    (0, "empty", None, ["not valid JSON"]),
    (0, "not-utf8", None, ["not UTF-8"]),
    (0, "edit", lambda items: items.clear() or items.append("B0X"), ["item 0", "expected Mapping, got str"]),
    (0, "edit", _item(2, "name", KeyError), ["item 2", "'name'"]),
    (0, "edit", _item(1, "asin", 12345), ["item 1", "'asin'", "expected str, got int"]),
    (0, "edit", _item(3, "query", None), ["item 3", "'query'"]),
    (0, "edit", _item(0, "small_description", ["ok", 3]), ["item 0", "'small_description'"]),
    (0, "edit", _item(4, "pricing", "$12.99 - $abc"), ["item 4", "'pricing'", "$abc"]),
    (0, "edit", _item(0, "customization_options", {"Color": [{"image": None}]}), ["item 0", "'Color'", "'value'"]),
    (0, "edit", _item(0, "customization_options", ["Color"]), ["item 0", "'customization_options'"]),
    (1, "truncate", None, ["not valid JSON"]),
    (1, "edit", lambda attrs: attrs.update(B0X=["attr"]), ["'B0X'", "expected Mapping, got list"]),
    (1, "edit", lambda attrs: next(iter(attrs.values())).pop("instruction_attributes"),
     ["'instruction_attributes'"]),
    (1, "edit", lambda attrs: next(iter(attrs.values())).update(attributes=None), ["'attributes'", "null"]),
    (2, "not-utf8", None, ["not UTF-8"]),
    (2, "edit", lambda human: next(iter(human.values()))[0].pop("instruction_options"),
     ["instruction 0", "'instruction_options'"]),
])
def test_webshop_catalogue(webshop_files, tmp_path, which, how, edit, needles):
  """Read as a run reads it (`WebshopEnv(data_dir=...)`, human goals on so all three files are read)."""
  from agentopd_jax.envs.webshop import catalog
  from agentopd_jax.envs.webshop.env import WebshopEnv

  good, _ = webshop_files
  folder = tmp_path / "data"
  shutil.copytree(good, folder)
  path = folder / (catalog.DATA_FILES[True] + (catalog.HUMAN_FILE,))[which]
  damage(path, how, edit)
  with pytest.raises(DataFileError) as error:
    WebshopEnv(data_dir=str(folder), human_goals=True)
  check(error, path, *needles)


def test_webshop_good_files_still_load(webshop_files):
  from agentopd_jax.envs.webshop.env import WebshopEnv

  folder, asin = webshop_files
  env = WebshopEnv(data_dir=str(folder), human_goals=True)
  assert [g["asin"] for g in env.shop.goals] == [asin]


# ------------------------------------------------------------------------------------------------------ Search
CORPUS_LINES = [json.dumps({"id": "0", "contents": '"Paris"\nParis is the capital of France.'}),
                json.dumps({"id": 1, "contents": '"Lyon"\nLyon is a city in France.'})]


@pytest.mark.parametrize("text, needles", [
    (CORPUS_LINES[0] + "\n" + CORPUS_LINES[1][:20] + "\n", [":2:", "not valid JSON"]),
    (CORPUS_LINES[0] + "\n\n" + json.dumps({"id": "1", "text": "no contents"}) + "\n", [":3:", "'contents'"]),
    (json.dumps({"id": ["0"], "contents": "an id that is a list"}) + "\n", [":1:", "'id'", "expected str or int"]),
    (json.dumps({"id": "0", "contents": ["a", "list"]}) + "\n", [":1:", "'contents'", "expected str, got list"]),
    ('["id", "contents"]\n', [":1:", "expected Mapping, got list"]),
    ("", ["no documents"]),
    ("\n  \n", ["no documents"]),
    (NOT_UTF8, [":1:", "not UTF-8"]),
])
def test_search_corpus(tmp_path, text, needles):
  """Read as the in-process retriever and the retrieval server read it (`read_corpus`, via `SearchEnv`)."""
  pytest.importorskip("bm25s")
  from agentopd_jax.envs.search.env import SearchEnv

  path = tmp_path / "corpus.jsonl"
  path.write_bytes(text if isinstance(text, bytes) else text.encode())
  with pytest.raises(DataFileError) as error:
    SearchEnv(corpus=str(path))
  check(error, path, *needles)


def test_search_good_corpus_still_loads(tmp_path):
  path = tmp_path / "corpus.jsonl"
  path.write_text("\n".join(CORPUS_LINES + [json.dumps({"contents": "no id: numbered by its place"})]) + "\n")
  assert [d["id"] for d in read_corpus(str(path))] == ["0", "1", "2"]


GOOD_ROW = to_row(SearchTask("who wrote hamlet?", ("Shakespeare",), "nq", "nq-0"), "test", 0)


def _row(**changes):
  row = {**GOOD_ROW, **changes}
  return {k: v for k, v in row.items() if v is not KeyError}


@pytest.mark.parametrize("name, content, needles", [
    ("q.jsonl", json.dumps(GOOD_ROW) + "\n" + json.dumps(GOOD_ROW)[:-9] + "\n", [":2:", "not valid JSON"]),
    ("q.jsonl", "", ["no rows"]),
    ("q.jsonl", NOT_UTF8, [":1:", "not UTF-8"]),
    ("q.jsonl", "[1, 2]\n", ["row 1", "expected Mapping, got list"]),
    ("q.json", json.dumps([GOOD_ROW])[:-30], ["not valid JSON"]),
    ("q.json", "[]", ["no rows"]),
    ("q.jsonl", [GOOD_ROW, _row(golden_answers=KeyError, reward_model=KeyError, env_kwargs=KeyError)],
     ["row 2", "golden"]),
    ("q.jsonl", [_row(golden_answers=1964)], ["row 1", "golden", "int"]),
    ("q.jsonl", [_row(question=KeyError, env_kwargs=KeyError, prompt=[])], ["row 1", "'prompt'"]),
    ("q.jsonl", [_row(question=KeyError, env_kwargs=KeyError, prompt=KeyError)], ["row 1", "no question"]),
    ("q.jsonl", [_row(env_kwargs="nq")], ["row 1", "'env_kwargs'"]),
    ("q.jsonl", [_row(metadata={"type": "single", "hops": [{"subject": "x"}]})], ["row 1", "'metadata'"]),
    ("q.parquet", b"PAR1 this is not a parquet file", ["not a readable parquet file"]),
    ("q.parquet", "truncated", ["not a readable parquet file"]),
    ("q.parquet", [_row(golden_answers=KeyError, reward_model=KeyError, env_kwargs=KeyError)], ["row 1", "golden"]),
])
def test_search_questions(tmp_path, name, content, needles):
  """Read as `env.train_file` / `env.test_file` are read (`load_tasks`)."""
  path = tmp_path / name
  if name.endswith(".parquet"):
    pytest.importorskip("pyarrow")
  if isinstance(content, list):
    write_rows(str(path), content)
  elif content == "truncated":
    write_rows(str(path), [GOOD_ROW] * 3)
    path.write_bytes(path.read_bytes()[:-40])
  else:
    path.write_bytes(content if isinstance(content, bytes) else content.encode())
  with pytest.raises(DataFileError) as error:
    load_tasks(str(path))
  check(error, path, *needles)
