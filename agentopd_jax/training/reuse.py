"""Work the runs of one experiment share, done once: the SFT warm start and its step-0 validation.

The runs of a sweep (methods × seeds) start from one warm start: `sft.seed` is fixed, so SFT trains the same params
whatever the run seed or the method. The first run that needs it trains it and stores it in the user's cache
(`cache.root()/warm_starts/<key>`: the params as a one-step checkpoint pool, and SFT's metrics lines); the others
restore it. The key hashes everything SFT reads (the env, model, tokenizer, rollout, sft, skills and optim sections,
pack_width, the mesh, the warm start's seed), the package's source, the JAX version and the machine (backend,
device kind and count, CPU threads: XLA:CPU splits sums by its thread count, so another count trains other params).

The step-0 validation plays the start on the panel with the run seed's validation key: stored per start and per
validation setting (`<key>/val0/<hash>.json`: the panel's metrics, outcomes and timings), so the methods of one
seed play it once. A start from `warm_start_run` shares it too (keyed by that checkpoint's recorded checksum); a
method's own start (Agentic-OPD's student) and multi-process runs never reuse.

Reuse gives the same run as no reuse (tests/test_reuse.py): the same params, every metric but the wall times, the
same outcomes. `reuse_warm_start=False` turns it off for a run, an empty `$AGENTOPD_WARM_STARTS` for every run.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
from pathlib import Path
from typing import Dict, Optional

import jax

from agentopd_jax import cache
from agentopd_jax.storage.atomic import atomic_write_json
from agentopd_jax.models.loading import run_params
from agentopd_jax.storage.checkpoints import CheckpointPool

SFT_SECTIONS = ("env", "model", "builtin_tokenizer", "tokenizer_path", "rollout", "sft", "skills", "optim",
                "pack_width", "mesh_shape")
VALIDATION_SECTIONS = ("env", "model", "builtin_tokenizer", "tokenizer_path", "rollout", "validation", "mesh_shape")


@functools.lru_cache(maxsize=None)
def source_digest() -> str:
  """sha256 over the package's Python sources: a code change is a new key."""
  root = Path(__file__).resolve().parents[1]
  h = hashlib.sha256()
  for path in sorted(root.rglob("*.py")):
    h.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes() + b"\0")
  return h.hexdigest()


def _machine() -> dict:
  device = jax.devices()[0]
  return {"jax": jax.__version__, "backend": jax.default_backend(), "device_kind": device.device_kind,
          "devices": jax.device_count(), "processes": jax.process_count(),
          "threads": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
          "xla_flags": os.environ.get("XLA_FLAGS", "")}


def _sections(cfg, names) -> dict:
  """{name: value} of run config fields, sections as plain dicts."""
  return {n: dataclasses.asdict(getattr(cfg, n)) if dataclasses.is_dataclass(getattr(cfg, n)) else getattr(cfg, n)
          for n in names}


def _digest(doc) -> str:
  return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()[:20]


def _model_files(path: str) -> list:
  """(name, size, mtime) of a model or tokenizer folder's files: new weights in the same folder are a new key."""
  if not path or not os.path.isdir(path):
    return []
  return sorted((f.name, f.stat().st_size, f.stat().st_mtime_ns) for f in os.scandir(path) if f.is_file())


def warm_start_key(cfg, base_seed: int) -> str:
  """The hash of what the SFT warm start of run config `cfg` depends on."""
  doc = _sections(cfg, SFT_SECTIONS)
  if doc["sft"].pop("dtype"):  # SFT computes in sft.dtype: the run's own model.dtype does not change it
    doc["model"]["dtype"] = cfg.sft.dtype
  if cfg.sft.opid_fraction:  # OPID-format demonstrations route skills by the run's `opid.*`
    doc["opid"] = dataclasses.asdict(cfg.opid)
  return _digest({"config": doc, "seed": base_seed,
                  "model_files": [_model_files(cfg.model.path), _model_files(cfg.tokenizer_path)],
                  "source": source_digest(), "machine": _machine()})


def store() -> Optional[Path]:
  """Where shared starts are kept: `$AGENTOPD_WARM_STARTS`, else `cache.root()/warm_starts`; None (no reuse) when
  that variable is set empty, as the test suite sets it so each test trains and validates for itself."""
  folder = os.environ.get("AGENTOPD_WARM_STARTS")
  if folder is None:
    return cache.root() / "warm_starts"
  return Path(folder).expanduser() if folder else None


class SharedStart:
  """The cache folder of one start: its params, its SFT log lines and its step-0 validations."""

  def __init__(self, key: str):
    self.folder = store() / key

  @property
  def pool_dir(self) -> Path:
    return self.folder / "checkpoints"

  def has_params(self) -> bool:
    return (self.folder / "sft_log.json").exists()

  def restore(self, abstract_params):
    """(params, SFT's logged records [(step, metrics)]) stored by `store`."""
    params, _ = run_params(self.folder, 0, abstract_params)
    records = json.loads((self.folder / "sft_log.json").read_text())
    return params, [(r["step"], r["metrics"]) for r in records]

  def store(self, params, sft_records) -> None:
    """Saves the warm start (first writer wins: a sweep's parallel runs may both have trained it, identically)."""
    if self.has_params():
      return
    with CheckpointPool(self.pool_dir) as pool:
      if 0 not in pool.steps():
        pool.save(0, {"params": params}, metrics={}, outcomes=None, config={})
    atomic_write_json(str(self.folder / "sft_log.json"),
                      [{"step": step, "metrics": metrics} for step, metrics in sft_records])

  def validation(self, key: str) -> Optional[Dict]:
    path = self.folder / "val0" / f"{key}.json"
    return json.loads(path.read_text()) if path.exists() else None

  def store_validation(self, key: str, result: Dict) -> None:
    (self.folder / "val0").mkdir(parents=True, exist_ok=True)
    atomic_write_json(str(self.folder / "val0" / f"{key}.json"), result)


def run_start_key(run_dir: str, step: int) -> Optional[str]:
  """A `warm_start_run` start: the recorded checksum of its checkpoint names it (None, no reuse, where the pool
  records none)."""
  path = Path(run_dir) / "checkpoints" / "checksums.json"
  checksum = json.loads(path.read_text()).get(str(step)) if path.exists() else None
  return None if checksum is None else _digest({"run_checkpoint": checksum})


def validation_key(cfg) -> str:
  """The hash of what a step-0 validation depends on besides the params: the panel, its play and its keys."""
  doc = _sections(cfg, VALIDATION_SECTIONS)
  return _digest({"config": doc, "seed": cfg.seed, "source": source_digest(), "machine": _machine()})
