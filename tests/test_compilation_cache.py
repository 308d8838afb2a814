"""The persistent compilation cache is on for CPU runs and hits in a second process; `cache.compile_counter` sees it."""
import json
import os
import subprocess
import sys

_RUN = """
import json, jax, jax.numpy as jnp
from agentopd_jax import cache
folder = cache.enable_compilation_cache()
before = cache.compile_counter()
jax.jit(lambda x: jnp.tanh(x @ x.T).sum())(jnp.ones((64, 32))).block_until_ready()
after = cache.compile_counter()
print(json.dumps({"folder": folder, **{k: after[k] - before[k] for k in after}}))
"""


def _run(root):
  env = {k: v for k, v in os.environ.items() if not k.startswith("JAX_")}  # no cache folder set: the default one
  env.update(AGENTOPD_CACHE=str(root), JAX_PLATFORMS="cpu")
  out = subprocess.run([sys.executable, "-c", _RUN], env=env, capture_output=True, text=True, check=True)
  return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_second_run_loads_what_the_first_compiled(tmp_path):
  first, second = _run(tmp_path), _run(tmp_path)
  assert first["folder"] == second["folder"] == str(tmp_path / "jax_compilation")
  assert first["programs"] >= 1 and first["cache_hits"] == 0 and first["compile_s"] > 0
  assert second["programs"] == first["programs"] and second["cache_hits"] == second["programs"]
  assert os.listdir(tmp_path / "jax_compilation")
