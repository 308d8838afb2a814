#!/usr/bin/env python
"""Vector-env throughput on ALFWorld (fast engine): N envs in W worker processes vs the same envs stepped serially
in-process, same games and the same actions, in one run. Prints JSON (progress on stderr).

Envs form GRPO groups (G copies of a game) and play synchronous rollouts with seeded random admissible actions, the
env side of a rollout; both sides must produce identical transcripts.

  python benchmarks/bench_vector_env.py                      # 128 envs (16 games x 8), 16 workers
  python benchmarks/bench_vector_env.py --envs 32 --workers 4 --steps 20 --rounds 1
"""
from __future__ import annotations

import argparse
import functools
import os
import random
import sys
import tempfile
import time

from common import emit_json, logger


log = logger("bench_vector_env")


def play(reset, step, tasks, steps, rounds, seed):
  """`rounds` synchronous rollouts (reset all, step the running envs with seeded random admissible actions until all
  are done or `steps` is reached, as a rollout loop does); returns (env-steps, seconds, transcript)."""
  rng = random.Random(seed)
  start = time.perf_counter()
  transcript, count = [], 0
  for _ in range(rounds):
    obs, infos = reset(tasks)
    dones = [False] * len(tasks)
    for _ in range(steps):
      actions = [None if d else rng.choice(info["admissible_commands"]) for d, info in zip(dones, infos)]
      if all(a is None for a in actions):
        break
      obs, scores, dones, infos = step(actions)
      count += sum(a is not None for a in actions)
      transcript.append((obs, scores, dones))
  return count, time.perf_counter() - start, transcript


def main(argv=None):
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--envs", type=int, default=128)
  p.add_argument("--group", type=int, default=8)
  p.add_argument("--workers", type=int, default=16)
  p.add_argument("--steps", type=int, default=50, help="max steps per episode (ALFWorld's limit)")
  p.add_argument("--rounds", type=int, default=2, help="rollouts (reset + play) per side")
  p.add_argument("--seed", type=int, default=0)
  p.add_argument("--out")
  args = p.parse_args(argv)

  from agentopd_jax.envs.alfworld import data, generator
  from agentopd_jax.envs.alfworld.env import AlfworldEnv
  from agentopd_jax.envs.vector import VectorEnv, group_tasks

  root = tempfile.mkdtemp(prefix="bench_vector_env_")
  n_games = args.envs // args.group
  generator.generate(root, sizes={"train": n_games}, seed=args.seed)
  tasks, _ = group_tasks(data.game_files("train", root), args.group)
  log(f"{len(tasks)} envs over {args.workers} workers, {args.steps} steps")

  serial = [AlfworldEnv("fast") for _ in tasks]

  last = [None] * len(tasks)

  def serial_reset(ts):
    out = [env.reset(t) for env, t in zip(serial, ts)]
    return [o for o, _ in out], [i for _, i in out]

  def serial_step(actions):
    for i, (env, a) in enumerate(zip(serial, actions)):
      if a is not None:
        last[i] = env.step(a)
    return tuple([r[k] for r in last] for k in range(4))

  n_serial, t_serial, ref = play(serial_reset, serial_step, tasks, args.steps, args.rounds, args.seed)
  start = time.perf_counter()
  venv = VectorEnv(functools.partial(AlfworldEnv, "fast"), num_workers=args.workers, num_envs=len(tasks))

  try:
    venv.reset(tasks)  # start the workers outside the timing (one-off process spawn)
    startup = time.perf_counter() - start
    n_vec, t_vec, got = play(venv.reset, venv.step, tasks, args.steps, args.rounds, args.seed)
  finally:
    venv.close()
  result = {
      "benchmark": "vector env throughput",
      "command": "python benchmarks/" + os.path.basename(__file__) + " " + " ".join(argv or sys.argv[1:]),
      "cpu_count": os.cpu_count(), "envs": len(tasks), "group": args.group, "workers": args.workers,
      "max_steps": args.steps, "rounds": args.rounds, "env_steps": n_vec,
      "serial_env_steps_per_s": round(n_serial / t_serial, 1),
      "vector_env_steps_per_s": round(n_vec / t_vec, 1),
      "vector_over_serial": round((n_vec / t_vec) / (n_serial / t_serial), 3),
      "vector_startup_s": round(startup, 2),
      "identical_transcripts": got == ref,
  }
  emit_json(result, args.out)


if __name__ == "__main__":
  main()
