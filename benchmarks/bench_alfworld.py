#!/usr/bin/env python
"""ALFWorld engines: the pure-Python fast engine vs the real one (TextWorld PddlEnv + Fast Downward + alfworld
wrappers), on the same generated games and the same action sequences, in one run.

Each game's action sequence (a mix of the expert's actions, random admissible ones and inadmissible strings, as an
RL agent produces) is fixed first; then each engine loads the game, resets and plays it, and every observation, score,
done flag and info dict is checked to be identical. The headline is step throughput (step() calls only); load+reset
time per game is reported separately, since a trainer loads a game per episode. Results are printed as JSON on stdout
(progress goes to stderr); `--out FILE` also writes them to a file. Target: fast >= 100x real steps/s.

  python benchmarks/bench_alfworld.py                 # 30 games, up to 30 steps each (~1 minute on a 2-core CPU)
  python benchmarks/bench_alfworld.py --quick         # 5 games x 10 steps
  python benchmarks/bench_alfworld.py --games 60 --version 2.1.1 --out /tmp/alfworld.json
"""
from __future__ import annotations

import argparse
import platform
import random
import tempfile
import time

from common import emit_json, logger

TARGET = 100.0


log = logger("bench_alfworld")


def parse_args(argv=None):
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--games", type=int, default=30)
  p.add_argument("--steps", type=int, default=30, help="actions per game (an episode also ends when won)")
  p.add_argument("--version", default="2.1.3", choices=("2.1.1", "2.1.3"), help="ALFWorld text version")
  p.add_argument("--fast-repeats", type=int, default=5, help="fast-engine passes over all games (best reported)")
  p.add_argument("--seed", type=int, default=0)
  p.add_argument("--quick", action="store_true", help="5 games x 10 steps: a smoke test")
  p.add_argument("--out", help="also write the JSON here")
  return p.parse_args(argv)


def action_scripts(paths, steps, seed):
  """Per game, the actions of an agent that mostly follows the expert and sometimes errs, fixed in advance."""
  from agentopd_jax.envs.alfworld.engine_fast import FastEngine
  from agentopd_jax.envs.alfworld.expert import Expert

  scripts = []
  for i, path in enumerate(paths):
    rng, env = random.Random(seed * 100003 + i), FastEngine(path)
    _, infos = env.reset()
    expert, script = Expert(env), []
    for _ in range(steps):
      u = rng.random()
      if u < 0.5:
        action = expert.next_action(env)
      elif u < 0.85:
        action = rng.choice(infos["admissible_commands"])
      else:
        action = rng.choice(["look around", "Take it", "", "go to the fridge", "inventory "])
      script.append(action)
      _, _, done, infos = env.step(action)
      if done:
        break
    scripts.append(script)
  return scripts


def play(make, paths, scripts):
  """Load, reset and run every script; returns (outputs, load+reset seconds, step seconds, steps, cpu seconds)."""
  outputs, load_s, step_s, steps = [], 0.0, 0.0, 0
  cpu0 = time.process_time()
  for path, script in zip(paths, scripts):
    t0 = time.perf_counter()
    env = make(path)
    out = [env.reset()]
    t1 = time.perf_counter()
    out += [env.step(action) for action in script]
    t2 = time.perf_counter()
    load_s, step_s, steps = load_s + t1 - t0, step_s + t2 - t1, steps + len(script)
    outputs.append(out)
  return outputs, load_s, step_s, steps, time.process_time() - cpu0


def main(argv=None) -> dict:
  args = parse_args(argv)
  if args.quick:
    args.games, args.steps, args.fast_repeats = 5, 10, 2
  from agentopd_jax.envs.alfworld import generator
  from agentopd_jax.envs.alfworld.engine_fast import FastEngine
  from agentopd_jax.envs.alfworld.engine_textworld import TextWorldEngine

  splits = ("train", "valid_seen", "valid_unseen")
  with tempfile.TemporaryDirectory(prefix="bench_alfworld_") as root:
    paths = [generator.write_game(root, splits[i % 3], generator.make_game(splits[i % 3], args.games, i, args.seed),
                                  args.version, None) for i in range(args.games)]
    scripts = action_scripts(paths, args.steps, args.seed)
    log(f"{len(paths)} games, {sum(map(len, scripts))} actions; real engine first")
    real_out, real_load, real_step, n_steps, real_cpu = play(TextWorldEngine, paths, scripts)
    log(f"real: {n_steps / real_step:.1f} steps/s; fast engine x{args.fast_repeats}")
    fast_runs = [play(FastEngine, paths, scripts) for _ in range(args.fast_repeats)]
  fast_out, fast_load, fast_step, _, fast_cpu = min(fast_runs, key=lambda r: r[2])
  identical = all(run[0] == real_out for run in fast_runs)
  real_sps, fast_sps = n_steps / real_step, n_steps / fast_step
  result = {
      "benchmark": "alfworld_engines",
      "games": len(paths), "steps": n_steps, "version": args.version, "identical_outputs": identical,
      "real": {"steps_per_s": round(real_sps, 2), "load_reset_s_per_game": round(real_load / len(paths), 4),
               "cpu_util": round(real_cpu / (real_load + real_step), 2)},
      "fast": {"steps_per_s": round(fast_sps, 1), "load_reset_s_per_game": round(fast_load / len(paths), 6),
               "cpu_util": round(fast_cpu / (fast_load + fast_step), 2)},
      "speedup_steps": round(fast_sps / real_sps, 1),
      "speedup_episodes": round((real_load + real_step) / (fast_load + fast_step), 1),
      "target_speedup": TARGET,
      "meets_target": identical and fast_sps / real_sps >= TARGET,
      "machine": {"python": platform.python_version(), "processor": platform.processor() or platform.machine()},
  }
  emit_json(result, args.out)
  return result


if __name__ == "__main__":
  main()
