"""The training run: optional SFT warm start on expert demonstrations, then GRPO, with validation checkpoints.

Data flows one way per iteration: task draw -> rollout (sampler + env workers) -> scores and advantages -> padded
batch -> jitted updates (fused scoring inside the loss). Every `validation.every` iterations the policy plays the
fixed validation panel and the pool saves a checkpoint carrying its metrics and per-problem outcomes; step 0 is the
warm-started policy (GRPO's starting point and KL reference). Killing the run at any point and starting the same
command again resumes from the newest checkpoint: params, optimizer state and step come from it, and the task draw
and sampling keys are pure functions of (seed, iteration), so the resumed run retraces the uninterrupted one.

Multi-host (`parallel.distributed`): every process runs this same loop; each plays its share of the iteration's
tasks and of the validation panel on its own devices, the update's batch is assembled from their rows, and the
episode records are gathered, so every process holds the same metrics and checkpoint records; process 0 writes them.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import time
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

import jax
import jax.numpy as jnp
import numpy as np

from agentopd_jax.batching.samples import Sample
from agentopd_jax.envs import registry
from agentopd_jax.envs.vector import group_tasks
from agentopd_jax.envs.verl_agent.metrics import EpisodeRecord, episode_metrics
from agentopd_jax.eval.validate import episode_record, validate
import agentopd_jax.methods  # noqa: F401  registers the methods' objectives
from agentopd_jax.methods.opid.hindsight import HindsightTeacher
from agentopd_jax.methods.sdar.teacher import Teacher, episode_skills, signal_metrics
from agentopd_jax.models.transformer import sharded_abstract_params
from agentopd_jax.objectives.advantages import (SKILL_SHIFT_ESTIMATORS, get_advantage_estimator, informative_groups,
                                                step_scores)
from agentopd_jax.objectives.registry import LossConfig, get_objective
from agentopd_jax.parallel import distributed
from agentopd_jax.parallel.sharding import make_mesh
from agentopd_jax.rollout.demonstrations import demonstration_samples
from agentopd_jax.scoring.teacher_signals import recompute_behaviour
from agentopd_jax.skills.context import SkillContext
from agentopd_jax.storage.checkpoints import CheckpointPool, run_params
from agentopd_jax.storage.logs import LiveReport, MetricsLogger, NullLogger, plot_curves, progress
from agentopd_jax import faults
from agentopd_jax.training import data
from agentopd_jax.training.assembly import (VALIDATION_STREAM, base_seed, demonstration_env, model_and_tokenizer,
                                            rollout_engine, sampling, validation_key)
from agentopd_jax.training.config import RunConfig, from_config_dict
from agentopd_jax.training.train_step import (BadUpdates, init_state, make_minibatches, make_optimizer,
                                              make_train_step, minibatch_samples)

logger = logging.getLogger(__name__)
RANDOM_INIT_PRESETS = ("tiny", "small")  # CPU-sized models trained from scratch; larger ones load a checkpoint


def _mean_metrics(rows: List[Dict[str, float]]) -> Dict[str, float]:
  return {k: float(np.mean([r[k] for r in rows])) for k in rows[0]} if rows else {}


class Run:
  """Everything a run builds once: model, tokenizer, games, env workers, engines, pool, logger."""

  def __init__(self, c):
    self.cfg: RunConfig = from_config_dict(c)  # every section typed and checked, before anything loads
    self.c = c
    self.workdir = Path(c.workdir)
    self.primary = distributed.is_primary()
    self.workdir.mkdir(parents=True, exist_ok=True)
    if self.primary:
      (self.workdir / "config.json").write_text(c.to_json_best_effort(indent=2))
    if not c.model.path and c.model.preset not in RANDOM_INIT_PRESETS:
      raise ValueError(f"model.path: preset {c.model.preset!r} needs pretrained weights; pass "
                       f"--config.model.path=/path/to/hf_folder (random init is only for {RANDOM_INIT_PRESETS})")
    self.mesh = make_mesh(tuple(c.mesh_shape))
    self.local_mesh = distributed.local_mesh(self.mesh)  # where this process samples (the whole mesh on one host)
    self.model, self.init_params, self.tokenizer = model_and_tokenizer(c, base_seed(c), self.mesh)
    spec = registry.get(c.env.name)
    self.train_games, valid_games = spec.tasks(c.env)
    self.phases = data.phase_pools(self.train_games, spec.task_group, c.grpo.task_phases, c.env.name,
                                   c.grpo.tasks_per_iteration)
    self.panel = valid_games[:c.validation.num_tasks]
    self.group_of = spec.group_of  # task -> its group, for the per-group metrics
    # This process's shares of an iteration's tasks and of the panel (all of them on one host).
    self.task_share = distributed.share(c.grpo.tasks_per_iteration, "grpo.tasks_per_iteration")
    self.panel_share = distributed.share(len(self.panel), "validation.num_tasks", even=False)
    n_train = (self.task_share.stop - self.task_share.start) * c.grpo.group_size
    self.train_engine = rollout_engine(c, self.model, self.tokenizer, self.local_mesh, n_train, self.cfg.rollout)
    self.val_engine = rollout_engine(c, self.model, self.tokenizer, self.local_mesh,
                                     (self.panel_share.stop - self.panel_share.start) * c.validation.attempts,
                                     self.cfg.rollout)
    self.pool = CheckpointPool(self.workdir / "checkpoints", keep=c.checkpoint.keep or None)
    self.live = LiveReport()
    self.log = (MetricsLogger(self.workdir / "logs", use_tensorboard=c.logging.tensorboard, on_log=self.live)
                if self.primary else NullLogger())
    self.loss_cfg = self.cfg.loss
    self.optimizer = make_optimizer(self.cfg.optim)
    self.bad_updates = BadUpdates(self.cfg.optim.max_bad_updates)
    self.use_reference = self.loss_cfg.kl_coef > 0
    self.sampling = sampling(self.cfg)
    self.temperature = self.sampling.train.temperature  # the train step and every scorer use the rollouts' one
    self.train_step = make_train_step(self.model, self.loss_cfg, self.optimizer, self.mesh, self.use_reference,
                                      temperature=self.temperature)
    self.key = jax.random.key(c.seed)
    self.objective = get_objective(self.loss_cfg.objective)
    self.skills, self.teacher = self._skills_and_teacher()
    self.hindsight = self._hindsight()

  def _skills_and_teacher(self):
    """The skill context (retrieval over the env's bank) and the teacher, each built only when the objective reads
    it: teacher signals for SDAR and its baselines, skills in the student's prompt for Skill-GRPO."""
    c = self.c
    wants_teacher = self.objective.teacher_top_k is not None
    teacher_cfg = self.cfg.teacher
    skills = None
    if self.objective.student_skills or (wants_teacher and teacher_cfg.context == "skills"):
      skills = SkillContext(c.env.name, c.skills.bank_dir, c.skills.retrieval, c.seed, c.skills.ucb_c)
    if not wants_teacher:
      return skills, None
    pool = (distributed.to_local(run_params(teacher_cfg.pool_run, teacher_cfg.pool_step,
                                            sharded_abstract_params(self.model, self.mesh), "teacher.pool_step")[0],
                                 self.local_mesh) if teacher_cfg.source == "pool" else None)
    return skills, Teacher(teacher_cfg, self.model, self.tokenizer, c.rollout.max_prompt_tokens, skills, pool)

  def _hindsight(self):
    """OPID's hindsight teacher when the advantage estimator adds its skill shift (`grpo.advantage` "opid")."""
    c = self.c
    if c.grpo.advantage not in SKILL_SHIFT_ESTIMATORS:
      return None
    if c.rollout.layout != "step":
      raise ValueError(f"grpo.advantage={c.grpo.advantage!r} (OPID) needs rollout.layout='step', got "
                       f"{c.rollout.layout!r}: its skills are scored per env step")
    return HindsightTeacher(self.cfg.opid, c.env.name, c.env, self.model,
                            self.train_engine.chat, c.rollout.max_prompt_tokens)

  def finish(self, **extra) -> Dict:
    """The run's summary (`summarize` plus `extra`), written to summary.json, and its learning curves."""
    summary = dict(summarize(self.pool), **extra)
    if not self.primary:
      return summary
    (self.workdir / "summary.json").write_text(json.dumps(summary, indent=2))
    if self.c.logging.plot:
      self.log.flush()
      plot_curves(self.workdir / "logs", self.workdir / "curves.png")
    return summary

  def close(self):
    if self.hindsight is not None:
      self.hindsight.close()
    self.train_engine.env.close()
    self.val_engine.env.close()
    self.log.close()
    self.pool.close()

  # ------------------------------------------------------------------------------------------------ phases
  def sft(self):
    """Imitation of expert demonstrations through the same train step: NLL on the replies, or on every token with
    `sft.train_on_prompt`."""
    c = self.c
    demos = self.demonstrations()  # every process replays them all (a cheap, deterministic replay)
    decay = max(c.sft.steps - c.sft.warmup_steps, 0) if c.sft.lr_schedule == "cosine" else 0
    # The run's AdamW (weight decay, clipping, betas) with the warm start's own rate and schedule.
    optimizer = make_optimizer(dataclasses.replace(self.cfg.optim, learning_rate=c.sft.learning_rate,
                                                   warmup_steps=c.sft.warmup_steps, decay_steps=decay,
                                                   final_lr_ratio=0.1))
    step_fn = make_train_step(self.model, LossConfig(objective="sft"), optimizer, self.mesh)
    state = init_state(jax.tree.map(jnp.copy, self.init_params), optimizer, mesh=self.mesh, model=self.model)
    bad_updates = BadUpdates(c.optim.max_bad_updates)
    rng = np.random.default_rng([base_seed(c), 7])
    size = min(c.sft.batch_size, len(demos))
    mine = distributed.share(size, "sft.batch_size")  # every process draws the same batch and trains on its share
    micro = distributed.local_size(c.sft.micro_batch_size, "sft.micro_batch_size")
    for s in self.live.watch(progress(range(c.sft.steps), desc="sft")):
      picked = [demos[i] for i in rng.choice(len(demos), size, replace=False)][mine]
      (batch,) = make_minibatches(picked, [0.0] * len(picked), len(picked), micro, c.pack_width,
                                  mesh=self.local_mesh, agree=distributed.shape_agreement())
      if c.sft.train_on_prompt:
        # Language modelling on the whole demonstration (env text included): a from-scratch model gets ~30x more
        # supervised tokens for the same compute (docs/results.md: valid replies 0 -> 66 % after 50 steps).
        # The replies are ~4 % of those tokens, so they are up-weighted (`sft.reply_weight`) to keep the action
        # choice, where the copying from context must happen, a sizeable share of the loss. A sample's first token
        # has no prediction (position 0), nor, when rows are packed, a context of its own.
        batch.loss_mask = ((batch.positions > 0) + (c.sft.reply_weight - 1.0) * batch.loss_mask).astype(np.float32)
      state, metrics = step_fn(state, batch)
      metrics = {k: float(v) for k, v in metrics.items()}
      bad_updates.observe(metrics, picked, f"sft step {s + 1}")
      self.log.log(s + 1, {f"sft/{k}": v for k, v in metrics.items()}, phase="sft")
      faults.point("sft/step")
    self.live.watch(None)
    return state.params

  def warm_start(self):
    """GRPO's starting params: checkpoint `warm_start_step` (default 0, the warm start) of `warm_start_run`'s pool,
    else the SFT warm start, else the initial params."""
    c = self.c
    if c.warm_start_run:
      return run_params(c.warm_start_run, c.warm_start_step, sharded_abstract_params(self.model, self.mesh),
                        "warm_start_step")[0]
    return self.sft() if c.sft.steps else jax.tree.map(jnp.copy, self.init_params)

  def demonstrations(self) -> List[Sample]:
    """The warm start's samples: the expert's episodes of the first `sft.demos` training tasks and, for the share
    `sft.skill_fraction` of them (spread evenly), also the `sft.skill_expert`'s episode behind SDAR's privileged
    prompt with the task's KM-retrieved skills, so that the self-teacher learns to use skills it reads."""
    c = self.c
    spec, engine = registry.get(c.env.name), self.train_engine
    games = self.train_games[:c.sft.demos]

    def play(tasks, expert):
      return demonstration_samples(demonstration_env(c), engine.text_env_factory, engine.chat, tasks,
                                   spec.expert_policy(c.env, expert), c.rollout.layout,
                                   mistake_rate=c.sft.mistake_rate, seed=base_seed(c))

    demos = play(games, c.sft.expert)
    fraction = c.sft.skill_fraction
    if not fraction:
      return demos
    skilled = [g for i, g in enumerate(games) if int((i + 1) * fraction) > int(i * fraction)]
    skills = SkillContext(c.env.name, c.skills.bank_dir, "km")
    samples = play(skilled, c.sft.skill_expert or c.sft.expert)
    privileged, _ = skills.privileged(samples, lambda s: skilled[s.traj_id], 0, self.tokenizer,
                                      c.rollout.max_prompt_tokens)
    return demos + privileged

  def play_panel(self, params, skills: bool = False):
    """(episode records, per-problem outcomes, stats) of the validation panel, each process playing its share and
    the records gathered; `skills`: with the retrieved skills in the student's prompts."""
    c, share, attempts = self.c, self.panel_share, self.c.validation.attempts
    problems = self.panel[share]
    context = (self.skills.prompt_context([p for p in problems for _ in range(attempts)], VALIDATION_STREAM,
                                          first_episode=share.start * attempts)[0] if skills else None)
    records, outcomes, stats = validate(self.val_engine, distributed.to_local(params, self.local_mesh), problems,
                                        attempts, validation_key(c), self.sampling.validation, context=context,
                                        first_problem=share.start, group_of=self.group_of)
    return (*gather_episodes(records, outcomes), stats)

  def validate(self, params, iteration: int) -> Dict:
    """The panel's metrics (`val/...`) and outcomes; when the student trains with skills in its prompt (Skill-GRPO)
    the panel is played a second time with them (`val_skills/...`), as the authors validate twice."""
    records, outcomes, stats = self.play_panel(params)
    metrics = {f"val/{k}": v for k, v in episode_metrics(records).items()}
    metrics["val/time_s"] = stats["env_s"] + stats["generate_s"]
    if self.objective.student_skills:
      records, _, _ = self.play_panel(params, skills=True)
      metrics.update({f"val_skills/{k}": v for k, v in episode_metrics(records).items()})
      self.skills.take_hits()  # validation's retrievals are not the training batch's
    self.log.log(iteration, metrics, phase="val")
    return dict(metrics=metrics, outcomes=outcomes)

  def checkpoint(self, state, iteration: int, val: Dict, **extra):
    """Saves `state` with the validation's metrics and outcomes; `extra` joins the record (e.g. the OPD scheduler,
    the skill retriever's state: a UCB bandit resumes where it was)."""
    extra = dict(extra, bad_updates=self.bad_updates.count)
    if self.skills is not None:
      extra["skills"] = self.skills.state_dict()
    self.pool.save(iteration, {"params": state.params, "opt_state": state.opt_state, "step": state.step},
                   metrics=val["metrics"], outcomes=val["outcomes"], config=json.loads(self.c.to_json_best_effort()),
                   extra={"iteration": iteration, **extra})

  def restore_extra(self, step: int) -> Dict:
    """The `extra` record of checkpoint `step`, with the skill retriever's state and the bad-update count put back."""
    extra = self.pool.metadata(step)["extra"] or {}
    self.bad_updates.count = extra.get("bad_updates", 0)
    if self.skills is not None and "skills" in extra:
      self.skills.load_state_dict(extra["skills"])
    return extra

  def resume(self):
    """(step, train state) of the newest good checkpoint (damaged newer ones are moved aside, see
    `CheckpointPool.restore_newest`) with its extra record put back, or (None, None) for a fresh run."""
    if not self.pool.steps():
      return None, None
    template = init_state(self.init_params, self.optimizer, mesh=self.mesh, model=self.model)
    step, saved = self.pool.restore_newest({"params": template.params, "opt_state": template.opt_state,
                                            "step": template.step})
    if step is None:
      return None, None
    self.restore_extra(step)
    return step, template.replace(params=saved["params"], opt_state=saved["opt_state"], step=saved["step"])

  def advantages(self, samples: Sequence[Sample], num_groups: int) -> Tuple[jnp.ndarray, List[float]]:
    """(step scores, GRPO advantages) of an iteration's step samples: episode reward minus the invalid-action
    penalty per step, normalised by the configured estimator (`grpo.advantage`) over each group's step samples."""
    scores = step_scores(jnp.asarray([s.episode_reward for s in samples]),
                         jnp.asarray([s.action_valid for s in samples]), self.c.env.invalid_penalty)
    advantages = get_advantage_estimator(self.c.grpo.advantage)(
        scores, jnp.asarray([s.group_id for s in samples]), jnp.ones(len(samples)), num_groups=num_groups)
    return scores, np.asarray(advantages).tolist()

  def iteration_tasks(self, iteration: int) -> List:
    """The iteration's task draw, from its `grpo.task_phases` phase's tasks (the whole pool without phases)."""
    pool = data.phase_pool(self.train_games, self.phases, iteration)
    return data.iteration_tasks(pool, self.c.grpo.tasks_per_iteration, self.c.seed, iteration)

  def grpo_iteration(self, state, iteration: int):
    c, t0 = self.c, time.perf_counter()
    tasks = self.iteration_tasks(iteration)[self.task_share]
    envs, groups = group_tasks(tasks, c.grpo.group_size)
    first_episode = self.task_share.start * c.grpo.group_size  # this process's first episode in the whole batch
    context, student_skills = (self.skills.prompt_context(envs, iteration, first_episode=first_episode)
                               if self.objective.student_skills else (None, None))
    params = distributed.to_local(state.params, self.local_mesh)  # the rollout-time policy, on this process
    rollout = self.train_engine.run(params, envs, envs, groups, jax.random.fold_in(self.key, iteration),
                                    self.sampling.train, context=context, first_episode=first_episode)
    samples = rollout.samples
    t1 = time.perf_counter()
    # OPID: the analysis of this batch's trajectories runs on a worker thread while the advantages are computed.
    analysis = self.hindsight.submit(samples, tasks, iteration) if self.hindsight is not None else None
    scores, advantages = self.advantages(samples, len(tasks))
    trained = samples
    if c.grpo.filter_groups:
      trained, advantages = informative_samples(samples, advantages, len(tasks))
    metrics: Dict[str, float] = {}
    if c.rollout.recompute_old_logprobs and trained:
      t_old = time.perf_counter()
      trained, drift = recompute_behaviour(self.model, params, trained, temperature=self.temperature,
                                           pack_width=c.pack_width, rows_per_call=c.grpo.micro_batch_size,
                                           mesh=self.local_mesh)
      metrics.update(drift, **{"time/recompute_old_s": time.perf_counter() - t_old})
    # Below, every process takes part whether or not it has samples left: the metrics and the retriever's feedback
    # are gathered over processes.
    if analysis is not None:
      t_opid = time.perf_counter()
      advantages, opid_metrics = self.hindsight.advantages(params, trained, advantages, analysis,
                                                           temperature=self.temperature, pack_width=c.pack_width,
                                                           rows_per_call=c.grpo.micro_batch_size, mesh=self.local_mesh)
      metrics.update(opid_metrics, **{"time/opid_s": time.perf_counter() - t_opid})
    signals = None
    if self.teacher is not None:
      first = distributed.offset(len(trained))
      signals, used = (self.teacher.signals(params, trained, tasks, iteration,
                                            top_k=self.objective.teacher_top_k(self.loss_cfg),
                                            temperature=self.temperature, pack_width=c.pack_width,
                                            rows_per_call=c.grpo.micro_batch_size, mesh=self.local_mesh, first=first)
                       if trained else ([], []))
      metrics.update(signal_metrics(trained, signals, self.loss_cfg.gate_beta))
      metrics["time/teacher_s"] = time.perf_counter() - t1
      if self.skills is not None:
        self.skills.update(episode_skills(trained, used), first_episode)
    if student_skills is not None:
      won = {ep.traj_id: float(ep.won) for ep in rollout.episodes}
      self.skills.update({e: (names, won[e]) for e, names in student_skills.items()}, first_episode)
    if self.skills is not None:
      metrics.update({f"skills/hits/{name}": n for name, n in self.skills.take_hits().items()})
    # No informative group anywhere (filter_groups): the iteration makes no update, as DAPO skips an empty batch.
    # Multi-host: each process brings its share of every mini-batch (blank where it has no samples left).
    anywhere = sum(distributed.allgather(len(trained))) > 0
    mini = distributed.local_size(c.grpo.mini_batch_size, "grpo.mini_batch_size")
    minibatches = (make_minibatches(trained, advantages, mini,
                                    distributed.local_size(c.grpo.micro_batch_size, "grpo.micro_batch_size"),
                                    c.pack_width, mesh=self.local_mesh, teacher=signals,
                                    agree=distributed.shape_agreement()) if anywhere else [])
    if self.objective.prepare is not None:
      minibatches = [self.objective.prepare(b, self.loss_cfg, iteration) for b in minibatches]
    t2 = time.perf_counter()
    updates = []
    for k, minibatch in enumerate(minibatches):
      state, m = self.train_step(state, minibatch)
      updates.append({name: float(v) for name, v in m.items()})
      self.bad_updates.observe(updates[-1], minibatch_samples(trained, mini, k), f"iteration {iteration}")
      faults.point("train/update")
    t3 = time.perf_counter()
    played, _ = gather_episodes([episode_record(ep, self.group_of(envs[ep.traj_id])) for ep in rollout.episodes
                                 if not ep.env_failed], {})
    metrics.update({f"episode/{k}": v for k, v in episode_metrics(played).items()})
    if updates:
      metrics.update({f"actor/{k}": v for k, v in _mean_metrics(updates).items()})
      # On the first mini-batch the policy still equals the sampler's, so this is the sampler<->trainer drift.
      metrics["rollout/logprob_drift"] = updates[0]["logprob_drift"]
    metrics.update({"time/env_s": rollout.stats["env_s"], "time/generate_s": rollout.stats["generate_s"],
                    "time/advantage_s": t2 - t1, "time/update_s": t3 - t2, "time/iteration_s": t3 - t0,
                    "batch/width": minibatches[0].tokens.shape[-1] if minibatches else 0,
                    "batch/updates": len(updates)})
    counts = np.sum(distributed.allgather([  # over every process's share
        len(samples), len(trained), sum(b.tokens.shape[0] * b.tokens.shape[1] for b in minibatches),
        sum(int(b.segment_ids.astype(bool).sum()) for b in minibatches),
        sum(ep.env_failed for ep in rollout.episodes), float(jnp.sum(scores))]), axis=0)
    metrics.update({"batch/samples": int(counts[0]), "batch/trained_samples": int(counts[1]),
                    "batch/rows": int(counts[2]), "batch/tokens": int(counts[3]), "batch/env_failed": int(counts[4]),
                    "batch/score_mean": float(counts[5] / counts[0])})
    self.log.log(iteration, metrics, phase="train")
    return state, metrics


def gather_episodes(records, outcomes):
  """(every process's episode records in process order, the union of their per-problem outcomes)."""
  if jax.process_count() == 1:
    return records, outcomes
  shares = distributed.allgather([[dataclasses.asdict(r) for r in records], outcomes])
  return ([EpisodeRecord(**r) for share, _ in shares for r in share],
          {p: tuple(o) for _, out in shares for p, o in out.items()})


def informative_samples(samples: Sequence[Sample], advantages: Sequence[float],
                        num_groups: int) -> Tuple[List[Sample], List[float]]:
  """The samples (and their advantages) of groups whose episodes earned different rewards (`informative_groups`)."""
  if not samples:
    return [], []
  keep = np.asarray(informative_groups(jnp.asarray([s.episode_reward for s in samples]),
                                       jnp.asarray([s.group_id for s in samples]), num_groups))
  kept = [i for i, s in enumerate(samples) if keep[s.group_id]]
  return [samples[i] for i in kept], [advantages[i] for i in kept]


def train(c) -> Dict:
  """Runs (or resumes) the configured job; returns a summary with the warm-start and best validation results."""
  run = Run(c)
  try:
    latest, state = run.resume()
    if latest is None:
      run.log.truncate_after(-1)  # lines of an attempt that crashed before its first checkpoint are redone
      params = run.warm_start()
      state = init_state(params, run.optimizer, jax.tree.map(jnp.copy, params) if run.use_reference else None,
                         run.mesh, run.model)
      run.checkpoint(state, 0, run.validate(state.params, 0))
      start = 1
    else:
      if run.use_reference:  # π_ref is the warm start, checkpoint 0
        run.pool.verify(0)
        state = state.replace(reference_params=run.pool.restore_params(0, state.params))
      run.log.truncate_after(latest, phases=("train", "val"))  # SFT ended before checkpoint 0: its lines stay
      start = latest + 1
      logger.info("resumed from step %d of %s", latest, run.pool.directory)
    for iteration in run.live.watch(progress(range(start, c.grpo.iterations + 1), desc="grpo", initial=start - 1,
                                             total=c.grpo.iterations)):
      state, _ = run.grpo_iteration(state, iteration)
      if iteration % c.validation.every == 0 or iteration == c.grpo.iterations:
        run.checkpoint(state, iteration, run.validate(state.params, iteration))
    return run.finish()
  finally:
    run.close()


def summarize(pool: CheckpointPool) -> Dict:
  """Validation success of the warm start (step 0), the final and the best checkpoint."""
  steps = pool.steps()
  success = {s: pool.metadata(s)["metrics"].get("val/success_rate") for s in steps}
  best = pool.best_step()
  return {"steps": steps, "val_success": success, "start_success": success[steps[0]],
          "final_success": success[steps[-1]], "best_step": best, "best_success": success[best]}
