"""WebShop's hindsight review (`EnvSpec.hindsight`, `envs.hindsight`): an episode's actions replayed on the site from
the goal's start page, each beside the oracle shopper's next action from the same page (`expert.next_action`).

The oracle is `plan` made state-based: it buys what `plan` buys (`plan_target`), so from the start page it takes
`plan`'s own steps, and from anywhere else the shortest way back onto them. A goal `plan` cannot reach has no expert
action at any step. The replay's env never truncates (the rollout's step budget already cut the actions). Milestones
are the search, the product, its options and Buy Now: a workflow is their order.
"""
from __future__ import annotations

from typing import Optional, Sequence, Tuple

from agentopd_jax.envs.hindsight import Replay, Review, replay


class WebshopReplay(Replay):
  """A `WebshopEnv` at some state of a goal, and the oracle's target for it (None: `plan` finds no way)."""

  horizon = 30

  def __init__(self, env, target, task: str):
    self.env, self.target, self.task = env, target, task
    self.won = False

  @property
  def done(self) -> bool:
    return self.env.done

  def copy(self) -> "WebshopReplay":
    other = WebshopReplay(self.env.copy(), self.target, self.task)
    other.won = self.won
    return other

  def expert(self) -> Optional[str]:
    from agentopd_jax.envs.webshop.expert import next_action

    return None if self.target is None else next_action(self.env, self.target)

  def step(self, action: str) -> Tuple[bool, str]:
    from agentopd_jax.envs.webshop.env import parse_action

    name, arg = parse_action(action)
    arg = arg.lower() if arg is not None else None
    click = self.env.page.clickables.get(arg) if name == "click" and arg != "search" else None
    admissible = bool(arg) if name == "search" else click is not None
    milestone = admissible and (name == "search" or arg == "buy now" or click.kind in ("product", "option"))
    _, _, _, infos = self.env.step(action)
    self.won = bool(infos["won"])
    return admissible, action if milestone else ""

  def advice(self, action: str) -> str:
    return f"Choose {action}"


def reviewer(shop_kwargs: dict):
  """(goal index or goal dict, executed actions) -> Review; the shop is the run's, built from the checked
  `shop_kwargs` (`spec.shop_kwargs`), and the oracle's target is found once per goal."""
  from agentopd_jax.envs.webshop.env import WebshopEnv
  from agentopd_jax.envs.webshop.expert import plan_target

  kwargs = dict(shop_kwargs, max_steps=None)
  targets = {}

  def review(goal, actions: Sequence[str]) -> Review:
    env = WebshopEnv(**kwargs)
    env.reset(goal)
    key = goal if isinstance(goal, int) else None
    if key is None or key not in targets:
      target = plan_target(env.shop, goal, max_steps=None)
      if key is not None:
        targets[key] = target
    else:
      target = targets[key]
    return replay(WebshopReplay(env, target, env.goal["instruction_text"]), actions)
  return review
