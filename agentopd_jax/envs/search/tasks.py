"""Question specs (what an env episode plays) and Search-R1's dataset rows, with loaders for the real files.

A `SearchTask` is the picklable task the vector env hands to `SearchEnv.reset`. Rows follow Search-R1's parquet
schema (`qa_search_{train,test}_merge.py`: data_source, prompt, ability, reward_model.ground_truth.target,
extra_info) plus the FlashRAG columns it keeps (id, question, golden_answers) and verl-agent's `env_kwargs`, so our
bundled files and the real ones load through the same `task_from_row`. Bundled rows also carry `metadata`, the
question's reasoning plan (which entity and fact each hop looks up), which only the oracle reads.
"""
from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from agentopd_jax.envs import datafiles
from agentopd_jax.envs.search.prompts import make_prefix

DATA_SOURCES = ("nq", "triviaqa", "popqa", "hotpotqa", "2wikimultihopqa", "musique", "bamboogle")
TRAIN_SOURCES = ("nq", "hotpotqa")  # Search-R1 trains on these; the other five are out-of-domain at test time
PLAN_KINDS = ("single", "bridge", "comparison")


@dataclasses.dataclass(frozen=True)
class Plan:
  """How a bundled question is answered: look up `hops` (subject, relation) in order, then combine.

  single: one hop. bridge: the second hop's subject is "" and stands for the first hop's answer. comparison: both
  subjects' values are compared with `op` ("min"/"max": the subject with the smaller/larger value is the answer;
  "same": "yes" if the values are equal, else "no").
  """
  kind: str
  hops: Tuple[Tuple[str, str], ...]
  op: str = ""

  def __post_init__(self):
    if self.kind not in PLAN_KINDS:
      raise ValueError(f"plan kind must be one of {PLAN_KINDS}, got {self.kind!r}")

  def to_dict(self) -> Dict[str, Any]:
    return {"type": self.kind, "hops": [{"subject": s, "relation": r} for s, r in self.hops], "op": self.op}

  @classmethod
  def from_dict(cls, d: Mapping[str, Any]) -> "Plan":
    return cls(d["type"], tuple((h["subject"], h["relation"]) for h in d["hops"]), d.get("op") or "")


@dataclasses.dataclass(frozen=True)
class SearchTask:
  """One question; `str(task)` is its id, which the rollout uses as the problem id."""
  question: str
  golden_answers: Tuple[str, ...]
  data_source: str
  id: str = ""
  plan: Optional[Plan] = None

  def __post_init__(self):
    if isinstance(self.golden_answers, str):
      raise TypeError("golden_answers must be a sequence of strings, not one string")
    object.__setattr__(self, "golden_answers", tuple(str(a) for a in self.golden_answers))

  def __str__(self) -> str:
    return self.id or self.question


def to_row(task: SearchTask, split: str, index: int) -> Dict[str, Any]:
  """A Search-R1 parquet row for `task` (plus env_kwargs as verl-agent's preprocessing adds, and our plan)."""
  row = {
      "id": task.id,
      "question": task.question,
      "golden_answers": list(task.golden_answers),
      "data_source": task.data_source,
      "prompt": [{"role": "user", "content": make_prefix(task.question)}],
      "ability": "fact-reasoning",
      "reward_model": {"style": "rule", "ground_truth": {"target": list(task.golden_answers)}},
      "extra_info": {"split": split, "index": index},
      "env_kwargs": {"ground_truth": {"target": list(task.golden_answers)}, "question": task.question,
                     "data_source": task.data_source},
  }
  if task.plan is not None:
    row["metadata"] = task.plan.to_dict()
  return row


_QUESTION_MARK = "Question: "


def task_from_row(row: Mapping[str, Any], data_source: str = "") -> SearchTask:
  """A task from a Search-R1 / verl-agent parquet row, a FlashRAG JSONL row ({id, question, golden_answers}) or one
  of our rows. `data_source` fills in rows that lack one (FlashRAG files are one dataset per file)."""
  env_kwargs = _mapping(row, "env_kwargs")
  question = row.get("question") or env_kwargs.get("question")
  if not question and row.get("prompt") is not None:
    messages = list(row["prompt"])
    content = messages[-1].get("content") if messages and isinstance(messages[-1], Mapping) else None
    if not isinstance(content, str):
      raise ValueError("field 'prompt' must be a list of chat messages, the last with a 'content' string")
    question = content[content.rfind(_QUESTION_MARK) + len(_QUESTION_MARK):] if _QUESTION_MARK in content else content
  if not question:
    raise ValueError(f"row has no question (looked at question, env_kwargs.question, prompt): {sorted(row)}")
  golden = row.get("golden_answers")
  if golden is None:
    truth = _mapping(row, "reward_model").get("ground_truth") or env_kwargs.get("ground_truth") or {}
    golden = truth.get("target") if isinstance(truth, Mapping) else truth
  if golden is None:
    raise ValueError(f"row has no golden answers (golden_answers or reward_model.ground_truth.target): {sorted(row)}")
  if not isinstance(golden, (str, list, tuple)):
    raise ValueError(f"golden answers must be a string or a list of strings, got {type(golden).__name__}")
  golden = [golden] if isinstance(golden, str) else list(golden)
  source = row.get("data_source") or env_kwargs.get("data_source") or data_source
  index = _mapping(row, "extra_info").get("index")
  row_id = str(row.get("id") or (index if index is not None else ""))
  if row_id and source and not row_id.startswith(f"{source}-"):
    row_id = f"{source}-{row_id}"  # FlashRAG ids ("test_0") repeat across datasets; problem ids must not
  metadata = row.get("metadata")
  plan = Plan.from_dict(metadata) if isinstance(metadata, Mapping) and "hops" in metadata else None
  return SearchTask(question=str(question).strip(), golden_answers=tuple(golden), data_source=str(source),
                    id=str(row_id), plan=plan)


def _mapping(row: Mapping[str, Any], key: str) -> Mapping[str, Any]:
  """An optional nested object of a row ({} when absent)."""
  value = row.get(key) or {}
  if not isinstance(value, Mapping):
    raise ValueError(f"field {key!r} must be an object, got {type(value).__name__}")
  return value


def read_rows(path: str) -> List[Dict[str, Any]]:
  """Rows of a .parquet (needs pyarrow), .jsonl or .json file. A file that cannot be read as such, or holds no rows
  (JSON objects), is a `DataFileError` naming it."""
  if not os.path.exists(path):
    raise FileNotFoundError(f"no such dataset file: {path}")
  if path.endswith(".parquet"):
    try:
      import pyarrow
      import pyarrow.parquet as pq
    except ImportError as e:
      raise ImportError(f"reading {path} needs pyarrow ({e}); `pip install pyarrow`, or convert it to JSONL") from e
    try:
      rows = pq.read_table(path).to_pylist()
    except pyarrow.ArrowException as e:
      raise datafiles.DataFileError(f"{path}: not a readable parquet file: {e}") from None
  elif path.endswith(".jsonl"):
    rows = [row for _, row in datafiles.read_jsonl(path)]
  else:
    data = datafiles.read_json(path)
    rows = data if isinstance(data, list) else [data]
  if not rows:
    raise datafiles.DataFileError(f"{path}: the file holds no rows")
  for i, row in enumerate(rows, 1):
    datafiles.expect(row, Mapping, f"{path}: row {i}")
  return rows


def load_tasks(path: str, data_source: str = "", data_sources: Optional[Sequence[str]] = None) -> List[SearchTask]:
  """Tasks of a Search-R1/verl-agent parquet, a FlashRAG JSONL, or one of our files; `data_sources` filters. A row
  that is not a question is a `DataFileError` naming the file and the row (counting non-blank lines in JSONL)."""
  tasks = []
  for i, row in enumerate(read_rows(path), 1):
    try:
      tasks.append(task_from_row(row, data_source))
    except ValueError as e:
      raise datafiles.DataFileError(f"{path}: row {i}: {e}") from None
    except (KeyError, TypeError) as e:  # only `Plan.from_dict` indexes without checking
      raise datafiles.DataFileError(f"{path}: row {i}: field 'metadata' is not a plan ({type(e).__name__}: {e})"
                                    ) from None
  return [t for t in tasks if data_sources is None or t.data_source in data_sources]


def write_rows(path: str, rows: Iterable[Mapping[str, Any]]):
  """JSONL, or parquet (pyarrow) when the path ends in .parquet."""
  rows = list(rows)
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  if path.endswith(".parquet"):
    try:
      import pyarrow as pa
      import pyarrow.parquet as pq
    except ImportError as e:
      raise ImportError(f"writing {path} needs pyarrow ({e}); `pip install pyarrow`, or write .jsonl") from e
    pq.write_table(pa.Table.from_pylist(rows), path)
    return
  with open(path, "w", encoding="utf-8") as f:
    for row in rows:
      f.write(json.dumps(row, ensure_ascii=False) + "\n")
