"""SDAR and its four teacher-reading baselines as one method: a privileged teacher scores every batch once.

The objective (`loss.objective`: sdar, grpo_opsd, opsd, rlsd or skill_sd; `methods.sdar.losses`) decides how the
teacher's per-token signals enter the loss; this method produces them. The teacher is the rollout-time policy itself
(`teacher.source="self"`) or a frozen checkpoint (`"pool"`), reading the student's completions after its own prompt:
the plain one, or with the task's retrieved skills (`teacher.context="skills"`, research/methods.md §4). Each
episode's success is fed back to the skill retriever for the skills its teacher read.
"""
from __future__ import annotations

import time
from typing import Any, Dict, Mapping

from agentopd_jax.methods.base import Iteration, Method, MethodContext, Signals
from agentopd_jax.methods.sdar.teacher import Teacher, episode_skills, signal_metrics
from agentopd_jax.objectives.registry import get_objective
from agentopd_jax.parallel import distributed
from agentopd_jax.skills.context import SkillContext
from agentopd_jax.storage.checkpoints import run_params


class Sdar(Method):
  name = "sdar"
  sections = ("teacher", "skills", "loss")
  provides = frozenset({"teacher"})

  def __init__(self, teacher_cfg, skills_cfg, loss_cfg):
    self.teacher_cfg, self.skills_cfg, self.loss_cfg = teacher_cfg, skills_cfg, loss_cfg
    self.skills = None

  def start(self, ctx: MethodContext) -> None:
    t, s = self.teacher_cfg, self.skills_cfg
    self.ctx = ctx
    self.top_k = get_objective(self.loss_cfg.objective).teacher_top_k(self.loss_cfg)  # the objective's support
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
    metrics = signal_metrics(trained, signals, self.loss_cfg.gate_beta)
    metrics["time/teacher_s"] = time.perf_counter() - t0
    if self.skills is not None:
      self.skills.update(episode_skills(trained, used), it.first_episode)
      metrics.update({f"skills/hits/{name}": n for name, n in self.skills.take_hits().items()})
    return Signals(teacher=signals, metrics=metrics)

  def state_dict(self) -> Dict[str, Any]:
    return {"skills": self.skills.state_dict()} if self.skills is not None else {}
