"""The real ALFWorld text engine: TextWorld's PDDL environment with alfworld's wrappers, as `AlfredTWEnv` builds it.

The very env alfworld's `AlfredTWEnv.init_env` makes through `textworld.gym` (`TextworldBatchGymEnv` over
GenericEnvironment, the 50-step `Limit`, `AlfredDemangler(shuffle=False)`, `AlfredInfos`, `Filter`), for one game with
batch size 1, which textworld always runs in the calling process (`SyncBatchEnv`). The batch env is what freezes a
finished episode: once a step returns done, every later step returns that step's result again. Every call goes
through Fast Downward: this is the reference the fast engine is tested against, not the one to train with.
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
    from textworld.gym.envs import TextworldBatchGymEnv

    infos = textworld.EnvInfos(won=True, admissible_commands=True, extras=["gamefile"])
    self.gamefile = gamefile
    self._env = TextworldBatchGymEnv([gamefile], infos, batch_size=1, max_episode_steps=max_steps,
                                     wrappers=[AlfredDemangler(shuffle=False), AlfredInfos])

  def reset(self) -> Tuple[str, Dict]:
    obs, infos = self._env.reset()
    return obs[0], _first(infos)

  def step(self, action: str) -> Tuple[str, int, bool, Dict]:
    obs, scores, dones, infos = self._env.step([action])
    infos = _first(infos)
    infos["extra.gamefile"] = self.gamefile  # AlfredInfos only sets it on reset
    return obs[0], scores[0], dones[0], infos


def _first(batch_infos: Dict) -> Dict:
  return {key: values[0] for key, values in batch_infos.items()}
