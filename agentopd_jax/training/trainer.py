"""The training loop every method runs: optional warm start, then iterations of rollout -> advantages -> the methods'
signals -> updates, with validation checkpoints.

Data flows one way per iteration: task draw -> the methods' prompt context -> rollout (sampler + env workers) ->
GRPO step scores and advantages (`methods.grpo`) -> optional group filter and behaviour recompute -> each method's
signals (advantages, teacher signals, distillation weights) -> packed mini-batches -> jitted updates (fused scoring
inside the loss). Every method takes the same rollouts (`grpo.tasks_per_iteration` x `grpo.group_size`) and the same
mini-batches (`grpo.mini_batch_size`) unless its config says otherwise; the train log records both per iteration
(`batch/samples`, `batch/updates`). With continuous refill (`rollout.refill`) the batch is the first
`tasks_per_iteration` groups to complete in a pool of env slots, in stream order (`rollout/refill.py`).

Every `validation.every` iterations the policy plays the fixed validation panel and the pool saves a checkpoint
carrying its metrics, per-problem outcomes and every method's state; step 0 is the starting policy (GRPO's KL
reference). Killing the run at any point and starting the same command again resumes from the newest checkpoint:
params, optimizer state, step and the methods' state come from it, and the task draw and sampling keys are pure
functions of (seed, iteration), so the resumed run retraces the uninterrupted one (except for the episodes that
`rollout.max_staleness` >= 1 carries between iterations, which no checkpoint holds).

Multi-host (`parallel.distributed`): every process runs this same loop; each plays its share of the iteration's
tasks and of the validation panel on its own devices, the update's batch is assembled from their rows, and the
episode records are gathered, so every process holds the same metrics and checkpoint records; process 0 writes them.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import time
from typing import Callable, Dict, List, Optional

import jax
import jax.numpy as jnp
import numpy as np

from agentopd_jax import cache, faults
from agentopd_jax.envs.vector import group_tasks
from agentopd_jax.envs.verl_agent.metrics import EpisodeRecord, episode_metrics
from agentopd_jax.eval.validate import episode_record, validate
from agentopd_jax.methods import grpo
from agentopd_jax.methods.base import Iteration, MethodContext
from agentopd_jax.models import lora
from agentopd_jax.objectives import rollout_correction
from agentopd_jax.parallel import distributed
from agentopd_jax.rollout.refill import RefillRollouts
from agentopd_jax.scoring.teacher_signals import recompute_behaviour
from agentopd_jax.storage.checkpoints import CheckpointPool
from agentopd_jax.storage.logs import plot_curves, progress
from agentopd_jax.training import data, reuse
from agentopd_jax.training.assembly import LORA_STREAM, VALIDATION_STREAM, RunParts, build_run
from agentopd_jax.training.train_step import init_state, make_minibatches, minibatch_samples, policy_params
from agentopd_jax.training.warm_start import warm_start

logger = logging.getLogger(__name__)


def _mean_metrics(rows: List[Dict[str, float]]) -> Dict[str, float]:
  return {k: float(np.mean([r[k] for r in rows])) for k in rows[0]} if rows else {}


class Trainer:
  """One run of the loop over built parts (`assembly.build_run`); `run()` trains or resumes it."""

  def __init__(self, parts: RunParts):
    self.parts, self.cfg = parts, parts.cfg
    self.methods = parts.methods
    self.shared_start = None  # the cache folder of a start that runs share (`reuse`); set by `start_state`
    self.lora = parts.cfg.lora if parts.cfg.lora.rank else None
    self.trained_key = "adapters" if self.lora else "params"  # what a checkpoint's state holds
    s = parts.sampling.train
    self.ctx = MethodContext(
        model=parts.model, tokenizer=parts.tokenizer, chat=parts.train_engine.chat, env_name=self.cfg.env.name,
        env_cfg=self.cfg.env, layout=self.cfg.rollout.layout, max_prompt_tokens=self.cfg.rollout.max_prompt_tokens,
        seed=self.cfg.seed,
        micro_batch_size=distributed.local_size(self.cfg.grpo.micro_batch_size, "grpo.micro_batch_size"),
        mesh=parts.mesh, local_mesh=parts.local_mesh, abstract_params=parts.abstract_params,
        train_engine=parts.train_engine, train_sampling=s,
        scoring={"temperature": s.temperature, "pack_width": self.cfg.pack_width,
                 "rows_per_call": self.cfg.grpo.micro_batch_size, "mesh": parts.local_mesh},
        loss=parts.loss,
        play_panel=self.play_panel, panel_groups={str(task): parts.group_of(task) for task in parts.panel},
        validation_stream=VALIDATION_STREAM, log=parts.log, workdir=parts.workdir,
        primary=parts.primary)
    for m in self.methods:
      m.start(self.ctx)
    r = self.cfg.rollout
    self.refill = (RefillRollouts(parts.train_engine, self.cfg.grpo.group_size, self.draw, r.max_staleness)
                   if r.refill else None)

  def close(self):
    for m in self.methods:
      m.close()
    p = self.parts
    p.train_engine.env.close()
    p.val_engine.env.close()
    p.log.close()
    p.pool.close()

  # ------------------------------------------------------------------------------------------------ validation
  def play_panel(self, params, context_of: Optional[Callable] = None, traces: Optional[List[Dict]] = None):
    """(episode records, per-problem outcomes, stats) of the validation panel, each process playing its share and
    the records gathered; `context_of(tasks, first_episode)`: the prompt context of the panel's episodes; `traces`
    receives this process's episodes, turn by turn (`eval.validate.episode_traces`)."""
    p, attempts = self.parts, self.cfg.validation.attempts
    problems = p.panel[p.panel_share]
    first = p.panel_share.start * attempts
    context = context_of([q for q in problems for _ in range(attempts)], first) if context_of else None
    records, outcomes, stats = validate(p.val_engine, distributed.to_local(params, p.local_mesh), problems, attempts,
                                        p.validation_key, p.sampling.validation, traces=traces, context=context,
                                        first_problem=p.panel_share.start, group_of=p.group_of)
    return (*gather_episodes(records, outcomes), stats)

  def validate(self, params, iteration: int) -> Dict:
    """The panel's metrics (`val/...`, plus what the methods add) and outcomes, and its first
    `logging.val_generations` episodes turn by turn in the generations log. At step 0 of a start that runs share
    (`training.reuse`), the panel is played once per validation setting and seed and reused."""
    shared = self.shared_start if iteration == 0 else None
    key = reuse.validation_key(self.cfg) if shared is not None else None
    played = shared.validation(key) if shared is not None else None
    if played is None:
      traces = [] if self.cfg.logging.val_generations else None  # no turn-by-turn copy of the panel unless logged
      records, outcomes, stats = self.play_panel(params, traces=traces)
      played = {"metrics": episode_metrics(records), "outcomes": outcomes, "stats": stats,
                "generations": [{"problem": t["problem"], "won": t["won"], "reward": t["reward"],
                                 "steps": [{"prompt": s["prompt"], "reply": s["reply"]} for s in t["steps"]]}
                                for t in (traces or [])[:self.cfg.logging.val_generations]]}
      if shared is not None:
        shared.store_validation(key, played)
    outcomes = {problem: tuple(o) for problem, o in played["outcomes"].items()}
    metrics = {f"val/{k}": v for k, v in played["metrics"].items()}
    metrics["timing_s/testing"] = played["stats"]["env_s"] + played["stats"]["generate_s"]
    if "reward/mean" in played["metrics"]:  # verl's core validation score
      metrics[f"val-core/{self.cfg.env.name}/reward/mean@{self.cfg.validation.attempts}"] = \
          played["metrics"]["reward/mean"]
    for m in self.methods:
      metrics.update(m.validation_metrics(params, outcomes, iteration))
    self.parts.log.log(iteration, metrics, phase="val")
    if self.cfg.logging.val_generations:
      self.parts.log.log_generations(iteration, played.get("generations", [])[:self.cfg.logging.val_generations])
    return dict(metrics=metrics, outcomes=outcomes)

  def validate_and_checkpoint(self, state, iteration: int):
    """Validates, lets the methods see the outcomes, and saves `state` with the validation's metrics and outcomes
    and every method's state (the skill retriever's bandit, Agentic-OPD's scheduler and teacher)."""
    val = self.validate(self.policy(state), iteration)
    for m in self.methods:
      m.after_validation(val["outcomes"], iteration)
    extra = {"bad_updates": self.parts.bad_updates.count}
    for m in self.methods:
      extra.update(m.state_dict())
    if self.lora:
      extra["lora"] = dataclasses.asdict(self.lora)
    self.parts.pool.save(iteration, {self.trained_key: state.params, "opt_state": state.opt_state,
                                     "step": state.step},
                         metrics=val["metrics"], outcomes=val["outcomes"], config=json.loads(self.parts.config_json),
                         extra={"iteration": iteration, **extra})

  # ------------------------------------------------------------------------------------------------ start / resume
  def resume(self):
    """(step, train state) of the newest good checkpoint (damaged newer ones are moved aside, see
    `CheckpointPool.restore_newest`) with its extra record put back, or (None, None) for a fresh run."""
    p = self.parts
    if not p.pool.steps():
      return None, None
    template = (self.fresh_state(p.init_params) if self.lora else
                init_state(p.init_params, p.optimizer, mesh=p.mesh, model=p.model))
    step, saved = p.pool.restore_newest({self.trained_key: template.params, "opt_state": template.opt_state,
                                         "step": template.step})
    if step is None:
      return None, None
    extra = p.pool.metadata(step)["extra"] or {}
    p.bad_updates.count = extra.get("bad_updates", 0)
    for m in self.methods:
      m.load_state_dict(extra)
    state = template.replace(params=saved[self.trained_key], opt_state=saved["opt_state"], step=saved["step"])
    if self.lora:
      state = state.replace(base_params=p.pool.restore_base(template.base_params))
    return step, state

  def fresh_state(self, params):
    """The train state that starts from `params`: every weight trained, or (`lora.rank` > 0) fresh adapters on
    `params` as the frozen base, which is then π_ref as well."""
    p = self.parts
    if self.lora:
      key = jax.random.fold_in(jax.random.key(self.cfg.seed), LORA_STREAM)
      return init_state(lora.init_adapters(params, self.lora, key), p.optimizer, None, p.mesh, p.model,
                        base_params=params)
    return init_state(params, p.optimizer, jax.tree.map(jnp.copy, params) if p.use_reference else None, p.mesh,
                      p.model)

  def policy(self, state):
    """The policy's full weights (a LoRA run's base with its adapters merged, once per call)."""
    return policy_params(state, self.lora)

  def start_state(self):
    """The train state at step 0: a method's own starting params, else the warm start."""
    p = self.parts
    params = next((q for q in (m.initial_params() for m in self.methods) if q is not None), None)
    if params is None:
      params, self.shared_start = warm_start(p)
    state = self.fresh_state(params)
    if self.lora:
      p.pool.save_base(state.base_params)
    return state

  def run(self) -> Dict:
    """Runs (or resumes) the loop; returns the summary (warm start, final and best validation, the methods')."""
    p, cfg = self.parts, self.cfg
    latest, state = self.resume()
    if latest is None:
      p.log.truncate_after(-1)  # lines of an attempt that crashed before its first checkpoint are redone
      state = self.start_state()
      self.validate_and_checkpoint(state, 0)
      start = 1
    else:
      if p.use_reference and not self.lora:  # π_ref is the starting policy, checkpoint 0
        p.pool.verify(0)
        state = state.replace(reference_params=p.pool.restore_params(0, state.params))
      phases = ("train", "val") + tuple(ph for m in self.methods for ph in m.log_phases)
      p.log.truncate_after(latest, phases=phases)  # SFT ended before checkpoint 0: its lines stay
      start = latest + 1
      logger.info("resumed from step %d of %s", latest, p.pool.directory)
      if cfg.rollout.max_staleness:
        logger.warning("rollout.max_staleness=%d: the episodes in flight at step %d are not in its checkpoint; the "
                       "task stream restarts at iteration %d's draw", cfg.rollout.max_staleness, latest, start)
    name = "+".join(m.name for m in self.methods)
    for iteration in p.live.watch(progress(range(start, cfg.grpo.iterations + 1), desc=name, initial=start - 1,
                                           total=cfg.grpo.iterations)):
      state, _ = self.iteration(state, iteration)
      if iteration % cfg.validation.every == 0 or iteration == cfg.grpo.iterations:
        self.validate_and_checkpoint(state, iteration)
    return self.finish()

  def finish(self) -> Dict:
    """The run's summary (`summarize` plus the methods'), written to summary.json, and its learning curves."""
    p = self.parts
    summary = summarize(p.pool)
    for m in self.methods:
      summary.update(m.summary())
    if not p.primary:
      return summary
    (p.workdir / "summary.json").write_text(json.dumps(summary, indent=2))
    if self.cfg.logging.plot:
      p.log.flush()
      plot_curves(p.workdir / "logs", p.workdir / "curves.png")
    return summary

  # ------------------------------------------------------------------------------------------------ one iteration
  def iteration_tasks(self, iteration: int) -> List:
    """The iteration's task draw, from its `grpo.task_phases` phase's tasks (the whole pool without phases)."""
    p = self.parts
    pool = data.phase_pool(p.train_tasks, p.phases, iteration)
    return data.iteration_tasks(pool, self.cfg.grpo.tasks_per_iteration, self.cfg.seed, iteration)

  def draw(self, iteration: int):
    """Lock-step iteration `iteration`'s tasks (this process's share), key and first episode: continuous refill's
    queue (`rollout.refill`) plays the same episodes with the same keys."""
    p = self.parts
    return (self.iteration_tasks(iteration)[p.task_share], jax.random.fold_in(p.key, iteration),
            p.task_share.start * self.cfg.grpo.group_size)

  def iteration(self, state, iteration: int):
    p, cfg, t0 = self.parts, self.cfg, time.perf_counter()
    compiled = [cache.compile_counter()]  # at t0, t1, t2, t3: what of each part was compilation
    tasks, key, first_episode = self.draw(iteration)
    envs, groups = group_tasks(tasks, cfg.grpo.group_size)
    it = Iteration(iteration=iteration, key=key, tasks=tasks, envs=envs, groups=groups,
                   first_episode=first_episode,  # this process's first
                   params=distributed.to_local(self.policy(state), p.local_mesh))  # the rollout-time policy, here
    contexts = [c for c in (m.prompt_context(it) for m in self.methods) if c is not None]
    if self.refill is None:
      it.rollout = p.train_engine.run(it.params, envs, envs, groups, it.key, p.sampling.train,
                                      context=contexts[0] if contexts else None, first_episode=it.first_episode)
    else:  # the batch: the first len(tasks) groups to complete (on-policy: this draw's, as lock-step numbers them)
      it.rollout, tasks = self.refill.run(it.params, iteration, len(tasks), p.sampling.train)
      envs, groups = group_tasks(tasks, cfg.grpo.group_size)
      it.tasks, it.envs, it.groups = tasks, envs, groups
    samples = it.rollout.samples
    t1 = time.perf_counter()
    compiled.append(cache.compile_counter())
    for m in self.methods:
      m.after_rollout(it)  # e.g. OPID's analysis starts on a worker thread while the advantages are computed
    scores, advantages = grpo.advantages(samples, len(tasks), cfg.grpo.advantage, cfg.env.invalid_penalty)
    trained = samples
    if cfg.grpo.filter_groups:
      trained, advantages = grpo.informative_samples(samples, advantages, len(tasks))
    metrics: Dict[str, float] = {}
    if cfg.rollout.recompute_old_logprobs and trained:
      t_old = time.perf_counter()
      trained, drift = recompute_behaviour(p.model, it.params, trained, **self.ctx.scoring)
      metrics.update(drift, **{"timing_s/old_log_prob": time.perf_counter() - t_old})
    is_weights = None
    if cfg.rollout_correction.enabled or cfg.rollout.recompute_old_logprobs:
      # π_old against the sampler's π_rollout: measured whenever they can differ, corrected where configured.
      trained, is_weights, corr = rollout_correction.correct(trained, cfg.rollout_correction, distributed.totals)
      metrics.update(corr)
    it.samples, it.advantages = trained, advantages
    # Below, every process takes part whether or not it has samples left: the metrics, the retriever's feedback and
    # the routing are gathered over processes.
    teacher, distill_weights = None, None
    for m in self.methods:
      sig = m.signals(it)
      if sig.advantages is not None:
        it.advantages = sig.advantages
      teacher = sig.teacher if sig.teacher is not None else teacher
      distill_weights = sig.distill_weights if sig.distill_weights is not None else distill_weights
      metrics.update(sig.metrics)
    # No informative group anywhere (filter_groups): the iteration makes no update, as DAPO skips an empty batch.
    # Multi-host: each process brings its share of every mini-batch (blank where it has no samples left).
    anywhere = sum(distributed.allgather(len(trained))) > 0
    sizes = [s for s in (m.minibatch_size(it) for m in self.methods) if s is not None]
    mini = sizes[0] if sizes else distributed.local_size(cfg.grpo.mini_batch_size, "grpo.mini_batch_size")
    minibatches = (make_minibatches(trained, it.advantages, mini,
                                    distributed.local_size(cfg.grpo.micro_batch_size, "grpo.micro_batch_size"),
                                    cfg.pack_width, distill_weights=distill_weights, mesh=p.local_mesh,
                                    teacher=teacher, agree=distributed.shape_agreement(),
                                    share_prefixes=cfg.share_prefixes and cfg.pack_width > 0
                                    and jax.process_count() == 1,
                                    is_weights=is_weights)
                   if anywhere else [])
    if p.objective.prepare is not None:
      minibatches = [p.objective.prepare(b, p.loss, iteration) for b in minibatches]
    teacher_params = next((q for q in (m.teacher_params() for m in self.methods) if q is not None), None)
    t2 = time.perf_counter()
    compiled.append(cache.compile_counter())
    updates = []
    for k, minibatch in enumerate(minibatches):
      state, m = p.train_step(state, minibatch, teacher_params)
      updates.append({name: float(v) for name, v in m.items()})
      p.bad_updates.observe(updates[-1], minibatch_samples(trained, mini, k), f"iteration {iteration}")
      faults.point("train/update")
    t3 = time.perf_counter()
    compiled.append(cache.compile_counter())
    played, _ = gather_episodes([episode_record(ep, p.group_of(envs[ep.traj_id])) for ep in it.rollout.episodes
                                 if not ep.env_failed], {})
    metrics.update({f"episode/{k}": v for k, v in episode_metrics(played).items()})
    if updates:
      metrics.update({f"actor/{k}": v for k, v in _mean_metrics(updates).items()})
      if "logprob_drift" in updates[0]:  # objectives with a PPO ratio report it
        # On the first mini-batch the policy still equals the sampler's, so this is the sampler<->trainer drift.
        metrics["rollout/logprob_drift"] = updates[0]["logprob_drift"]
    metrics.update({"timing_s/env": it.rollout.stats["env_s"], "timing_s/gen": it.rollout.stats["generate_s"],
                    "timing_s/adv": t2 - t1, "timing_s/update_actor": t3 - t2, "timing_s/step": t3 - t0,
                    "batch/width": minibatches[0].tokens.shape[-1] if minibatches else 0,
                    "batch/updates": len(updates)})
    metrics.update({f"compile/{part}_s": b["compile_s"] - a["compile_s"]
                    for part, a, b in zip(("generate", "advantage", "update"), compiled, compiled[1:])})
    metrics.update({f"compile/{k}": compiled[-1][k] - compiled[0][k] for k in ("compile_s", "programs", "cache_hits")})
    # This process's rollout work (multi-host: its own share, played in parallel with the others').
    metrics.update({f"rollout/{k}": it.rollout.stats[k]
                    for k in ("prefill_tokens", "generated_tokens", "decode_steps", "decode_row_steps",
                              "prompt_truncations")})
    metrics.update({f"rollout/{k}": v for k, v in it.rollout.stats.items() if k.startswith("refill_")})
    counts = np.sum(distributed.allgather([  # over every process's share
        len(samples), len(trained), sum(b.tokens.shape[0] * b.tokens.shape[1] for b in minibatches),
        sum(int(b.segment_ids.astype(bool).sum()) for b in minibatches),
        sum(int((b.prefix_segment_ids > 0).sum()) for b in minibatches if b.prefix_segment_ids is not None),
        sum(ep.env_failed for ep in it.rollout.episodes), float(np.sum(scores))]), axis=0)
    metrics.update({"batch/samples": int(counts[0]), "batch/trained_samples": int(counts[1]),
                    "batch/rows": int(counts[2]), "batch/tokens": int(counts[3]), "batch/prefix_tokens": int(counts[4]),
                    "batch/env_failed": int(counts[5]), "batch/score_mean": float(counts[6] / counts[0])})
    p.log.log(iteration, metrics, phase="train")
    return state, metrics


def gather_episodes(records, outcomes):
  """(every process's episode records in process order, the union of their per-problem outcomes)."""
  if jax.process_count() == 1:
    return records, outcomes
  shares = distributed.allgather([[dataclasses.asdict(r) for r in records], outcomes])
  return ([EpisodeRecord(**r) for share, _ in shares for r in share],
          {q: tuple(o) for _, out in shares for q, o in out.items()})


def train(c) -> Dict:
  """Runs (or resumes) the configured job; returns a summary with the warm-start and best validation results."""
  trainer = Trainer(build_run(c))
  try:
    return trainer.run()
  finally:
    trainer.close()


def summarize(pool: CheckpointPool) -> Dict:
  """Validation success of the warm start (step 0), the final and the best checkpoint."""
  steps = pool.steps()
  success = {s: pool.metadata(s)["metrics"].get("val/success_rate") for s in steps}
  best = pool.best_step()
  return {"steps": steps, "val_success": success, "start_success": success[steps[0]],
          "final_success": success[steps[-1]], "best_step": best, "best_success": success[best]}
