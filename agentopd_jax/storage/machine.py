"""The machine a run ran on, as far as it moves the run's numbers.

XLA:CPU picks its kernels by the CPU's instruction sets and splits reductions by its thread count, so the same
command on the same code gives other bits on another CPU, and the CPU default's 330 SFT steps grow those bits into
another warm start (docs/results.md, "Reproducing the default run"). Every start of a run, the first and each resume,
appends one line to the run's `machine.jsonl`; `experiments/record_run.py` keeps the file with the run's record, so a
record says which machine its numbers are.
"""
from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path
from typing import Dict, List

FILE = "machine.jsonl"
# The instruction sets that decide which XLA:CPU kernels run (x86 and Arm).
ISA = ("avx2", "fma", "avx512f", "avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "asimd", "sve")


def _cpuinfo() -> Dict[str, str]:
  """The first processor's fields of /proc/cpuinfo ({} where there is none)."""
  try:
    first = Path("/proc/cpuinfo").read_text().split("\n\n", 1)[0]
  except OSError:
    return {}
  return {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in first.splitlines())}


def describe() -> dict:
  """The CPU (model, family and model numbers, the instruction sets in `ISA`), the cores this process may use, the
  JAX backend and devices, the versions and XLA_FLAGS."""
  import jax
  import jaxlib

  info = _cpuinfo()
  flags = set((info.get("flags") or info.get("Features") or "").split())
  cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
  return {"cpu": info.get("model name") or platform.processor() or platform.machine(),
          "cpu_family": info.get("cpu family"), "cpu_model": info.get("model"),
          "isa": [name for name in ISA if name in flags], "cores": cores,
          "backend": jax.default_backend(), "device_kind": jax.devices()[0].device_kind,
          "devices": jax.device_count(), "processes": jax.process_count(), "jax": jax.__version__,
          "jaxlib": jaxlib.__version__, "python": platform.python_version(), "xla_flags": os.environ.get("XLA_FLAGS", "")}


def append(folder) -> None:
  """One line for this start of the run in `folder`: the time, then `describe()`."""
  with open(Path(folder) / FILE, "a", encoding="utf-8") as f:
    f.write(json.dumps({"time": time.time(), **describe()}) + "\n")


def read(folder) -> List[dict]:
  """The run's starts, oldest first ([] for a run that has no machine.jsonl). A last line cut short by a kill while
  it was written is left out."""
  path = Path(folder) / FILE
  if not path.exists():
    return []
  text = path.read_text(encoding="utf-8")
  lines = text.splitlines() if text.endswith("\n") else text.splitlines()[:-1]
  return [json.loads(line) for line in lines if line.strip()]
