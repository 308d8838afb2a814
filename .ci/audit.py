"""Audit the pinned dependencies against published advisories where pip-audit's services cannot be reached.

pip-audit asks PyPI's per-version JSON API or api.osv.dev. From a machine that reaches neither, it skips every
package and prints a false "No known vulnerabilities found" (docs/reliability.md, "Supply chain"). This script does
pip-audit's check from two sources such a machine may still have:

- a local copy of an OSV database: a checkout of pypa/advisory-database (`vulns/<package>/*.yaml`) or an unzipped
  OSV export (`*.json`). Each advisory's affected ranges are evaluated as the OSV schema defines them (ECOSYSTEM
  events in PEP 440 order, explicit version lists, withdrawn advisories ignored);
- with `--pypi`, PyPI's per-project JSON API, which lists the advisories of a project's newest release only: it
  covers a pin that is the newest release and says so for the others.

  python .ci/audit.py --osv <folder> [--pypi] [--installed]

The packages are setup.py's `==` pins; `--installed` adds what pip installed for them: every distribution
agentopd_jax and its extras need, transitively, as installed here. Prints one JSON report and exits 1 if any advisory affects an audited version.
"""
from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import json
import os
import runpy
import sys
import urllib.request
from collections.abc import Callable, Iterable, Mapping

import setuptools
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import InvalidVersion, Version

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def setup_kwargs(setup_py: str = os.path.join(ROOT, "setup.py")) -> dict:
  """The keywords setup.py passes to setuptools.setup (install_requires, extras_require, ...); nothing is installed."""
  kwargs, real = {}, setuptools.setup
  setuptools.setup = kwargs.update
  try:
    runpy.run_path(setup_py)
  finally:
    setuptools.setup = real
  return kwargs


def setup_pins(setup_py: str = os.path.join(ROOT, "setup.py")) -> dict[str, str]:
  """{canonical name: version} of every `==` requirement in setup.py's install_requires and extras."""
  kwargs = setup_kwargs(setup_py)
  found = {}
  for text in [*kwargs["install_requires"], *(r for extra in kwargs["extras_require"].values() for r in extra)]:
    req = Requirement(text)
    exact = [s.version for s in req.specifier if s.operator == "=="]
    if exact:
      found[canonicalize_name(req.name)] = exact[0]
  return found


def resolved(root: str = "agentopd_jax") -> dict[str, str]:
  """{canonical name: version} of every installed distribution that `root` with all its extras needs, transitively:
  what `pip install -e '.[...]'` resolved the pins' own dependencies to (not the rest of the environment)."""
  found: dict[str, str] = {}
  seen: set[tuple[str, frozenset]] = set()
  todo = [(root, frozenset(importlib.metadata.metadata(root).get_all("Provides-Extra") or ()))]
  while todo:
    name, extras = todo.pop()
    if (canonicalize_name(name), extras) in seen:
      continue
    seen.add((canonicalize_name(name), extras))
    try:
      dist = importlib.metadata.distribution(name)
    except importlib.metadata.PackageNotFoundError:
      continue  # a requirement whose marker holds elsewhere (another platform or Python) is not installed here
    if canonicalize_name(name) != canonicalize_name(root):
      found[canonicalize_name(dist.metadata["Name"])] = dist.version
    for text in dist.requires or ():
      req = Requirement(text)
      if req.marker is None or any(req.marker.evaluate({"extra": e}) for e in ("", *extras)):
        todo.append((req.name, frozenset(req.extras)))
  return found


def read_osv(folder: str) -> dict[str, list[dict]]:
  """{canonical PyPI package name: [advisory, ...]} of the OSV files (.yaml, .yml, .json) under `folder`."""
  by_package: dict[str, list[dict]] = {}
  for top, _, files in os.walk(folder):
    for name in sorted(files):
      if not name.endswith((".yaml", ".yml", ".json")):
        continue
      with open(os.path.join(top, name), encoding="utf-8") as f:
        entry = json.load(f) if name.endswith(".json") else yaml.safe_load(f)
      if not isinstance(entry, dict) or "affected" not in entry:
        continue
      for package in {canonicalize_name(a["package"]["name"]) for a in entry["affected"]
                      if a.get("package", {}).get("ecosystem") == "PyPI"}:
        by_package.setdefault(package, []).append(entry)
  return by_package


def _in_range(version: Version, events: Iterable[Mapping[str, str]]) -> bool:
  """OSV's evaluation of one ECOSYSTEM range: walk the events in version order; `introduced` at or below the version
  turns it affected, `fixed` at or below (or `last_affected` below) turns it back."""
  affected = False
  keyed = [(Version(value), kind) for event in events for kind, value in event.items() if kind != "limit"]
  for bound, kind in sorted(keyed, key=lambda e: e[0]):
    if kind == "introduced" and version >= bound:
      affected = True
    elif kind == "fixed" and version >= bound:
      affected = False
    elif kind == "last_affected" and version > bound:
      affected = False
  return affected


def affects(entry: Mapping, package: str, version: str) -> bool:
  """Whether the OSV advisory `entry` lists `version` of `package` as affected (never a withdrawn advisory)."""
  if entry.get("withdrawn"):
    return False
  parsed = Version(version)
  for a in entry["affected"]:
    if a.get("package", {}).get("ecosystem") != "PyPI" or canonicalize_name(a["package"]["name"]) != package:
      continue
    if any(_valid(v) and parsed == Version(v) for v in a.get("versions", ())):
      return True
    if any(r.get("type") == "ECOSYSTEM" and _in_range(parsed, r.get("events", ())) for r in a.get("ranges", ())):
      return True
  return False


def _valid(text: str) -> bool:
  try:
    Version(text)
  except InvalidVersion:
    return False
  return True


def pypi_latest(name: str, get_json: Callable[[str], Mapping]) -> tuple[str, list[dict]]:
  """(newest release, its non-withdrawn advisories) from PyPI's per-project JSON API."""
  data = get_json(f"https://pypi.org/pypi/{name}/json")
  return data["info"]["version"], [v for v in data.get("vulnerabilities") or () if not v.get("withdrawn")]


def _get_json(url: str) -> Mapping:
  with urllib.request.urlopen(url, timeout=30) as response:
    return json.load(response)


def audit(packages: Mapping[str, str], advisories: Mapping[str, list[dict]] | None = None,
          get_json: Callable[[str], Mapping] | None = None) -> dict:
  """The report: per package its version, the advisories known for it and which of them affect that version."""
  report = {"packages": {}, "hits": [], "unevaluated": []}
  for name, version in sorted(packages.items()):
    row = report["packages"][name] = {"version": version}
    if not _valid(version):
      report["unevaluated"].append(f"{name}=={version}: not a PEP 440 version")
      continue
    if advisories is not None:
      known = advisories.get(name, [])
      row["osv_advisories"] = len(known)
      for entry in known:
        try:
          hit = affects(entry, name, version)
        except InvalidVersion as e:
          report["unevaluated"].append(f"{name}=={version}: {entry['id']}: {e}")
          continue
        if hit:
          report["hits"].append({"package": name, "version": version, "id": entry["id"], "source": "osv",
                                 "aliases": entry.get("aliases", [])})
    if get_json is not None:
      try:
        latest, vulns = pypi_latest(name, get_json)
      except Exception as e:  # one unreachable project is reported, not fatal to the audit
        row["pypi"] = f"unreachable: {type(e).__name__}: {e}"
        continue
      row["pypi_latest"] = latest
      row["pypi"] = "covered (pin is the newest release)" if latest == version else "not covered (pin is older)"
      if latest == version:
        report["hits"] += [{"package": name, "version": version, "id": v["id"], "source": "pypi",
                            "aliases": v.get("aliases", [])} for v in vulns]
  return report


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--osv", help="a folder of OSV advisories (pypa/advisory-database or an OSV export)")
  parser.add_argument("--pypi", action="store_true", help="also ask PyPI's per-project JSON API")
  parser.add_argument("--installed", action="store_true", help="audit the installed dependencies of the pins too")
  args = parser.parse_args(argv)
  if not args.osv and not args.pypi:
    parser.error("give --osv <folder>, --pypi, or both")
  if args.osv and not os.path.isdir(args.osv):
    parser.error(f"--osv: {args.osv} is not a folder")
  packages = setup_pins()
  if args.installed:
    packages = {**resolved(), **packages}
  advisories = read_osv(args.osv) if args.osv else None
  report = audit(packages, advisories, _get_json if args.pypi else None)
  if advisories is not None:
    dates = [str(e.get("modified", "")) for entries in advisories.values() for e in entries]
    report["osv"] = {"folder": args.osv, "advisories": len({e["id"] for es in advisories.values() for e in es}),
                     "newest_modified": max(dates, default="")}
  report["date"] = datetime.date.today().isoformat()
  report["audited"] = len(packages)
  print(json.dumps(report, indent=1))
  return 1 if report["hits"] else 0


if __name__ == "__main__":
  sys.exit(main())
