"""OPID as an add-on method: hindsight skills shift GRPO's advantages token by token (research/methods.md §3).

After each rollout an analyzer (`opid.analyzer`: an LLM through an OpenAI-compatible endpoint, or the env's oracle)
reads the batch's finished trajectories on a worker thread while the loop computes GRPO's advantages; it writes an
episode skill and critical-step skills. The rollout-time policy then re-scores each completion with and without its
skill in the prompt, and the log-prob shift, weighted by `opid.w_episode`/`w_step`, is added to the episode
advantage (`methods.opid.hindsight`), whichever estimator `grpo.advantage` names. An add-on: it stacks on any
primary method that does not set the advantages itself (`sdar+opid`); `opid` alone is GRPO with it.
"""
from __future__ import annotations

import time

from agentopd_jax.methods.base import Iteration, Method, MethodContext, Signals
from agentopd_jax.methods.opid.hindsight import HindsightTeacher
from agentopd_jax.methods.opid.injection import Anchors


class Opid(Method):
  name = "opid"
  sections = ("opid",)
  provides = frozenset({"advantages"})

  def __init__(self, opid_cfg):
    self.cfg = opid_cfg
    self.hindsight = None
    self.analysis = None

  @staticmethod
  def preset(c, paper: bool):
    """OPID (methods.md §3.3) added to a run config's method: GRPO's episode advantage plus the skill shift (w_ep =
    w_step = 0.001, step_priority routing). On CPU the offline oracle analyzer; on the paper setting an
    OpenAI-compatible one (the authors' fallback model; point opid.base_url/analyzer_model at yours) and the scripts'
    advantage mode: mean_norm for Qwen3 and where the env config's `opid.paper_mode` says so (WebShop), mean_std_norm
    otherwise. The workdir gets "_opid"."""
    c.method = "opid" if c.method == "grpo" else f"{c.method}+opid"
    c.workdir = f"{c.workdir}_opid"
    mean_norm = paper and (c.opid.paper_mode == "mean_norm" or c.model.preset.startswith("qwen3"))
    c.grpo.advantage = "grpo_mean_norm" if mean_norm else "grpo"
    if paper:
      c.opid.analyzer = "openai"
      c.opid.analyzer_model = "gemini-2.5-flash"
    return c

  def start(self, ctx: MethodContext) -> None:
    if ctx.layout != "step":
      raise ValueError(f"rollout.layout: OPID needs 'step' (its skills are scored per env step), got {ctx.layout!r}")
    self.ctx = ctx
    anchors = Anchors.of(ctx.train_engine.text_env_factory().prompt_anchors)
    self.hindsight = HindsightTeacher(self.cfg, ctx.env_name, ctx.env_cfg, ctx.model, ctx.chat, ctx.max_prompt_tokens,
                                      anchors)

  def after_rollout(self, it: Iteration) -> None:
    self.analysis = self.hindsight.submit(it.rollout.samples, it.tasks, it.iteration)

  def signals(self, it: Iteration) -> Signals:
    analysis, self.analysis = self.analysis, None
    if analysis is None:
      return Signals()
    t0 = time.perf_counter()
    advantages, metrics = self.hindsight.advantages(it.params, it.samples, it.advantages, analysis,
                                                    **self.ctx.scoring)
    metrics["timing_s/opid"] = time.perf_counter() - t0
    return Signals(advantages=advantages, metrics=metrics)

  def close(self) -> None:
    if self.hindsight is not None:
      self.hindsight.close()
