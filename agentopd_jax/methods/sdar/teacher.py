"""The teacher of self-distillation objectives (SDAR and its baselines): whose parameters, on which prompt.

`source` picks the parameters: "self", the rollout-time policy π_old (SDAR, OPSD, RLSD, Skill-SD), or "pool", a
checkpoint of a finished run's Orbax pool (Agentic-OPD's kind of teacher). `context` picks the prompt: "skills", the
student's prompt behind SDAR's privileged prefix with the retrieved skills, or "plain", the student's own prompt. Any
pair works with every gate and divergence, since the loss only reads the log-probs scored here.

The privileged prompt is SDAR's `build_teacher_batch`: the student prompt decoded *with* its special tokens (the
chat-templated text), `"[Privileged Skill Information]\\n{skills}\\n\\n"` prepended as raw text before the template's
first token, re-encoded without adding special tokens, and left-truncated to the prompt limit, so an over-long
prompt loses the skill text first. The response tokens are the student's own.
"""
from __future__ import annotations

import dataclasses
from typing import Any, Dict, List, Optional, Sequence, Tuple

import numpy as np

from agentopd_jax.batching.collate import TeacherSignal
from agentopd_jax.batching.samples import Sample
from agentopd_jax.parallel import distributed
from agentopd_jax.scoring.teacher_signals import score_teacher
from agentopd_jax.skills.context import SkillContext

SOURCES = ("self", "pool")
CONTEXTS = ("skills", "plain")


@dataclasses.dataclass(frozen=True)
class TeacherConfig:
  source: str = "self"
  context: str = "skills"
  pool_run: str = ""          # source "pool": the run folder whose `checkpoints/` pool holds the teacher
  pool_step: str = "best"     # "best", "latest" or a step number of that pool

  def __post_init__(self):
    if self.source not in SOURCES:
      raise ValueError(f"teacher.source must be one of {SOURCES}, got {self.source!r}")
    if self.context not in CONTEXTS:
      raise ValueError(f"teacher.context must be one of {CONTEXTS}, got {self.context!r}")
    if self.source == "pool" and not self.pool_run:
      raise ValueError("teacher.pool_run: teacher.source='pool' needs the run folder whose checkpoint teaches")


class Teacher:
  """Scores an iteration's samples under the configured teacher (`score_teacher`), once, before the update."""

  def __init__(self, cfg: TeacherConfig, model, tokenizer, max_prompt_tokens: int,
               skills: Optional[SkillContext] = None, pool_params: Any = None):
    if cfg.context == "skills" and skills is None:
      raise ValueError("teacher.context='skills' needs a skill context (skills.retrieval, skills.bank_dir)")
    if cfg.source == "pool" and pool_params is None:
      raise ValueError("teacher.source='pool' needs the pool checkpoint's params")
    self.cfg, self.model, self.tokenizer = cfg, model, tokenizer
    self.max_prompt_tokens = max_prompt_tokens
    self.skills = skills
    self._pool_params = pool_params

  def teacher_samples(self, samples: Sequence[Sample], tasks: Sequence[Any], iteration: int, first: int = 0
                      ) -> Tuple[List[Sample], List[Tuple[str, ...]]]:
    """The teacher's sequences (the student's completions after the teacher's prompts) and the skills each used;
    `tasks[s.group_id]` is sample s's task, `first` the index of samples[0] in the whole batch (multi-host)."""
    if self.cfg.context == "plain":
      return list(samples), [() for _ in samples]
    return self.skills.privileged(samples, lambda s: tasks[s.group_id], iteration, self.tokenizer,
                                  self.max_prompt_tokens, first)

  def signals(self, params, samples: Sequence[Sample], tasks: Sequence[Any], iteration: int, *, top_k: int,
              temperature: float, pack_width: int, rows_per_call: int, mesh=None, first: int = 0
              ) -> Tuple[List[TeacherSignal], List[Tuple[str, ...]]]:
    """(per-sample teacher signals, the skills each sample's teacher read). `params` are the rollout-time params,
    used when the source is "self"."""
    seqs, used = self.teacher_samples(samples, tasks, iteration, first)
    teacher_params = params if self.cfg.source == "self" else self._pool_params
    return score_teacher(self.model, teacher_params, seqs, top_k=top_k, temperature=temperature,
                         pack_width=pack_width, rows_per_call=rows_per_call, mesh=mesh), used


def episode_skills(samples: Sequence[Sample], used: Sequence[Tuple[str, ...]]) -> Dict[int, Tuple[set, float]]:
  """{episode: (the skills any of its samples' teachers read, its success)}: the bandit feedback of a batch."""
  episodes: Dict[int, Tuple[set, float]] = {}
  for s, names in zip(samples, used):
    skills, won = episodes.get(s.traj_id, (set(), float(s.won)))
    episodes[s.traj_id] = (skills | set(names), won)
  return episodes


def signal_metrics(samples: Sequence[Sample], signals: Sequence[TeacherSignal], gate_beta: float) -> Dict[str, float]:
  """What the paper plots (Fig. 2–5), from the batch-time scores: the teacher–student gap Δ = log π_T − log π_old on
  the sampled tokens (mean, std), and by turn index the gap, the sampled KL(π_old ‖ π_T) = mean(log π_old − log π_T)
  and the gate σ(β·Δ) and its active share (Δ > 0). Over every process's samples (each process calls it)."""
  sums: Dict[str, List[float]] = {}  # "all" and each turn: [tokens, Σ Δ, Σ Δ², Σ gate, tokens with Δ > 0]
  for s, sig in zip(samples, signals):
    mask = np.asarray(s.completion_mask, bool)
    gap = (np.asarray(sig.logprobs, np.float64) - np.asarray(s.behaviour_logprobs, np.float64))[mask]
    row = [gap.size, gap.sum(), np.square(gap).sum(), (1.0 / (1.0 + np.exp(-gate_beta * gap))).sum(), (gap > 0).sum()]
    for name in ("all", str(max(s.step_index, 0))):
      sums[name] = [a + float(b) for a, b in zip(sums.get(name, [0.0] * 5), row)]
  total = distributed.sum_over_processes(sums)
  if "all" not in total:
    return {}
  n, s1, s2, _, _ = total.pop("all")
  mean = s1 / n if n else 0.0
  metrics = {"teacher/gap_mean": float(mean),
             "teacher/gap_std": float(np.sqrt(max(s2 / n - mean**2, 0.0))) if n else 0.0}
  for turn in sorted(total, key=int):
    n, s1, _, gates, active = total[turn]
    if n:
      metrics.update({f"teacher/gap_turn{turn}": float(s1 / n), f"teacher/kl_turn{turn}": float(-s1 / n),
                      f"teacher/gate_turn{turn}": float(gates / n),
                      f"teacher/gate_active_turn{turn}": float(active / n)})
  return metrics
