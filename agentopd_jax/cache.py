"""The user's cache: one root for what runs share and can always rebuild (generated ALFWorld games, the built-in
tokenizer, JAX's compiled executables): `$AGENTOPD_CACHE`, else `~/.cache/agentopd_jax`."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Dict, Optional


def root() -> Path:
  return Path(os.environ.get("AGENTOPD_CACHE", "~/.cache/agentopd_jax")).expanduser()


def enable_compilation_cache() -> Optional[str]:
  """JAX's persistent compilation cache under `root()/jax_compilation` for a CPU run; returns the folder in use.

  A later run, or a resumed one, then loads every executable an earlier run compiled for the same computation
  (model, shapes, flags, jax version) instead of compiling it again: on the CPU default that is about 20 s of the
  first iteration and more of each validation's first call. Every executable is kept, however quickly it compiled.
  Left as it is when a cache folder is already set (`JAX_COMPILATION_CACHE_DIR`, e.g. the tests' shared one), and on
  accelerators, where the user's own JAX settings decide."""
  import jax  # here, so that the env workers can import `root` without JAX

  current = jax.config.jax_compilation_cache_dir
  if current:
    return current
  if jax.default_backend() != "cpu":
    return None
  folder = root() / "jax_compilation"
  folder.mkdir(parents=True, exist_ok=True)
  jax.config.update("jax_compilation_cache_dir", str(folder))
  jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
  jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
  return str(folder)


# Lowering to StableHLO, and XLA compilation or its load from the persistent cache (JAX times both as one event).
# Tracing is left out: its events nest, so a sum would count inner traces twice.
_LOWER, _COMPILE = "/jax/core/compile/jaxpr_to_mlir_module_duration", "/jax/core/compile/backend_compile_duration"
_HIT = "/jax/compilation_cache/cache_hits"
_compiled = {"compile_s": 0.0, "programs": 0, "cache_hits": 0}
_listening = []  # non-empty once the listeners are registered (once per process)


def _on_duration(name: str, seconds: float, **_) -> None:
  if name in (_LOWER, _COMPILE):
    _compiled["compile_s"] += seconds
    _compiled["programs"] += name == _COMPILE


def _on_event(name: str, **_) -> None:
  if name == _HIT:
    _compiled["cache_hits"] += 1


def compile_counter() -> Dict[str, float]:
  """This process's running totals of JAX compilation, from JAX's own monitoring events: `compile_s` (lowering,
  and XLA compiling or loading from the persistent cache), `programs` (executables built or loaded) and
  `cache_hits` (of them, loaded from the persistent cache). The trainer logs each iteration's increase, so a metric
  says how much of an iteration was compilation, and whether a new shape forced it."""
  if not _listening:
    import jax
    jax.monitoring.register_event_duration_secs_listener(_on_duration)
    jax.monitoring.register_event_listener(_on_event)
    _listening.append(True)
  return dict(_compiled)
