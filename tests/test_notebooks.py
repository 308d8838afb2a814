"""Every notebook's code cells run top to bottom, in-process, as a fresh kernel would from the repository root (the
quickstart's run shrunk to seconds by $AGENTOPD_NOTEBOOK_SMOKE; the others on their demonstration data)."""
import json
import pathlib

import pytest

ROOT = pathlib.Path(__file__).parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs(path, tmp_path, monkeypatch):
  monkeypatch.setenv("AGENTOPD_CACHE", str(tmp_path / "cache"))
  monkeypatch.setenv("AGENTOPD_NOTEBOOK_SMOKE", str(tmp_path / "runs"))
  monkeypatch.setenv("MPLBACKEND", "Agg")
  monkeypatch.setenv("AGENTOPD_POOL", str(tmp_path / "no_pool"))    # the notebooks' demonstration data, not
  monkeypatch.setenv("AGENTOPD_SWEEP", str(tmp_path / "no_sweep"))  # whatever runs/ holds here
  monkeypatch.chdir(ROOT)
  cells = json.loads(path.read_text())["cells"]
  namespace = {}
  for cell in cells:
    if cell["cell_type"] == "code":
      exec(compile("".join(cell["source"]), f"{path.name}", "exec"), namespace)
  assert namespace, "notebook defined nothing"


def test_there_are_notebooks():
  assert {p.name for p in NOTEBOOKS} >= {"quickstart.ipynb", "compare.ipynb", "coverage.ipynb"}
