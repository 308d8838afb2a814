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

from agentopd_jax.batching.collate import TeacherSignal
from agentopd_jax.batching.samples import Sample
from agentopd_jax.parallel import distributed
from agentopd_jax.rollout.chat import raw_prefixed_ids, templated_text
from agentopd_jax.rollout.engine import PromptContext
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

  Multi-host: each process retrieves for its own share, numbering samples and episodes over the whole batch (`first`,
  `first_episode`), so a draw does not depend on which process makes it; `update` and `take_hits` gather every
  process's feedback and counts, so every process holds the run's retriever state.
  """

  def __init__(self, env_name: str, bank_dir: str = "", retrieval: str = "km", seed: int = 0, ucb_c: float = 1.0):
    self.retriever, self.query_fields = retriever_for(env_name, bank_dir, retrieval, seed, ucb_c)
    self._taken = dict(self.retriever.hits)

  def retrieve(self, task: Any, templated: str, key: int, rule: Optional[str] = None
               ) -> Tuple[str, Tuple[str, ...]]:
    """`rule`: the retriever's matching rule for this query (None: the env's, the teacher's)."""
    got = self.retriever.retrieve(SkillQuery(prompt=templated, **self.query_fields(task)), key, rule)
    return privileged_prefix(got.text), tuple(got.skills)

  def privileged(self, samples: Sequence[Sample], task_of: Callable[[Sample], Any], key: int, tokenizer,
                 max_prompt_tokens: int, first: int = 0) -> Tuple[List[Sample], List[Tuple[str, ...]]]:
    """The samples behind SDAR's privileged prompt (`chat.raw_prefixed_ids`: the retrieved skills as a raw prefix
    of the chat-templated prompt, left-truncated), the same completions; and the skills each one read. `first`: the
    index of samples[0] in the whole batch (multi-host)."""
    out, used = [], []
    for i, s in enumerate(samples, first):
      text = templated_text(tokenizer, s.prompt_ids)
      prefix, names = self.retrieve(task_of(s), text, key * 1_000_003 + i)
      out.append(dataclasses.replace(s, prompt_ids=raw_prefixed_ids(tokenizer, prefix, text, max_prompt_tokens)))
      used.append(names)
    return out, used

  def take_hits(self) -> Dict[str, int]:
    """{skill: retrievals that included it, in every process} since the previous call."""
    mine = {name: n - self._taken.get(name, 0) for name, n in self.retriever.hits.items()
            if n != self._taken.get(name, 0)}
    new: Dict[str, int] = {}
    for part in distributed.allgather(mine):
      for name, n in part.items():
        new[name] = new.get(name, 0) + n
    self._taken = {name: self._taken.get(name, 0) + new.get(name, 0) for name in {**self._taken, **new}}
    self.retriever.hits = dict(self._taken)
    return new

  def update(self, episodes: Dict[int, Tuple[set, float]], first_episode: int = 0) -> None:
    """Bandit feedback (UCB): {episode: (the skills in any of its contexts, its success)}, episodes numbered from
    `first_episode` of the whole batch; with every process's feedback, each skill an episode read is rewarded with
    the episode's success, in episode order."""
    every: Dict[int, Tuple[Tuple[str, ...], float]] = {}
    for part in distributed.allgather([[first_episode + e, sorted(names), float(won)]
                                       for e, (names, won) in episodes.items()]):
      every.update({e: (tuple(names), won) for e, names, won in part})
    order = sorted(every)
    self.retriever.update([every[e][0] for e in order], [every[e][1] for e in order])

  def prompt_context(self, tasks: Sequence[Any], key: int, placement: str = "user", first_episode: int = 0
                     ) -> Tuple[PromptContext, Dict[int, set]]:
    """The skills in the student's own prompts (Skill-GRPO, skill-prompted evaluation): a `PromptContext` for
    `RolloutEngine.run` over `tasks` (one per env instance, the first being episode `first_episode` of the whole
    batch), and {episode (of `tasks`): skills read}, filled as it plays.

    Each placement reproduces one of SDAR's inputs whole. "user" is its Skill-GRPO collector, which matches by the
    prompt's keywords alone (rule "prompt", every env: no game file or data source, so a search prompt gets the
    general skills only); "raw" is its privileged teacher's prompt, matched by the env's rule."""
    used: Dict[int, set] = {}
    rule = "prompt" if placement == "user" else None

    def prefix(episode: int, templated: str) -> str:
      text, names = self.retrieve(tasks[episode], templated, key * 1_000_003 + first_episode + episode, rule)
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
