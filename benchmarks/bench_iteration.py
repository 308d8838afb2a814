#!/usr/bin/env python
"""Whole GRPO iterations of the ALFWorld CPU default, per method and compute precision, in one paired run.

Each arm is `experiments/train.py --config=configs/alfworld.py[:method]` from one warm start (`--warm_start`, a
finished run's step 0, e.g. `runs/precision_ab/warm_start`), for `--iterations` iterations, validated only at its
start and end on 4 games (so the timed part is the iterations). Arms run one after the other, `--repeats` rounds in
round-robin order, so background load hits them alike. Per arm the JSON gives the mean seconds of each part of an
iteration (env stepping, generation, advantages, the method's teacher scoring, update) over iterations 2.., the first
iteration apart (it compiles), how much of each part was still compilation (`compiling_s`: new shapes met after the
first iteration), and each arm's ratio to the first arm (`grpo:float32`, today's default). An arm `method:dtype@REF`
runs the code of git revision REF (a worktree of it, on PYTHONPATH), so that code before and after a change is timed
in one paired run; `+field=value` suffixes set config fields of that arm alone.

The compilation cache: every arm's first round runs on an empty JAX cache folder of its own and the next rounds
reuse it, so `first_iteration_s` of round 1 (compiling) against rounds 2.. (loading) shows what the persistent
cache saves, and `first_over_later` whether a cached run's first iteration is as fast as its later ones.

  python benchmarks/bench_iteration.py --warm_start runs/precision_ab/warm_start --out /tmp/iteration.json
  python benchmarks/bench_iteration.py --warm_start W --arms grpo:float32,grpo:bfloat16,sdar:bfloat16 --repeats 2
  python benchmarks/bench_iteration.py --warm_start W --arms grpo:float32@d7e18ff,grpo:float32 --repeats 1
  python benchmarks/bench_iteration.py --warm_start W \
    --arms grpo:float32,skill_grpo:float32,skill_grpo:float32+rollout.max_prompt_tokens=1024
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from common import emit_json, logger

from agentopd_jax.storage.logs import renamed

ROOT = Path(__file__).resolve().parents[1]
PARTS = ("env", "generate", "advantage", "teacher", "opid", "update", "iteration")
TIMING = {"env": "timing_s/env", "generate": "timing_s/gen", "advantage": "timing_s/adv", "teacher": "timing_s/teacher",
          "opid": "timing_s/opid", "update": "timing_s/update_actor", "iteration": "timing_s/step"}  # the logged keys
DEFAULT_ARMS = "grpo:float32,grpo:bfloat16,sdar:bfloat16,rlsd:bfloat16,opsd:bfloat16,skill_sd:bfloat16," \
               "skill_grpo:bfloat16"


log = logger("bench_iteration")


def parse_arm(arm: str) -> tuple:
  """"method:dtype[@REV][+field=value...]" -> (method, dtype, REV or "", the config overrides "field=value", ...)."""
  arm, *overrides = arm.split("+")
  method, rest = arm.split(":")
  dtype, _, rev = rest.partition("@")
  return (method, dtype, rev, *overrides)


def arm_name(method: str, dtype: str, rev: str = "", *overrides: str) -> str:
  return f"{method}:{dtype}" + (f"@{rev}" if rev else "") + "".join(f"+{o}" for o in overrides)


def checkout(ref: str, tmp: Path) -> Path:
  """The source tree of git revision `ref`: this checkout for "", else a detached worktree of it under `tmp`."""
  if not ref:
    return ROOT
  tree = tmp / f"tree_{ref}"
  if not tree.exists():
    subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-f", str(tree), ref], check=True,
                   capture_output=True)
  return tree


def run_arm(method: str, dtype: str, tree: Path, args, workdir: Path, cache_dir: Path, overrides=()) -> dict:
  variant = "" if method == "grpo" else f":{method}"
  config = f"--config={tree / 'configs' / 'alfworld.py'}{variant}"
  cmd = [sys.executable, str(tree / "experiments" / "train.py"), config,
         f"--config.workdir={workdir}", f"--config.warm_start_run={Path(args.warm_start).resolve()}",
         "--config.warm_start_step=0",
         f"--config.model.dtype={dtype}", f"--config.grpo.iterations={args.iterations}",
         "--config.validation.every=1000", "--config.validation.num_tasks=4", "--config.validation.attempts=1",
         "--config.logging.plot=False", "--config.logging.tensorboard=False"] + [f"--config.{o}" for o in overrides]
  if "reuse_warm_start" in (tree / "agentopd_jax" / "training" / "config.py").read_text():
    cmd.append("--config.reuse_warm_start=False")  # a revision from before warm-start reuse lacks the field
  env = dict(os.environ, JAX_COMPILATION_CACHE_DIR=str(cache_dir), JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS="0",
             JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES="0", PYTHONPATH=str(tree))
  t0 = time.perf_counter()
  proc = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True)
  wall = time.perf_counter() - t0
  if proc.returncode:
    raise SystemExit(f"{method}:{dtype} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
  records = [renamed(json.loads(line)) for line in (workdir / "logs" / "metrics.jsonl").read_text().splitlines()]
  train = [r for r in records if r["phase"] == "train"]
  part = lambda r, p: r.get(TIMING[p], 0.0)  # noqa: E731
  later = train[1:]
  return {"wall_s": round(wall, 1), "first_iteration_s": round(part(train[0], "iteration"), 2),
          "later": {p: round(sum(part(r, p) for r in later) / len(later), 2) for p in PARTS},
          # of those seconds, compiling or loading executables (the trainer's `compile/*`), and how many
          "compiling_later": {k: round(sum(r.get(f"compile/{k}", 0.0) for r in later) / len(later), 2)
                              for k in ("generate_s", "advantage_s", "update_s", "compile_s", "programs", "cache_hits")},
          "samples": sum(r.get("batch/samples", 0) for r in later) / len(later),
          "prompt_truncations": sum(r.get("rollout/prompt_truncations", 0) for r in later) / len(later)}


def main(argv=None) -> dict:
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--warm_start", required=True, help="a finished run whose step-0 checkpoint every arm starts from")
  p.add_argument("--arms", default=DEFAULT_ARMS,
                 help="comma-separated method:dtype[@REV][+field=value...]; the first is the reference")
  p.add_argument("--iterations", type=int, default=4)
  p.add_argument("--repeats", type=int, default=2, help="rounds; round 1 compiles, later rounds load the cache")
  p.add_argument("--out", default=None)
  args = p.parse_args(argv)
  arms = [parse_arm(a) for a in args.arms.split(",")]
  rounds = {a: [] for a in arms}
  with tempfile.TemporaryDirectory(prefix="bench_iteration_") as tmp:
    try:
      for r in range(args.repeats):
        for i, (method, dtype, ref, *overrides) in enumerate(arms):
          name = f"{i}_{method}_{dtype}_{ref}"  # an arm's own cache folder, whatever its overrides
          log(f"round {r + 1}: {arm_name(method, dtype, ref, *overrides)} ({ref or 'this checkout'})")
          rounds[arms[i]].append(run_arm(method, dtype, checkout(ref, Path(tmp)), args, Path(tmp) / f"{name}_{r}",
                                         Path(tmp) / f"cache_{name}", overrides))
    finally:
      subprocess.run(["git", "-C", str(ROOT), "worktree", "prune"], capture_output=True)
  out = {"what": __doc__.split("\n\n")[0], "warm_start": args.warm_start, "iterations": args.iterations,
         "cpu_threads": len(os.sched_getaffinity(0)), "arms": {}}
  first = None
  for arm, runs in rounds.items():
    cached = runs[1:] or runs
    later = {part: round(sum(x["later"][part] for x in runs) / len(runs), 2) for part in PARTS}
    compiling = {k: round(sum(x["compiling_later"][k] for x in runs) / len(runs), 2) for k in runs[0]["compiling_later"]}
    entry = {"rounds": runs, "iteration_s": later["iteration"], "parts_s": later, "compiling_s": compiling,
             "first_iteration_compiling_s": runs[0]["first_iteration_s"],
             "first_iteration_cached_s": round(sum(x["first_iteration_s"] for x in cached) / len(cached), 2)}
    entry["first_over_later"] = round(entry["first_iteration_cached_s"] / later["iteration"], 2)
    first = first or entry
    entry["speedup_vs_first_arm"] = round(first["iteration_s"] / later["iteration"], 2)
    out["arms"][arm_name(*arm)] = entry
  for name, entry in out["arms"].items():
    grpo = out["arms"].get("grpo:" + name.split(":")[1].split("+")[0])  # same precision and revision
    if grpo is not None:  # the method's iteration against GRPO's in the same precision
      entry["over_grpo_same_precision"] = round(entry["iteration_s"] / grpo["iteration_s"], 2)
  emit_json(out, args.out)
  return out


if __name__ == "__main__":
  main()
