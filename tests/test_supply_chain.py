"""Supply chain (issue 23, item 7): no code from a model folder or a data file ever runs, and the dependencies are the
exact versions tested together.

A Hugging Face folder can carry Python (`auto_map` + trust_remote_code) and pickles (pytorch_model.bin, .pt, .pkl);
unpickling runs whatever the file names. The source tree is scanned for both, so a later change cannot bring them back
unnoticed; weights are read from safetensors only.
"""
import ast
import json
import os
import re
import runpy

import pytest
import setuptools

from agentopd_jax.models import hf_io
from agentopd_jax.models.config import preset

from test_configs import ROOT

SOURCE_DIRS = ("agentopd_jax", "experiments", "benchmarks")
# Calls that deserialise a file or bytes into arbitrary Python objects.
UNPICKLERS = {"pickle.load", "pickle.loads", "pickle.Unpickler", "cloudpickle.load", "cloudpickle.loads", "dill.load",
              "dill.loads", "joblib.load", "torch.load", "pd.read_pickle", "pandas.read_pickle", "shelve.open",
              "marshal.load", "marshal.loads", "yaml.unsafe_load"}


def _sources():
  """(path relative to the repository, parsed module) of every Python file under SOURCE_DIRS."""
  for top in SOURCE_DIRS:
    for folder, _, files in os.walk(os.path.join(ROOT, top)):
      for name in sorted(files):
        if name.endswith(".py"):
          path = os.path.join(folder, name)
          with open(path, encoding="utf-8") as f:
            yield os.path.relpath(path, ROOT), ast.parse(f.read(), path)


def _dotted(node) -> str:
  """`a.b.c` of a Name/Attribute chain ("" for anything else, e.g. a call's result)."""
  if isinstance(node, ast.Name):
    return node.id
  if isinstance(node, ast.Attribute):
    inner = _dotted(node.value)
    return f"{inner}.{node.attr}" if inner else ""
  return ""


def _is_false(node) -> bool:
  return isinstance(node, ast.Constant) and node.value is False


def test_no_remote_code_and_no_unpickling_in_the_source():
  found = []
  for path, tree in _sources():
    for node in ast.walk(tree):
      if isinstance(node, ast.ImportFrom) and node.module in ("pickle", "cloudpickle", "dill", "joblib", "marshal"):
        found += [f"{path}:{node.lineno}: from {node.module} import {a.name}" for a in node.names
                  if a.name in ("load", "loads", "Unpickler")]
      if not isinstance(node, ast.Call):
        continue
      name = _dotted(node.func)
      keywords = {k.arg: k.value for k in node.keywords}
      if name in UNPICKLERS:
        found.append(f"{path}:{node.lineno}: {name}(...)")
      if name in ("np.load", "numpy.load") and not _is_false(keywords.get("allow_pickle", ast.Constant(False))):
        found.append(f"{path}:{node.lineno}: {name}(..., allow_pickle=...)")
      if name == "yaml.load" and "SafeLoader" not in ast.unparse(keywords.get("Loader", ast.Constant(None))):
        found.append(f"{path}:{node.lineno}: yaml.load without SafeLoader")
      # AutoTokenizer / AutoConfig / any from_pretrained: trust_remote_code absent or a literal False.
      if "trust_remote_code" in keywords and not _is_false(keywords["trust_remote_code"]):
        found.append(f"{path}:{node.lineno}: {name}(trust_remote_code={ast.unparse(keywords['trust_remote_code'])})")
  assert not found, "\n".join(found)


def test_no_trust_remote_code_true_in_any_text():
  """Also in shell scripts and strings the AST scan does not see as calls (e.g. a command line built as text)."""
  pattern = re.compile(r"trust[_-]remote[_-]code\s*[=:]\s*['\"]?true", re.IGNORECASE)
  hits = []
  for top in SOURCE_DIRS:
    for folder, _, files in os.walk(os.path.join(ROOT, top)):
      for name in files:
        if name.endswith((".py", ".sh", ".json", ".md")):
          with open(os.path.join(folder, name), encoding="utf-8", errors="replace") as f:
            hits += [f"{os.path.join(folder, name)}: {m.group(0)}" for m in pattern.finditer(f.read())]
  assert not hits, hits


def test_a_folder_with_only_pickled_weights_is_refused_unread(tmp_path):
  folder = tmp_path / "pt_only"
  folder.mkdir()
  (folder / "config.json").write_text(json.dumps(preset("tiny").to_hf_config()))
  (folder / "pytorch_model.bin").write_bytes(b"not a pickle: never opened")
  with pytest.raises(FileNotFoundError, match=r"only pickled weights \(pytorch_model\.bin\); safetensors is required"):
    hf_io.load_hf(str(folder))


def test_every_runtime_dependency_is_pinned_exactly(monkeypatch):
  """install_requires and every extra but `test` (whose pytest/hypothesis are tools, not runtime code) pin `==`."""
  kwargs = {}
  monkeypatch.setattr(setuptools, "setup", kwargs.update)  # setup.py runs, nothing is installed
  runpy.run_path(os.path.join(ROOT, "setup.py"))
  runtime = list(kwargs["install_requires"])
  for extra, requirements in kwargs["extras_require"].items():
    if extra != "test":
      runtime += requirements
  loose = [r for r in runtime if not re.fullmatch(r"[A-Za-z0-9_.\-]+(\[[A-Za-z0-9_,\-]+\])?==[A-Za-z0-9_.+!]+", r)]
  assert not loose, f"not pinned with ==: {loose}"
  # The test extra's runtime packages are the pinned ones above, so CI tests what users install.
  tools = [r for r in kwargs["extras_require"]["test"] if r not in runtime]
  assert all(r.startswith(("pytest", "hypothesis")) for r in tools), tools
