"""Demonstrations in OPID's injection format, for a warm start whose policy reads OPID's skills.

OPID's signal is Δ = log π(y | ĥ) − log π(y | h): the old policy re-scoring its own reply with the analyzer's skill
spliced into the prompt (`injection.augment_observation`). A policy that never saw those sections gives Δ ≈ noise, so
the warm start shows it what they mean. Each demonstration episode is reviewed by the oracle analyzer twice, as OPID
would review a rollout:
  * whole, a won episode: its episode skill is a workflow, and the steps that left the reviewer's plan (the explorer's
    searching, inserted mistakes) get step skills;
  * cut short at a random step before its end, an unfinished (failed) episode: its episode skill is an avoidance rule.
Every step is then shown with the skills OPID's router gives it (`injection.route`), and imitates (`targets`):
  * "skills" (the default): the action the skills point to, the reviewer's action from that state wherever it has
    one. A step skill names it ("Go to countertop 1 next: ..."), a workflow names where the objects are ("take mug 1
    from desk 1 -> ..."), an avoidance rule what to do instead; the skill then carries what the reply needs.
  * "expert": the demonstration's own action wherever it has one (a step skill's step still imitates the reviewer's
    action; an inserted mistake without a step skill is not imitated). The explorer's searching does not depend on
    the episode skill, so the policy learns to act around the section rather than on it (docs/results.md, "OPID's
    table").
Prompts are cut to the rollout's prompt limit the way OPID's teacher prompts are (last tokens kept).

Those reviews put the workflow only at steps that kept to the plan, where the plain prompt already says what to do:
the searching that a workflow could spare is where step skills go. `retry_demonstration_samples` adds the setting
where the episode skill decides the action, the hindsight retry's (`methods.opid.retry`): each won episode's task
played again from its start by the env's skill follower (`EnvSpec.skill_follower`), which searches first where the
workflow found the objects, with the workflow in every prompt.
"""
from __future__ import annotations

from typing import Any, Callable, List, Sequence, Tuple

import numpy as np

from agentopd_jax.batching.samples import Sample
from agentopd_jax.envs.hindsight import Review
from agentopd_jax.methods.opid.injection import OPID_ANCHORS, Anchors, augment_observation, route
from agentopd_jax.methods.opid.oracle import analysis_of
from agentopd_jax.rollout.chat import ChatFormat
from agentopd_jax.rollout.demonstrations import DemoEpisode, step_sample


TARGETS = ("skills", "expert")


def _samples(ep: DemoEpisode, steps: int, review: Review, chat: ChatFormat, reply_of: Callable[[str], str],
             opid_cfg, max_prompt_tokens: int, targets: str, anchors: Anchors) -> List[Sample]:
  """The first `steps` steps of `ep` under the skills of `review` (a review of those steps)."""
  analysis = analysis_of(review, [True] * steps, range(steps), opid_cfg.max_step_skills)
  out = []
  for t in range(steps):
    episode_skill, step_skill = route(t, analysis, opid_cfg.w_episode, opid_cfg.w_step, opid_cfg.route)
    own = ep.steps[t].action if ep.steps[t].imitated else ""
    reviewer = review.steps[t].expert_action if (step_skill or targets == "skills") else None
    action = reviewer or ("" if step_skill else own)
    if not action:
      continue
    prompt = augment_observation(ep.steps[t].prompt, episode_skill, step_skill, anchors)
    out.append(step_sample(chat, ep, t, prompt, reply_of(action), max_prompt_tokens, won=steps == len(ep.steps)))
  return out


def workflows(episodes: Sequence[DemoEpisode], review: Callable[[Any, Sequence[str]], Review], max_step_skills: int
              ) -> List[Tuple[DemoEpisode, str]]:
  """(episode, its episode skill) for the won episodes of `episodes` whose review holds: the oracle's workflow."""
  out = []
  for ep in episodes:
    actions = [s.action for s in ep.steps]
    try:
      reviewed = review(ep.task, actions)
    except Exception:  # counted where the same review makes the whole-episode samples
      continue
    if reviewed.won:
      out.append((ep, analysis_of(reviewed, [True] * len(actions), range(len(actions)), max_step_skills).episode_skill))
  return out


def retry_demonstration_samples(replays: Sequence[DemoEpisode], skills: Sequence[str], chat: ChatFormat,
                                max_prompt_tokens: int, anchors: Anchors = OPID_ANCHORS) -> List[Sample]:
  """Every imitated step of `replays` (episodes of the env's skill follower; `replays[i]` played `skills[
  replays[i].traj_id]`) with that episode skill spliced into its prompt as the retry splices it
  (`retry.retry_context`)."""
  return [step_sample(chat, ep, t, augment_observation(step.prompt, episode_skill=skills[ep.traj_id], anchors=anchors),
                      step.reply, max_prompt_tokens)
          for ep in replays for t, step in enumerate(ep.steps) if step.imitated]


def opid_demonstration_samples(episodes: Sequence[DemoEpisode], review: Callable[[Any, Sequence[str]], Review],
                               chat: ChatFormat, reply_of: Callable[[str], str], opid_cfg, max_prompt_tokens: int,
                               seed: int = 0, targets: str = "skills", anchors: Anchors = OPID_ANCHORS
                               ) -> Tuple[List[Sample], int]:
  """(samples, episodes whose review failed) for `episodes` in step layout (module docstring).

  `review(task, actions)`: the env's hindsight review (`EnvSpec.hindsight(env_cfg)`); `reply_of(action)`: the text
  env's `demo_reply`; `opid_cfg`: the run's `opid.*` (route, weights, max_step_skills). The cut of each episode is
  a pure function of `seed` and its position; `targets`: what each step imitates (module docstring); `anchors`:
  where the env's prompt format takes the skill sections (`Anchors.of(text_env.prompt_anchors)`)."""
  if targets not in TARGETS:
    raise ValueError(f"sft.opid_targets must be one of {TARGETS}, got {targets!r}")
  out: List[Sample] = []
  failed = 0
  for ep in episodes:
    actions = [s.action for s in ep.steps]
    # The cut's own random stream (41), apart from the recovery mistakes' [seed, traj_id].
    cut = int(np.random.default_rng([seed, ep.traj_id, 41]).integers(1, len(actions))) if len(actions) > 1 else 0
    for steps in (len(actions), cut):
      if not steps:
        continue
      try:
        reviewed = review(ep.task, actions[:steps])
      except Exception:  # a replay that does not reproduce the episode teaches nothing about it
        failed += 1
        continue
      out += _samples(ep, steps, reviewed, chat, reply_of, opid_cfg, max_prompt_tokens, targets, anchors)
  return out, failed
