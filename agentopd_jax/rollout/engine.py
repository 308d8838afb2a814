"""Multi-turn rollouts: the sampler plays G copies of each task in the vector env, in one of two sample layouts.

  * "step" (verl-agent; OPID, SDAR): every env step is its own sample — the templated prompt with the text history,
    and that step's reply as the completion.
  * "trajectory" (verl-tool; Agentic-OPD): one sample per episode — the first prompt, then each reply followed by
    the next observation as a user turn; the observation tokens are appended to the KV cache (continuation, never a
    re-prefill) and masked out of the loss.

By default all envs of a batch step in lock-step: one batched generation per env step, one vector-env step
(`overlap_env` steps one half while the other decodes; `rollout/refill.py` keeps a pool of slots busy). Episodes
end when the env says done, after `max_steps` steps, or (trajectory layout) when the next turn would not fit in
`max_total_tokens`; failed env episodes (worker crash, env exception) yield no training samples.
"""
from __future__ import annotations

import dataclasses
import time
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import jax
import jax.numpy as jnp
import numpy as np

from agentopd_jax import faults
from agentopd_jax.batching.samples import EPISODE_INFO_KEYS, LAYOUTS, EpisodeResult, Sample
from agentopd_jax.parallel import distributed
from agentopd_jax.rollout.chat import ChatFormat, raw_prefixed_ids, templated_text
from agentopd_jax.sampling.sampler import Sampler, SampleOutput, SamplingParams, fold_in


@dataclasses.dataclass(frozen=True)
class RolloutConfig:
  """The run config's `rollout` section (defaults: the CPU run's; the paper presets raise the token budgets)."""
  layout: str = "step"                # "step" (verl-agent) or "trajectory" (verl-tool)
  max_steps: int = 10                 # env steps per episode
  max_prompt_tokens: int = 1024       # step layout: longer prompts keep their last tokens (and are counted)
  max_response_tokens: int = 24       # per reply
  max_observation_tokens: int = 500   # trajectory layout: per observation turn
  max_total_tokens: int = 4096        # trajectory layout: whole sequence
  batch_bucket: int = 8               # the step layout pads the shrinking set of live envs to a multiple of this
  temperature: float = 1.0            # the train step scores logits / T too (verl): PPO optimises the sampled policy
  top_p: float = 1.0
  top_k: int = 0
  recompute_old_logprobs: bool = False  # π_old from the trainer's own forward instead of the sampler's (verl): where
                                        # the sampler runs at another precision or sharding (paper presets)
  share_prefill: bool = True          # the rollouts of a group prefill the prompt head they share once (the sampler's
                                      # `prefix_keys`; each turn in the step layout, the first in the trajectory one)
  overlap_env: bool = False           # step layout: two halves of the batch (whole GRPO groups) take turns, so that
                                      # the env workers step one half while the sampler decodes the other; the same
                                      # tokens as lock-step (row-keyed sampling), for env latency hidden by decoding
  refill: bool = False                # step layout: a slot whose episode ended starts the next queued one, and a
                                      # batch closes at grpo.tasks_per_iteration complete groups (`rollout.refill`)
  refill_slots: int = 0               # with refill: episodes played at once (env slots); 0: the whole batch
  max_staleness: int = 0              # with refill: policy versions a sample may be trained after the one that
                                      # sampled it; 0: strictly on-policy (the lock-step episodes, in fewer slots)

  def __post_init__(self):
    if self.layout not in LAYOUTS:
      raise ValueError(f"rollout.layout must be one of {LAYOUTS}, got {self.layout!r}")
    for name in ("max_steps", "max_prompt_tokens", "max_response_tokens", "max_observation_tokens",
                 "max_total_tokens", "batch_bucket"):
      if getattr(self, name) < 1:
        raise ValueError(f"rollout.{name} must be >= 1, got {getattr(self, name)}")
    if not self.temperature > 0:
      raise ValueError(f"rollout.temperature must be > 0 (a group's rollouts must differ), got {self.temperature}")
    if not 0.0 < self.top_p <= 1.0:
      raise ValueError(f"rollout.top_p must be in (0, 1], got {self.top_p}")
    if self.top_k < 0:
      raise ValueError(f"rollout.top_k must be >= 0, got {self.top_k}")
    if self.overlap_env and self.layout != "step":
      raise ValueError(f"rollout.overlap_env needs layout 'step' (a turn per env state), got {self.layout!r}")
    if self.refill and self.layout != "step":
      raise ValueError(f"rollout.refill needs layout 'step' (a slot takes a new episode between turns), got "
                       f"{self.layout!r}")
    if self.refill and self.overlap_env:
      raise ValueError("rollout.refill and rollout.overlap_env: choose one (refill keeps every slot busy; overlap "
                       "hides env latency behind decoding)")
    for name in ("refill_slots", "max_staleness"):
      if getattr(self, name) < 0:
        raise ValueError(f"rollout.{name} must be >= 0, got {getattr(self, name)}")
      if getattr(self, name) and not self.refill:
        raise ValueError(f"rollout.{name}={getattr(self, name)} needs rollout.refill=True")


PLACEMENTS = ("user", "raw")


@dataclasses.dataclass(frozen=True)
class PromptContext:
  """Extra context in the student's own prompts (Skill-GRPO's skills; skill-prompted evaluation).

  prefix(episode index, chat-templated prompt text) -> the text to add. placement "user": inside the user message,
  before the env's text (Skill-GRPO's collector); "raw": before the chat template's first token, re-encoded, as
  SDAR's privileged teacher reads it (`chat.raw_prefixed_ids`). rewrite(episode index, the env's prompt text) -> the
  text the user message holds instead (OPID's skill sections spliced into it), applied before any prefix.
  """
  prefix: Optional[Callable[[int, str], str]] = None
  placement: str = "user"
  rewrite: Optional[Callable[[int, str], str]] = None

  def __post_init__(self):
    if self.placement not in PLACEMENTS:
      raise ValueError(f"PromptContext.placement must be one of {PLACEMENTS}, got {self.placement!r}")


@dataclasses.dataclass
class Rollout:
  samples: List[Sample]
  episodes: List[EpisodeResult]
  stats: Dict[str, float]


class _Episode:
  """Book-keeping of one env instance during a rollout."""

  def __init__(self, view, problem_id: str, group_id: int, traj_id: int):
    self.view, self.problem_id, self.group_id, self.traj_id = view, problem_id, group_id, traj_id
    self.done = False
    self.reward, self.won, self.length, self.valid = 0.0, False, 0, 0
    self.truncated, self.failed, self.error = False, False, None
    self.info: Dict = {}
    self.samples: List[Sample] = []
    self.observation = ""  # the env's latest raw observation

  def keep_info(self, infos: Dict):
    self.info.update({k: infos[k] for k in EPISODE_INFO_KEYS if k in infos})

  def begin(self, observation, infos: Dict):
    """The env's reset reply: the first observation, or the failure of the reset."""
    if infos.get("env_failed"):
      self.fail(infos)
      return
    self.keep_info(infos)
    self.view.begin(observation, infos)
    self.observation = observation

  def fail(self, infos: Dict):
    self.done, self.failed, self.error = True, True, infos.get("error", "env failed")

  def close(self):
    """After its last turn: unfinished episodes are truncated; the outcome reaches every sample."""
    if not self.done:
      self.truncated = True
    for s in self.samples:
      s.episode_reward, s.won = self.reward, self.won

  def result(self) -> EpisodeResult:
    return EpisodeResult(problem_id=self.problem_id, group_id=self.group_id, traj_id=self.traj_id, won=self.won,
                         reward=self.reward, length=self.length, valid_actions=self.valid,
                         truncated=self.truncated, env_failed=self.failed, error=self.error, info=dict(self.info))


def new_timer() -> Dict[str, float]:
  """A rollout's time and work counters (`Rollout.stats`)."""
  return {"env_s": 0.0, "generate_s": 0.0, "prompt_truncations": 0.0, "prefill_tokens": 0.0, "generated_tokens": 0.0,
          "decode_steps": 0.0, "decode_row_steps": 0.0, "generate_calls": 0.0}


def check_played(episodes: Sequence[_Episode]):
  """Raises where every episode failed. Nothing played: no caller has anything to learn or measure from, and a run
  resumes from its checkpoint. Every process of a multi-host run asks, and all stop together: one raising alone
  would leave the others waiting in their next collective."""
  failed_here = bool(episodes) and all(ep.failed for ep in episodes)
  failed_processes = int(distributed.totals([float(failed_here)])[0])
  if failed_here:
    raise RuntimeError(f"rollout: all {len(episodes)} env episodes failed (env workers lost or env code raising); "
                       f"the first error: {episodes[0].error}")
  if failed_processes:
    raise RuntimeError(f"rollout: every env episode of {failed_processes} other process(es) failed (their logs "
                       f"name the error); process {jax.process_index()} stops with them")


def _halves(group_ids: Sequence[int]) -> List[List[int]]:
  """Two halves of the episodes for `overlap_env`, of whole GRPO groups (so each half's prompts still share their
  group's head): the first half of the groups, in order of first appearance, and the rest; one group is cut in two."""
  order = list(dict.fromkeys(group_ids))
  if len(order) < 2:
    n = len(group_ids)
    return [list(range(n // 2)), list(range(n // 2, n))]
  first = set(order[:(len(order) + 1) // 2])
  return [[i for i, g in enumerate(group_ids) if g in first], [i for i, g in enumerate(group_ids) if g not in first]]


class RolloutEngine:
  """Drives `sampler` and `vector_env` (whose `num_envs` must equal the number of tasks per call).

  text_env_factory: zero-arg callable making one `TextEnv` (see `rollout.text_envs`) per env instance.
  """

  def __init__(self, sampler: Sampler, tokenizer, vector_env, text_env_factory: Callable[[], object],
               config: RolloutConfig, chat: Optional[ChatFormat] = None):
    self.sampler, self.tokenizer, self.env = sampler, tokenizer, vector_env
    self.text_env_factory, self.config = text_env_factory, config
    self.chat = chat or ChatFormat(tokenizer)

  def run(self, params, tasks: Sequence, problem_ids: Sequence[str], group_ids: Sequence[int], key: jax.Array,
          sampling: SamplingParams, context: Optional[PromptContext] = None, first_episode: int = 0) -> Rollout:
    """Plays one episode per task (tasks already repeated G times for GRPO; see `envs.vector.group_tasks`); with
    `context`, every prompt carries its prefix (the trajectory layout's first prompt: the rest follows it).

    Episode i samples with its own key, fold_in(key, first_episode + i), so its tokens do not depend on the other
    episodes of the call: a batch split over hosts (each passing its share's `first_episode`) plays as one call."""
    if not len(tasks) == len(problem_ids) == len(group_ids):
      raise ValueError(f"rollout: {len(tasks)} tasks, {len(problem_ids)} problem ids, {len(group_ids)} group ids")
    sampling, timer = self.reply_sampling(sampling), new_timer()
    t0 = time.perf_counter()
    obs, infos = self.env.reset(list(tasks))
    timer["env_s"] += time.perf_counter() - t0
    episodes = [_Episode(self.text_env_factory(), str(p), int(g), i)
                for i, (p, g) in enumerate(zip(problem_ids, group_ids))]
    for ep, o, info in zip(episodes, obs, infos):
      ep.begin(o, info)
    run = self._run_steps if self.config.layout == "step" else self._run_trajectories
    episode_keys = jax.vmap(jax.random.fold_in, (None, 0))(key, jnp.arange(len(episodes)) + first_episode)
    run(params, episodes, episode_keys, sampling, timer, context)
    for ep in episodes:
      ep.close()
    check_played(episodes)
    samples = [s for ep in episodes if not ep.failed for s in ep.samples]
    timer["samples"] = float(len(samples))
    return Rollout(samples=samples, episodes=[ep.result() for ep in episodes], stats=timer)

  def reply_sampling(self, sampling: SamplingParams) -> SamplingParams:
    """`sampling` for one reply: at most `max_response_tokens`, ending at the chat's end-of-turn too."""
    return dataclasses.replace(sampling, max_new_tokens=self.config.max_response_tokens,
                               stop_token_ids=tuple(sorted(set(sampling.stop_token_ids) | {self.chat.eos_id})))

  # ------------------------------------------------------------------------------------------ env stepping
  def _step_envs(self, episodes: List[_Episode], actions: Dict[int, str], timer):
    self._apply_step(episodes, actions, self._submit_step(episodes, actions, timer), timer)

  def _submit_step(self, episodes: List[_Episode], actions: Dict[int, str], timer):
    t0 = time.perf_counter()
    pending = self.env.step_async([actions.get(i) for i in range(len(episodes))])
    timer["env_s"] += time.perf_counter() - t0
    return pending

  def _apply_step(self, episodes: List[_Episode], actions: Dict[int, str], pending, timer):
    """Collects a step `_submit_step` sent (`env_s`: the time spent waiting on it) into the episodes."""
    t0 = time.perf_counter()
    obs, scores, dones, infos = self.env.step_wait(pending)
    timer["env_s"] += time.perf_counter() - t0
    faults.point("rollout/turn")
    for i, action in actions.items():
      ep = episodes[i]
      if infos[i].get("env_failed"):
        ep.fail(infos[i])
        continue
      reward, won = ep.view.reward(scores[i], dones[i], infos[i])
      if ep.samples and ep.samples[-1].step_index >= 0:  # the step layout's sample of this step
        ep.samples[-1].step_reward = reward
      ep.reward += reward
      ep.won = ep.won or won
      ep.keep_info(infos[i])
      ep.view.observe(action, obs[i], infos[i])
      ep.observation = obs[i]
      ep.done = bool(dones[i])

  def _prompt_ids(self, episode: int, text: str, context: Optional[PromptContext]) -> Tuple[List[int], str]:
    """(prompt ids, the user text they hold) of a fresh conversation, with `context`'s rewrite and prefix if any."""
    if context is not None and context.rewrite is not None:
      text = context.rewrite(episode, text)
    ids = self.chat.prompt_ids(text)
    if context is None or context.prefix is None:
      return ids, text
    templated = templated_text(self.tokenizer, ids)
    prefix = context.prefix(episode, templated)
    if context.placement == "user":
      return self.chat.prompt_ids(prefix + text), prefix + text
    return raw_prefixed_ids(self.tokenizer, prefix, templated), text

  def _prefix_keys(self, rows: Sequence[Optional[_Episode]]):
    """The sampler's `prefix_keys` for rows playing these episodes (None: a padding row): their GRPO groups."""
    if not self.config.share_prefill:
      return None
    return [None if ep is None else ep.group_id for ep in rows]

  def _decode(self, ids: List[int]) -> str:
    return self.tokenizer.decode(ids, skip_special_tokens=True)

  def _generate(self, fn, timer, prefill: Sequence[Sequence[int]], rows: Sequence[int], *args, **kwargs
                ) -> SampleOutput:
    """fn(*args, **kwargs), timed. `prefill`: the new prompts or chunks of the played rows, `rows` (not the padding
    or finished ones). The counts (`prefill_tokens`, `generated_tokens`, `decode_steps`: the longest row's tokens
    per call, `decode_row_steps`: that times the call's rows, so what exceeds `generated_tokens` was decoded for
    padding rows or for rows whose reply had ended) size the rollout's work (`benchmarks/iteration_roof.py` sets
    its time against a roof)."""
    t0 = time.perf_counter()
    out = fn(*args, **kwargs)
    timer["generate_s"] += time.perf_counter() - t0
    real = out.lengths[np.asarray(rows, np.int64)]
    timer["prefill_tokens"] += float(sum(map(len, prefill)) - out.prefill_saved)
    timer["generated_tokens"] += float(real.sum())
    timer["decode_steps"] += float(real.max(initial=0))
    timer["decode_row_steps"] += float(len(out.lengths) * real.max(initial=0))  # rows the batch decoded, padding too
    timer["generate_calls"] += 1
    return out

  # ------------------------------------------------------------------------------------------ step layout
  def _run_steps(self, params, episodes: List[_Episode], keys, sampling, timer, context):
    """Every turn, the live episodes' prompts -> one reply each -> the env step. With `overlap_env` the episodes are
    split into two halves of whole groups that take turns: half A decodes while half B's envs step, then B decodes
    while A's step. A row's tokens depend on its key and turn only, so both orders play the same episodes."""
    cfg = self.config
    if not cfg.overlap_env:
      for _ in range(cfg.max_steps):
        actions = self._turn(params, episodes, [i for i, ep in enumerate(episodes) if not ep.done], keys,
                             sampling, timer, context)
        if not actions:
          return
        self._step_envs(episodes, actions, timer)
      return
    halves = _halves([ep.group_id for ep in episodes])
    pending = None  # (actions, handle) of the other half's step in flight
    for _ in range(cfg.max_steps):
      for half in halves:
        actions = self._turn(params, episodes, [i for i in half if not episodes[i].done], keys, sampling, timer,
                             context)
        if pending is not None:
          self._apply_step(episodes, *pending, timer)
        pending = (actions, self._submit_step(episodes, actions, timer)) if actions else None
    if pending is not None:
      self._apply_step(episodes, *pending, timer)

  def _turn(self, params, episodes: List[_Episode], live: List[int], keys, sampling, timer, context
            ) -> Dict[int, str]:
    """The next turn of each `live` episode: their prompts, one reply each (recorded as samples); {episode: action}.
    Row i samples with fold_in(keys[i], its turn), whatever turn the other rows are at (continuous refill mixes
    them)."""
    cfg = self.config
    if not live:
      return {}
    texts, prompts = [], []
    for i in live:
      ids, text = self._prompt_ids(i, episodes[i].view.step_prompt(), context)
      texts.append(text)
      if len(ids) > cfg.max_prompt_tokens:
        ids = ids[-cfg.max_prompt_tokens:]
        timer["prompt_truncations"] += 1
      prompts.append(ids)
    # Pad the batch to a bucket so a shrinking set of live envs reuses a few compiled shapes.
    width = -(-len(live) // cfg.batch_bucket) * cfg.batch_bucket
    dummies = width - len(live)
    rows = live + [live[0]] * dummies  # a dummy row's one token is discarded: any key will do
    turns = jnp.asarray([episodes[i].length for i in rows], jnp.uint32)
    out = self._generate(self.sampler.generate, timer, prompts, range(len(live)), params,
                         prompts + [[self.sampler.pad_id]] * dummies,
                         fold_in(keys[jnp.asarray(rows)], turns), sampling,
                         row_max_new_tokens=[cfg.max_response_tokens] * len(live) + [1] * dummies,
                         prefix_keys=self._prefix_keys([episodes[i] for i in live] + [None] * dummies))
    actions = {}
    for j, i in enumerate(live):
      ep = episodes[i]
      ids = out.row(j)
      response = self._decode(ids)
      action, valid = ep.view.project(response)
      actions[i] = action
      ep.length += 1
      ep.valid += valid
      ep.samples.append(Sample(
          prompt_ids=prompts[j], completion_ids=ids, completion_mask=[1] * len(ids),
          behaviour_logprobs=out.policy_logprobs[j, :len(ids)].tolist(),
          rollout_logprobs=out.logprobs[j, :len(ids)].tolist(), group_id=ep.group_id,
          problem_id=ep.problem_id, traj_id=ep.traj_id, step_index=ep.length - 1, action_valid=float(valid),
          invalid_actions=1 - valid, prompt_text=texts[j], response_text=response, observation=ep.observation,
          action=action))
    del out  # its KV cache would otherwise stay alive beside the next step's
    return actions

  # ------------------------------------------------------------------------------------ trajectory layout
  def _run_trajectories(self, params, episodes: List[_Episode], keys, sampling, timer, context):
    cfg = self.config
    n = len(episodes)
    prompts = [self._prompt_ids(i, ep.view.turn_prompt(), context)[0] if not ep.done else [self.sampler.pad_id]
               for i, ep in enumerate(episodes)]
    for ep, p in zip(episodes, prompts):
      if not ep.done and len(p) + cfg.max_response_tokens > cfg.max_total_tokens:
        raise ValueError(f"rollout: the first prompt of {ep.problem_id} has {len(p)} tokens, which with "
                         f"max_response_tokens={cfg.max_response_tokens} exceeds max_total_tokens="
                         f"{cfg.max_total_tokens}")
    seqs = [dict(completion=[], mask=[], logprobs=[], rollout=[], turns=0, invalid=0) for _ in range(n)]
    active = [not ep.done for ep in episodes]
    max_new = [cfg.max_response_tokens if a else 1 for a in active]
    played = [i for i in range(n) if active[i]]
    out = self._generate(self.sampler.generate, timer, [prompts[i] for i in played], played, params, prompts,
                         fold_in(keys, 0), sampling,
                         cache_size=cfg.max_total_tokens, row_max_new_tokens=max_new,
                         prefix_keys=self._prefix_keys([ep if a else None for ep, a in zip(episodes, active)]))
    for t in range(cfg.max_steps):
      actions = {}
      for i, ep in enumerate(episodes):
        if not active[i]:
          continue
        ids = out.row(i)
        action, valid = ep.view.project(self._decode(ids))
        actions[i] = action
        seq = seqs[i]
        seq["completion"] += ids
        seq["mask"] += [1] * len(ids)
        seq["logprobs"] += out.policy_logprobs[i, :len(ids)].tolist()
        seq["rollout"] += out.logprobs[i, :len(ids)].tolist()
        seq["turns"] += 1
        seq["invalid"] += 1 - valid
        ep.length += 1
        ep.valid += valid
      self._step_envs(episodes, actions, timer)
      chunks = [[] for _ in range(n)]
      for i in actions:
        ep = episodes[i]
        active[i] = not ep.done and t + 1 < cfg.max_steps
        if not active[i]:
          continue
        ended_eos = out.lengths[i] > 0 and out.row(i)[-1] == self.chat.eos_id
        chunk = self._observation_chunk(ep.view.turn_prompt(), ended_eos)
        used = len(prompts[i]) + len(seqs[i]["completion"])
        if used + len(chunk) + cfg.max_response_tokens > cfg.max_total_tokens:
          active[i] = False  # the next turn would not fit: the episode ends here, truncated
          continue
        chunks[i] = chunk
        seqs[i]["completion"] += chunk
        seqs[i]["mask"] += [0] * len(chunk)
        seqs[i]["logprobs"] += [0.0] * len(chunk)
        seqs[i]["rollout"] += [0.0] * len(chunk)
      if not any(active):
        break
      played = [i for i in range(n) if active[i]]
      out = self._generate(self.sampler.continue_generation, timer, chunks, played, params, out.state, chunks,
                           fold_in(keys, t + 1), sampling, active=active,
                           row_max_new_tokens=[cfg.max_response_tokens if a else 1 for a in active])
    for i, ep in enumerate(episodes):
      seq = seqs[i]
      if ep.failed or not seq["turns"]:
        continue
      # Observation tokens appended after the final reply are never followed by a reply: drop them.
      last_gen = max(j for j, m in enumerate(seq["mask"]) if m) + 1
      ep.samples.append(Sample(
          prompt_ids=prompts[i], completion_ids=seq["completion"][:last_gen], completion_mask=seq["mask"][:last_gen],
          behaviour_logprobs=seq["logprobs"][:last_gen], rollout_logprobs=seq["rollout"][:last_gen],
          group_id=ep.group_id, problem_id=ep.problem_id,
          traj_id=ep.traj_id, step_index=-1, action_valid=1.0 - seq["invalid"] / seq["turns"],
          invalid_actions=seq["invalid"], prompt_text=episodes[i].view.task))

  def _observation_chunk(self, text: str, ended_with_eos: bool) -> List[int]:
    """The next user turn's tokens, cut in the middle when over `max_observation_tokens` so that both the turn
    opening and the assistant header at its end survive."""
    chunk = self.chat.turn_ids(text, ended_with_eos)
    cap = self.config.max_observation_tokens
    if len(chunk) <= cap:
      return chunk
    tail = min(self.chat.tail_len, cap // 2)
    return chunk[:cap - tail] + chunk[len(chunk) - tail:]
