"""Crash-safe JSON files (the checkpoint pool's checksums, the teacher scheduler state and manifest): a reader sees
the old file or the new one, never half of one."""
from __future__ import annotations

import json
import os
import tempfile


def atomic_write_json(path: str | os.PathLike, doc, indent: int | None = None) -> None:
  """Write `doc` to `path`: a temp file in the same folder, fsync, `os.replace`, then the folder is fsynced so the
  rename itself survives a crash. The folder is created if missing; the temp file never outlives a failure."""
  path = os.path.abspath(os.fspath(path))
  directory = os.path.dirname(path)
  os.makedirs(directory, exist_ok=True)
  fd, tmp = tempfile.mkstemp(dir=directory, prefix=f".{os.path.basename(path)}.", suffix=".tmp")
  try:
    with os.fdopen(fd, "w", encoding="utf-8") as f:
      json.dump(doc, f, indent=indent)
      f.write("\n")
      f.flush()
      os.fsync(f.fileno())
    os.replace(tmp, path)
  except BaseException:
    if os.path.exists(tmp):
      os.unlink(tmp)
    raise
  dir_fd = os.open(directory, os.O_RDONLY)
  try:
    os.fsync(dir_fd)
  finally:
    os.close(dir_fd)
