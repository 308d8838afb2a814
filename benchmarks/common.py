"""Shared by the benchmark scripts: every benchmark prints its result as JSON and can also write it to a file."""
import json
from typing import Optional


def emit_json(result: dict, out: Optional[str]) -> None:
  text = json.dumps(result, indent=2)
  print(text)
  if out:
    with open(out, "w") as f:
      f.write(text + "\n")
