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
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from agentopd_jax.rollout.batch import TeacherSignal
from agentopd_jax.rollout.chat import raw_prefixed_ids, templated_text
from agentopd_jax.rollout.engine import PromptContext
from agentopd_jax.rollout.types import Sample
from agentopd_jax.scoring.teacher_signals import score_teacher
from agentopd_jax.skills import SkillQuery, privileged_prefix, retriever_for

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


class SkillContext:
  """Retrieved skills per prompt, with the retriever's state and the hit counts since the last `take_hits`.

  `retrieve(task, templated, key)` -> (the privileged prefix, the skill names); the retriever, a registry string of
  `skills.retrieval`, reads the env's own query fields of `task` (its game file, data source) and the prompt.
  """

  def __init__(self, env_name: str, bank_dir: str = "", retrieval: str = "km", seed: int = 0, ucb_c: float = 1.0):
    self.retriever, self.query_fields = retriever_for(env_name, bank_dir, retrieval, seed, ucb_c)
    self._taken = dict(self.retriever.hits)

  def retrieve(self, task: Any, templated: str, key: int) -> Tuple[str, Tuple[str, ...]]:
    got = self.retriever.retrieve(SkillQuery(prompt=templated, **self.query_fields(task)), key)
    return privileged_prefix(got.text), tuple(got.skills)

  def privileged(self, samples: Sequence[Sample], task_of: Callable[[Sample], Any], key: int, tokenizer,
                 max_prompt_tokens: int) -> Tuple[List[Sample], List[Tuple[str, ...]]]:
    """The samples behind SDAR's privileged prompt (`chat.raw_prefixed_ids`: the retrieved skills as a raw prefix
    of the chat-templated prompt, left-truncated), the same completions; and the skills each one read."""
    out, used = [], []
    for i, s in enumerate(samples):
      text = templated_text(tokenizer, s.prompt_ids)
      prefix, names = self.retrieve(task_of(s), text, key * 1_000_003 + i)
      out.append(dataclasses.replace(s, prompt_ids=raw_prefixed_ids(tokenizer, prefix, text, max_prompt_tokens)))
      used.append(names)
    return out, used

  def take_hits(self) -> Dict[str, int]:
    """{skill: retrievals that included it} since the previous call."""
    now = dict(self.retriever.hits)
    new = {name: n - self._taken.get(name, 0) for name, n in now.items() if n != self._taken.get(name, 0)}
    self._taken = now
    return new

  def update(self, episodes: Dict[int, Tuple[set, float]]) -> None:
    """Bandit feedback (UCB): {episode: (the skills in any of its contexts, its success)}; each skill an episode
    read is rewarded with the episode's success."""
    order = sorted(episodes)
    self.retriever.update([tuple(sorted(episodes[e][0])) for e in order], [episodes[e][1] for e in order])

  def prompt_context(self, tasks: Sequence[Any], key: int, placement: str = "user"
                     ) -> Tuple[PromptContext, Dict[int, set]]:
    """The skills in the student's own prompts (Skill-GRPO, skill-prompted evaluation): a `PromptContext` for
    `RolloutEngine.run` over `tasks` (one per env instance), and {episode: skills read}, filled as it plays."""
    used: Dict[int, set] = {}

    def prefix(episode: int, templated: str) -> str:
      text, names = self.retrieve(tasks[episode], templated, key * 1_000_003 + episode)
      used.setdefault(episode, set()).update(names)
      return text
    return PromptContext(prefix=prefix, placement=placement), used

  def state_dict(self) -> Dict:
    return self.retriever.state_dict()

  def load_state_dict(self, state: Dict) -> None:
    self.retriever.load_state_dict(state)
    self._taken = dict(self.retriever.hits)


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

  def teacher_samples(self, samples: Sequence[Sample], tasks: Sequence[Any], iteration: int
                      ) -> Tuple[List[Sample], List[Tuple[str, ...]]]:
    """The teacher's sequences (the student's completions after the teacher's prompts) and the skills each used;
    `tasks[s.group_id]` is sample s's task."""
    if self.cfg.context == "plain":
      return list(samples), [() for _ in samples]
    return self.skills.privileged(samples, lambda s: tasks[s.group_id], iteration, self.tokenizer,
                                  self.max_prompt_tokens)

  def signals(self, params, samples: Sequence[Sample], tasks: Sequence[Any], iteration: int, *, top_k: int,
              temperature: float, pack_width: int, rows_per_call: int, mesh=None
              ) -> Tuple[List[TeacherSignal], List[Tuple[str, ...]]]:
    """(per-sample teacher signals, the skills each sample's teacher read). `params` are the rollout-time params,
    used when the source is "self"."""
    seqs, used = self.teacher_samples(samples, tasks, iteration)
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
  and the gate σ(β·Δ) and its active share (Δ > 0)."""
  gaps, by_turn = [], {}
  for s, sig in zip(samples, signals):
    mask = np.asarray(s.completion_mask, bool)
    gap = (np.asarray(sig.logprobs) - np.asarray(s.behaviour_logprobs))[mask]
    gaps.append(gap)
    by_turn.setdefault(max(s.step_index, 0), []).append(gap)
  if not gaps:
    return {}
  every = np.concatenate(gaps)
  metrics = {"teacher/gap_mean": float(every.mean()) if every.size else 0.0,
             "teacher/gap_std": float(every.std()) if every.size else 0.0}
  for turn, parts in sorted(by_turn.items()):
    gap = np.concatenate(parts)
    if not gap.size:
      continue
    gate = 1.0 / (1.0 + np.exp(-gate_beta * gap))
    metrics.update({f"teacher/gap_turn{turn}": float(gap.mean()), f"teacher/kl_turn{turn}": float(-gap.mean()),
                    f"teacher/gate_turn{turn}": float(gate.mean()),
                    f"teacher/gate_active_turn{turn}": float((gap > 0).mean())})
  return metrics
