"""Reading the data files envs load (ALFWorld games, WebShop catalogues, search corpora and question sets).

Why one reader: a real data set is thousands of files or millions of lines, and a truncated download, a file in
another schema or another encoding otherwise surfaces as a bare KeyError or JSONDecodeError from deep inside a
loader, naming neither the file nor the line. Here every such fault is one `DataFileError` whose message starts
with the file (and line, or record) and names the field at fault.
"""
from __future__ import annotations

import json
from typing import Any, Iterator, Mapping, Tuple, Type, Union

Types = Union[Type, Tuple[Type, ...]]


class DataFileError(ValueError):
  """A data file that is unreadable or not in the schema its loader expects; the message names the file."""


def read_json(path: str) -> Any:
  """The JSON value a file holds; bytes that are not UTF-8, or text that is not JSON, are a `DataFileError`."""
  try:
    with open(path, encoding="utf-8") as f:
      return json.load(f)
  except UnicodeDecodeError as e:
    raise DataFileError(f"{path}: not UTF-8 text (byte {e.start})") from None
  except json.JSONDecodeError as e:
    raise DataFileError(f"{path}: not valid JSON: {e}") from None


def read_jsonl(path: str) -> Iterator[Tuple[int, Any]]:
  """(line number, JSON value) for every non-blank line of a JSON-lines file, with the same errors as `read_json`
  naming the line."""
  with open(path, "rb") as f:
    for n, raw in enumerate(f, 1):
      try:
        line = raw.decode("utf-8")
      except UnicodeDecodeError as e:
        raise DataFileError(f"{path}:{n}: not UTF-8 text (byte {e.start} of the line)") from None
      if not line.strip():
        continue
      try:
        yield n, json.loads(line)
      except json.JSONDecodeError as e:
        raise DataFileError(f"{path}:{n}: not valid JSON: {e.msg} (column {e.colno})") from None


def _names(types: Types) -> str:
  return " or ".join(t.__name__ for t in (types if isinstance(types, tuple) else (types,)))


def expect(value: Any, types: Types, where: str) -> Any:
  """`value` if it is of `types`, else a `DataFileError` saying what `where` (file, record, field) should hold."""
  if not isinstance(value, types):
    raise DataFileError(f"{where}: expected {_names(types)}, got {type(value).__name__}")
  return value


def field(record: Any, key: str, types: Types, where: str, required: bool = True) -> Any:
  """`record[key]` checked to be of `types`; `where` names the record (file, line or index). An optional field
  that is missing or null reads as None."""
  expect(record, Mapping, where)
  value = record.get(key)
  if value is None:
    if required:
      raise DataFileError(f"{where}: missing (or null) field {key!r}")
    return None
  return expect(value, types, f"{where}: field {key!r}")
