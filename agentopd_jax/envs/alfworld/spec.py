"""ALFWorld's run spec (`envs.registry`): game files as tasks, `AlfworldEnv` workers, `AlfworldText`, three experts,
SDAR's skill bank (typed by game file), OPID's oracle review (`hindsight.py`) and the explorer that follows its
workflows, task types as groups and the papers' per-type report columns.

Tasks are game files: `env.data_root` (ours or the real download), or with none, games generated deterministically
from `env.generate_seed` into the cache, so the default run needs no download and its task set is fixed across run
seeds. The built-in tokenizer's default corpus already holds ALFWorld's names and commands, so it adds no corpus.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import re
import zlib
from pathlib import Path
from typing import List, Optional, Tuple

from agentopd_jax import cache
from agentopd_jax.envs import datafiles
from agentopd_jax.envs.alfworld.text import AlfworldText
from agentopd_jax.envs.registry import EnvCommon, EnvSpec, ReportSpec, SkillSpec, register, shipped_skill_bank

# Checked in this order and the first substring hit wins, as in verl-agent ("pick_and_place" also catches
# "pick_and_place_simple", the directory prefix of task type 1).
ALFWORLD_TASK_TYPES = (
    "pick_and_place", "pick_two_obj_and_place", "look_at_obj_in_light", "pick_heat_then_place_in_recep",
    "pick_cool_then_place_in_recep", "pick_clean_then_place_in_recep",
)  # fmt: skip
# The papers' per-type columns, in their order.
REPORT = ReportSpec(columns=(
    ("Pick", "pick_and_place"), ("Look", "look_at_obj_in_light"), ("Clean", "pick_clean_then_place_in_recep"),
    ("Heat", "pick_heat_then_place_in_recep"), ("Cool", "pick_cool_then_place_in_recep"),
    ("Pick2", "pick_two_obj_and_place"),
), headline="All")  # fmt: skip


def alfworld_task_type(gamefile: str) -> str | None:
  """The task type named in a game file path, or None: a game's group (`val/<task type>_success_rate`)."""
  return next((t for t in ALFWORLD_TASK_TYPES if t in gamefile), None)


def games(env_cfg) -> Tuple[List[str], List[str]]:
  """(training games, validation games) of the configured splits and task types."""
  from agentopd_jax.envs.alfworld import data, generator

  root = env_cfg.data_root
  if not root:
    scene_numbers = tuple(env_cfg.generate_scenes) or None
    distractors = tuple(env_cfg.generate_distractors)
    seed, home_prob = env_cfg.generate_seed, env_cfg.generate_home_prob
    # Fields added after the first release join the spec only when set, so existing caches keep their names.
    spec = json.dumps([seed, env_cfg.train_split, env_cfg.generate_train, env_cfg.valid_split, env_cfg.generate_valid,
                       sorted(env_cfg.task_types), scene_numbers]
                      + ([list(distractors)] if distractors != generator.DISTRACTOR_TYPES else [])
                      + ([home_prob] if home_prob else []))
    root = str(cache.root() / "alfworld_generated" / hashlib.sha1(spec.encode()).hexdigest()[:12])
    done = Path(root) / "COMPLETE"
    if not done.exists():  # the marker is written last, so an interrupted generation is redone, not half-used
      generator.generate(root, {env_cfg.train_split: env_cfg.generate_train,
                                env_cfg.valid_split: env_cfg.generate_valid}, seed=seed,
                         task_types=tuple(env_cfg.task_types), scene_numbers=scene_numbers,
                         distractor_types=distractors, home_prob=home_prob)
      done.write_text(spec + "\n")
  elif not os.path.isdir(root):
    raise FileNotFoundError(f"env.data_root: no such folder {root}")
  train = data.game_files(env_cfg.train_split, root, env_cfg.task_types)
  valid = data.game_files(env_cfg.valid_split, root, env_cfg.task_types)
  for split, files in ((env_cfg.train_split, train), (env_cfg.valid_split, valid)):
    if not files:
      raise ValueError(f"env: no {split} games of task types {tuple(env_cfg.task_types)} under {root}")
  return train, valid


EXPERTS = ("explorer", "planner", "skilled_explorer")
# The search order the shipped skills teach in the CPU default's room (scene 225), "Tables First": the main table,
# coffeetable 2, where task objects usually start, then sidetable 1 (their start when a coffeetable is the goal; the
# destination's type is never searched), then the other tables.
SKILLED_FIRST = ("coffeetable 2", "sidetable 1", "coffeetable 1", "diningtable 1")


def expert_actions(gamefile: str, expert: str = "planner") -> List[str]:
  """Demonstration actions for a game.

  "explorer" (`explore_then_solve`): searches until the object is in view, so a text-only policy can imitate it.
  "planner": the stored walkthrough (the privileged planner's plan: it walks straight to the hidden object).
  "skilled_explorer": the explorer doing what the shipped skills say: the main table, then the other tables, never
  searching the destination's type for the object (the demonstrations of skill-in-context warm starts).
  """
  from agentopd_jax.envs.alfworld.engine_fast import FastEngine
  from agentopd_jax.envs.alfworld.expert import explore_then_solve, solve

  if expert not in EXPERTS:
    raise ValueError(f"sft.expert must be one of {EXPERTS}, got {expert!r}")
  walkthrough = datafiles.field(datafiles.read_json(gamefile), "walkthrough", list, gamefile, required=False)
  if expert == "planner" and walkthrough:
    return list(walkthrough)
  engine = FastEngine(gamefile)
  engine.reset()
  if expert == "planner":
    return solve(engine)
  seed = zlib.crc32(game_name(gamefile).encode())
  if expert == "skilled_explorer":
    return explore_then_solve(engine, seed=seed, first=SKILLED_FIRST, skip_destination=True)
  return explore_then_solve(engine, seed=seed)


# A workflow's "take <object> from <receptacle>" milestones (`methods.opid.oracle`): where it found its objects.
_TAKE_FROM = re.compile(r"\btake [a-z]+ \d+ from ([a-z]+ \d+)")


def workflow_actions(gamefile: str, skill: str) -> List[str]:
  """The explorer of `expert_actions` ("explorer") reading an OPID episode skill: it searches first the receptacles
  the skill's workflow took objects from, in their order, then as before. It knows nothing else the skill does not
  say (a lamp's place, where a workflow names none). The demonstrations of the hindsight retry's setting
  (`sft.opid_retries`)."""
  from agentopd_jax.envs.alfworld.engine_fast import FastEngine
  from agentopd_jax.envs.alfworld.expert import explore_then_solve

  engine = FastEngine(gamefile)
  engine.reset()
  first = tuple(dict.fromkeys(_TAKE_FROM.findall(skill)))
  return explore_then_solve(engine, seed=zlib.crc32(game_name(gamefile).encode()), first=first)


def game_name(gamefile: str) -> str:
  """A game by its folder below the data root ("valid_seen/<task>/<trial>"): what seeds the explorer's search, so
  its demonstrations are the same wherever the games live (the generated ones sit under the user's cache)."""
  return "/".join(Path(gamefile).parts[-4:-1])


def record_name(problem: str) -> str:
  """A panel problem as run records name it: a game file by `game_name`, which does not depend on where the cache
  is; anything else (a record's name already) as it is."""
  parts = Path(problem).parts
  return game_name(problem) if parts and parts[-1].endswith(".tw-pddl") and len(parts) >= 4 else problem


def worker(env_cfg, max_steps: Optional[int] = None):
  from agentopd_jax.envs.alfworld.env import AlfworldEnv

  return functools.partial(AlfworldEnv, env_cfg.engine, **({} if max_steps is None else {"max_steps": max_steps}))


def hindsight(env_cfg):
  """OPID's oracle analyzer: (game file, actions) -> the episode replayed beside the expert (`hindsight.py`)."""
  from agentopd_jax.envs.alfworld.hindsight import reviewer

  return reviewer(env_cfg)


def skill_follower(env_cfg):
  """(game file, OPID episode skill) -> the explorer's actions when it reads that skill (`workflow_actions`)."""
  return workflow_actions


def skill_query(gamefile: str) -> dict:
  """SDAR types an ALFWorld task by its game file's path (the task type names the game's folder)."""
  return {"gamefile": gamefile}


@dataclasses.dataclass(frozen=True)
class AlfworldConfig(EnvCommon):
  """The run config's `env` section for ALFWorld."""
  name: str = "alfworld"
  engine: str = "fast"                 # "fast" (pure Python) or "textworld" (the real engine)
  data_root: str = ""                  # "" -> generate games into <cache>/alfworld_generated/
  generate_seed: int = 0               # the generated games are fixed across run seeds, like a benchmark's
  generate_train: int = 1200           # games generated per split when data_root is empty (1200: ~10 s)
  generate_valid: int = 64
  generate_scenes: Tuple[int, ...] = (225,)  # generate in these ALFRED scenes only (a living room, 8 receptacles)
  generate_distractors: Tuple[int, ...] = (1, 2)  # (min, max) other object types per generated game (benchmark: 6-12)
  generate_home_prob: float = 0.7      # each task object starts at its home (the main table) with this chance;
                                       # 0: uniform
  train_split: str = "train"
  valid_split: str = "valid_seen"      # alfworld's eval_in_distribution
  task_types: Tuple[str, ...] = ("pick_and_place_simple", "look_at_obj_in_light")


SPEC = register(EnvSpec(
    name="alfworld", config=AlfworldConfig, tasks=games, worker=worker, text_env=AlfworldText, experts=EXPERTS,
    expert=lambda env_cfg, name: functools.partial(expert_actions, expert=name),
    skills=SkillSpec(bank=shipped_skill_bank("alfworld"), rule="gamefile", query=skill_query), hindsight=hindsight,
    skill_follower=skill_follower, task_group=alfworld_task_type, report=REPORT, record_name=record_name))
