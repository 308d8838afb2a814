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

import logging
from typing import Callable, Iterable, List, Optional, Sequence

import numpy as np

from agentopd_jax.batching.samples import Sample
from agentopd_jax.rollout.chat import ChatFormat

logger = logging.getLogger(__name__)


def _stale_action(seen: Sequence[str], admissible: Sequence[str], rng: np.random.Generator) -> Optional[str]:
  """An action admissible at an earlier step but not now (None if there is none): the env answers it with a no-op."""
  now = set(admissible)
  stale = sorted(set(seen) - now)
  return stale[rng.integers(len(stale))] if stale else None


def demonstration_samples(env, text_env_factory: Callable[[], object], chat: ChatFormat, tasks: Iterable,
                          expert_actions: Callable[[object], Sequence[str]], layout: str = "step",
                          mistake_rate: float = 0.0, seed: int = 0) -> List[Sample]:
  """Samples of every task's expert episode that the expert wins; `env` is one in-process env (reset / step).

  `mistake_rate` > 0 inserts recovery demonstrations (module docstring); it needs an env whose infos list the
  `admissible_commands` (ALFWorld). The mistakes are a pure function of `seed` and the task's position.
  """
  if not 0.0 <= mistake_rate < 1.0:
    raise ValueError(f"mistake_rate must be in [0, 1), got {mistake_rate}")
  out: List[Sample] = []
  lost = []
  for traj_id, task in enumerate(tasks):
    rng = np.random.default_rng([seed, traj_id])
    obs, infos = env.reset(task)
    if mistake_rate and "admissible_commands" not in infos:
      raise ValueError("sft.mistake_rate needs an env that lists admissible_commands in its infos (ALFWorld)")
    view = text_env_factory()
    view.begin(obs, infos)
    seen = list(infos.get("admissible_commands", ()))
    steps = []  # (prompt text, reply text, imitated?)
    reward, won, done = 0.0, False, False
    for expert_action in expert_actions(task):
      mistake = (_stale_action(seen, infos["admissible_commands"], rng)
                 if mistake_rate and rng.random() < mistake_rate else None)
      for action, imitated in ((mistake, False), (expert_action, True)):
        if action is None:
          continue
        steps.append((view.step_prompt() if layout == "step" else view.turn_prompt(), view.demo_reply(action),
                      imitated))
        obs, score, done, infos = env.step(action)
        r, w = view.reward(score, done, infos)
        reward, won = reward + r, won or w
        view.observe(action, obs, infos)
        seen.extend(infos.get("admissible_commands", ()))
        if done:
          break
      if done:
        break
    if not won:
      lost.append(str(task))
      continue
    if layout == "step":
      for t, (prompt, reply, imitated) in enumerate(steps):
        if not imitated:
          continue
        ids = chat.reply_ids(reply)
        out.append(Sample(prompt_ids=chat.prompt_ids(prompt), completion_ids=ids, completion_mask=[1] * len(ids),
                          behaviour_logprobs=[0.0] * len(ids), group_id=traj_id, problem_id=str(task),
                          traj_id=traj_id, step_index=t, action_valid=1.0, episode_reward=reward, won=won,
                          prompt_text=prompt, response_text=reply))
    else:
      completion, mask = [], []
      for t, (prompt, reply, imitated) in enumerate(steps):
        if t:
          turn = chat.turn_ids(prompt, reply_ended_with_eos=True)
          completion += turn
          mask += [0] * len(turn)
        ids = chat.reply_ids(reply)
        completion += ids
        mask += [int(imitated)] * len(ids)
      out.append(Sample(prompt_ids=chat.prompt_ids(steps[0][0]), completion_ids=completion, completion_mask=mask,
                        behaviour_logprobs=[0.0] * len(completion), group_id=traj_id, problem_id=str(task),
                        traj_id=traj_id, step_index=-1, action_valid=1.0, episode_reward=reward, won=won,
                        prompt_text=steps[0][0]))
  if lost:
    logger.warning("skipped %d expert episodes that do not win (first: %s)", len(lost), lost[0])
  if not out:
    raise ValueError(f"the expert won none of the {len(lost)} demonstration tasks; nothing to imitate")
  return out
