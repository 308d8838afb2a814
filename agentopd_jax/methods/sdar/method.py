"""SDAR and its four teacher-reading baselines as one set of hooks: a privileged teacher scores every batch once.

Each is a method of its own name (`method`: sdar, grpo_opsd, grpo_opsd_rkl, opsd, rlsd or skill_sd), whose objective of the same
name (`methods.sdar.losses`) decides how the teacher's per-token signals enter the loss; the hooks produce them. The
teacher is the rollout-time policy itself (`teacher.source="self"`) or a frozen checkpoint (`"pool"`), reading the
student's completions after its own prompt: the plain one, or with the task's retrieved skills
(`teacher.context="skills"`, research/methods.md §4). Each episode's success is fed back to the skill retriever for
the skills its teacher read.
"""
from __future__ import annotations

import time
from typing import Any, Dict, Mapping

from agentopd_jax.methods.base import Iteration, Method, MethodContext, Signals
from agentopd_jax.methods.sdar.teacher import Teacher, episode_skills, signal_metrics
from agentopd_jax.objectives.registry import get_objective
from agentopd_jax.parallel import distributed
from agentopd_jax.skills.context import SkillContext
from agentopd_jax.models.loading import run_params


def skill_preset(c, method: str):
  """SDAR or one of its baselines (`method`) on top of a run config: SDAR's λ = 0.01, β = 5, the self-teacher (π_old)
  reading KM-retrieved skills; the workdir gets the method's name. GRPO+OPSD is the β = 0 gate, OPSD the gated term
  without the policy gradient (their objectives force those values)."""
  c.method = method
  c.workdir = f"{c.workdir}_{method}"
  c.sdar.coef = 0.01
  c.sdar.gate_beta = 5.0
  c.teacher.source = "self"
  c.teacher.context = "skills"
  c.skills.retrieval = "km"
  return c


class Sdar(Method):
  """SDAR: GRPO plus the gated self-distillation term (group `sdar`). `sdar.gate_beta` is also the gate of the
  `teacher/*` metrics every method of the family logs."""
  name = "sdar"
  objective = "sdar"
  group = "sdar"
  sections = ("teacher", "skills", "sdar")
  provides = frozenset({"teacher"})

  def __init__(self, teacher_cfg, skills_cfg, sdar_cfg):
    self.teacher_cfg, self.skills_cfg, self.sdar_cfg = teacher_cfg, skills_cfg, sdar_cfg
    self.skills = None

  @classmethod
  def preset(cls, c, paper: bool):
    del paper
    return skill_preset(c, cls.name)

  def start(self, ctx: MethodContext) -> None:
    t, s = self.teacher_cfg, self.skills_cfg
    self.ctx = ctx
    self.top_k = get_objective(ctx.loss.objective).teacher_top_k(ctx.loss)  # the objective's support
    if t.context == "skills":
      self.skills = SkillContext(ctx.env_name, s.bank_dir, s.retrieval, ctx.seed, s.ucb_c)
    pool = (distributed.to_local(run_params(t.pool_run, t.pool_step, ctx.abstract_params, "teacher.pool_step")[0],
                                 ctx.local_mesh) if t.source == "pool" else None)
    self.teacher = Teacher(t, ctx.model, ctx.tokenizer, ctx.max_prompt_tokens, self.skills, pool)

  def load_state_dict(self, extra: Mapping[str, Any]) -> None:
    if self.skills is not None and "skills" in extra:
      self.skills.load_state_dict(extra["skills"])

  def signals(self, it: Iteration) -> Signals:
    t0, trained = time.perf_counter(), it.samples
    first = distributed.offset(len(trained))  # every process takes part, with or without samples
    signals, used = (self.teacher.signals(it.params, trained, it.tasks, it.iteration, top_k=self.top_k, first=first,
                                          **self.ctx.scoring)
                     if trained else ([], []))
    metrics = signal_metrics(trained, signals, self.sdar_cfg.gate_beta)
    metrics["timing_s/teacher"] = time.perf_counter() - t0
    if self.skills is not None:
      self.skills.update(episode_skills(trained, used), it.first_episode)
      metrics.update({f"skills/hits/{name}": n for name, n in self.skills.take_hits().items()})
    return Signals(teacher=signals, metrics=metrics)

  def state_dict(self) -> Dict[str, Any]:
    return {"skills": self.skills.state_dict()} if self.skills is not None else {}


class GrpoOpsd(Sdar):
  """SDAR's GRPO+OPSD baseline: the ungated term (β = 0) added to GRPO."""
  name = objective = "grpo_opsd"


class GrpoOpsdRkl(Sdar):
  """GRPO+OPSD with the sampled reverse-KL gradient (`methods.sdar.losses.reverse_kl_score`): the ungated term that
  really pulls toward the teacher, beside the authors' form."""
  name = objective = "grpo_opsd_rkl"

  @classmethod
  def preset(cls, c, paper: bool):
    c = super().preset(c, paper)
    c.sdar.divergence = "reverse_kl_score"
    return c


class Opsd(Sdar):
  """SDAR's OPSD baseline: the gated term without the policy gradient."""
  name = objective = "opsd"


class Rlsd(Sdar):
  """RLSD: GRPO with teacher-reweighted advantages (group `rlsd`)."""
  name = objective = "rlsd"
  group = "rlsd"


class SkillSd(Sdar):
  """Skill-SD: GRPO plus the ρ_on·k3 self-distillation term (group `skill_sd`)."""
  name = objective = "skill_sd"
  group = "skill_sd"
