"""The run config's `agentic_opd` group: Agentic-OPD's student, teacher pool, scheduler and update size
(`methods.agentic_opd.method`), and its loss's fields (`methods.agentic_opd.losses`, which reads the group from
`LossParams.method`)."""
from __future__ import annotations

import dataclasses
import math

from agentopd_jax.eval.coverage import SOLVED_RULES
from agentopd_jax.methods.agentic_opd.hcn import SCHEDULERS

LAD_CHOICES = ("group_rates", "off")
OPD_VARIANTS = ("topk_reverse_kl", "sampled_token")
LAD_OTHER = ("none", "grpo")
LAD_NORMS = ("loss_tokens", "routed_tokens")
SELECTION_PANELS = ("held_out", "whole")


@dataclasses.dataclass(frozen=True)
class AgenticOpdConfig:
  teacher_run: str = ""                # the GRPO run whose checkpoints are the student and the teachers
  student_step: str = "best"           # "best" (validation) or a step of that run
  scheduler: str = "hcn"               # hcn (v3), hcn_global, static_best, random, round_robin
  selection_interval: int = 4          # iterations between teacher re-selections (a multiple of validation.every)
  solved_rule: str = "any"             # a problem is solved by a checkpoint if any attempt won ("majority": most)
  prune_dominated: bool = False        # drop teachers whose solved set another teacher's contains
  selection_panel: str = "held_out"    # "held_out": the student, the solved sets and the scheduler read the first
                                       # half of each task group's problems on the panel, `val_report/` reports the
                                       # rest; "whole": all of it for both
  lad: str = "group_rates"             # LAD routing: "group_rates" (teacher rollouts on the same tasks) or "off"
  whole_batch_update: bool = False     # one optimizer step over the whole batch per iteration, as the authors'
                                       # trainer; False: grpo.mini_batch_size mini-batches, as every method takes
  # The loss (objective "agentic_opd").
  loss_coef: float = 1.0               # weight of the OPD term
  task_loss_coef: float = 0.0          # weight of the GRPO task term on every rollout; 0 = pure OPD (reference default)
  top_k: int = 16                      # k of the student's top-k support (OPD_TOP_K)
  max_abs_log_ratio: float = 0.0       # clamp of the top-k log-ratio to ±c; 0 = no clamp (the reference's null)
  variant: str = "topk_reverse_kl"     # or "sampled_token" (the documented PG-OPD advantage)
  lad_other: str = "none"              # what rollouts LAD does not route get: "none", or "grpo" (pg_loss_coef · PPO)
  lad_norm: str = "loss_tokens"        # the OPD term's token mean over every loss token (the authors'), so its step
                                       # shrinks with the routed share; "routed_tokens": over the routed ones only

  def __post_init__(self):
    if self.scheduler not in SCHEDULERS:
      raise ValueError(f"agentic_opd.scheduler: unknown {self.scheduler!r}; choose one of {sorted(SCHEDULERS)}")
    if self.lad not in LAD_CHOICES:
      raise ValueError(f"agentic_opd.lad must be one of {LAD_CHOICES}, got {self.lad!r}")
    if self.solved_rule not in SOLVED_RULES:
      raise ValueError(f"agentic_opd.solved_rule must be one of {SOLVED_RULES}, got {self.solved_rule!r}")
    if self.selection_panel not in SELECTION_PANELS:
      raise ValueError(f"agentic_opd.selection_panel must be one of {SELECTION_PANELS}, got {self.selection_panel!r}")
    if self.selection_interval < 1:
      raise ValueError(f"agentic_opd.selection_interval must be >= 1, got {self.selection_interval}")
    for name in ("loss_coef", "task_loss_coef", "max_abs_log_ratio"):
      value = getattr(self, name)
      if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"agentic_opd.{name} must be a finite number, got {value!r}")
      if value < 0.0:
        raise ValueError(f"agentic_opd.{name} must be >= 0, got {value}")
    if isinstance(self.top_k, bool) or not isinstance(self.top_k, int) or self.top_k < 1:
      raise ValueError(f"agentic_opd.top_k must be an int >= 1, got {self.top_k!r}")
    if self.variant not in OPD_VARIANTS:
      raise ValueError(f"agentic_opd.variant must be one of {OPD_VARIANTS}, got {self.variant!r}")
    if self.lad_norm not in LAD_NORMS:
      raise ValueError(f"agentic_opd.lad_norm must be one of {LAD_NORMS}, got {self.lad_norm!r}")
    if self.lad_other not in LAD_OTHER:
      raise ValueError(f"agentic_opd.lad_other must be one of {LAD_OTHER}, got {self.lad_other!r}")
