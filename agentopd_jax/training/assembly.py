"""Run assembly: the small builders that turn a run config's fields into objects (model and tokenizer, env workers
and rollout engines, chat format, validation key and sampling, checkpointed policies).

The trainers, the experiments and `serve` build a run's parts through these functions, so that a checkpoint is
evaluated, probed and served with the very tokenizer, prompts, sampling and random numbers it was trained and
validated with.
"""
from __future__ import annotations

import dataclasses
import functools

import jax

from agentopd_jax.envs import registry
from agentopd_jax.envs.vector import VectorEnv
from agentopd_jax.envs.verl_agent.corpus import default_corpus
from agentopd_jax.models.loading import load_model_and_tokenizer
from agentopd_jax.models.transformer import sharded_abstract_params
from agentopd_jax.rollout.chat import ChatFormat
from agentopd_jax.rollout.engine import RolloutConfig, RolloutEngine
from agentopd_jax.rollout.text_envs import make_text_env
from agentopd_jax.sampling.sampler import Sampler, SamplingParams
from agentopd_jax.storage.checkpoints import run_params
from agentopd_jax.training.config import RunConfig, from_config_dict

VALIDATION_STREAM = 10**6  # fold_in index of the validation key; GRPO iteration i uses index i


def text_env_factory(c):
  """A fresh `TextEnv` of the configured env and prompt per call (one per env instance)."""
  return functools.partial(make_text_env, c.env.name, history_length=c.env.history_length,
                           compact=c.env.compact_prompt, flavor=c.env.prompt_flavor,
                           invalid_penalty=c.env.invalid_penalty, **registry.get(c.env.name).text_options(c.env))


def demonstration_env(c):
  """The in-process env expert demonstrations are replayed in: episodes that do not win within `sft.max_demo_steps`
  (default: the rollout horizon) are not imitated."""
  return registry.get(c.env.name).worker(c.env, c.sft.max_demo_steps or c.rollout.max_steps)()


def chat_format(c, tokenizer) -> ChatFormat:
  return ChatFormat(tokenizer, c.model.chat_template_kwargs.to_dict())


def rollout_engine(c, model, tokenizer, mesh, num_envs: int, rollout: RolloutConfig | None = None) -> RolloutEngine:
  """The configured env, prompts and sampler over `num_envs` env workers (close with `engine.env.close()`);
  `rollout`: the run's typed `rollout` section (built from `c` when not given)."""
  envs = VectorEnv(registry.get(c.env.name).worker(c.env, c.rollout.max_steps), min(c.env.num_workers, num_envs),
                   num_envs, backend=c.env.backend, step_timeout_s=c.env.step_timeout_s,
                   ray_actor_options=c.env.ray_actor_options.to_dict() if c.env.backend == "ray" else None)
  sampler = Sampler(model, tokenizer, pad_id=tokenizer.pad_token_id or 0, mesh=mesh)
  return RolloutEngine(sampler, tokenizer, envs, text_env_factory(c),
                       rollout or from_config_dict(c).rollout,
                       chat_format(c, tokenizer))


@dataclasses.dataclass(frozen=True)
class Sampling:
  """How a run decodes: `train` for the GRPO/OPD rollouts (its temperature is also the one the train step, the
  behaviour recompute and the teachers score at), `validation` for the panel (the same but `validation.temperature`)."""
  train: SamplingParams
  validation: SamplingParams


def sampling(cfg: RunConfig) -> Sampling:
  """The run's `Sampling`; the one place `rollout.temperature` is read."""
  train = SamplingParams(temperature=cfg.rollout.temperature, top_p=cfg.rollout.top_p, top_k=cfg.rollout.top_k)
  return Sampling(train, dataclasses.replace(train, temperature=cfg.validation.temperature))


def validation_key(c) -> jax.Array:
  """One key for every validation of a run (and for `evaluate.py`), so checkpoints face the same random numbers."""
  return jax.random.fold_in(jax.random.key(c.seed), VALIDATION_STREAM)


def base_seed(c) -> int:
  """Seed of the warm start (random init, SFT batch order, recovery mistakes): `sft.seed`, or `seed` when that is -1.

  A fixed `sft.seed` gives every run seed the same base model, as RL runs from one pretrained checkpoint share it; the
  run seed then varies what RL varies (rollouts, task draws, validation samples).
  """
  return c.sft.seed if c.sft.seed >= 0 else c.seed


def model_and_tokenizer(c, seed: int, mesh):
  """(model config, params, tokenizer) of the run config: `load_model_and_tokenizer` with the built-in tokenizer's
  settings, trained on the base corpus (`envs.verl_agent.corpus`) and also on the env's own text when
  `builtin_tokenizer.env_corpus` is set."""
  env_corpus = registry.get(c.env.name).tokenizer_corpus(c.env) if c.builtin_tokenizer.env_corpus else None
  return load_model_and_tokenizer(c.model, c.tokenizer_path, seed, mesh, c.builtin_tokenizer.vocab_size, env_corpus,
                                  builtin_corpus=default_corpus())


def checkpoint_policy(c, step: str, mesh):
  """(model config, params, tokenizer, step) of checkpoint `step` ("best", "latest" or an integer) of c.workdir."""
  config, _, tokenizer = model_and_tokenizer(c, c.seed, mesh)
  params, number = run_params(c.workdir, step, sharded_abstract_params(config, mesh))
  return config, params, tokenizer, number
