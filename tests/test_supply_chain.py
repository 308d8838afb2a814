"""Supply chain: no code from a model folder or a data file ever runs, and the dependencies are the
exact versions tested together.

A Hugging Face folder can carry Python (`auto_map` + trust_remote_code) and pickles (pytorch_model.bin, .pt, .pkl);
unpickling runs whatever the file names. The source tree is scanned for both, so a later change cannot bring them back
unnoticed; weights are read from safetensors only.
"""
import ast
import importlib.util
import json
import os
import re
import runpy

import pytest
import yaml

from agentopd_jax.models import hf_io
from agentopd_jax.models.config import preset

from test_configs import ROOT

SOURCE_DIRS = ("agentopd_jax", "experiments", "benchmarks", ".ci")
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


def test_every_runtime_dependency_is_pinned_exactly():
  """install_requires and every extra but `test` (whose pytest/hypothesis are tools, not runtime code) pin `==`."""
  kwargs = _audit_module().setup_kwargs()
  runtime = list(kwargs["install_requires"])
  for extra, requirements in kwargs["extras_require"].items():
    if extra != "test":
      runtime += requirements
  loose = [r for r in runtime if not re.fullmatch(r"[A-Za-z0-9_.\-]+(\[[A-Za-z0-9_,\-]+\])?==[A-Za-z0-9_.+!]+", r)]
  assert not loose, f"not pinned with ==: {loose}"
  # The test extra's runtime packages are the pinned ones above, so CI tests what users install.
  tools = [r for r in kwargs["extras_require"]["test"] if r not in runtime]
  assert all(r.startswith(("pytest", "hypothesis")) for r in tools), tools


SECRET_NAMES = re.compile(r"(^|_)(key|api_key|secret|password|passwd|token|credentials?)$")


def test_no_config_field_holds_a_secret():
  """The config is written to config.json and into every checkpoint record, so keys come from the environment only
  ($OPENAI_API_KEY for the analyzer, $AGENTOPD_SEARCH_API_KEY for the retriever): no field of any variant of any env
  config may be named like one."""
  from agentopd_jax.training.presets import PAPER_MODELS, method_variants

  own, on_paper = method_variants()
  variants = ["cpu", *own, *PAPER_MODELS, *(f"{m}_{p}" for m in on_paper for p in PAPER_MODELS)]
  found = set()
  for name in ("alfworld", "webshop", "searchqa"):
    module = runpy.run_path(os.path.join(ROOT, "configs", f"{name}.py"))
    for variant in variants:
      flat = _flat(module["get_config"](variant).to_dict())
      found |= {f"configs/{name}.py:{variant} {path}" for path in flat if SECRET_NAMES.search(path.split(".")[-1])}
  assert not found, sorted(found)


def _flat(tree, prefix=""):
  """{dotted path: leaf} of a nested dict."""
  out = {}
  for k, v in tree.items():
    out.update(_flat(v, f"{prefix}{k}.") if isinstance(v, dict) else {f"{prefix}{k}": v})
  return out


def _audit_module():
  spec = importlib.util.spec_from_file_location("ci_audit", os.path.join(ROOT, ".ci", "audit.py"))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


def _advisory(id_, name, ranges=(), versions=(), **extra):
  return {"id": id_, "affected": [{"package": {"name": name, "ecosystem": "PyPI"}, "versions": list(versions),
                                   "ranges": [{"type": "ECOSYSTEM", "events": list(r)} for r in ranges]}], **extra}


def test_the_offline_audit_evaluates_osv_ranges_as_the_schema_defines(tmp_path):
  """.ci/audit.py, pip-audit's check where its services are unreachable: hand-made advisories in both file formats,
  each hit and miss decided by hand from the OSV schema's rules."""
  audit = _audit_module()
  (tmp_path / "torch").mkdir()
  advisories = {
      "torch/A.yaml": _advisory("A", "torch", ranges=[[{"introduced": "0"}, {"fixed": "2.13.0"}]]),  # fixed in the pin
      "torch/B.yaml": _advisory("B", "torch", ranges=[[{"introduced": "2.10"}, {"fixed": "2.14.0"}]]),  # inside
      "C.json": _advisory("C", "Torch", ranges=[[{"introduced": "2.0"}, {"last_affected": "2.13.0"}]]),  # the last one
      "D.json": _advisory("D", "torch", ranges=[[{"introduced": "2.0"}, {"last_affected": "2.12.9"}]]),  # after it
      "E.json": _advisory("E", "torch", versions=["2.13"]),  # the same version under PEP 440
      "F.json": _advisory("F", "torch", versions=["2.13.0"], withdrawn="2025-01-01T00:00:00Z"),  # withdrawn
      # Two ranges in one: affected again from 2.13.0 after a fix at 2.1.
      "G.json": _advisory("G", "torch", ranges=[[{"introduced": "0"}, {"fixed": "2.1"}, {"introduced": "2.13.0"}]]),
      "H.json": _advisory("H", "tqdm", ranges=[[{"introduced": "4.0"}, {"fixed": "4.66.3"}]]),  # another package
  }
  for path, entry in advisories.items():
    text = json.dumps(entry) if path.endswith(".json") else yaml.safe_dump(entry)
    (tmp_path / path).write_text(text)
  (tmp_path / "README.md").write_text("not an advisory")
  found = audit.read_osv(str(tmp_path))
  assert sorted(found) == ["torch", "tqdm"] and len(found["torch"]) == 7
  report = audit.audit({"torch": "2.13.0", "tqdm": "4.70.1", "jax": "0.10.2"}, found)
  assert sorted(h["id"] for h in report["hits"]) == ["B", "C", "E", "G"]
  assert report["packages"]["jax"] == {"version": "0.10.2", "osv_advisories": 0} and not report["unevaluated"]


def test_the_audit_trusts_pypi_only_for_a_pin_that_is_the_newest_release():
  """PyPI's per-project JSON lists the advisories of the newest release: they count for a pin equal to it, and a pin
  that is older is reported as not covered rather than clean."""
  audit = _audit_module()
  vuln = {"id": "PYSEC-1", "aliases": ["CVE-1"], "withdrawn": None}
  pages = {"https://pypi.org/pypi/a/json": {"info": {"version": "1.0"}, "vulnerabilities": [vuln]},
           "https://pypi.org/pypi/b/json": {"info": {"version": "2.0"}, "vulnerabilities": [vuln]},
           "https://pypi.org/pypi/c/json": {"info": {"version": "3.0"}, "vulnerabilities": [{**vuln, "withdrawn": "x"}]}}

  def get_json(url):
    if url not in pages:
      raise OSError("unreachable")
    return pages[url]

  report = audit.audit({"a": "1.0", "b": "1.5", "c": "3.0", "d": "1.0"}, None, get_json)
  assert report["hits"] == [{"package": "a", "version": "1.0", "id": "PYSEC-1", "source": "pypi", "aliases": ["CVE-1"]}]
  assert report["packages"]["b"]["pypi"] == "not covered (pin is older)"
  assert report["packages"]["c"]["pypi"] == "covered (pin is the newest release)"
  assert report["packages"]["d"]["pypi"].startswith("unreachable: OSError")


def test_the_audit_reads_every_pin_of_setup_py_and_what_pip_resolved_for_them():
  audit = _audit_module()
  pins = audit.setup_pins()
  assert pins["jax"] == "0.10.2" and pins["torch"] == "2.13.0" and pins["alfworld"] == "0.4.2"
  assert "pytest" not in pins and "hypothesis" not in pins  # unpinned tools are not the pinned set
  resolved = audit.resolved()
  # The installed pins, every extra's included (torch as its CPU build, 2.13.0+cpu).
  assert {name: resolved[name].split("+")[0] for name in pins} == pins
  assert "ml-dtypes" in resolved and "execnet" in resolved  # jax's and pytest-xdist's own dependencies
  assert "agentopd-jax" not in resolved and "pip" not in resolved  # not the project, not the rest of the machine
