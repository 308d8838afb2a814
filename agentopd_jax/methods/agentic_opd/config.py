"""The run config's `opd` section: Agentic-OPD's student, teacher pool, scheduler and update size
(method="agentic_opd"; `methods.agentic_opd.method`)."""
from __future__ import annotations

import dataclasses

from agentopd_jax.eval.coverage import SOLVED_RULES
from agentopd_jax.methods.agentic_opd.hcn import SCHEDULERS

LAD_CHOICES = ("group_rates", "off")


@dataclasses.dataclass(frozen=True)
class OpdConfig:
  teacher_run: str = ""                # the GRPO run whose checkpoints are the student and the teachers
  student_step: str = "best"           # "best" (validation) or a step of that run
  scheduler: str = "hcn"               # hcn (v3), hcn_global, static_best, random, round_robin
  selection_interval: int = 4          # iterations between teacher re-selections (a multiple of validation.every)
  solved_rule: str = "any"             # a problem is solved by a checkpoint if any attempt won ("majority": most)
  prune_dominated: bool = False        # drop teachers whose solved set another teacher's contains
  lad: str = "group_rates"             # LAD routing: "group_rates" (teacher rollouts on the same tasks) or "off"
  whole_batch_update: bool = False     # one optimizer step over the whole batch per iteration, as the authors'
                                       # trainer; False: grpo.mini_batch_size mini-batches, as every method takes

  def __post_init__(self):
    if self.scheduler not in SCHEDULERS:
      raise ValueError(f"opd.scheduler: unknown {self.scheduler!r}; choose one of {sorted(SCHEDULERS)}")
    if self.lad not in LAD_CHOICES:
      raise ValueError(f"opd.lad must be one of {LAD_CHOICES}, got {self.lad!r}")
    if self.solved_rule not in SOLVED_RULES:
      raise ValueError(f"opd.solved_rule must be one of {SOLVED_RULES}, got {self.solved_rule!r}")
    if self.selection_interval < 1:
      raise ValueError(f"opd.selection_interval must be >= 1, got {self.selection_interval}")
