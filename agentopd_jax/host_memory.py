"""The host allocator of a training or evaluation process: glibc's malloc set to reuse the pages it has.

XLA:CPU allocates the buffers of every call of a compiled program (activations, a decode step's KV cache, a
mini-batch's gradients: up to tens of MB each) with malloc, and frees them when the call ends. With glibc's defaults
a buffer over the mmap threshold is mapped for the call and unmapped at its end, and the arenas of XLA's worker
threads give their freed tops back to the kernel; the next call's buffers then fault in freshly zeroed pages. A
CPU-default GRPO run took ~90 k page faults per second and spent 11 % of its CPU time in the kernel. One arena that
never maps and never trims keeps the pages and reuses them: on the CPU default's shapes a decoding call ran 1.13x
and an update step 1.03x faster, with 0.3 s of system time against 4.3 (docs/benchmarks.md, "The host allocator").
Only where memory comes from changes: every value is the same, bit for bit. Few-row decoding of larger models
streams its weights more slowly from the one heap (the `small` preset's 8-row bf16 decode step: 10.5 against
9.2 ms), so the server keeps glibc's defaults.

The cost: the heap is never given back and fragments, so a CPU-default run peaked at 3.0 GB resident against
2.2 GB. `AGENTOPD_HOST_ALLOCATOR=default` keeps glibc's behaviour; a `GLIBC_TUNABLES` the user set wins.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
import sys

# mallopt parameters (glibc's malloc.h)
M_TRIM_THRESHOLD, M_MMAP_MAX, M_ARENA_MAX = -1, -4, -8
_SETTINGS = ((M_ARENA_MAX, 1), (M_MMAP_MAX, 0), (M_TRIM_THRESHOLD, 2**31 - 1))


def tune() -> bool:
  """Sets glibc's malloc to one arena, no mmap'd chunks and no trimming; returns whether it did.

  Call it first thing in a process, before JAX starts its backend: arenas that XLA's threads made before are left
  as they are (the call still helps, by less). Nothing happens off Linux or glibc, under
  `AGENTOPD_HOST_ALLOCATOR=default`, or when `GLIBC_TUNABLES` is set (the user's own malloc settings)."""
  if os.environ.get("AGENTOPD_HOST_ALLOCATOR", "") == "default" or "GLIBC_TUNABLES" in os.environ:
    return False
  if not sys.platform.startswith("linux"):
    return False
  try:
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    mallopt = libc.mallopt  # glibc only (musl has none)
  except (OSError, AttributeError):
    return False
  mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
  return all(mallopt(param, value) == 1 for param, value in _SETTINGS)
