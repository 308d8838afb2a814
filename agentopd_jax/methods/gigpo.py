"""GiGPO (verl-agent's headline method, the baseline OPID and SDAR build on): GRPO's loss with a two-level advantage,
the episode's group-normalised score plus ω times the step's discounted return normalised over the steps of its task
group that answered the same env state (`objectives.gigpo`). The whole method is this module and its config group
`gigpo`; it replaces the loop's advantages in `signals`, so `grpo.advantage` is not read (`gigpo.mode` sets both
levels, as in verl-agent). Step layout only: a step sample is one env state.
"""
from __future__ import annotations

import dataclasses
import functools
import math
from typing import Dict

import jax
import numpy as np

from agentopd_jax.batching.collate import bucket
from agentopd_jax.methods.base import Method, MethodContext, Iteration, Signals
from agentopd_jax.objectives.advantages import GRPO_MODES, step_scores
from agentopd_jax.objectives.gigpo import anchor_groups, discounted_returns, gigpo_advantages, group_stats

# verl-agent's example scripts, per env: the mode and similarity clustering (examples/gigpo_trainer/run_*.sh).
ENV_PRESETS: Dict[str, Dict[str, object]] = {
    "alfworld": dict(mode="mean_std_norm"),
    "webshop": dict(mode="mean_norm"),
    "search": dict(mode="mean_std_norm", enable_similarity=True, similarity_thresh=0.9),
}


@dataclasses.dataclass(frozen=True)
class GigpoConfig:
  """`gigpo.*`, verl-agent's `algorithm.gamma` and `algorithm.gigpo` (its yaml defaults; the env presets set the
  scripts' values)."""
  gamma: float = 0.95               # discount of the step returns
  step_advantage_w: float = 1.0     # ω: weight of the step advantage
  mode: str = "mean_norm"           # "mean_norm" (x − μ) or "mean_std_norm" ((x − μ)/(σ + 1e-6)), both levels
  enable_similarity: bool = False   # anchor groups by text similarity instead of equality (search-QA)
  similarity_thresh: float = 0.95   # difflib ratio at or above which two observations share a group

  def __post_init__(self):
    for name in ("gamma", "step_advantage_w", "similarity_thresh"):
      value = getattr(self, name)
      if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"gigpo.{name}: must be a finite number, got {value!r}")
    if not 0.0 <= self.gamma <= 1.0:
      raise ValueError(f"gigpo.gamma: must be in [0, 1], got {self.gamma}")
    if self.step_advantage_w < 0:
      raise ValueError(f"gigpo.step_advantage_w: must be >= 0, got {self.step_advantage_w}")
    if self.mode not in GRPO_MODES:
      raise ValueError(f"gigpo.mode: must be one of {GRPO_MODES}, got {self.mode!r}")
    if not 0.0 < self.similarity_thresh <= 1.0:
      raise ValueError(f"gigpo.similarity_thresh: must be in (0, 1], got {self.similarity_thresh}")


@functools.lru_cache(maxsize=None)
def _advantages(mode: str, omega: float, num_groups: int, num_steps: int):
  return jax.jit(lambda episode, step, group_ids, step_groups, valid: gigpo_advantages(
      episode, step, group_ids, step_groups, valid, mode, omega, num_groups, num_steps))


class Gigpo(Method):
  """The hook: `signals` computes the iteration's advantages from its step samples."""
  name = "gigpo"
  objective = "grpo"
  sections = ("gigpo",)
  provides = frozenset({"advantages"})

  def __init__(self, cfg: GigpoConfig):
    self.cfg = cfg
    self.penalty = 0.0

  @staticmethod
  def preset(c, paper: bool):
    """GiGPO on the CPU default or a paper model, with verl-agent's per-env script settings (γ 0.95, ω 1, the
    env's mode and clustering); the workdir gets "_gigpo"."""
    del paper
    c.method = "gigpo"
    c.workdir = f"{c.workdir}_gigpo"
    for key, value in ENV_PRESETS.get(c.env.name, {}).items():
      setattr(c.gigpo, key, value)
    return c

  def start(self, ctx: MethodContext) -> None:
    if ctx.layout != "step":
      raise ValueError(f"method gigpo: rollout.layout must be 'step' (one sample per env state), got "
                       f"{ctx.layout!r}")
    self.penalty = float(ctx.env_cfg.invalid_penalty)

  def signals(self, it: Iteration) -> Signals:
    samples = it.samples
    if not samples:
      return Signals()
    cfg, n = self.cfg, len(samples)
    valid = np.asarray([s.action_valid for s in samples], np.float32)
    episode = np.asarray(step_scores(np.asarray([s.episode_reward for s in samples], np.float32), valid,
                                     self.penalty))
    returns = discounted_returns([s.step_reward for s in samples], [s.traj_id for s in samples],
                                 [s.step_index for s in samples], cfg.gamma)
    step = returns - self.penalty * (1.0 - valid)   # the penalty after discounting: its own step only
    groups = anchor_groups([s.group_id for s in samples], [s.observation for s in samples], cfg.enable_similarity,
                           cfg.similarity_thresh)
    # Padded to buckets of the samples and groups axes (padding: no group, not valid), so few programs compile.
    size = bucket(n, 64)
    pad = lambda x, fill, dtype: np.concatenate([np.asarray(x, dtype), np.full(size - n, fill, dtype)])  # noqa: E731
    num_groups = bucket(max(s.group_id for s in samples) + 1, 8)
    num_steps = bucket(int(groups.max()) + 1, 64)
    adv = _advantages(cfg.mode, float(cfg.step_advantage_w), num_groups, num_steps)(
        pad(episode, 0.0, np.float32), pad(step, 0.0, np.float32),
        pad([s.group_id for s in samples], num_groups, np.int32), pad(groups, num_steps, np.int32),
        pad(np.ones(n), 0.0, np.float32))
    stats = group_stats(groups)
    return Signals(advantages=np.asarray(adv)[:n].tolist(),
                   metrics={f"gigpo/{k}": v for k, v in stats.items()})
