"""OPID's config group `opid.*`: the analyzer, the skill routing and weights, and the schedule."""
from __future__ import annotations

import dataclasses

from agentopd_jax.methods.opid.injection import ROUTES
from agentopd_jax.objectives.advantages import GRPO_MODES

ANALYZERS = ("oracle", "stats", "openai", "local")


@dataclasses.dataclass(frozen=True)
class OpidConfig:
  """`opid.*` (defaults: OPID's scripts, §3.3). Schedule steps are GRPO iterations; -1 means "not set"."""
  analyzer: str = "oracle"
  analyzer_model: str = ""        # openai: the model name; local: a model folder or a run folder to serve
  base_url: str = ""              # openai: the endpoint ("" -> OPENAI_BASE_URL)
  timeout_s: float = 600.0
  max_completion_tokens: int = 4096
  workers: int = 128
  parse_attempts: int = 2
  api_retries: int = 5
  max_step_skills: int = 5        # K
  route: str = "step_priority"    # or "additive"
  w_episode: float = 0.001
  w_step: float = 0.001
  normalize: bool = False         # z-score each Δ over its routed tokens
  clip: float = 0.0               # clamp each Δ to ±clip; 0 = none
  gamma: float = 0.95             # the discount of the "Return:" lines
  start_after: int = -1           # the skill advantage is on only after this iteration
  stop_after: int = -1            # ... and up to this one
  failed_only: bool = False       # analyse failed episodes only
  failed_only_after: int = -1     # all episodes up to this iteration, failed ones after it (overrides failed_only)
  paper_mode: str = "mean_std_norm"  # the episode advantage of the opid_<model> presets (OPID's scripts; WebShop's:
                                     # mean_norm)

  def __post_init__(self):
    if self.analyzer not in ANALYZERS:
      raise ValueError(f"opid.analyzer must be one of {ANALYZERS}, got {self.analyzer!r}")
    if self.route not in ROUTES:
      raise ValueError(f"opid.route must be one of {ROUTES}, got {self.route!r}")
    if self.analyzer in ("openai", "local") and not self.analyzer_model:
      raise ValueError(f"opid.analyzer_model: analyzer {self.analyzer!r} needs a model "
                       f"({'its name at the endpoint' if self.analyzer == 'openai' else 'a folder or run to serve'})")
    if self.w_episode < 0 or self.w_step < 0 or self.clip < 0:
      raise ValueError(f"opid.w_episode, opid.w_step and opid.clip must be >= 0, got {self.w_episode}, "
                       f"{self.w_step}, {self.clip}")
    if not 0.0 <= self.gamma <= 1.0:
      raise ValueError(f"opid.gamma must be in [0, 1], got {self.gamma}")
    if self.paper_mode not in GRPO_MODES:
      raise ValueError(f"opid.paper_mode must be one of {GRPO_MODES}, got {self.paper_mode!r}")

  def active(self, iteration: int) -> bool:
    """Whether iteration `iteration` gets the skill advantage (OPID's `_is_opid_teacher_adv_enabled`)."""
    return not (0 <= self.start_after and iteration <= self.start_after) and \
        not (0 <= self.stop_after < iteration)

  def failed_only_at(self, iteration: int) -> bool:
    return iteration > self.failed_only_after if self.failed_only_after >= 0 else self.failed_only
