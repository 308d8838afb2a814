"""Skill-GRPO (SDAR's baseline, research/methods.md §4): GRPO with the retrieved skills in the student's own prompt.

The skills are retrieved per task from the env's bank (`skills.retrieval`; a UCB bandit learns from each episode's
success which skills help), prepended to the student's prompts during rollouts, and the loss is plain GRPO. As the
authors validate twice, every validation also plays the panel with the skills in the prompt (`val_skills/...`).
"""
from __future__ import annotations

from typing import Any, Dict, Mapping

from agentopd_jax.envs.verl_agent.metrics import episode_metrics
from agentopd_jax.methods.base import Method, MethodContext, Iteration, Signals
from agentopd_jax.skills.context import SkillContext


SKILL_PROMPT_TOKENS = 2048  # SDAR's ALFWorld max_prompt_length, which no student prompt may exceed


def keep_prompts_whole(c) -> None:
  """Raises run config `c`'s prompt limit to SKILL_PROMPT_TOKENS where it is lower: the skills Skill-GRPO's
  collector matches anywhere in the prompt add up to ~700 tokens, and SDAR never cuts a student prompt (ALFWorld:
  2048, `truncation=error`), where a CPU default's limit of 1024 would cut about 30 % of them, skills first, and give
  each cut prompt a head of its own in the update (`train_step.make_minibatches`). The preset and
  `evaluate.py --skill_prompt=user` (the same student prompts) call it."""
  c.rollout.max_prompt_tokens = max(c.rollout.max_prompt_tokens, SKILL_PROMPT_TOKENS)


class SkillGrpo(Method):
  name = "skill_grpo"
  objective = "grpo"
  sections = ("skills",)
  provides = frozenset({"context"})
  fixed_draw = True

  def __init__(self, skills_cfg):
    self.skills_cfg = skills_cfg
    self.skills = None

  @staticmethod
  def preset(c, paper: bool):
    """Skill-GRPO on top of a run config, as SDAR's table runs it: KM-retrieved skills in the student's prompt; the
    workdir gets "_skill_grpo"; its prompts kept whole (`keep_prompts_whole`)."""
    del paper
    c.method = "skill_grpo"
    c.workdir = f"{c.workdir}_skill_grpo"
    c.skills.retrieval = "km"
    keep_prompts_whole(c)
    return c

  def start(self, ctx: MethodContext) -> None:
    c = self.skills_cfg
    self.ctx = ctx
    self.skills = SkillContext(ctx.env_name, c.bank_dir, c.retrieval, ctx.seed, c.ucb_c)

  def load_state_dict(self, extra: Mapping[str, Any]) -> None:
    if "skills" in extra:
      self.skills.load_state_dict(extra["skills"])

  def prompt_context(self, it: Iteration):
    context, it.prompt_state = self.skills.prompt_context(it.envs, it.iteration, first_episode=it.first_episode)
    return context

  def signals(self, it: Iteration) -> Signals:
    """The bandit's feedback: each episode's success for the skills its prompts held."""
    won = {ep.traj_id: float(ep.won) for ep in it.rollout.episodes}
    self.skills.update({e: (names, won[e]) for e, names in it.prompt_state.items()}, it.first_episode)
    return Signals(metrics={f"skills/hits/{name}": n for name, n in self.skills.take_hits().items()})

  def validation_metrics(self, params, outcomes, iteration: int) -> Dict[str, float]:
    """The panel played again with the skills in the student's prompt."""
    del outcomes
    def context_of(tasks, first_episode):
      return self.skills.prompt_context(tasks, self.ctx.validation_stream, first_episode=first_episode)[0]
    records, _, _ = self.ctx.play_panel(params, context_of)
    self.skills.take_hits()  # validation's retrievals are not the training batch's
    return {f"val_skills/{k}": v for k, v in episode_metrics(records).items()}

  def state_dict(self) -> Dict[str, Any]:
    return {"skills": self.skills.state_dict()}
