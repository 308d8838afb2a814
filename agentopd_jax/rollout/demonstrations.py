"""Expert demonstrations as training samples, in either layout, for the SFT warm start.

A demonstration replays an expert's action list through the same env and `TextEnv` the policy will face, so SFT
sees byte-identical prompts, history rendering and chat layout to the later RL rollouts; only the replies are
written by `TextEnv.demo_reply` instead of sampled. Only episodes the expert wins are imitated: WebShop's oracle
cannot win the few goals whose options WebShop's own matcher rejects (envs/webshop/reward.py), and a lost
demonstration teaches nothing worth copying.
"""
from __future__ import annotations

import logging
from typing import Callable, Iterable, List, Sequence

from agentopd_jax.rollout.chat import ChatFormat
from agentopd_jax.rollout.types import Sample

logger = logging.getLogger(__name__)


def demonstration_samples(env, text_env_factory: Callable[[], object], chat: ChatFormat, tasks: Iterable,
                          expert_actions: Callable[[object], Sequence[str]], layout: str = "step") -> List[Sample]:
  """Samples of every task's expert episode that the expert wins; `env` is one in-process env (reset / step)."""
  out: List[Sample] = []
  lost = []
  for traj_id, task in enumerate(tasks):
    obs, infos = env.reset(task)
    view = text_env_factory()
    view.begin(obs, infos)
    steps = []  # (prompt text, reply text)
    reward, won = 0.0, False
    for action in expert_actions(task):
      steps.append((view.step_prompt() if layout == "step" else view.turn_prompt(), view.demo_reply(action)))
      obs, score, done, infos = env.step(action)
      r, w = view.reward(score, done, infos)
      reward, won = reward + r, won or w
      view.observe(action, obs, infos)
      if done:
        break
    if not won:
      lost.append(str(task))
      continue
    if layout == "step":
      for t, (prompt, reply) in enumerate(steps):
        ids = chat.reply_ids(reply)
        out.append(Sample(prompt_ids=chat.prompt_ids(prompt), completion_ids=ids, completion_mask=[1] * len(ids),
                          behaviour_logprobs=[0.0] * len(ids), group_id=traj_id, problem_id=str(task),
                          traj_id=traj_id, step_index=t, action_valid=1.0, episode_reward=reward, won=won,
                          prompt_text=prompt, response_text=reply))
    else:
      completion, mask = [], []
      for t, (prompt, reply) in enumerate(steps):
        if t:
          turn = chat.turn_ids(prompt, reply_ended_with_eos=True)
          completion += turn
          mask += [0] * len(turn)
        ids = chat.reply_ids(reply)
        completion += ids
        mask += [1] * len(ids)
      out.append(Sample(prompt_ids=chat.prompt_ids(steps[0][0]), completion_ids=completion, completion_mask=mask,
                        behaviour_logprobs=[0.0] * len(completion), group_id=traj_id, problem_id=str(task),
                        traj_id=traj_id, step_index=-1, action_valid=1.0, episode_reward=reward, won=won,
                        prompt_text=steps[0][0]))
  if lost:
    logger.warning("skipped %d expert episodes that do not win (first: %s)", len(lost), lost[0])
  if not out:
    raise ValueError(f"the expert won none of the {len(lost)} demonstration tasks; nothing to imitate")
  return out
