#!/usr/bin/env python
"""Teacher swap benchmark: how long `ResidentTeacher.load` takes to replace the resident teacher with another
checkpoint, against a raw `jax.device_put` of the same parameters from host memory in the same run.

Agentic-OPD swaps the resident teacher at most once per validation interval (every 5 training steps), so a swap
must stay small next to an OPD step. The swap frees the old teacher, then restores the new one's params (only the
`params` subtree, not the optimizer state) from its orbax checkpoint onto the device. The reference is the floor of
any restore: copying the same bytes host -> device (`device_put(..., may_alias=False)`, a real copy also on CPU).
The checkpoints were just written, so they are read from the page cache: this is the restore cost, not cold disk.

  python benchmarks/bench_teacher_swap.py                    # small preset (~36 M params), 3 checkpoints, 7 swaps
  python benchmarks/bench_teacher_swap.py --preset tiny --repeats 3 --out /tmp/swap.json

Both contenders are timed round-robin (`interleaved_times`), after one untimed warm-up each; medians are the
headline figures. Prints one JSON object.
"""
from __future__ import annotations

import argparse
import itertools
import platform
import tempfile
import time

from bench_foundation import code_version, interleaved_times, timing_entry
from common import emit_json, logger


log = logger("bench_teacher_swap")


def parse_args(argv=None):
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--preset", default="small", help="model preset from agentopd_jax.models.config (default small)")
  p.add_argument("--checkpoints", type=int, default=3, help="checkpoints saved and swapped between (>= 2)")
  p.add_argument("--repeats", type=int, default=7, help="timed swaps (and device_puts)")
  p.add_argument("--out", default="", help="also write the JSON here")
  return p.parse_args(argv)


def save_checkpoints(pool_dir: str, config, n: int):
  """n checkpoints of random params; returns host (numpy) copies of the last one, for the device_put reference."""
  import jax
  import numpy as np

  from agentopd_jax.models import transformer
  from agentopd_jax.storage.checkpoints import CheckpointPool

  init = jax.jit(lambda key: transformer.init_params(config, key))
  with CheckpointPool(pool_dir) as pool:
    for step in range(n):
      params = init(jax.random.key(step))
      pool.save(step, {"params": params}, metrics={}, outcomes={}, config={})
      host = jax.tree.map(np.array, params)  # np.array copies: host memory of its own
      jax.tree.map(lambda x: x.delete(), params)
  return host


def main(argv=None):
  args = parse_args(argv)
  if args.checkpoints < 2:
    raise SystemExit("--checkpoints must be >= 2 (a swap needs another checkpoint)")
  import jax

  from agentopd_jax.models import transformer
  from agentopd_jax.models.config import preset
  from agentopd_jax.methods.agentic_opd.resident import ResidentTeacher

  config = preset(args.preset)
  abstract = transformer.abstract_params(config)
  nbytes = sum(a.size * a.dtype.itemsize for a in jax.tree.leaves(abstract))
  with tempfile.TemporaryDirectory() as tmp:
    log(f"saving {args.checkpoints} checkpoints of {args.preset} ({nbytes / 2**20:.0f} MiB of params each)")
    t0 = time.perf_counter()
    host = save_checkpoints(f"{tmp}/checkpoints", config, args.checkpoints)
    save_s = time.perf_counter() - t0
    device = jax.devices()[0]
    steps = itertools.cycle(range(args.checkpoints))

    def device_put():
      arrays = jax.block_until_ready(jax.device_put(host, device, may_alias=False))
      jax.tree.map(lambda x: x.delete(), arrays)

    with ResidentTeacher(f"{tmp}/checkpoints", abstract, jax.sharding.SingleDeviceSharding(device)) as teacher:
      first_t0 = time.perf_counter()
      teacher.load(next(steps))
      first_s = time.perf_counter() - first_t0
      device_put()
      log(f"timing {args.repeats} swaps and device_puts round-robin")
      times = interleaved_times({"swap": lambda: teacher.load(next(steps)), "device_put": device_put}, args.repeats)
      swaps = teacher.swaps
  swap, put = timing_entry(times["swap"], nbytes / 1e9, "gb_per_s"), timing_entry(times["device_put"], nbytes / 1e9,
                                                                                  "gb_per_s")
  result = {
      "benchmark": "teacher_swap", "preset": args.preset, "num_params": config.num_params(),
      "param_bytes": nbytes, "checkpoints": args.checkpoints, "save_s_total": round(save_s, 2),
      "first_load_s": round(first_s, 4), "swaps_done": swaps, "swap": swap, "device_put_reference": put,
      "swap_over_device_put": round(swap["median_s"] / put["median_s"], 2),
      "device": str(device), "platform": platform.platform(), "jax": jax.__version__, **code_version(),
  }
  emit_json(result, args.out)


if __name__ == "__main__":
  main()
