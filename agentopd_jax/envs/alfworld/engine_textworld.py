"""The real ALFWorld text engine: TextWorld's PDDL environment with alfworld's wrappers, as `AlfredTWEnv` builds it.

Same wrapper stack as alfworld's `AlfredTWEnv.init_env` through `textworld.gym` (GenericEnvironment, the 50-step
`Limit`, `AlfredDemangler(shuffle=False)`, `AlfredInfos`, `Filter`), without the gym batching and its worker
processes, so one game runs in the calling process. Every call goes through Fast Downward: this is the reference the
fast engine is tested against, not the one to train with.
"""
from __future__ import annotations

from typing import Dict, Tuple

MAX_STEPS = 50


class TextWorldEngine:
  """reset() -> (obs, infos); step(action) -> (obs, score, done, infos); infos carry `won`, `admissible_commands`
  and `extra.gamefile`."""

  def __init__(self, gamefile: str, max_steps: int = MAX_STEPS):
    import textworld
    from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredInfos
    from textworld.envs.wrappers import Filter, GenericEnvironment, Limit

    infos = textworld.EnvInfos(won=True, admissible_commands=True, extras=["gamefile"])
    env = Limit(GenericEnvironment(infos), max_episode_steps=max_steps)
    for wrapper in (AlfredDemangler(shuffle=False), AlfredInfos, Filter):
      env = wrapper(env)
    env.load(gamefile)
    self.gamefile = gamefile
    self._env = env

  def reset(self) -> Tuple[str, Dict]:
    return self._env.reset()

  def step(self, action: str) -> Tuple[str, int, bool, Dict]:
    obs, score, done, infos = self._env.step(action)
    infos["extra.gamefile"] = self.gamefile  # AlfredInfos only sets it on reset
    return obs, score, done, infos
