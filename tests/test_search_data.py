"""Generated corpus and questions, Search-R1 rows and loaders, the export command and the TFDS builder."""
import collections
import json
import subprocess
import sys

import pytest

from agentopd_jax.envs.search.export import export
from agentopd_jax.envs.search.prompts import make_prefix
from agentopd_jax.envs.search.questions import DEFAULT_SIZES, bundled_tasks, generate_questions
from agentopd_jax.envs.search.retriever import read_corpus
from agentopd_jax.envs.search.tasks import (DATA_SOURCES, TRAIN_SOURCES, Plan, SearchTask, load_tasks, read_rows,
                                            task_from_row, to_row, write_rows)
from agentopd_jax.envs.search.world import RELATIONS, generate_world, passage_text, passage_title


@pytest.fixture(scope="module")
def world():
  return generate_world(0)


@pytest.fixture(scope="module")
def splits(world):
  return {split: bundled_tasks(split, 0, world=world) for split in ("train", "test")}


def test_world_is_deterministic_and_wiki18_shaped(world):
  assert generate_world(0).passages == world.passages
  assert generate_world(1).passages != world.passages
  assert [p["id"] for p in world.passages] == [str(i) for i in range(len(world.passages))]
  for p in world.passages:
    title = passage_title(p["contents"])
    assert p["contents"].startswith(f'"{title}"\n{title} ') and p["contents"].count("\n") == 1
    assert title in world.entities
  kinds = collections.Counter(e.kind for e in world.entities.values())
  assert set(kinds) == {"person", "city", "country", "film", "book", "studio", "publisher", "university"}
  assert len(world.passages) > 1000


def test_every_fact_reads_back_from_one_of_its_passages(world):
  by_title = collections.defaultdict(list)
  for p in world.passages:
    by_title[passage_title(p["contents"])].append(passage_text(p["contents"]))
  for entity in world.entities.values():
    for relation, value in entity.facts.items():
      assert value in {RELATIONS[relation].read(t) for t in by_title[entity.name]}, (entity.name, relation)
      if RELATIONS[relation].object_kind:
        assert world.entities[value].kind == RELATIONS[relation].object_kind


def test_bundled_splits(splits):
  train, test = splits["train"], splits["test"]
  assert collections.Counter(t.data_source for t in train) == DEFAULT_SIZES["train"]
  assert collections.Counter(t.data_source for t in test) == DEFAULT_SIZES["test"]
  assert set(DEFAULT_SIZES["train"]) == set(TRAIN_SOURCES) and set(DEFAULT_SIZES["test"]) == set(DATA_SOURCES)
  assert len({t.id for t in train + test}) == len(train) + len(test)
  assert not {t.question for t in train} & {t.question for t in test}
  assert bundled_tasks("test", 0) == test  # same seed, same questions
  kinds = {s: collections.Counter(t.plan.kind for t in test if t.data_source == s) for s in DATA_SOURCES}
  assert set(kinds["nq"]) == set(kinds["triviaqa"]) == set(kinds["popqa"]) == {"single"}
  assert set(kinds["hotpotqa"]) == set(kinds["2wikimultihopqa"]) == {"bridge", "comparison"}
  assert set(kinds["musique"]) == set(kinds["bamboogle"]) == {"bridge"}
  nq = [t.question for t in test if t.data_source == "nq"]
  assert all(q == q.lower() and not q.endswith("?") for q in nq)
  yes_no = collections.Counter(t.golden_answers[0] for t in test if t.plan.op == "same")
  assert yes_no["yes"] > 5 and yes_no["no"] > 5


def test_questions_are_answered_by_their_plans(world, splits):
  for task in splits["test"]:
    values = []
    for subject, relation in task.plan.hops:
      subject = subject or values[-1]
      values.append(world.entities[subject].facts[relation])
    if task.plan.kind != "comparison":
      assert values[-1] in task.golden_answers, task
    elif task.plan.op == "same":
      assert task.golden_answers == (("yes",) if values[0] == values[1] else ("no",))
    else:
      (a, _), (b, _) = task.plan.hops
      first = (int(values[0]) < int(values[1])) == (task.plan.op == "min")
      assert task.golden_answers == ((a,) if first else (b,))


def test_generate_questions_errors(world):
  with pytest.raises(ValueError, match="data source"):
    generate_questions(world, "squad", "test", 3)
  with pytest.raises(ValueError, match="split"):
    generate_questions(world, "nq", "dev", 3)
  with pytest.raises(ValueError, match="no single questions left"):
    generate_questions(world, "popqa", "test", 100000)


def test_search_r1_row_schema_round_trip(splits):
  task = splits["test"][0]
  row = to_row(task, "test", 0)
  assert list(row) == ["id", "question", "golden_answers", "data_source", "prompt", "ability", "reward_model",
                       "extra_info", "env_kwargs", "metadata"]
  assert row["prompt"] == [{"role": "user", "content": make_prefix(task.question)}]
  assert row["ability"] == "fact-reasoning" and row["extra_info"] == {"split": "test", "index": 0}
  assert row["reward_model"] == {"style": "rule", "ground_truth": {"target": list(task.golden_answers)}}
  assert task_from_row(row) == task
  assert Plan.from_dict(json.loads(json.dumps(task.plan.to_dict()))) == task.plan


def test_loaders_for_real_file_shapes(tmp_path, splits):
  # An upstream Search-R1 parquet row: no env_kwargs, the question only inside the prompt, FlashRAG id.
  upstream = {"id": "test_7", "data_source": "bamboogle", "ability": "fact-reasoning",
              "prompt": [{"role": "user", "content": make_prefix("Who was president of the U.S. in 1905")}],
              "reward_model": {"style": "rule", "ground_truth": {"target": ["Theodore Roosevelt"]}},
              "extra_info": {"split": "test", "index": 7}}
  flashrag = {"id": "dev_3", "question": "who wrote hamlet", "golden_answers": ["Shakespeare", "W. Shakespeare"]}
  write_rows(str(tmp_path / "t.parquet"), [upstream])
  write_rows(str(tmp_path / "nq.jsonl"), [flashrag])
  assert load_tasks(str(tmp_path / "t.parquet")) == [SearchTask(
      "Who was president of the U.S. in 1905?", ("Theodore Roosevelt",), "bamboogle", "bamboogle-test_7")]
  assert load_tasks(str(tmp_path / "nq.jsonl"), data_source="nq") == [SearchTask(
      "who wrote hamlet", ("Shakespeare", "W. Shakespeare"), "nq", "nq-dev_3")]
  rows = [to_row(t, "test", i) for i, t in enumerate(splits["test"][::50])]
  write_rows(str(tmp_path / "ours.parquet"), rows)
  assert load_tasks(str(tmp_path / "ours.parquet")) == splits["test"][::50]
  assert load_tasks(str(tmp_path / "ours.parquet"), data_sources=["nq"]) == [t for t in splits["test"][::50]
                                                                               if t.data_source == "nq"]
  with pytest.raises(FileNotFoundError):
    read_rows(str(tmp_path / "missing.parquet"))
  with pytest.raises(ValueError, match="golden"):
    task_from_row({"question": "q"})


def test_export_writes_what_the_server_and_loaders_read(tmp_path, world, splits):
  paths = export(str(tmp_path), seed=0, fmt="jsonl")
  assert read_corpus(paths["corpus"]) == list(world.passages)
  assert load_tasks(paths["test"]) == splits["test"]
  out = subprocess.run([sys.executable, "-m", "agentopd_jax.envs.search.export", "--out", str(tmp_path / "p")],
                       capture_output=True, text=True, timeout=120, check=True).stdout
  assert "train.parquet" in out and load_tasks(str(tmp_path / "p" / "train.parquet")) == splits["train"]


def test_tfds_builder_round_trip(tmp_path, splits):
  import tensorflow_datasets as tfds

  from agentopd_jax.envs.search.tfds_builder import NAME, build, task_from_example

  builder = build(str(tmp_path))
  for split in ("train", "test"):
    source = tfds.data_source(NAME, data_dir=str(tmp_path), split=split)
    assert [task_from_example(source[i]) for i in range(len(source))] == splits[split]
  example = tfds.data_source(NAME, data_dir=str(tmp_path), split="test[:1]")[0]
  assert example["prompt"].decode() == make_prefix(splits["test"][0].question)
  reread = tfds.builder_from_directory(str(builder.data_path)).as_data_source(split="train")
  assert task_from_example(reread[5]) == splits["train"][5]
  assert "tensorflow" not in sys.modules
