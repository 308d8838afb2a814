"""The config groups of SDAR and its teacher-reading baselines (`methods.sdar.losses` reads them from
`LossParams.method`): `sdar` (SDAR, GRPO+OPSD, OPSD; its `gate_beta` also sets the gate of the `teacher/*` metrics
every method of the family logs), `rlsd` (RLSD's λ schedule and token-weight clip) and `skill_sd` (Skill-SD's
coefficient). Frozen and hashable: the jitted train step's static argument."""
from __future__ import annotations

import dataclasses
import math

SDAR_GATES = ("gap", "entropy", "soft_or")
SDAR_DIVERGENCES = ("reverse_kl", "reverse_kl_score", "topk_forward_kl", "topk_reverse_kl", "topk_jsd")
SAMPLED_DIVERGENCES = ("reverse_kl", "reverse_kl_score")  # read only log π_T of the sampled token
RLSD_SCHEDULES = ("released_code", "from_lambda0")


def _finite_at_least(section: str, obj, names, least: float = 0.0) -> None:
  """Each named field of `obj` is a finite number >= `least`; else a ValueError naming `section.field`."""
  for name in names:
    value = getattr(obj, name)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
      raise ValueError(f"{section}.{name} must be a finite number, got {value!r}")
    if value < least:
      raise ValueError(f"{section}.{name} must be >= {least}, got {value}")


def _int_at_least(section: str, obj, name: str, least: int) -> None:
  value = getattr(obj, name)
  if isinstance(value, bool) or not isinstance(value, int) or value < least:
    raise ValueError(f"{section}.{name} must be an int >= {least}, got {value!r}")


@dataclasses.dataclass(frozen=True)
class SdarConfig:
  """`sdar.*`: the gated self-distillation term of SDAR (and of GRPO+OPSD and OPSD, whose objectives fix the gate's
  β at 0 or the policy-gradient coefficient at 0)."""
  coef: float = 0.01               # λ of the λ·L_SDAR term
  gate_beta: float = 5.0           # β of the gate σ(β·Δ_t); 0 = ungated (g ≡ ½, the GRPO+OPSD baseline)
  gate: str = "gap"                # "gap" (SDAR), "entropy" or "soft_or" (paper ablations)
  divergence: str = "reverse_kl"   # the released code's; "reverse_kl_score" the sampled ∇KL(π_θ‖π_T); or over the
                                   # teacher's top-k: "topk_forward_kl", "topk_reverse_kl", "topk_jsd"
  top_k: int = 16                  # k of the teacher's top-k support of the top-k divergences

  def __post_init__(self):
    _finite_at_least("sdar", self, ("coef", "gate_beta"))
    # top_k >= 2: a top-1 support renormalises to a point mass, on which every divergence is 0.
    _int_at_least("sdar", self, "top_k", 2)
    if self.gate not in SDAR_GATES:
      raise ValueError(f"sdar.gate must be one of {SDAR_GATES}, got {self.gate!r}")
    if self.divergence not in SDAR_DIVERGENCES:
      raise ValueError(f"sdar.divergence must be one of {SDAR_DIVERGENCES}, got {self.divergence!r}")


@dataclasses.dataclass(frozen=True)
class RlsdConfig:
  """`rlsd.*`: RLSD's teacher-reweighted advantages (`methods.sdar.losses.rlsd_advantages`)."""
  start_lambda: float = 0.5        # λ_0, decayed linearly to 0 (`methods.sdar.losses.rlsd_lambda`)
  warmdown_steps: int = 50         # W: iterations over which λ reaches 0 (code default; paper scripts 100)
  schedule: str = "released_code"  # λ_i = λ_0·max(0, 1 − i/W), or "from_lambda0": λ_0·max(0, 1 − (i − 1)/W)
  eps_w: float = 0.2               # token weights clipped to [1 − ε_w, 1 + ε_w]

  def __post_init__(self):
    _finite_at_least("rlsd", self, ("start_lambda", "eps_w"))
    _int_at_least("rlsd", self, "warmdown_steps", 1)
    if self.schedule not in RLSD_SCHEDULES:
      raise ValueError(f"rlsd.schedule must be one of {RLSD_SCHEDULES}, got {self.schedule!r}")
    if not 0.0 <= self.start_lambda <= 1.0:
      raise ValueError(f"rlsd.start_lambda must be in [0, 1], got {self.start_lambda}")
    if not 0.0 <= self.eps_w < 1.0:
      raise ValueError(f"rlsd.eps_w must be in [0, 1), got {self.eps_w}")


@dataclasses.dataclass(frozen=True)
class SkillSdConfig:
  """`skill_sd.*`: Skill-SD's self-distillation term."""
  coef: float = 0.001              # λ_SDL of the ρ_on·k3 term

  def __post_init__(self):
    _finite_at_least("skill_sd", self, ("coef",))
