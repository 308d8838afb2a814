"""The policy a run starts from: checkpoint `warm_start_step` of `warm_start_run`, else SFT on expert
demonstrations, else the initial params (a method's own starting params, e.g. Agentic-OPD's student, come first)."""
from __future__ import annotations

import dataclasses
import logging
from typing import Any, List, Optional, Tuple

import jax
import jax.numpy as jnp
import numpy as np

from agentopd_jax import faults
from agentopd_jax.batching.samples import Sample
from agentopd_jax.envs import registry
from agentopd_jax.objectives.registry import LossParams
from agentopd_jax.parallel import distributed
from agentopd_jax.methods.opid.demos import opid_demonstration_samples, retry_demonstration_samples, workflows
from agentopd_jax.methods.opid.injection import Anchors
from agentopd_jax.rollout.demonstrations import DemoEpisode, demonstration_samples, play_demonstrations
from agentopd_jax.skills.context import SkillContext
from agentopd_jax.models.loading import run_params
from agentopd_jax.storage.logs import progress
from agentopd_jax.training.assembly import RunParts, base_seed, demonstration_env
from agentopd_jax.training import reuse
from agentopd_jax.training.train_step import (BadUpdates, cached_train_step, init_state, make_minibatches,
                                             make_optimizer, with_scored)

logger = logging.getLogger(__name__)


def warm_start(parts: RunParts) -> Tuple[Any, Optional[reuse.SharedStart]]:
  """(GRPO's starting params, the cache folder runs share it in, or None): checkpoint `warm_start_step` (default 0,
  the warm start) of `warm_start_run`'s pool, else the SFT warm start (restored from the cache when another run of
  the same key trained it, `training.reuse`), else the initial params."""
  cfg = parts.cfg
  shared = cfg.reuse_warm_start and jax.process_count() == 1 and reuse.store() is not None
  if cfg.warm_start_run:
    params, step = run_params(cfg.warm_start_run, cfg.warm_start_step, parts.abstract_params, "warm_start_step")
    key = reuse.run_start_key(cfg.warm_start_run, step) if shared else None
    return params, None if key is None else reuse.SharedStart(key)
  if not cfg.sft.steps:
    return jax.tree.map(jnp.copy, parts.init_params), None
  start = reuse.SharedStart(reuse.warm_start_key(cfg, base_seed(cfg))) if shared else None
  if start is not None and start.has_params():
    params, records = start.restore(parts.abstract_params)
    for step, metrics in records:
      parts.log.log(step, metrics, phase="sft")
    logger.info("warm start restored from %s", start.folder)
    return params, start
  params, records = sft(parts)
  if start is not None:
    start.store(params, records)
  return params, start


def sft(parts: RunParts):
  """(params, logged records [(step, metrics)]): imitation of expert demonstrations through the same train step,
  NLL on the replies, or on every token with `sft.train_on_prompt`."""
  cfg, s = parts.cfg, parts.cfg.sft
  demos = demonstrations(parts)  # every process replays them all (a cheap, deterministic replay)
  decay = max(s.steps - s.warmup_steps, 0) if s.lr_schedule == "cosine" else 0
  # The run's AdamW (weight decay, clipping, betas) with the warm start's own rate and schedule.
  optim = dataclasses.replace(cfg.optim, learning_rate=s.learning_rate, warmup_steps=s.warmup_steps,
                              decay_steps=decay, final_lr_ratio=0.1)
  optimizer = make_optimizer(optim)
  model = parts.model.replace(dtype=s.dtype) if s.dtype else parts.model
  step_fn = cached_train_step(model, LossParams("sft"), optim, parts.mesh)
  state = init_state(jax.tree.map(jnp.copy, parts.init_params), optimizer, mesh=parts.mesh, model=model)
  bad_updates = BadUpdates(cfg.optim.max_bad_updates)
  rng = np.random.default_rng([base_seed(cfg), 7])
  size = min(s.batch_size, len(demos))
  mine = distributed.share(size, "sft.batch_size")  # every process draws the same batch and trains on its share
  micro = distributed.local_size(s.micro_batch_size, "sft.micro_batch_size")
  records = []
  for step in parts.live.watch(progress(range(s.steps), desc="sft")):
    picked = [demos[i] for i in rng.choice(len(demos), size, replace=False)][mine]
    (batch,) = make_minibatches(picked, [0.0] * len(picked), len(picked), micro, cfg.pack_width,
                                mesh=parts.local_mesh, agree=distributed.shape_agreement())
    if s.train_on_prompt:
      # Language modelling on the whole demonstration (env text included): a from-scratch model gets ~30x more
      # supervised tokens for the same compute (docs/results.md: valid replies 0 -> 66 % after 50 steps).
      # The replies are ~4 % of those tokens, so they are up-weighted (`sft.reply_weight`) to keep the action
      # choice, where the copying from context must happen, a sizeable share of the loss. A sample's first token
      # has no prediction (position 0), nor, when rows are packed, a context of its own.
      batch.loss_mask = ((batch.positions > 0) + (s.reply_weight - 1.0) * batch.loss_mask).astype(np.float32)
      (batch,) = with_scored([batch], distributed.shape_agreement())
    state, metrics = step_fn(state, batch)
    metrics = {k: float(v) for k, v in metrics.items()}
    bad_updates.observe(metrics, picked, f"sft step {step + 1}")
    records.append((step + 1, {f"sft/{k}": v for k, v in metrics.items()}))
    parts.log.log(*records[-1], phase="sft")
    faults.point("sft/step")
  parts.live.watch(None)
  return state.params, records


def _spread(games: List[Any], fraction: float) -> List[Any]:
  """The share `fraction` of `games`, spread evenly."""
  return [g for i, g in enumerate(games) if int((i + 1) * fraction) > int(i * fraction)]


def demonstrations(parts: RunParts) -> List[Sample]:
  """The warm start's samples: the expert's episodes of the first `sft.demos` training tasks; for the share
  `sft.skill_fraction` of them (spread evenly), also the `sft.skill_expert`'s episode behind SDAR's privileged
  prompt with the task's KM-retrieved skills, so that the self-teacher learns to use skills it reads; for the share
  `sft.opid_fraction`, also that expert's episode in OPID's injection format (`methods.opid.demos`)."""
  cfg, s = parts.cfg, parts.cfg.sft
  spec, engine = registry.get(cfg.env.name), parts.train_engine
  games = parts.train_tasks[:s.demos]
  skill_expert = s.skill_expert or s.expert

  def play(tasks, expert):
    return demonstration_samples(demonstration_env(cfg), engine.text_env_factory, engine.chat, tasks,
                                 spec.expert_policy(cfg.env, expert), cfg.rollout.layout,
                                 mistake_rate=s.mistake_rate, seed=base_seed(cfg))

  demos = play(games, s.expert)
  if s.skill_fraction:
    skilled = _spread(games, s.skill_fraction)
    skills = SkillContext(cfg.env.name, cfg.skills.bank_dir, "km")
    samples = play(skilled, skill_expert)
    privileged, _ = skills.privileged(samples, lambda x: skilled[x.traj_id], 0, parts.tokenizer,
                                      cfg.rollout.max_prompt_tokens)
    demos += privileged
  if s.opid_fraction:
    demos += opid_demonstrations(parts, _spread(games, s.opid_fraction), skill_expert)
  return demos


def opid_demonstrations(parts: RunParts, games: List[Any], expert: str) -> List[Sample]:
  """`expert`'s won episodes of `games` in OPID's injection format, skills routed by the run's `opid.*`."""
  cfg = parts.cfg
  spec, engine = registry.get(cfg.env.name), parts.train_engine
  if cfg.rollout.layout != "step":
    raise ValueError(f"sft.opid_fraction needs rollout.layout='step' (OPID scores each step's prompt), got "
                     f"{cfg.rollout.layout!r}")
  if spec.hindsight is None:
    raise ValueError(f"sft.opid_fraction needs the oracle analyzer's review, which env {cfg.env.name!r} has not "
                     f"(its EnvSpec.hindsight is None)")
  episodes = play_demonstrations(demonstration_env(cfg), engine.text_env_factory, games,
                                 spec.expert_policy(cfg.env, expert), "step", cfg.sft.mistake_rate, base_seed(cfg))
  text_env = engine.text_env_factory()
  samples, failed = opid_demonstration_samples(episodes, spec.hindsight(cfg.env), engine.chat, text_env.demo_reply,
                                               cfg.opid, cfg.rollout.max_prompt_tokens, base_seed(cfg),
                                               cfg.sft.opid_targets, Anchors.of(text_env.prompt_anchors))
  if failed:
    logger.warning("OPID demonstrations: %d reviews failed; their episodes are left out", failed)
  if cfg.sft.opid_retries:
    replays, skills = retry_episodes(cfg, engine.text_env_factory, episodes)
    samples += cfg.sft.opid_retries * retry_demonstration_samples(replays, skills, engine.chat,
                                                                  cfg.rollout.max_prompt_tokens,
                                                                  Anchors.of(text_env.prompt_anchors))
  return samples


def retry_episodes(cfg, text_env_factory, episodes: List[DemoEpisode]) -> Tuple[List[DemoEpisode], List[str]]:
  """`sft.opid_retries`: (replays, skills): each won episode of `episodes` played again from its task's start by the
  env's skill follower reading the oracle's workflow of it, `skills[replay.traj_id]`
  (`methods.opid.demos.retry_demonstration_samples` puts it in every prompt)."""
  spec = registry.get(cfg.env.name)
  if spec.skill_follower is None:
    raise ValueError(f"sft.opid_retries needs an expert that follows OPID's workflows, which env {cfg.env.name!r} has "
                     f"not (its EnvSpec.skill_follower is None)")
  reviewed = workflows(episodes, spec.hindsight(cfg.env), cfg.opid.max_step_skills)
  follow = spec.skill_follower(cfg.env)
  skill_of = {id(ep.task): skill for ep, skill in reviewed}
  replays = play_demonstrations(demonstration_env(cfg), text_env_factory, [ep.task for ep, _ in reviewed],
                                lambda task: follow(task, skill_of[id(task)]), "step", cfg.sft.mistake_rate,
                                base_seed(cfg))
  return replays, [skill for _, skill in reviewed]
