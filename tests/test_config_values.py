"""The values every preset resolves to (docs/architecture.md): `get_config(variant)` of each `configs/<env>.py` variant
(cpu, agentic_opd, opid, the SDAR-family methods, the paper models, <method>_<model>, opid_<model>, ALFWorld's
forgetting, search-QA's pool) and of configs/sample.py must give exactly the values and types of
tests/fixtures/config_values.json, so a change to where or how the defaults are written cannot move a value unnoticed.

`tests/fixtures/config_values_before_groups.json` holds the same presets in the single-section layout (every method's
loss fields in `loss`, Agentic-OPD's in `opd`, the method spread over `method`, `loss.objective` and
`grpo.advantage`); `training.config.upgrade` of each must give the method-group values here, value for value.

A change to a default must update the fixture deliberately. Regenerate it from the current tree:

  python tests/test_config_values.py          # --out writes elsewhere

The fixture holds, per "configs/x.py:variant" ("configs/sample.py": its `get_config()`), `values`:
every leaf field by dotted path (tuples as lists, floats as floats, so JSON keeps int/float/str/bool/None apart; an
empty sub-ConfigDict as {}), and `types`: the ConfigDict's own type (`get_type`, a FieldReference's field_type) of
the fields whose JSON value does not say it: lists (tuple or list), None and {}.
"""
import functools
import importlib.util
import json
import os
import sys

import pytest

from conftest import nested

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURE = os.path.join(ROOT, "tests", "fixtures", "config_values.json")
BEFORE_GROUPS = os.path.join(ROOT, "tests", "fixtures", "config_values_before_groups.json")
EXTRA_VARIANTS = {"configs/alfworld.py": ("forgetting",), "configs/searchqa.py": ("pool",)}  # each config's `extra`
ENV_CONFIGS = ("configs/alfworld.py", "configs/webshop.py", "configs/searchqa.py", "configs/countdown.py")
NO_VARIANT = ("configs/sample.py",)                         # get_config() takes no argument


def _normalize(value):
  """A JSON value with the same scalar types: tuples and lists -> lists, dicts keep their (sorted) keys."""
  if isinstance(value, (tuple, list)):
    return [_normalize(v) for v in value]
  if isinstance(value, dict):
    return {str(k): _normalize(v) for k, v in sorted(value.items())}
  if value is None or type(value) in (bool, int, float, str):
    return value
  raise TypeError(f"no JSON form for {type(value).__name__} {value!r}")


def flatten(c, prefix=""):
  """({dotted path: JSON value}, {dotted path: type name}) of ConfigDict `c`; types only where JSON would lose them."""
  import ml_collections

  values, types = {}, {}
  for key in sorted(c.keys()):
    path = prefix + key
    value = c[key]  # a FieldReference resolves to its value
    if isinstance(value, (ml_collections.ConfigDict, ml_collections.FrozenConfigDict)) and len(value):
      sub_values, sub_types = flatten(value, path + ".")
      values.update(sub_values)
      types.update(sub_types)
      continue
    values[path] = _normalize(dict(value) if isinstance(value, (ml_collections.ConfigDict,
                                                                ml_collections.FrozenConfigDict)) else value)
    if value is None or isinstance(value, (tuple, list, dict, ml_collections.ConfigDict,
                                           ml_collections.FrozenConfigDict)):
      types[path] = c.get_type(key).__name__
  return values, types


def load_config(entry, root=ROOT):
  """The ConfigDict of fixture entry "configs/x.py:variant" (or "configs/sample.py") in the tree at `root`."""
  path, _, variant = entry.partition(":")
  name = "_config_values_" + os.path.basename(path)[:-3]
  spec = importlib.util.spec_from_file_location(name, os.path.join(root, path))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config(variant) if ":" in entry else module.get_config()


def record(entry, root=ROOT):
  values, types = flatten(load_config(entry, root))
  return {"types": types, "values": values}


def enumerate_entries():
  """Every variant `select_variant` accepts (`training.presets`), for every env config."""
  from agentopd_jax.training import presets

  models = sorted(presets.PAPER_MODELS)
  own, on_paper = presets.method_variants()
  variants = ["cpu"] + list(own) + models + [f"{m}_{p}" for m in on_paper for p in models]
  entries = [f"{path}:{v}" for path in ENV_CONFIGS for v in variants + list(EXTRA_VARIANTS.get(path, ()))]
  return entries + list(NO_VARIANT)


def _fixture():
  with open(FIXTURE) as f:
    return json.load(f)


def _strict_equal(a, b):
  if type(a) is not type(b):
    return False
  if isinstance(a, list):
    return len(a) == len(b) and all(_strict_equal(x, y) for x, y in zip(a, b))
  if isinstance(a, dict):
    return a.keys() == b.keys() and all(_strict_equal(a[k], b[k]) for k in a)
  return a == b


def _show(value, type_name):
  if type_name == "tuple" and isinstance(value, list):
    return repr(tuple(value))
  return repr(value) + ("" if type_name is None else f" ({type_name})")


def diff(recorded, now):
  """Lines `section.field: recorded X, now Y` for every field whose value, JSON type or recorded type differs."""
  lines = []
  rv, rt, nv, nt = recorded["values"], recorded["types"], now["values"], now["types"]
  for path in sorted(set(rv) | set(nv)):
    if path not in nv:
      lines.append(f"{path}: recorded {_show(rv[path], rt.get(path))}, now missing")
    elif path not in rv:
      lines.append(f"{path}: not recorded, now {_show(nv[path], nt.get(path))}")
    elif not _strict_equal(rv[path], nv[path]) or rt.get(path) != nt.get(path):
      lines.append(f"{path}: recorded {_show(rv[path], rt.get(path))}, now {_show(nv[path], nt.get(path))}")
  return lines


ENTRIES = sorted(_fixture()) if os.path.exists(FIXTURE) else []


def test_fixture_covers_every_preset():
  assert ENTRIES == sorted(enumerate_entries())
  assert len([e for e in ENTRIES if e.startswith("configs/alfworld.py:")]) == 43


@pytest.mark.parametrize("entry", ENTRIES)
def test_config_resolves_to_recorded_values(entry):
  lines = diff(_fixture()[entry], record(entry))
  assert not lines, f"{entry} differs from tests/fixtures/config_values.json:\n  " + "\n  ".join(lines)


def _dotted(tree, prefix=""):
  """{dotted path: value} of a nested dict (an empty dict is a leaf, as `flatten` records it)."""
  out = {}
  for key, value in tree.items():
    if isinstance(value, dict) and value:
      out.update(_dotted(value, prefix + key + "."))
    else:
      out[prefix + key] = value
  return out


def _group_path(path):
  """A dotted path of the single-section layout in the method groups."""
  from agentopd_jax.training.config import UPGRADED_KEYS

  if path.startswith("opd."):
    return "agentic_opd." + path[len("opd."):]
  return UPGRADED_KEYS.get(path, path)


with open(BEFORE_GROUPS) as _f:
  _BEFORE = json.load(_f)


def _section(path):
  return path.split(".")[0]


@functools.lru_cache(maxsize=None)
def _added_sections():
  """The sections of the group layout that the single-section layout never had (a method added since, such as
  `kl_to_best`), with the defaults a config that lacks them loads with: {dotted path: value}, {dotted path: type}."""
  from agentopd_jax.training.presets import cpu_base

  old = {_section(_group_path(path)) for entry in _BEFORE.values() for path in entry["values"]}
  values, types = flatten(cpu_base("countdown"))
  added = {_section(path) for path in values} - old
  return ({path: v for path, v in values.items() if _section(path) in added},
          {path: t for path, t in types.items() if _section(path) in added})


# Methods registered after the single-section layout whose objective reads a group it had (or none, GiGPO's "grpo"):
# their presets did not exist there either.
METHODS_ADDED_SINCE = ("grpo_opsd_rkl", "gigpo")
# Env configs' own variants added after it.
VARIANTS_ADDED_SINCE = ("configs/searchqa.py:pool",)


def _added_variants():
  """The entries of the methods whose config group the single-section layout never had, of the methods added since
  (`METHODS_ADDED_SINCE`) and the variants added since (`VARIANTS_ADDED_SINCE`): their presets did not exist there."""
  from agentopd_jax.methods import METHODS

  from agentopd_jax.training.presets import PAPER_MODELS

  added = {_section(path) for path in _added_sections()[0]}
  methods = {name for name, m in METHODS.items() if m.group in added} | set(METHODS_ADDED_SINCE)
  variants = [e.partition(":")[2] for e in ENTRIES]
  named = [next((v[:-len(m) - 1] for m in PAPER_MODELS if v.endswith("_" + m)), v) for v in variants]
  return [e for e, method in zip(ENTRIES, named) if method in methods or e in VARIANTS_ADDED_SINCE]


def test_the_single_section_fixture_holds_the_same_presets():
  assert sorted(_BEFORE) == sorted(set(ENTRIES) - set(_added_variants()))


@pytest.mark.parametrize("entry", sorted(_BEFORE))
def test_upgrade_gives_the_group_values(entry):
  """Every value is kept: `upgrade` of the single-section values, plus (in a run config) the defaults of the sections
  that layout never had and the preset's values of the fields added since to its sections (`share_prefixes`,
  `rollout.share_prefill`), equals the group values, value for value and type for type (JSON type and recorded
  ConfigDict type)."""
  from agentopd_jax.training.config import upgrade

  before, now = _BEFORE[entry], _fixture()[entry]
  values, types = _added_sections() if "env.name" in before["values"] else ({}, {})
  if "env.name" in before["values"]:
    known = {_group_path(path) for old in _BEFORE.values() for path in old["values"]}
    added = [p for p in now["values"] if p not in known and (p not in values or "." not in p)]
    values = {**values, **{p: now["values"][p] for p in added}}
    types = {**types, **{p: now["types"][p] for p in added if p in now["types"]}}
  upgraded = {"values": {**_dotted(upgrade(nested(before["values"]))), **values},
              "types": {**{_group_path(path): name for path, name in before["types"].items()}, **types}}
  lines = diff(now, upgraded)
  assert not lines, f"{entry}: upgrade of the single-section values differs:\n  " + "\n  ".join(lines)


def main(argv):
  import argparse

  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--out", default=FIXTURE)
  args = parser.parse_args(argv)
  # The tree whose configs are recorded is the one `agentopd_jax` is imported from (PYTHONPATH).
  import agentopd_jax

  root = os.path.dirname(os.path.dirname(os.path.abspath(agentopd_jax.__file__)))
  out = {entry: record(entry, root) for entry in enumerate_entries()}
  os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
  with open(args.out, "w") as f:
    json.dump(out, f, indent=1, sort_keys=True, allow_nan=False)
    f.write("\n")
  print(f"{len(out)} configs of {root} -> {args.out} ({os.path.getsize(args.out)} bytes)")


if __name__ == "__main__":
  main(sys.argv[1:])
