"""Sweeps: many `experiments/train.py` runs described by one ml_collections file (`experiments/sweep.py`).

A sweep file's `get_config()` returns a ConfigDict with
  base       "configs/alfworld.py:opid", a config file and optional variant, or a list of them (an axis: methods)
  root       the sweep's folder; each point trains in root/<point name> and logs to its train.log there
  seeds      a tuple of run seeds (`config.seed`; a tuple, so `--sweep.seeds="(0,1)"` overrides it), every point
             once per seed
  overrides  fixed values, nested as the run config is: {"warm_start_run": "runs/x", "sdar": {"coef": 1.0}}
  grid       nested the same way, with a list at each leaf: every combination of the leaves' values
  zip        nested the same way, with equal-length lists at the leaves: one axis whose leaves vary together
  zip_labels optional: one name per zip column, used in the points' names instead of the zipped settings (methods
             that differ in several fields: ("hcn_lad", "static_best", "grpo"))
Fields are read in ConfigDict's (sorted) order. Points are ordered seed-major (every method and setting of seed 0 first, so a partly run sweep already pairs them),
then base, grid, zip. A point whose workdir has summary.json is finished and skipped; one with checkpoints resumes
(train.py resumes from the newest); `root/sweep.json` lists the points for `experiments/compare.py` and schedulers.
"""
from __future__ import annotations

import dataclasses
import importlib.util
import itertools
import json
import os
import re
import shlex
import subprocess
import sys
import time
from typing import Any, Dict, List, Sequence, Tuple

import ml_collections

FIELDS = ("base", "root", "seeds", "overrides", "grid", "zip", "zip_labels")
RESERVED = ("workdir", "seed")  # set by the sweep for every point


@dataclasses.dataclass(frozen=True)
class Point:
  """One train.py run of a sweep."""
  name: str
  base: str                        # "configs/x.py[:variant]"
  seed: int
  overrides: Tuple[Tuple[str, Any], ...]  # (dotted field, value), fixed ones first
  workdir: str

  def command(self, python: str = sys.executable, train_script: str = "experiments/train.py") -> List[str]:
    flags = [f"--config.{key}={_flag_value(value)}" for key, value in self.overrides]
    return [python, train_script, f"--config={self.base}", f"--config.workdir={self.workdir}",
            f"--config.seed={self.seed}"] + flags

  @property
  def finished(self) -> bool:
    return os.path.exists(os.path.join(self.workdir, "summary.json"))

  @property
  def started(self) -> bool:
    return os.path.isdir(os.path.join(self.workdir, "checkpoints"))


def _flag_value(value: Any) -> str:
  """How `--config.field=` spells a value for ml_collections' flag parser."""
  if isinstance(value, str):
    return value
  if isinstance(value, (list, tuple)):
    return repr(tuple(value))
  return repr(value)


def load_run_config(base: str, where: str) -> ml_collections.ConfigDict:
  """The run config `base` ("configs/x.py[:variant]") names, as train.py would build it before overrides."""
  path, _, variant = base.partition(":")
  if not os.path.isfile(path):
    raise ValueError(f"{where}: config file {path!r} not found (paths are relative to the current directory)")
  spec = importlib.util.spec_from_file_location(f"sweep_base_{abs(hash(path))}", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  try:
    return module.get_config(variant) if variant else module.get_config()
  except ValueError as exc:
    raise ValueError(f"{where}: {exc}") from None


def _leaves(tree: Any, where: str, prefix: str = "") -> List[Tuple[str, Any]]:
  """(dotted key, value) of every leaf of a nested dict, in order."""
  if not isinstance(tree, (dict, ml_collections.ConfigDict)):
    raise ValueError(f"{where}: must be a nested dict of config fields, got {type(tree).__name__}")
  out = []
  for key, value in tree.items():
    dotted = f"{prefix}{key}"
    if isinstance(value, (dict, ml_collections.ConfigDict)):
      out += _leaves(value, f"{where}.{key}", dotted + ".")
    else:
      out.append((dotted, value))
  return out


def _check_field(config: ml_collections.ConfigDict, base: str, key: str, value: Any, where: str) -> None:
  """`key` is a field of `config` and `value` fits its type (ConfigDict's own type check on a copy)."""
  if key in RESERVED:
    raise ValueError(f"{where}: {key!r} is set by the sweep for every point; remove it")
  node, parts = config, key.split(".")
  for i, part in enumerate(parts[:-1]):
    if part not in node or not isinstance(node[part], ml_collections.ConfigDict):
      raise ValueError(f"{where}: {base} has no config section {'.'.join(parts[:i + 1])!r}{_stale(key, value)}")
    node = node[part]
  if parts[-1] not in node:
    raise ValueError(f"{where}: {base} has no field {key!r}{_stale(key, value)}")
  if value is None:
    raise ValueError(f"{where}: None cannot be passed as a flag; give a value")
  trial = ml_collections.ConfigDict(node.to_dict())
  try:
    trial[parts[-1]] = tuple(value) if isinstance(value, list) else value
  except TypeError as exc:
    raise ValueError(f"{where}: value {value!r} does not fit {key!r}: {exc}") from None
  if isinstance(value, str) and _stale(key, value):
    raise ValueError(f"{where}: value {value!r} of {key!r}{_stale(key, value)}")


def _stale(key: str, value: Any) -> str:
  """"; loss.sdar_coef is now sdar.coef" for a key of the single-section layout, else ""."""
  from agentopd_jax.training.config import stale_key  # the run config's modules: only on this error

  message = stale_key(key, value if isinstance(value, str) else None) or stale_key(key.split(".")[0])
  return f"; {message}" if message else ""


def _name_part(key: str, value: Any, keys: Sequence[str]) -> str:
  """A short label of one setting: the field's last name unless another axis field shares it."""
  short = key.rsplit(".", 1)[-1]
  label = short if sum(k.rsplit(".", 1)[-1] == short for k in keys) == 1 else key
  return f"{label}={_flag_value(value)}"


def _base_label(base: str, bases: Sequence[str]) -> str:
  path, _, variant = base.partition(":")
  stem = os.path.splitext(os.path.basename(path))[0]
  if len({os.path.splitext(os.path.basename(b.partition(':')[0]))[0] for b in bases}) > 1:
    return f"{stem}_{variant}" if variant else stem
  return variant or "default"


def _safe(name: str) -> str:
  return re.sub(r"[^A-Za-z0-9_.=+-]+", "_", name).strip("_")


def expand(sweep: ml_collections.ConfigDict, where: str = "sweep") -> List[Point]:
  """Every point of a sweep config, validated field by field (one error naming the sweep field at fault)."""
  unknown = sorted(set(sweep.keys()) - set(FIELDS))
  if unknown:
    raise ValueError(f"{where}: unknown field(s) {unknown}; a sweep has {list(FIELDS)}")
  for field in ("base", "root", "seeds"):
    if field not in sweep:
      raise ValueError(f"{where}.{field}: missing")
  bases = [sweep.base] if isinstance(sweep.base, str) else list(sweep.base)
  if not bases or not all(isinstance(b, str) and b for b in bases):
    raise ValueError(f"{where}.base: a config path (configs/x.py[:variant]) or a non-empty list of them")
  if len(set(bases)) != len(bases):
    raise ValueError(f"{where}.base: listed twice: {sorted(b for b in set(bases) if bases.count(b) > 1)}")
  if not isinstance(sweep.root, str) or not sweep.root:
    raise ValueError(f"{where}.root: the sweep's folder, a non-empty string")
  seeds = list(sweep.seeds) if isinstance(sweep.seeds, (list, tuple)) else None
  if not seeds or not all(isinstance(s, int) and not isinstance(s, bool) for s in seeds) or len(set(seeds)) != len(seeds):
    raise ValueError(f"{where}.seeds: a non-empty list of distinct ints, got {sweep.seeds!r}")
  fixed = _leaves(sweep.get("overrides", {}), f"{where}.overrides")
  grid = _leaves(sweep.get("grid", {}), f"{where}.grid")
  zipped = _leaves(sweep.get("zip", {}), f"{where}.zip")
  axes = [("grid", k, v) for k, v in grid] + [("zip", k, v) for k, v in zipped]
  for kind, key, values in axes:
    if not isinstance(values, list) or not values:
      raise ValueError(f"{where}.{kind}.{key}: a non-empty list of values, got {values!r}")
  if len({len(v) for _, v in zipped}) > 1:
    raise ValueError(f"{where}.zip: every list must have the same length, got "
                     f"{ {k: len(v) for k, v in zipped} }")
  labels = sweep.get("zip_labels")
  if labels is not None:
    if not zipped:
      raise ValueError(f"{where}.zip_labels: names zip columns, but the sweep has no zip")
    columns = len(zipped[0][1])
    if (not isinstance(labels, (list, tuple)) or len(labels) != columns
        or not all(isinstance(l, str) and l for l in labels) or len(set(labels)) != len(labels)):
      raise ValueError(f"{where}.zip_labels: {columns} distinct non-empty names, one per zip column, got {labels!r}")
  axis_keys = [k for k, _ in grid + zipped]
  every = axis_keys + [k for k, _ in fixed]
  twice = sorted({k for k in every if every.count(k) > 1})
  if twice:
    raise ValueError(f"{where}: field(s) {twice} set in more than one of overrides, grid and zip")
  for base in bases:
    config = load_run_config(base, f"{where}.base")
    for key, value in fixed:
      _check_field(config, base, key, value, f"{where}.overrides.{key}")
    for kind, key, values in axes:
      for value in values:
        _check_field(config, base, key, value, f"{where}.{kind}.{key}")
  grid_settings = list(itertools.product(*[[(k, v) for v in values] for k, values in grid]))
  zip_settings = ([tuple(zip([k for k, _ in zipped], column)) for column in zip(*[v for _, v in zipped])]
                  if zipped else [()])
  zip_names = ([[label] for label in labels] if labels is not None
               else [[_name_part(k, v, axis_keys) for k, v in z] for z in zip_settings])
  points = []
  for seed in seeds:
    for base in bases:
      for g in grid_settings:
        for z, z_name in zip(zip_settings, zip_names):
          parts = ([_base_label(base, bases)] if len(bases) > 1 or not (grid or zipped) else [])
          parts += [_name_part(k, v, axis_keys) for k, v in g] + z_name + [f"s{seed}"]
          name = _safe("-".join(parts))
          points.append(Point(name, base, seed, tuple(fixed) + tuple(g) + tuple(z),
                              os.path.join(sweep.root, name)))
  if len({p.name for p in points}) != len(points):
    raise ValueError(f"{where}: two points share a name; make the axis values distinct")
  return points


def load_sweep(path: str) -> ml_collections.ConfigDict:
  """A sweep file's config (`get_config()`), with one error naming the file when it is not one."""
  if not os.path.isfile(path):
    raise ValueError(f"--sweep: file {path!r} not found")
  spec = importlib.util.spec_from_file_location("sweep_file", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  if not hasattr(module, "get_config"):
    raise ValueError(f"{path}: a sweep file defines get_config() returning the sweep's ConfigDict")
  return module.get_config()


def write_manifest(sweep: ml_collections.ConfigDict, points: Sequence[Point], source: str) -> str:
  """root/sweep.json: the sweep and its points (name, base, seed, overrides, workdir)."""
  os.makedirs(sweep.root, exist_ok=True)
  path = os.path.join(sweep.root, "sweep.json")
  record = {"source": source, "sweep": sweep.to_dict(),
            "points": [dict(name=p.name, base=p.base, seed=p.seed, workdir=p.workdir,
                            overrides={k: v for k, v in p.overrides}) for p in points]}
  with open(path, "w") as f:
    json.dump(record, f, indent=2, default=lambda v: list(v) if isinstance(v, tuple) else str(v))
  return path


def run(points: Sequence[Point], parallel: int = 1, python: str = sys.executable,
        train_script: str = "experiments/train.py", log=print, poll_s: float = 1.0) -> Dict[str, str]:
  """Runs the unfinished points, `parallel` at a time, each as its own train.py process writing to its
  workdir's train.log; returns {point name: "skipped" | "done" | "failed (rc N)"}. A failed point does not stop
  the others; running the sweep again resumes it."""
  from agentopd_jax.storage.logs import progress

  if not isinstance(parallel, int) or parallel < 1:
    raise ValueError(f"--parallel must be an int >= 1, got {parallel!r}")
  status = {p.name: "skipped" for p in points if p.finished}
  pending = [p for p in points if not p.finished]
  for p in points:
    if p.finished:
      log(f"[sweep] {p.name}: finished, skipped")
  running: List[Tuple[Point, subprocess.Popen, Any, float]] = []
  bar = progress(len(points), desc="sweep", initial=len(status))
  try:
    while pending or running:
      while pending and len(running) < parallel:
        p = pending.pop(0)
        os.makedirs(p.workdir, exist_ok=True)
        log_file = open(os.path.join(p.workdir, "train.log"), "a")
        log(f"[sweep] {p.name}: {'resuming' if p.started else 'starting'}: {shlex.join(p.command(python, train_script))}")
        proc = subprocess.Popen(p.command(python, train_script), stdout=log_file, stderr=subprocess.STDOUT)
        running.append((p, proc, log_file, time.perf_counter()))
      time.sleep(poll_s)
      for item in list(running):
        p, proc, log_file, t0 = item
        rc = proc.poll()
        if rc is None:
          continue
        running.remove(item)
        log_file.close()
        status[p.name] = "done" if rc == 0 and p.finished else f"failed (rc {rc})"
        log(f"[sweep] {p.name}: {status[p.name]} in {time.perf_counter() - t0:.0f} s "
            f"(log: {os.path.join(p.workdir, 'train.log')})")
        bar.update(1)
        bar.set_postfix(done=sum(s == "done" for s in status.values()),
                        failed=sum(s.startswith("failed") for s in status.values()))
  finally:
    for p, proc, log_file, _ in running:  # interrupted: stop the children, they resume next time
      proc.terminate()
      proc.wait()
      log_file.close()
    bar.close()
  return status
