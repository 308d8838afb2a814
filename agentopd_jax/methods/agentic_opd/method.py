"""Agentic-OPD: distil the checkpoints a GRPO run discarded back into its best one (research/methods.md §2.2).

  start   student = the best-validation checkpoint of the GRPO run in `agentic_opd.teacher_run`; teachers = its
          other checkpoints, each with the solved set Q_i of its recorded validation outcomes (`pool`; a checkpoint
          without a record is played on the validation panel once, `evaluate_checkpoint`). At the student's first
          validation the scheduler (`agentic_opd.scheduler`, HCN v3 by default, `hcn`) picks a teacher, which
          becomes the one resident teacher (`resident`).
  each    LAD (`agentic_opd.lad="group_rates"`) rolls the teacher out on the iteration's tasks too and routes only
  step    the student's *lost* rollouts of tasks where the teacher's group success rate beats the student's; the
          `agentic_opd` objective (top-k reverse KL on the routed tokens, `losses`) scores the teacher in the train
          step's fused scoring call. Like every method it takes `grpo.mini_batch_size` mini-batches; with
          `agentic_opd.whole_batch_update` it takes one optimizer step over the whole batch, as the authors'
          trainer does.
  every   after a student validation, every `agentic_opd.selection_interval` iterations, re-select the teacher
  N       with the student's outcomes P_t and hot-swap it.

Held-out selection (`agentic_opd.selection_panel="held_out"`, the default): the validation panel splits into a
selection half (the first ceil(n/2) problems of each task group, `pool.split_panel`) and a report half. The
student's choice, the teachers' solved sets, the scheduler's universe and the student's P_t see only the selection
half, and every validation logs `val_select/` and `val_report/` success from its per-problem outcomes, so
`val_report/` measures the student on problems no choice has seen. "whole" selects on the whole panel and logs neither.

Why LAD compares group success rates rather than the solved sets Q_i − P_t: those sets are over the validation
panel, and the student trains on training tasks, which no checkpoint's record covers. The teacher's own rollouts
on the same tasks are the finer estimate methods.md §2.1 names, at the price of a second rollout per iteration.

Resume: the scheduler's state and the resident teacher's step are saved in each checkpoint's record, so a killed run
continues with the same teacher and the same weights; `<workdir>/scheduler_state.json` mirrors the latest state.
Multi-host: each process rolls its share of the tasks (and the teacher's rollouts of them, whose groups are its own);
the scheduler sees the gathered outcomes, so every process picks the same teacher.
"""
from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any, Dict, Mapping, Optional, Tuple

import jax
import jax.numpy as jnp
import numpy as np

from agentopd_jax.batching.collate import round_up
from agentopd_jax.eval.coverage import solved_set
from agentopd_jax.methods.agentic_opd.hcn import Teacher, make_scheduler, save_state
from agentopd_jax.methods.agentic_opd.losses import lad_mask, problem_success_rates
from agentopd_jax.methods.agentic_opd.pool import build_teacher_pool, restricted, split_panel, success_rate
from agentopd_jax.methods.agentic_opd.resident import ResidentTeacher
from agentopd_jax.methods.base import Iteration, Method, MethodContext, Signals
from agentopd_jax.models.loading import pool_params
from agentopd_jax.parallel import distributed
from agentopd_jax.storage.atomic import atomic_write_json
from agentopd_jax.storage.checkpoints import CheckpointPool

logger = logging.getLogger(__name__)
TEACHER_ROLLOUT_STREAM = 2 * 10**6  # fold_in offset of the teacher's LAD rollouts (student: the iteration index)


class AgenticOpd(Method):
  name = "agentic_opd"
  objective = "agentic_opd"
  group = "agentic_opd"
  takes_addons = False         # its loss distils a checkpoint teacher; nothing shifts its advantages
  sections = ("agentic_opd",)
  provides = frozenset({"distill_weights", "teacher_params", "initial_params"})
  fixed_draw = True
  log_phases = ("opd",)
  paper_variants = False       # its variant distils the CPU default's GRPO run

  def __init__(self, cfg):
    self.cfg = cfg
    self.teacher = None
    self.switches = 0
    self.selection = self.report = None  # the panel's halves with `selection_panel="held_out"`

  @staticmethod
  def preset(c, paper: bool):
    """Agentic-OPD (methods.md §2.3) on top of a run config: the student and teachers come from
    `agentic_opd.teacher_run` (that config's default GRPO run), so no SFT; pure top-k reverse-KL OPD (the group's
    loss defaults are the authors': task_loss_coef 0, k = 16, no KL), G = 4 rollouts per task, 8 tasks per
    iteration. The workdir is `runs/<env>_agentic_opd`."""
    del paper
    c.method = "agentic_opd"
    c.agentic_opd.teacher_run = c.workdir
    c.workdir = f"runs/{c.env.name}_agentic_opd"
    c.sft.steps = 0
    c.grpo.group_size = 4
    c.grpo.tasks_per_iteration = 8
    return c

  def start(self, ctx: MethodContext) -> None:
    o = self.cfg
    if not (Path(o.teacher_run) / "checkpoints").is_dir():
      raise ValueError(f"agentic_opd.teacher_run: no GRPO run at {o.teacher_run} (expected "
                       f"{o.teacher_run}/checkpoints); run `python experiments/train.py "
                       f"--config=configs/{ctx.env_name}.py` first or point it at one")
    self.ctx = ctx
    if o.selection_panel == "held_out":
      self.selection, self.report = split_panel(list(ctx.panel_groups), ctx.panel_groups.get)
    self.pool = build_teacher_pool(o.teacher_run, o.student_step, o.prune_dominated, o.solved_rule,
                                   evaluate=self.evaluate_checkpoint, selection=self.selection)
    if not self.pool.teachers:
      raise ValueError(f"agentic_opd.teacher_run: {o.teacher_run} has no checkpoint besides the student; nothing "
                       "to distil")
    teachers = [Teacher(name=t.name, step=t.step, solved=t.solved) for t in self.pool.teachers]
    self.scheduler = make_scheduler(o.scheduler, teachers, self.pool.problems)
    self.teacher = ResidentTeacher(Path(o.teacher_run) / "checkpoints", ctx.abstract_params)

  def evaluate_checkpoint(self, step: int) -> Dict[str, Tuple[int, int]]:
    """Validation-panel outcomes of a teacher-run checkpoint saved without them (the pool needs every teacher's
    solved set). Played once with the run's validation settings and random numbers, then cached in
    `<workdir>/teacher_outcomes/<step>.json`, so a resumed run reads the same sets instead of playing again (process
    0's copy decides, for every process)."""
    cache = self.ctx.workdir / "teacher_outcomes" / f"{step}.json"
    (outcomes,) = distributed.allgather(json.loads(cache.read_text()) if cache.exists() else None)[:1]
    if outcomes is None:
      with CheckpointPool(Path(self.cfg.teacher_run) / "checkpoints", read_only=True) as pool:
        params = pool_params(pool, step, self.ctx.abstract_params)
      _, outcomes, _ = self.ctx.play_panel(params)
      if self.ctx.primary:
        atomic_write_json(cache, outcomes)
      logger.info("evaluated teacher step %d of %s on the validation panel (it had no outcomes)", step,
                  self.cfg.teacher_run)
    return {problem: tuple(record) for problem, record in outcomes.items()}

  def load_state_dict(self, extra: Mapping[str, Any]) -> None:
    self.scheduler.load_state_dict(extra["scheduler"])
    self.switches = extra["switches"]
    self.teacher.load(extra["teacher_step"])
    logger.info("resumed with teacher step %d", self.teacher.step)

  def initial_params(self):
    """The student's starting params: the chosen checkpoint of the GRPO run."""
    with CheckpointPool(Path(self.cfg.teacher_run) / "checkpoints", read_only=True) as pool:
      return pool_params(pool, self.pool.student.step, self.ctx.abstract_params)

  def signals(self, it: Iteration) -> Signals:
    t0 = time.perf_counter()
    routed = self.routing(it)
    count, routed_samples = np.sum(distributed.allgather([len(it.samples), float(routed.sum())]), axis=0)
    return Signals(distill_weights=routed.tolist(), metrics={
        "opd/routed_samples": float(routed_samples), "opd/routed_fraction": float(routed_samples / max(count, 1)),
        "opd/teacher_step": float(self.teacher.step), "timing_s/lad": time.perf_counter() - t0})

  def routing(self, it: Iteration) -> np.ndarray:
    """[N] 0/1 LAD routing of the student's step samples (all ones with `agentic_opd.lad="off"`)."""
    samples = it.samples
    if self.cfg.lad == "off":
      return np.ones(len(samples), np.float32)
    played = self.ctx.train_engine.run(distributed.to_local(self.teacher.params, self.ctx.local_mesh), it.envs,
                                       it.envs, it.groups, jax.random.fold_in(it.key, TEACHER_ROLLOUT_STREAM),
                                       self.ctx.train_sampling, first_episode=it.first_episode)
    num_groups = max(it.groups) + 1

    def rates(eps):
      ok = [e for e in eps if not e.env_failed]
      return problem_success_rates(jnp.asarray([e.won for e in ok], jnp.float32),
                                   jnp.asarray([e.group_id for e in ok]), num_groups)

    mask = lad_mask(jnp.asarray([s.won for s in samples], jnp.float32), jnp.asarray([s.group_id for s in samples]),
                    rates(played.episodes), rates(it.rollout.episodes), mode="group_rates")
    return np.asarray(mask)

  def minibatch_size(self, it: Iteration):
    """With `agentic_opd.whole_batch_update`: the whole batch (every process padded to the largest share), one step."""
    if not self.cfg.whole_batch_update:
      return None
    return round_up(max(distributed.allgather(len(it.samples))), self.ctx.micro_batch_size)

  def teacher_params(self):
    return self.teacher.params

  def validation_metrics(self, params, outcomes, iteration: int) -> Dict[str, float]:
    """With a held-out split: the validation's success on each half (`val_select/`, `val_report/`, overall and per
    task group), from its per-problem outcomes; `val_report/` is the success no selection has seen."""
    if self.selection is None:
      return {}
    return {**half_metrics(outcomes, self.selection, self.ctx.panel_groups, "val_select/"),
            **half_metrics(outcomes, self.report, self.ctx.panel_groups, "val_report/")}

  def after_validation(self, outcomes, iteration: int) -> None:
    """Every `agentic_opd.selection_interval` iterations (step 0 included): re-select with the student's latest
    outcomes (on the selection half only, with a held-out split) and swap the resident teacher if it changed."""
    if iteration % self.cfg.selection_interval:
      return
    solved = solved_set(restricted(outcomes, self.selection), self.cfg.solved_rule)
    pick = self.scheduler.select(solved)
    step = self.pool.teachers[pick.index].step
    if self.teacher.step is not None and self.teacher.step != step:
      self.switches += 1
    self.teacher.load(step)
    if self.ctx.primary:
      save_state(self.ctx.workdir / "scheduler_state.json", self.scheduler)
    self.ctx.log.log(iteration, {
        "opd/teacher_step": float(step), "opd/teacher_switches": float(self.switches),
        "opd/weighted_marginal_gain": float(pick.priority[pick.index]),
        "opd/marginal_problems": float(pick.marginal[pick.index]),
        "opd/student_solved": float(len(solved & self.pool.problems)),
        "opd/teacher_swap_s": float(self.teacher.last_swap_s or 0.0)}, phase="opd")

  def state_dict(self) -> Dict[str, Any]:
    return {"teacher_step": self.teacher.step, "switches": self.switches, "scheduler": self.scheduler.state_dict()}

  def summary(self) -> Dict[str, Any]:
    return {"teacher_steps": self.pool.steps, "student_step": self.pool.student.step,
            "teacher_switches": self.switches}

  def close(self) -> None:
    if self.teacher is not None:
      self.teacher.close()


def half_metrics(outcomes: Mapping[str, Tuple[int, int]], half: frozenset, groups: Mapping[str, Optional[str]],
                 prefix: str) -> Dict[str, float]:
  """`<prefix>success_rate` and `<prefix><group>_success_rate` over the problems of `half` (`groups`: problem id ->
  its task group or None), under `val/`'s key names; a key without attempts is left out, as `val/` leaves it."""
  mine = restricted(outcomes, half)
  parts = {"success_rate": mine}
  for q, o in mine.items():
    if groups.get(q):
      parts.setdefault(f"{groups[q]}_success_rate", {})[q] = o
  rates = {k: success_rate(v) for k, v in parts.items()}
  return {prefix + k: r for k, r in rates.items() if r is not None}
