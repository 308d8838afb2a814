"""ALFWorld text games without the download: a generator of games in the real `$ALFWORLD_DATA` layout, the real
TextWorld engine, a pure-Python engine that prints the same text (~1000x faster), a state-based expert and a loader.

  from agentopd_jax.envs.alfworld import AlfworldEnv, FastEngine, game_files, generate, solve
  generate("/data/alfworld", seed=0)                        # 3553 / 140 / 134 games, text version 2.1.3
  env = FastEngine(game_files("valid_seen", "/data/alfworld")[0])
  obs, infos = env.reset()                                  # infos: won, admissible_commands, extra.gamefile
  obs, score, done, infos = env.step(solve(env)[0])
  env = AlfworldEnv("fast")                                 # any game per episode, the vector-env interface
  obs, infos = env.reset(game_files("train", "/data/alfworld")[0])

`grammar.py` builds text versions 2.1.1 (`put X in/on Y`, `You arrive at loc N.`) and 2.1.3 (`move X to Y`, `help`)
from the installed alfworld wheel's own alfred.pddl/alfred.twl2, so alfworld must be installed to generate games;
`engine_textworld.TextWorldEngine` also needs textworld[pddl]. Playing existing game files needs neither.
"""
from agentopd_jax.envs.alfworld.data import by_task_type, game_files
from agentopd_jax.envs.alfworld.engine_fast import FastEngine
from agentopd_jax.envs.alfworld.env import AlfworldEnv
from agentopd_jax.envs.alfworld.expert import Expert, solve
from agentopd_jax.envs.alfworld.generator import generate

__all__ = ["AlfworldEnv", "Expert", "FastEngine", "by_task_type", "game_files", "generate", "solve"]
