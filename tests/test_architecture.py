"""The package's layers: every import in `agentopd_jax/` points down the layer table, and no files import in a circle.

Run alone with `python -m pytest -q tests/test_architecture.py`; on failure it prints `file:line imports X (layer a -> b)`.

The rule (docs/architecture.md): a module imports only from a lower layer or from its own sibling (the name between
`|` in its row). Every import counts, at any depth: inside functions, under `if TYPE_CHECKING:`, relative or absolute.
The only dynamic import is `envs/registry.py:_discover`, which imports each env package's `spec` by name; any other
`importlib.import_module` / `__import__` call on a package module fails here too. Importing `a.b.c` is counted as
an edge to the file of `a.b.c` only, not to the `__init__.py` files Python runs on the way.

`ALLOWED` lists edges exempt from the rule; it is empty, and a listed edge that no longer exists fails the test.
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path
from typing import Dict, FrozenSet, Iterable, List, Mapping, Optional, Sequence, Set, Tuple

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "agentopd_jax"

# Bottom layer first. Names are dotted paths below `agentopd_jax`; a module takes the row of its longest listed prefix.
LAYERS: Tuple[str, ...] = (
  "faults | http_guard | cache | host_memory | parallel | batching",
  "storage | envs",
  "models",
  "sampling | scoring",
  "rollout | objectives",
  "skills | eval",
  "methods.base",
  "methods.grpo",
  "methods.sdar | methods.opid | methods.agentic_opd | methods.skill_grpo | methods.kl_to_best | methods.gigpo",
  "methods",
  "training",
  "serve",
)

# (importing module, imported module) pairs exempt from the rule: none.
ALLOWED: FrozenSet[Tuple[str, str]] = frozenset()

DYNAMIC_IMPORT_ALLOWED = {("agentopd_jax.envs.registry", "_discover")}


@dataclasses.dataclass(frozen=True)
class Edge:
  src: str  # importing module (dotted)
  dst: str  # imported module (dotted, a file of the package)
  path: str  # importing file, relative to the root
  line: int


def layer_table(rows: Sequence[str]) -> Dict[str, Tuple[int, str]]:
  """{prefix: (layer index, sibling)} from the `a | b` rows, bottom first."""
  table = {}
  for index, row in enumerate(rows):
    for name in (part.strip() for part in row.split("|")):
      assert name not in table, f"{name} is listed twice in LAYERS"
      table[name] = (index, name)
  return table


def place(module: str, table: Mapping[str, Tuple[int, str]], package: str = PACKAGE) -> Optional[Tuple[int, str]]:
  """The (layer, sibling) of a dotted module: its longest prefix in `table`; None for the package's own __init__."""
  rel = module[len(package) + 1:] if module != package else ""
  if not rel:
    return None
  parts = rel.split(".")
  for n in range(len(parts), 0, -1):
    key = ".".join(parts[:n])
    if key in table:
      return table[key]
  raise AssertionError(f"{module} is in no row of LAYERS: add it to the table")


def modules(root: Path, package: str = PACKAGE) -> Dict[str, Path]:
  """{dotted module: file} for every .py file of the package (a package's name maps to its __init__.py)."""
  out = {}
  for path in sorted((root / package).rglob("*.py")):
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
      parts = parts[:-1]
    out[".".join(parts)] = path
  return out


def _resolve(node: ast.ImportFrom, module: str, is_package: bool) -> str:
  if not node.level:
    return node.module or ""
  base = module.split(".") if is_package else module.split(".")[:-1]
  base = base[:len(base) - (node.level - 1)] if node.level > 1 else base
  return ".".join(base + ([node.module] if node.module else []))


def _target(name: str, known: Mapping[str, Path]) -> Optional[str]:
  """The package file `name` refers to (the longest known prefix), or None for a third-party module."""
  parts = name.split(".")
  for n in range(len(parts), 0, -1):
    candidate = ".".join(parts[:n])
    if candidate in known:
      return candidate
  return None


def _dynamic_imports(tree: ast.AST) -> Iterable[Tuple[str, int]]:
  """(enclosing function, line) of every importlib.import_module / __import__ call."""
  def walk(node, fn):
    for child in ast.iter_child_nodes(node):
      name = child.name if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)) else fn
      if isinstance(child, ast.Call):
        f = child.func
        if (isinstance(f, ast.Attribute) and f.attr == "import_module") or (isinstance(f, ast.Name)
                                                                            and f.id in ("__import__", "import_module")):
          yield fn, child.lineno
      yield from walk(child, name)
  yield from walk(tree, "")


def imports(root: Path, package: str = PACKAGE) -> Tuple[List[Edge], List[str]]:
  """Every edge between package files, and every dynamic import outside the allowed one."""
  known = modules(root, package)
  edges, dynamic = [], []
  for module, path in known.items():
    tree = ast.parse(path.read_text(), filename=str(path))
    rel = str(path.relative_to(root))
    for node in ast.walk(tree):
      names: List[str] = []
      if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
      elif isinstance(node, ast.ImportFrom):
        base = _resolve(node, module, path.name == "__init__.py")
        names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names]
      for name in names:
        dst = _target(name, known)
        edge = Edge(module, dst, rel, node.lineno)
        if dst is not None and dst != module and edge not in edges:
          edges.append(edge)
    for fn, line in _dynamic_imports(tree):
      if (module, fn) not in DYNAMIC_IMPORT_ALLOWED:
        dynamic.append(f"{rel}:{line} imports a module dynamically (only envs/registry.py:_discover may)")
  return edges, dynamic


def layer_violations(edges: Iterable[Edge], table: Mapping[str, Tuple[int, str]], package: str = PACKAGE,
                     allowed: FrozenSet[Tuple[str, str]] = frozenset()) -> List[str]:
  """`file:line imports X (layer a -> b)` for every edge that points up, or sideways to another sibling."""
  out = []
  for e in edges:
    if (e.src, e.dst) in allowed:
      continue
    src, dst = place(e.src, table, package), place(e.dst, table, package)
    if src is None or dst is None:
      continue
    if dst[0] > src[0] or (dst[0] == src[0] and dst[1] != src[1]):
      how = "up" if dst[0] > src[0] else "sideways"
      out.append(f"{e.path}:{e.line} imports {e.dst} ({how}: layer {src[0]} {src[1]} -> {dst[0]} {dst[1]})")
  return out


def circles(edges: Iterable[Edge], allowed: FrozenSet[Tuple[str, str]] = frozenset()) -> List[List[str]]:
  """The strongly connected components with more than one file (Tarjan), each sorted."""
  graph: Dict[str, Set[str]] = {}
  for e in edges:
    if (e.src, e.dst) not in allowed:
      graph.setdefault(e.src, set()).add(e.dst)
      graph.setdefault(e.dst, set())
  index: Dict[str, int] = {}
  low: Dict[str, int] = {}
  stack: List[str] = []
  on_stack: Set[str] = set()
  out: List[List[str]] = []

  def visit(v: str) -> None:
    index[v] = low[v] = len(index)
    stack.append(v)
    on_stack.add(v)
    for w in sorted(graph[v]):
      if w not in index:
        visit(w)
        low[v] = min(low[v], low[w])
      elif w in on_stack:
        low[v] = min(low[v], index[w])
    if low[v] == index[v]:
      component = []
      while True:
        w = stack.pop()
        on_stack.discard(w)
        component.append(w)
        if w == v:
          break
      if len(component) > 1:
        out.append(sorted(component))

  for v in sorted(graph):
    if v not in index:
      visit(v)
  return out


def test_imports_point_down():
  edges, dynamic = imports(ROOT)
  problems = layer_violations(edges, layer_table(LAYERS), allowed=ALLOWED) + dynamic
  assert not problems, "imports against the layer rule:\n" + "\n".join(problems)


def test_no_file_level_circle():
  edges, _ = imports(ROOT)
  found = circles(edges, ALLOWED)
  assert not found, "import circles:\n" + "\n".join(" <-> ".join(c) for c in found)


def test_allowed_edges_still_exist():
  """ALLOWED only shrinks: an edge moved out must leave the list too."""
  edges = {(e.src, e.dst) for e in imports(ROOT)[0]}
  assert not ALLOWED - edges, f"stale ALLOWED entries: {sorted(ALLOWED - edges)}"


def test_every_module_has_a_layer():
  table = layer_table(LAYERS)
  for module in modules(ROOT):
    place(module, table)


# A fixture package with each kind of problem the layers forbid, shaped like the moves the layout was made by.
FIXTURE = {
  "__init__.py": "",
  "low/__init__.py": "",
  "low/a.py": "from pkg.low import b\n",  # a <-> b: a circle inside one sibling
  "low/b.py": "def f():\n  from pkg.low.a import x\n",  # lazy import closes the circle
  "envs/__init__.py": "",
  "envs/spec.py": "from pkg.envs.hindsight import reviewer\n",
  "envs/hindsight.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n  from pkg.envs.spec import env_kwargs\n",
  "other/__init__.py": "",
  "other/x.py": "from ..low import a\nfrom . import y\n",  # relative imports, down and within the sibling
  "other/y.py": "import pkg.top.run\n",  # up: other -> top
  "side/__init__.py": "",
  "side/z.py": "from pkg.other.x import thing\n",  # sideways: side and other share a row
  "top/__init__.py": "",
  "top/run.py": "import importlib\nimportlib.import_module('pkg.low.a')\nimport numpy\n",
}
FIXTURE_LAYERS = ("low", "envs", "other | side", "top")


@pytest.fixture
def fixture_root(tmp_path):
  for rel, text in FIXTURE.items():
    (tmp_path / "pkg" / rel).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / "pkg" / rel).write_text(text)
  return tmp_path


def test_checker_finds_each_kind_of_problem(fixture_root):
  edges, dynamic = imports(fixture_root, "pkg")
  pairs = {(e.src, e.dst) for e in edges}
  assert ("pkg.other.x", "pkg.low.a") in pairs and ("pkg.other.x", "pkg.other.y") in pairs  # relative, resolved
  assert not any(e.dst == "numpy" for e in edges)  # third-party modules are not edges
  problems = layer_violations(edges, layer_table(FIXTURE_LAYERS), "pkg")
  assert problems == ["pkg/other/y.py:1 imports pkg.top.run (up: layer 2 other -> 3 top)",
                      "pkg/side/z.py:1 imports pkg.other.x (sideways: layer 2 side -> 2 other)"]
  assert circles(edges) == [["pkg.envs.hindsight", "pkg.envs.spec"], ["pkg.low.a", "pkg.low.b"]]
  assert dynamic == ["pkg/top/run.py:2 imports a module dynamically (only envs/registry.py:_discover may)"]
  # An allowed edge is skipped by both checks.
  assert circles(edges, frozenset({("pkg.low.b", "pkg.low.a"), ("pkg.envs.hindsight", "pkg.envs.spec")})) == []
  assert len(layer_violations(edges, layer_table(FIXTURE_LAYERS), "pkg", frozenset({("pkg.side.z", "pkg.other.x")})))\
      == 1


# Circles and upward or sideways imports between real module names, each built in a scratch package of just its
# files: the checker, with the real LAYERS, reports every one.
REGRESSIONS = {
  "objectives registry <-> agentic_opd losses": ({
    "objectives/registry.py": "from agentopd_jax.methods.agentic_opd.losses import agentic_opd_loss\n",
    "methods/agentic_opd/losses.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                     "  from agentopd_jax.objectives.registry import LossCore\n"}, "circle"),
  "objectives registry -> agentic_opd losses": ({
    "objectives/registry.py": "from agentopd_jax.methods.agentic_opd.losses import agentic_opd_loss\n",
    "methods/agentic_opd/losses.py": ""}, "up"),
  "sdar losses -> agentic_opd losses": ({
    "methods/sdar/losses.py": "from agentopd_jax.methods.agentic_opd.losses import topk_log_dists\n",
    "methods/agentic_opd/losses.py": ""}, "sideways"),
  "skills -> sdar teacher": ({
    "skills/context.py": "from agentopd_jax.methods.sdar.teacher import TeacherConfig\n",
    "methods/sdar/teacher.py": ""}, "up"),
  "training defaults <-> trainer": ({
    "training/defaults.py": "def check_config(c):\n  from agentopd_jax.training.trainer import config_dataclass\n",
    "training/trainer.py": "from agentopd_jax.training import defaults\n"}, "circle"),
  "search spec <-> hindsight": ({
    "envs/search/spec.py": "def hindsight(c):\n  from agentopd_jax.envs.search.hindsight import reviewer\n",
    "envs/search/hindsight.py": "from agentopd_jax.envs.search.spec import env_kwargs\n"}, "circle"),
  "webshop spec <-> hindsight": ({
    "envs/webshop/spec.py": "def hindsight(c):\n  from agentopd_jax.envs.webshop.hindsight import reviewer\n",
    "envs/webshop/hindsight.py": "from agentopd_jax.envs.webshop.spec import shop_args\n"}, "circle"),
  "agentic_opd pool -> training checkpoints": ({
    "methods/agentic_opd/pool.py": "from agentopd_jax.training.checkpoints import CheckpointPool\n",
    "training/checkpoints.py": ""}, "up"),
  "opid hindsight -> serve": ({
    "methods/opid/hindsight.py": "from agentopd_jax.serve.__main__ import API_KEY_ENV\n",
    "serve/__main__.py": ""}, "up"),
  "parallel -> training": ({
    "parallel/memory.py": "from agentopd_jax.training import train_step\n", "training/train_step.py": ""}, "up"),
  "scoring -> rollout": ({
    "scoring/teacher_signals.py": "from agentopd_jax.rollout.batch import collate\n", "rollout/batch.py": ""}, "up"),
  "objectives -> rollout": ({
    "objectives/registry.py": "from ..rollout.batch import TrainBatch\n", "rollout/batch.py": ""}, "sideways"),
  "eval -> training": ({
    "eval/compare.py": "from agentopd_jax.training.logging import read_metrics\n", "training/logging.py": ""}, "up"),
}


@pytest.mark.parametrize("name", sorted(REGRESSIONS))
def test_checker_reports_each_former_problem(tmp_path, name):
  files, kind = REGRESSIONS[name]
  for rel in ["__init__.py"] + list(files):
    for parent in Path(rel).parents:
      (tmp_path / PACKAGE / parent).mkdir(parents=True, exist_ok=True)
      (tmp_path / PACKAGE / parent / "__init__.py").touch()
    (tmp_path / PACKAGE / rel).write_text(files.get(rel, ""))
  edges, _ = imports(tmp_path)
  if kind == "circle":
    assert len(circles(edges)) == 1
  else:
    problems = layer_violations(edges, layer_table(LAYERS))
    assert len(problems) == 1 and f"({kind}:" in problems[0], problems
