"""Which games a run plays: the training pool, the fixed validation panel, and each iteration's task draw.

With no `env.data_root` the games are generated (deterministically from the seed) into the cache, so the default
run needs no download. The draw for iteration i is a pure function of (seed, i): a resumed run replays the same
tasks as an uninterrupted one without storing any data-loader state.
"""
from __future__ import annotations

import hashlib
import json
import os
import zlib
from pathlib import Path
from typing import List, Sequence, Tuple

import numpy as np

from agentopd_jax.envs.alfworld import data as alfworld_data
from agentopd_jax.envs.alfworld import generator
from agentopd_jax.envs.alfworld.engine_fast import FastEngine
from agentopd_jax.envs.alfworld.expert import explore_then_solve, solve


def cache_dir() -> Path:
  return Path(os.environ.get("AGENTOPD_CACHE", "~/.cache/agentopd_jax")).expanduser()


def alfworld_games(env_cfg, seed: int) -> Tuple[List[str], List[str]]:
  """(training games, validation games) of the configured splits and task types."""
  root = env_cfg.data_root
  if not root:
    scene_numbers = tuple(env_cfg.generate_scenes) or None
    distractors = tuple(env_cfg.generate_distractors)
    spec = json.dumps([seed, env_cfg.train_split, env_cfg.generate_train, env_cfg.valid_split, env_cfg.generate_valid,
                       sorted(env_cfg.task_types), scene_numbers]
                      + ([list(distractors)] if distractors != generator.DISTRACTOR_TYPES else []))
    root = str(cache_dir() / "alfworld_generated" / hashlib.sha1(spec.encode()).hexdigest()[:12])
    done = Path(root) / "COMPLETE"
    if not done.exists():  # the marker is written last, so an interrupted generation is redone, not half-used
      generator.generate(root, {env_cfg.train_split: env_cfg.generate_train,
                                env_cfg.valid_split: env_cfg.generate_valid}, seed=seed,
                         task_types=tuple(env_cfg.task_types), scene_numbers=scene_numbers,
                         distractor_types=distractors)
      done.write_text(spec + "\n")
  elif not os.path.isdir(root):
    raise FileNotFoundError(f"env.data_root: no such folder {root}")
  train = alfworld_data.game_files(env_cfg.train_split, root, env_cfg.task_types)
  valid = alfworld_data.game_files(env_cfg.valid_split, root, env_cfg.task_types)
  for split, games in ((env_cfg.train_split, train), (env_cfg.valid_split, valid)):
    if not games:
      raise ValueError(f"env: no {split} games of task types {tuple(env_cfg.task_types)} under {root}")
  return train, valid


EXPERTS = ("explorer", "planner")


def expert_actions(gamefile: str, expert: str = "planner") -> List[str]:
  """Demonstration actions for a game.

  "explorer" (`explore_then_solve`): searches until the object is in view, so a text-only policy can imitate it.
  "planner": the stored walkthrough (the privileged planner's plan: it walks straight to the hidden object).
  """
  if expert not in EXPERTS:
    raise ValueError(f"sft.expert must be one of {EXPERTS}, got {expert!r}")
  with open(gamefile) as f:
    walkthrough = json.load(f).get("walkthrough")
  if expert == "planner" and walkthrough:
    return list(walkthrough)
  engine = FastEngine(gamefile)
  engine.reset()
  if expert == "planner":
    return solve(engine)
  return explore_then_solve(engine, seed=zlib.crc32(gamefile.encode()))


def iteration_tasks(pool: Sequence[str], n: int, seed: int, iteration: int) -> List[str]:
  """n distinct tasks for one iteration (with replacement across iterations), a pure function of (seed, i)."""
  if n > len(pool):
    raise ValueError(f"grpo.tasks_per_iteration={n} exceeds the {len(pool)} training games")
  rng = np.random.default_rng([seed, iteration])
  return [pool[i] for i in rng.choice(len(pool), n, replace=False)]
