"""The text side of an environment for the policy: prompt rendering, action projection and rewards, per episode.

The env workers return raw observations; one `TextEnv` per env instance turns them into the policy's prompts with
verl-agent's templates and history memory, and the policy's replies into env actions with a validity flag. The
rollout engine is env-agnostic: each env's `TextEnv` class (`envs/<env>/text.py`: `AlfworldText`, `WebshopText`,
`SearchText`, all with one interface) is part of its registered spec (`envs.registry`).
"""
from __future__ import annotations

from agentopd_jax.envs import registry


def make_text_env(name: str, **kwargs):
  """A `TextEnv` of the env registered as `name`."""
  return registry.get(name).text_env(**kwargs)
