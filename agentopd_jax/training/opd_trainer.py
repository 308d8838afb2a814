"""Agentic-OPD training: distil the checkpoints a GRPO run discarded back into its best one.

`python experiments/train.py --config=configs/alfworld.py:agentic_opd` (research/methods.md §2.2, at CPU scale):

  start   student = the best-validation checkpoint of the GRPO run in `opd.teacher_run`; teachers = its other
          checkpoints, each with the solved set Q_i of its recorded validation outcomes (`methods.agentic_opd.pool`; a
          checkpoint without a record is played on the validation panel once, `OpdRun.evaluate_checkpoint`).
          Validate the student (P_0), let the scheduler (`opd.scheduler`, HCN v3 by default) pick a teacher, and
          make it the one resident teacher (`methods.agentic_opd.resident`).
  each    roll out the student on training tasks (G per task); LAD (`opd.lad="group_rates"`) also rolls the
  step    teacher out on the same tasks and routes only the student's *lost* rollouts of tasks where the teacher's
          group success rate beats the student's; one update of the `agentic_opd` objective (top-k reverse KL on
          the routed tokens; the teacher scored in the same fused scoring call as the student).
  every   validate the student (P_t), checkpoint it, and every `opd.selection_interval` iterations re-select the
  N       teacher with P_t and hot-swap it.

Why LAD compares group success rates here rather than the solved sets Q_i − P_t: those sets are over the validation
panel, and the student trains on training tasks, which no checkpoint's record covers. The teacher's own rollouts
on the same tasks are the finer estimate methods.md §2.1 names, at the price of a second rollout per iteration.

Resume: the scheduler's state and the resident teacher's step are saved in each checkpoint's record, so a killed run
continues with the same teacher and the same weights; `<workdir>/scheduler_state.json` mirrors the latest state.

Multi-host: as `Run` does for GRPO, each process plays its share of the tasks (and LAD's teacher rollouts of them,
whose groups are its own) and of the validation panel; the scheduler sees the gathered outcomes, so every process
picks the same teacher; process 0 writes the records.
"""
from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Dict, Tuple

import jax
import jax.numpy as jnp
import numpy as np

from agentopd_jax.batching.collate import round_up
from agentopd_jax.envs.vector import group_tasks
from agentopd_jax.envs.verl_agent.metrics import episode_metrics
from agentopd_jax.eval.coverage import solved_set
from agentopd_jax.eval.validate import episode_record
from agentopd_jax.methods.agentic_opd.hcn import Teacher, make_scheduler, save_state
from agentopd_jax.methods.agentic_opd.losses import lad_mask, problem_success_rates
from agentopd_jax.methods.agentic_opd.pool import build_teacher_pool
from agentopd_jax.methods.agentic_opd.resident import ResidentTeacher
from agentopd_jax.models.transformer import sharded_abstract_params
from agentopd_jax.parallel import distributed
from agentopd_jax.storage.atomic import atomic_write_json
from agentopd_jax.storage.checkpoints import CheckpointPool
from agentopd_jax.storage.logs import progress
from agentopd_jax import faults
from agentopd_jax.training.config import from_config_dict
from agentopd_jax.training.train_step import init_state, make_minibatches, minibatch_samples
from agentopd_jax.training.trainer import Run, gather_episodes

logger = logging.getLogger(__name__)
TEACHER_ROLLOUT_STREAM = 2 * 10**6  # fold_in offset of the teacher's LAD rollouts (student: the iteration index)


def check_opd_config(c) -> None:
  """One clear error per bad field (`from_config_dict`) and for what Agentic-OPD needs beyond it, before anything is
  loaded."""
  from_config_dict(c)
  o = c.opd
  if c.loss.objective != "agentic_opd":
    raise ValueError(f"loss.objective must be 'agentic_opd' for method=agentic_opd, got {c.loss.objective!r}")
  if o.selection_interval < 1 or o.selection_interval % c.validation.every:
    raise ValueError(f"opd.selection_interval ({o.selection_interval}) must be a positive multiple of "
                     f"validation.every ({c.validation.every}): a teacher is re-selected after a student validation")
  if not (Path(o.teacher_run) / "checkpoints").is_dir():
    raise ValueError(f"opd.teacher_run: no GRPO run at {o.teacher_run} (expected {o.teacher_run}/checkpoints); run "
                     f"`python experiments/train.py --config=configs/{c.env.name}.py` first or point it at one")


class OpdRun:
  """A `Run` (model, engines, own checkpoint pool, logger) plus the teacher pool, scheduler and resident teacher."""

  def __init__(self, c):
    check_opd_config(c)
    self.c = c
    self.run = Run(c)
    o = c.opd
    self.abstract = sharded_abstract_params(self.run.model, self.run.mesh)
    self.teacher_pool = build_teacher_pool(o.teacher_run, o.student_step, o.prune_dominated, o.solved_rule,
                                           evaluate=self.evaluate_checkpoint)
    if not self.teacher_pool.teachers:
      raise ValueError(f"opd.teacher_run: {o.teacher_run} has no checkpoint besides the student; nothing to distil")
    teachers = [Teacher(name=t.name, step=t.step, solved=t.solved) for t in self.teacher_pool.teachers]
    self.scheduler = make_scheduler(o.scheduler, teachers, self.teacher_pool.problems)
    self.teacher = ResidentTeacher(Path(o.teacher_run) / "checkpoints", self.abstract)
    self.switches = 0

  def close(self):
    self.teacher.close()
    self.run.close()

  def evaluate_checkpoint(self, step: int) -> Dict[str, Tuple[int, int]]:
    """Validation-panel outcomes of a teacher-run checkpoint saved without them (the pool needs every teacher's
    solved set). Played once with the run's validation settings and random numbers, then cached in
    `<workdir>/teacher_outcomes/<step>.json`, so a resumed run reads the same sets instead of playing again (process
    0's copy decides, for every process)."""
    cache = self.run.workdir / "teacher_outcomes" / f"{step}.json"
    (outcomes,) = distributed.allgather(json.loads(cache.read_text()) if cache.exists() else None)[:1]
    if outcomes is None:
      with CheckpointPool(Path(self.c.opd.teacher_run) / "checkpoints", read_only=True) as pool:
        params = pool.restore_params(step, self.abstract)
      _, outcomes, _ = self.run.play_panel(params)
      if self.run.primary:
        atomic_write_json(cache, outcomes)
      logger.info("evaluated teacher step %d of %s on the validation panel (it had no outcomes)", step,
                  self.c.opd.teacher_run)
    return {problem: tuple(record) for problem, record in outcomes.items()}

  def student_params(self):
    """The student's starting params: the chosen checkpoint of the GRPO run."""
    with CheckpointPool(Path(self.c.opd.teacher_run) / "checkpoints", read_only=True) as pool:
      return pool.restore_params(self.teacher_pool.student.step, self.abstract)

  def select_teacher(self, outcomes, iteration: int) -> Dict[str, float]:
    """Re-selects with the student's latest validation outcomes and swaps the resident teacher if it changed."""
    solved = solved_set(outcomes, self.c.opd.solved_rule)
    pick = self.scheduler.select(solved)
    step = self.teacher_pool.teachers[pick.index].step
    if self.teacher.step is not None and self.teacher.step != step:
      self.switches += 1
    self.teacher.load(step)
    if self.run.primary:
      save_state(self.run.workdir / "scheduler_state.json", self.scheduler)
    metrics = {"opd/teacher_step": float(step), "opd/teacher_switches": float(self.switches),
               "opd/weighted_marginal_gain": float(pick.priority[pick.index]),
               "opd/marginal_problems": float(pick.marginal[pick.index]),
               "opd/student_solved": float(len(solved & self.teacher_pool.problems)),
               "opd/teacher_swap_s": float(self.teacher.last_swap_s or 0.0)}
    self.run.log.log(iteration, metrics, phase="opd")
    return metrics

  def validate_and_checkpoint(self, state, iteration: int, reselect: bool):
    val = self.run.validate(state.params, iteration)
    if reselect:
      self.select_teacher(val["outcomes"], iteration)
    self.run.checkpoint(state, iteration, val, teacher_step=self.teacher.step, switches=self.switches,
                        scheduler=self.scheduler.state_dict())

  def routing(self, samples, episodes, tasks, groups, key, sampling, first_episode: int) -> np.ndarray:
    """[N] 0/1 LAD routing of the student's step samples (all ones with `opd.lad="off"`)."""
    if self.c.opd.lad == "off":
      return np.ones(len(samples), np.float32)
    played = self.run.train_engine.run(distributed.to_local(self.teacher.params, self.run.local_mesh), tasks, tasks,
                                       groups, jax.random.fold_in(key, TEACHER_ROLLOUT_STREAM), sampling,
                                       first_episode=first_episode)
    num_groups = max(groups) + 1

    def rates(eps):
      ok = [e for e in eps if not e.env_failed]
      return problem_success_rates(jnp.asarray([e.won for e in ok], jnp.float32),
                                   jnp.asarray([e.group_id for e in ok]), num_groups)

    mask = lad_mask(jnp.asarray([s.won for s in samples], jnp.float32), jnp.asarray([s.group_id for s in samples]),
                    rates(played.episodes), rates(episodes), mode="group_rates")
    return np.asarray(mask)

  def iteration(self, state, iteration: int):
    c, run, t0 = self.c, self.run, time.perf_counter()
    tasks = run.iteration_tasks(iteration)[run.task_share]
    envs, groups = group_tasks(tasks, c.grpo.group_size)
    first_episode = run.task_share.start * c.grpo.group_size
    sampling = run.sampling.train
    key = jax.random.fold_in(run.key, iteration)
    rollout = run.train_engine.run(distributed.to_local(state.params, run.local_mesh), envs, envs, groups, key,
                                   sampling, first_episode=first_episode)
    samples = rollout.samples
    t1 = time.perf_counter()
    routed = self.routing(samples, rollout.episodes, envs, groups, key, sampling, first_episode)
    t2 = time.perf_counter()
    # GRPO advantages feed the optional task term (`loss.task_loss_coef`, `loss.lad_other="grpo"`).
    _, advantages = run.advantages(samples, len(tasks))
    # Exactly one optimizer step per iteration, as the authors' update: the mini-batch is the whole batch, whatever
    # its size and `grpo.mini_batch_size`, so every micro-batch's top-k support comes from the rollout-time params.
    # Multi-host: each process brings its samples, padded to the largest share.
    counts = distributed.allgather(len(samples))
    micro = distributed.local_size(c.grpo.micro_batch_size, "grpo.micro_batch_size")
    mini = round_up(max(counts), micro)
    minibatches = make_minibatches(samples, advantages, mini, micro, c.pack_width, distill_weights=routed.tolist(),
                                   mesh=run.local_mesh, agree=distributed.shape_agreement())
    updates = []
    for k, minibatch in enumerate(minibatches):
      state, m = run.train_step(state, minibatch, self.teacher.params)
      updates.append({name: float(v) for name, v in m.items()})
      run.bad_updates.observe(updates[-1], minibatch_samples(samples, mini, k), f"iteration {iteration}")
      faults.point("train/update")
    t3 = time.perf_counter()
    played, _ = gather_episodes([episode_record(ep, run.group_of(envs[ep.traj_id])) for ep in rollout.episodes
                                 if not ep.env_failed], {})
    metrics = {f"episode/{k}": v for k, v in episode_metrics(played).items()}
    metrics.update({f"actor/{k}": float(np.mean([u[k] for u in updates])) for k in updates[0]})
    routed_samples, rows = np.sum(distributed.allgather(
        [float(routed.sum()), sum(b.tokens.shape[0] * b.tokens.shape[1] for b in minibatches)]), axis=0)
    metrics.update({"opd/routed_samples": float(routed_samples),
                    "opd/routed_fraction": float(routed_samples / max(sum(counts), 1)),
                    "opd/teacher_step": float(self.teacher.step), "time/generate_s": rollout.stats["generate_s"],
                    "time/lad_s": t2 - t1, "time/update_s": t3 - t2, "time/iteration_s": t3 - t0,
                    "batch/samples": sum(counts), "batch/updates": len(minibatches), "batch/rows": int(rows)})
    run.log.log(iteration, metrics, phase="train")
    return state


def train_agentic_opd(c) -> Dict:
  """Runs (or resumes) an Agentic-OPD job; returns the summary of its own checkpoints (step 0 = the student)."""
  opd = OpdRun(c)
  run = opd.run
  try:
    latest, state = run.resume()
    if latest is None:
      run.log.truncate_after(-1)
      state = init_state(opd.student_params(), run.optimizer, mesh=run.mesh, model=run.model)
      opd.validate_and_checkpoint(state, 0, reselect=True)
      start = 1
    else:
      extra = run.pool.metadata(latest)["extra"]
      opd.scheduler.load_state_dict(extra["scheduler"])
      opd.switches = extra["switches"]
      opd.teacher.load(extra["teacher_step"])
      run.log.truncate_after(latest, phases=("train", "val", "opd"))
      start = latest + 1
      logger.info("resumed from step %d of %s (teacher: step %d)", latest, run.pool.directory, opd.teacher.step)
    for iteration in run.live.watch(progress(range(start, c.grpo.iterations + 1), desc="agentic-opd",
                                             initial=start - 1, total=c.grpo.iterations)):
      state = opd.iteration(state, iteration)
      if iteration % c.validation.every == 0 or iteration == c.grpo.iterations:
        opd.validate_and_checkpoint(state, iteration, reselect=iteration % c.opd.selection_interval == 0)
    return run.finish(teacher_steps=opd.teacher_pool.steps, student_step=opd.teacher_pool.student.step,
                      teacher_switches=opd.switches)
  finally:
    opd.close()
