"""Expert demonstrations as training samples, in either layout, for the SFT warm start.

A demonstration replays an expert's action list through the same env and `TextEnv` the policy will face, so SFT
sees byte-identical prompts, history rendering and chat layout to the later RL rollouts; only the replies are
written by `TextEnv.demo_reply` instead of sampled. Only episodes the expert wins are imitated: WebShop's oracle
cannot win the few goals whose options WebShop's own matcher rejects (envs/webshop/reward.py), and a lost
demonstration teaches nothing worth copying.

Recovery demonstrations (`mistake_rate`, in the spirit of DART's noise injection): an expert never errs, so a policy
cloned from it has never seen the state its own first mistake leads to. Left alone, the tiny CPU model answers
"Nothing happens." by repeating the failed action until the episode ends (docs/results.md). With probability
`mistake_rate` before an expert action, a stale action (admissible at an earlier step of the episode, not now) is
played first; the env answers "Nothing happens." and the expert's action follows. The mistake is never a training
target, but the steps after it carry it in their history, so the policy learns to go on after a failed action.
"""
from __future__ import annotations

import dataclasses
import logging
from typing import Callable, Iterable, List, Optional, Sequence, Tuple

import numpy as np

from agentopd_jax.batching.samples import Sample
from agentopd_jax.rollout.chat import ChatFormat

logger = logging.getLogger(__name__)


def _stale_action(seen: Sequence[str], admissible: Sequence[str], rng: np.random.Generator) -> Optional[str]:
  """An action admissible at an earlier step but not now (None if there is none): the env answers it with a no-op."""
  now = set(admissible)
  stale = sorted(set(seen) - now)
  return stale[rng.integers(len(stale))] if stale else None


@dataclasses.dataclass(frozen=True)
class DemoStep:
  """One played step of a demonstration: its prompt text (the layout's), the reply written for the action, the env
  action, and whether it is the expert's (imitated) or an inserted mistake."""
  prompt: str
  reply: str
  action: str
  imitated: bool


@dataclasses.dataclass(frozen=True)
class DemoEpisode:
  """A won expert episode: its task, its position among the demonstration tasks, its steps and total reward."""
  task: object
  traj_id: int
  steps: Tuple[DemoStep, ...]
  reward: float


def play_demonstrations(env, text_env_factory: Callable[[], object], tasks: Iterable,
                        expert_actions: Callable[[object], Sequence[str]], layout: str = "step",
                        mistake_rate: float = 0.0, seed: int = 0) -> List[DemoEpisode]:
  """Every task's expert episode that the expert wins; `env` is one in-process env (reset / step).

  `mistake_rate` > 0 inserts recovery demonstrations (module docstring); it needs an env whose infos list the
  `admissible_commands` (ALFWorld). The mistakes are a pure function of `seed` and the task's position.
  """
  if not 0.0 <= mistake_rate < 1.0:
    raise ValueError(f"mistake_rate must be in [0, 1), got {mistake_rate}")
  out: List[DemoEpisode] = []
  lost = []
  for traj_id, task in enumerate(tasks):
    rng = np.random.default_rng([seed, traj_id])
    obs, infos = env.reset(task)
    if mistake_rate and "admissible_commands" not in infos:
      raise ValueError("sft.mistake_rate needs an env that lists admissible_commands in its infos (ALFWorld)")
    view = text_env_factory()
    view.begin(obs, infos)
    seen = list(infos.get("admissible_commands", ()))
    steps: List[DemoStep] = []
    reward, won, done = 0.0, False, False
    for expert_action in expert_actions(task):
      mistake = (_stale_action(seen, infos["admissible_commands"], rng)
                 if mistake_rate and rng.random() < mistake_rate else None)
      for action, imitated in ((mistake, False), (expert_action, True)):
        if action is None:
          continue
        steps.append(DemoStep(view.step_prompt() if layout == "step" else view.turn_prompt(),
                              view.demo_reply(action), action, imitated))
        obs, score, done, infos = env.step(action)
        r, w = view.reward(score, done, infos)
        reward, won = reward + r, won or w
        view.observe(action, obs, infos)
        seen.extend(infos.get("admissible_commands", ()))
        if done:
          break
      if done:
        break
    if won:
      out.append(DemoEpisode(task, traj_id, tuple(steps), reward))
    else:
      lost.append(str(task))
  if lost:
    logger.warning("skipped %d expert episodes that do not win (first: %s)", len(lost), lost[0])
  if not out:
    raise ValueError(f"the expert won none of the {len(lost)} demonstration tasks; nothing to imitate")
  return out


def step_sample(chat: ChatFormat, ep: DemoEpisode, t: int, prompt: str, reply: str, max_prompt_tokens: int = 0,
                won: bool = True) -> Sample:
  """Step `t` of `ep` as a step-layout sample: `prompt` (the step's own, or rewritten with skills) and `reply`;
  `max_prompt_tokens` > 0 keeps the prompt's last tokens; `won` False (an episode cut short) carries no reward."""
  ids = chat.reply_ids(reply)
  prompt_ids = chat.prompt_ids(prompt)
  return Sample(prompt_ids=prompt_ids[-max_prompt_tokens:] if max_prompt_tokens else prompt_ids, completion_ids=ids,
                completion_mask=[1] * len(ids), behaviour_logprobs=[0.0] * len(ids), group_id=ep.traj_id,
                problem_id=str(ep.task), traj_id=ep.traj_id, step_index=t, action_valid=1.0,
                episode_reward=ep.reward if won else 0.0, won=won, prompt_text=prompt, response_text=reply)


def demonstration_samples(env, text_env_factory: Callable[[], object], chat: ChatFormat, tasks: Iterable,
                          expert_actions: Callable[[object], Sequence[str]], layout: str = "step",
                          mistake_rate: float = 0.0, seed: int = 0) -> List[Sample]:
  """Samples of every task's expert episode that the expert wins (`play_demonstrations`), in `layout`."""
  out: List[Sample] = []
  for ep in play_demonstrations(env, text_env_factory, tasks, expert_actions, layout, mistake_rate, seed):
    if layout == "step":
      out += [step_sample(chat, ep, t, step.prompt, step.reply) for t, step in enumerate(ep.steps) if step.imitated]
    else:
      completion, mask = [], []
      for t, step in enumerate(ep.steps):
        if t:
          turn = chat.turn_ids(step.prompt, reply_ended_with_eos=True)
          completion += turn
          mask += [0] * len(turn)
        ids = chat.reply_ids(step.reply)
        completion += ids
        mask += [int(step.imitated)] * len(ids)
      out.append(Sample(prompt_ids=chat.prompt_ids(ep.steps[0].prompt), completion_ids=completion,
                        completion_mask=mask, behaviour_logprobs=[0.0] * len(completion), step_index=-1,
                        prompt_text=ep.steps[0].prompt, group_id=ep.traj_id, problem_id=str(ep.task),
                        traj_id=ep.traj_id, action_valid=1.0, episode_reward=ep.reward, won=True))
  return out
