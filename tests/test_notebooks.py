"""Every notebook's code cells run top to bottom (in-process, on the CPU defaults)."""
import json
import pathlib

import pytest

NOTEBOOKS = sorted((pathlib.Path(__file__).parent.parent / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs(path, tmp_path, monkeypatch):
  monkeypatch.setenv("AGENTOPD_CACHE", str(tmp_path))
  cells = json.loads(path.read_text())["cells"]
  namespace = {}
  for cell in cells:
    if cell["cell_type"] == "code":
      exec(compile("".join(cell["source"]), f"{path.name}", "exec"), namespace)
  assert namespace, "notebook defined nothing"


def test_there_are_notebooks():
  assert NOTEBOOKS
