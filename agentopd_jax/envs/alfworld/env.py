"""ALFWorld behind the vector-env interface: `factory()` builds an env once per worker; `reset(gamefile)` starts an
episode of any game, on the engine the config names.

The engines load one game per instance (the real one compiles it through Fast Downward), so this wrapper swaps
engines per episode; infos gain `gamefile` (verl-agent reads `extra.gamefile` for per-task-type success).
"""
from __future__ import annotations

from typing import Dict, Tuple

ENGINES = ("fast", "textworld")


class AlfworldEnv:
  """One ALFWorld environment. engine: "fast" (pure Python, for training) or "textworld" (the real engine)."""

  def __init__(self, engine: str = "fast", max_steps: int = 50):
    if engine not in ENGINES:
      raise ValueError(f"AlfworldEnv engine must be one of {ENGINES}, got {engine!r}")
    self.engine_name = engine
    self.max_steps = max_steps
    self._engine = None

  def reset(self, gamefile: str) -> Tuple[str, Dict]:
    if self.engine_name == "fast":
      from agentopd_jax.envs.alfworld.engine_fast import FastEngine
      self._engine = FastEngine(gamefile, max_steps=self.max_steps)
    else:
      from agentopd_jax.envs.alfworld.engine_textworld import TextWorldEngine
      self._engine = TextWorldEngine(gamefile, max_steps=self.max_steps)
    obs, infos = self._engine.reset()
    return obs, self._with_gamefile(infos, gamefile)

  def step(self, action: str) -> Tuple[str, int, bool, Dict]:
    if self._engine is None:
      raise RuntimeError("AlfworldEnv.step called before reset")
    obs, score, done, infos = self._engine.step(action)
    return obs, score, done, self._with_gamefile(infos, infos.get("extra.gamefile"))

  @staticmethod
  def _with_gamefile(infos: Dict, gamefile: str) -> Dict:
    infos = dict(infos)
    infos["gamefile"] = gamefile
    return infos
