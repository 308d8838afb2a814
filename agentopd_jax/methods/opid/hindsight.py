"""OPID's teacher (methods.md §3.2): hindsight skills from the policy's own finished trajectories, and the log-prob
shift they cause on the policy's own responses.

Per iteration, on the step samples of the rollout:
  1. `submit`: each trajectory becomes an analyzer record (task, per step the env's raw observation, the decoded
     reply and the discounted return, γ = `opid.gamma`, success) and the analysis starts on a worker thread, so it
     overlaps the trainer's other work on the batch (advantages, collation), as OPID's async executor does.
  2. `signals` joins it, routes each step sample (`injection.route`: the critical-step skill, else the episode
     skill), splices the skill into the sample's own step prompt text (`augment_observation`), chat-templates it as
     the rollout did, and scores the *same* response tokens under the rollout-time params, once per routed sample
     per route (`score_teacher`: batched, packed). Δ = that log-prob − the behaviour log-prob is then a constant.
A failed analysis (API or parse) gives its trajectory no signal and is counted; it never stops training.

Analyzers, by `opid.analyzer`: "oracle" (offline: the env's expert from each replayed state, `methods.opid.oracle`),
"stats" (the oracle's text, but step skills only at the steps OPID's statistical selector picks: below-mean returns
in high-variance groups of steps that saw the same observation within a task group), "openai" (any OpenAI-compatible endpoint through the official client) and "local" (our `agentopd_jax.serve`
started on `opid.analyzer_model`, a model folder or a run, then reached through the same client).
"""
from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from agentopd_jax.batching.samples import Sample
from agentopd_jax.http_guard import SERVE_API_KEY_ENV
from agentopd_jax.methods.opid.advantage import opid_advantages, shift_metrics
from agentopd_jax.methods.opid.analysis import (Analysis, Analyzer, EpisodeRecord, OpenAIBackend, StepRecord,
                                               discounted_returns, select_critical_steps_by_stats)
from agentopd_jax.methods.opid.config import OpidConfig
from agentopd_jax.methods.opid.injection import OPID_ANCHORS, Anchors, augment_observation, route, task_description
from agentopd_jax.parallel import distributed
from agentopd_jax.rollout.chat import ChatFormat
from agentopd_jax.scoring.teacher_signals import score_teacher


def trajectories(samples: Sequence[Sample]) -> Dict[int, List[Sample]]:
  """{traj_id: its step samples in step order}."""
  out: Dict[int, List[Sample]] = {}
  for s in samples:
    if s.step_index < 0:
      raise ValueError("OPID needs the step layout (rollout.layout='step'): a sample covers a whole trajectory")
    out.setdefault(s.traj_id, []).append(s)
  return {t: sorted(steps, key=lambda s: s.step_index) for t, steps in sorted(out.items())}


def step_returns(steps: Sequence[Sample], gamma: float) -> List[float]:
  """The discounted return from each step of one trajectory. Our envs pay their reward on the last step, so the
  per-step rewards are 0 … 0, R and the returns γ^(T−1−t)·R."""
  return discounted_returns([0.0] * (len(steps) - 1) + [steps[-1].episode_reward], gamma)


def stats_candidates(by_traj: Dict[int, List[Sample]], gamma: float, k: int) -> Dict[int, Tuple[int, ...]]:
  """{traj_id: the step indices OPID's statistical selector picks in it} (`select_critical_steps_by_stats` over
  every step sample of the batch, steps grouped by task group and raw observation, top k per trajectory)."""
  flat = [(t, s, g) for t, steps in by_traj.items() for s, g in zip(steps, step_returns(steps, gamma))]
  mask, _ = select_critical_steps_by_stats([g for _, _, g in flat], [s.observation for _, s, _ in flat],
                                           [s.group_id for _, s, _ in flat], [t for t, _, _ in flat],
                                           topk_per_traj=k)
  out: Dict[int, Tuple[int, ...]] = {t: () for t in by_traj}
  for (t, s, _), picked in zip(flat, mask):
    if picked:
      out[t] += (s.step_index,)
  return out


def episode_record(steps: Sequence[Sample], gamma: float, anchors: Anchors = OPID_ANCHORS) -> EpisodeRecord:
  """The analyzer's view of one trajectory (`step_returns` on its "Return:" lines; the task as `anchors` find it in
  the first prompt)."""
  returns = step_returns(steps, gamma)
  return EpisodeRecord(
      steps=tuple(StepRecord(s.step_index, s.observation, s.response_text, float(g)) for s, g in zip(steps, returns)),
      success=bool(steps[-1].won), task=task_description(steps[0].prompt_text, anchors))


class LocalServer:
  """`python -m agentopd_jax.serve --model MODEL --port 0` in a subprocess; `url` once it listens. It serves this
  run alone on loopback, so it runs without a key even when the user's environment sets the server's
  `$AGENTOPD_API_KEY` (the analyzer would not know to send it)."""

  def __init__(self, model: str, startup_timeout_s: float = 600.0):
    env = {k: v for k, v in os.environ.items() if k != SERVE_API_KEY_ENV}
    self.proc = subprocess.Popen([sys.executable, "-m", "agentopd_jax.serve", "--model", model, "--port", "0"],
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    deadline, lines = time.monotonic() + startup_timeout_s, []
    while time.monotonic() < deadline:
      line = self.proc.stdout.readline()
      if not line and self.proc.poll() is not None:
        break
      lines.append(line)
      if line.startswith("serving "):
        self.url = line.rsplit(" at ", 1)[1].strip()
        self.name = line.split("'")[1]
        return
    self.close()
    raise RuntimeError(f"opid.analyzer_model: the local analyzer server for {model!r} did not start:\n"
                       + "".join(lines[-20:]))

  def close(self):
    if self.proc.poll() is None:
      self.proc.terminate()
      try:
        self.proc.wait(30)
      except subprocess.TimeoutExpired:
        self.proc.kill()


class HindsightTeacher:
  """OPID's analysis and skill scoring for one run (see the module docstring)."""

  def __init__(self, cfg: OpidConfig, env_name: str, env_cfg: Any, model, chat: ChatFormat, max_prompt_tokens: int,
               anchors: Anchors = OPID_ANCHORS):
    """`anchors`: where the run's prompt format takes the skill sections (`Anchors.of(text_env.prompt_anchors)`)."""
    self.cfg, self.model, self.chat, self.max_prompt_tokens = cfg, model, chat, max_prompt_tokens
    self.anchors = anchors
    self.server = None
    if cfg.analyzer in ("oracle", "stats"):
      from agentopd_jax.methods.opid.oracle import OracleAnalyzer
      self.analyzer = OracleAnalyzer(env_name, env_cfg, cfg.max_step_skills)
    else:
      # The key is never a config field (the config is saved with every checkpoint): "openai" reads
      # $OPENAI_API_KEY, and the local server has none.
      base_url, api_key, name = cfg.base_url or None, None, cfg.analyzer_model
      if cfg.analyzer == "local":
        self.server = LocalServer(cfg.analyzer_model)
        base_url, api_key, name = self.server.url, "local", self.server.name
      backend = OpenAIBackend(name, base_url=base_url, api_key=api_key, timeout=cfg.timeout_s,
                              max_completion_tokens=cfg.max_completion_tokens)
      self.analyzer = Analyzer(backend, cfg.max_step_skills, parse_attempts=cfg.parse_attempts,
                               api_retries=cfg.api_retries, workers=cfg.workers)
    self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="opid-analysis")

  def close(self):
    self._pool.shutdown(wait=True)
    if self.server is not None:
      self.server.close()

  def submit(self, samples: Sequence[Sample], tasks: Sequence[Any], iteration: int) -> Optional[Future]:
    """Starts the analysis of the batch's trajectories (None when the skill advantage is off this iteration);
    `tasks[s.group_id]` is sample s's task."""
    if not self.cfg.active(iteration) or not (self.cfg.w_episode or self.cfg.w_step):
      return None
    by_traj = trajectories(samples)
    failed_only = self.cfg.failed_only_at(iteration)
    chosen = {t: steps for t, steps in by_traj.items() if not (failed_only and steps[-1].won)}

    def work():
      t0 = time.perf_counter()
      if self.cfg.analyzer in ("oracle", "stats"):
        from agentopd_jax.methods.opid.oracle import OracleEpisode
        picked = (stats_candidates(by_traj, self.cfg.gamma, self.cfg.max_step_skills)
                  if self.cfg.analyzer == "stats" else {})
        results = self.analyzer.analyze([
            OracleEpisode(tasks[steps[0].group_id], tuple(s.action for s in steps),
                          tuple(s.action_valid > 0 for s in steps), bool(steps[-1].won), picked.get(t))
            for t, steps in chosen.items()])
      else:
        results = self.analyzer.analyze([episode_record(steps, self.cfg.gamma, self.anchors) for steps in chosen.values()])
      stats = dict(self.analyzer.stats, latency_s=time.perf_counter() - t0, trajectories=len(by_traj))
      return dict(zip(chosen, results)), stats
    return self._pool.submit(work)

  def advantages(self, params, samples: Sequence[Sample], episode_advantages: Sequence[float],
                 analysis: Optional[Future], *, temperature: float, pack_width: int, rows_per_call: int,
                 mesh=None) -> Tuple[List[Any], Dict[str, float]]:
    """(per sample: A^OPID over its completion tokens, or the episode advantage alone when the skill term is off;
    metrics). `params` are the rollout-time params; `temperature` is the rollout's, as the behaviour log-probs are
    of logits / T (verl scores the teacher's forward at the rollout temperature too).

    Multi-host: every process calls it with its share of the batch (possibly none): `opid.normalize`'s statistics
    and the metrics are over every process's rows."""
    if analysis is None:
      return list(episode_advantages), {}
    results, stats = analysis.result()
    cfg = self.cfg
    routes = [route(s.step_index, results.get(s.traj_id), cfg.w_episode, cfg.w_step, cfg.route) for s in samples]
    teacher = {}
    for which, pick in (("episode", 0), ("step", 1)):
      picked = [i for i, r in enumerate(routes) if r[pick] is not None]
      seqs = [self._augmented(samples[i], **{f"{which}_skill": routes[i][pick]}) for i in picked]
      scored = score_teacher(self.model, params, seqs, temperature=temperature, pack_width=pack_width,
                             rows_per_call=rows_per_call, mesh=mesh)
      teacher[which] = dict(zip(picked, (sig.logprobs for sig in scored)))
    width = max((len(s.completion_ids) for s in samples), default=0)
    mask, old = np.zeros((len(samples), width), np.float32), np.zeros((len(samples), width), np.float32)
    lp = {w: np.zeros_like(old) for w in teacher}
    use = {w: np.zeros(len(samples), np.float32) for w in teacher}
    for i, s in enumerate(samples):
      n = len(s.completion_ids)
      mask[i, :n], old[i, :n] = s.completion_mask, s.behaviour_logprobs
      for w in teacher:
        if i in teacher[w]:
          lp[w][i, :n], use[w][i] = teacher[w][i], 1.0
    adv = np.asarray(opid_advantages(np.asarray(episode_advantages, np.float32), mask, old, lp["episode"],
                                     use["episode"], lp["step"], use["step"], cfg.w_episode, cfg.w_step,
                                     cfg.normalize, cfg.clip or None, totals=distributed.totals))
    analysed = sum(isinstance(r, Analysis) for r in results.values())
    trajs, analysed, chosen, parse, api, nulls = distributed.totals([
        stats.get("trajectories", 0), analysed, len(results), stats.get("parse_failures", 0),
        stats.get("api_failures", 0), stats.get("null_step_skills", 0)])
    metrics = {"opid/analysed_fraction": analysed / max(trajs, 1),
               "opid/analysis_failures": float(chosen - analysed),
               "opid/parse_failures": float(parse), "opid/api_failures": float(api),
               "opid/null_step_skills": float(nulls),
               "opid/analyzer_latency_s": float(max(distributed.allgather(float(stats["latency_s"]))))}
    metrics.update(shift_metrics(mask, old, lp["episode"], use["episode"], lp["step"], use["step"],
                                 totals=distributed.totals))
    return [adv[i, :len(s.completion_ids)] for i, s in enumerate(samples)], metrics

  def _augmented(self, s: Sample, episode_skill: Optional[str] = None, step_skill: Optional[str] = None) -> Sample:
    """Sample s with its step prompt text re-written with the skill, templated as the rollout templates it and cut
    to the same prompt limit (its last tokens kept); the response tokens are s's own."""
    ids = self.chat.prompt_ids(augment_observation(s.prompt_text, episode_skill, step_skill, self.anchors))
    return dataclasses.replace(s, prompt_ids=ids[-self.max_prompt_tokens:])
