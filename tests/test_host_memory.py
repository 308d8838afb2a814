"""`host_memory.tune`: after it, freed large buffers are reused instead of faulting in new pages; it is a no-op
when the user opts out or sets glibc's own tunables."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

from agentopd_jax import host_memory

# 20 buffers of 64 MiB, each written in full and freed: 16 384 pages apiece.
_CHURN = textwrap.dedent("""
    import json, resource, sys
    from agentopd_jax import host_memory
    tuned = host_memory.tune()
    import numpy as np
    np._core.multiarray._set_madvise_hugepage(False)  # numpy's own huge pages would hide the count
    np.empty(16 << 20, np.float32).fill(1.0)  # the first buffer may fault in either case
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(20):
      np.empty(16 << 20, np.float32).fill(1.0)
    print(json.dumps({"tuned": tuned, "faults": resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before}))
""")


def _churn(**env):
  clean = {k: v for k, v in os.environ.items() if k not in ("AGENTOPD_HOST_ALLOCATOR", "GLIBC_TUNABLES")}
  out = subprocess.run([sys.executable, "-c", _CHURN], env={**clean, **env}, capture_output=True, text=True,
                       check=True).stdout
  return json.loads(out.strip().splitlines()[-1])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt")
def test_tuned_allocator_reuses_freed_buffers():
  tuned, default = _churn(), _churn(AGENTOPD_HOST_ALLOCATOR="default")
  assert tuned["tuned"] and not default["tuned"]
  pages = 20 * (64 << 20) // 4096
  assert default["faults"] > pages // 2  # glibc's defaults: every buffer is mapped anew
  assert tuned["faults"] < pages // 20   # tuned: the first buffer's pages are reused


def test_opting_out_or_user_tunables_leave_malloc_alone(monkeypatch):
  monkeypatch.setenv("AGENTOPD_HOST_ALLOCATOR", "default")
  assert not host_memory.tune()
  monkeypatch.delenv("AGENTOPD_HOST_ALLOCATOR")
  monkeypatch.setenv("GLIBC_TUNABLES", "glibc.malloc.arena_max=2")
  assert not host_memory.tune()
