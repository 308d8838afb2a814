"""Run assembly: the one place a run config becomes objects. `build_run(c)` checks the config (`from_config_dict`)
and builds the run's parts once: model and tokenizer, tasks and validation panel, env workers and rollout engines,
sampling, checkpoint pool, logger, optimizer, train step and the methods (`RunParts`). The trainer and the methods
see only these parts, never the config.

The small builders below (model and tokenizer, env workers and rollout engines, chat format, validation key and
sampling, checkpointed policies) are also what the experiments and `serve` use, so that a checkpoint is evaluated,
probed and served with the very tokenizer, prompts, sampling and random numbers it was trained and validated with.
They take the typed `RunConfig` or the ConfigDict alike (the same field names).
"""
from __future__ import annotations

import dataclasses
import functools
import json
import logging
from pathlib import Path
from typing import Any, Callable, List, Tuple

import jax

from agentopd_jax import cache
from agentopd_jax.envs import registry
from agentopd_jax.envs.vector import VectorEnv
from agentopd_jax.envs.verl_agent.corpus import default_corpus
from agentopd_jax.models.loading import load_model_and_tokenizer
from agentopd_jax.models.transformer import sharded_abstract_params
from agentopd_jax.rollout.chat import ChatFormat
from agentopd_jax.rollout.engine import RolloutEngine
from agentopd_jax.rollout.text_envs import make_text_env
from agentopd_jax.sampling.sampler import Sampler, SamplingParams
from agentopd_jax.methods import METHODS
from agentopd_jax.methods.base import Method, check_composition
from agentopd_jax.objectives.registry import LossParams, Objective, get_objective
from agentopd_jax.parallel import distributed
from agentopd_jax.parallel.sharding import make_mesh
from agentopd_jax.models.loading import run_params
from agentopd_jax.storage.checkpoints import CheckpointPool
from agentopd_jax.storage import machine
from agentopd_jax.storage.logs import LiveReport, MetricsLogger, NullLogger, WandbSink
from agentopd_jax.training import data
from agentopd_jax.training.config import RunConfig, from_config_dict, loss_params
from agentopd_jax.training.config import method_names as methods_of
from agentopd_jax.training.train_step import BadUpdates, cached_train_step, make_optimizer

logger = logging.getLogger(__name__)
VALIDATION_STREAM = 10**6  # fold_in index of the validation key; GRPO iteration i uses index i
LORA_STREAM = 3 * 10**6    # fold_in index of a LoRA run's adapter initialisation
RANDOM_INIT_PRESETS = ("nano", "tiny", "small")  # CPU-sized models trained from scratch; larger ones load a checkpoint


def validation_panel(valid_tasks: List[Any], num_tasks: int, env_name: str) -> List[Any]:
  """The validation panel: the first `num_tasks` of the env's validation tasks, all of them when it has fewer, which
  is logged, since a config that names more problems than the panel holds misstates every table read from it."""
  if num_tasks > len(valid_tasks):
    logger.warning("validation.num_tasks=%d, but env %s has %d validation tasks: the panel is all %d of them",
                   num_tasks, env_name, len(valid_tasks), len(valid_tasks))
  return valid_tasks[:num_tasks]


def _plain(mapping) -> dict:
  """A mapping field as a plain dict, from the typed config (a dict) or a ConfigDict."""
  return mapping.to_dict() if hasattr(mapping, "to_dict") else dict(mapping)


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
  return ChatFormat(tokenizer, _plain(c.model.chat_template_kwargs))


def rollout_engine(c, model, tokenizer, mesh, num_envs: int) -> RolloutEngine:
  """The configured env, prompts and sampler over `num_envs` env workers (close with `engine.env.close()`)."""
  envs = VectorEnv(registry.get(c.env.name).worker(c.env, c.rollout.max_steps), min(c.env.num_workers, num_envs),
                   num_envs, backend=c.env.backend, step_timeout_s=c.env.step_timeout_s,
                   ray_actor_options=_plain(c.env.ray_actor_options) if c.env.backend == "ray" else None)
  sampler = Sampler(model, tokenizer, pad_id=tokenizer.pad_token_id or 0, mesh=mesh)
  return RolloutEngine(sampler, tokenizer, envs, text_env_factory(c),
                       c.rollout if isinstance(c, RunConfig) else from_config_dict(c).rollout,
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


@dataclasses.dataclass
class RunParts:
  """Everything a run builds once from its config; the trainer and the methods see only these."""
  cfg: RunConfig
  config_json: str            # the run config as saved with every checkpoint
  workdir: Path
  primary: bool               # this process writes the run's files
  mesh: Any
  local_mesh: Any             # where this process samples (the whole mesh on one host)
  model: Any
  init_params: Any
  abstract_params: Any
  tokenizer: Any
  train_tasks: List[Any]
  phases: Any
  panel: List[Any]
  group_of: Callable[[Any], Any]  # task -> its report group (the per-group metrics)
  task_share: slice           # this process's shares of an iteration's tasks and of the panel
  panel_share: slice
  sampling: Sampling
  validation_key: jax.Array
  key: jax.Array              # the run's key; iteration i samples with fold_in(key, i)
  train_engine: RolloutEngine
  val_engine: RolloutEngine
  pool: CheckpointPool
  live: LiveReport
  log: Any
  optimizer: Any
  bad_updates: BadUpdates
  use_reference: bool
  loss: LossParams            # the objective, the loss core and the primary method's config group
  objective: Objective
  train_step: Callable
  methods: Tuple[Method, ...]


def method_names(cfg: RunConfig) -> Tuple[str, ...]:
  """The run's methods (its `method` string), in the order their hooks run: the add-ons (OPID's advantage shift),
  then the primary method (a teacher-reading objective's teacher, Skill-GRPO's prompt skills, Agentic-OPD)."""
  return methods_of(cfg.method)


def make_method(name: str, cfg: RunConfig) -> Method:
  """Method `name` built from the config sections it names (`Method.sections`)."""
  cls = METHODS[name]
  return cls(*(getattr(cfg, section) for section in cls.sections))


def build_run(c) -> RunParts:
  """The run's parts from its ConfigDict `c`: every section typed and checked first (`from_config_dict`, one error
  naming `section.field`), then the model, tasks, engines, pool, logger, optimizer, train step and methods."""
  cfg = from_config_dict(c)  # before anything loads
  if cfg.compilation_cache:
    cache.enable_compilation_cache()  # before anything compiles
  if not cfg.model.path and cfg.model.preset not in RANDOM_INIT_PRESETS:
    raise ValueError(f"model.path: preset {cfg.model.preset!r} needs pretrained weights; pass "
                     f"--config.model.path=/path/to/hf_folder (random init is only for {RANDOM_INIT_PRESETS})")
  config_json = c.to_json_best_effort(indent=2)
  workdir, primary = Path(cfg.workdir), distributed.is_primary()
  workdir.mkdir(parents=True, exist_ok=True)
  if primary:
    (workdir / "config.json").write_text(config_json)
  mesh = make_mesh(tuple(cfg.mesh_shape))
  if primary:
    machine.append(workdir)  # each start of the run: the CPU and versions its numbers depend on
  local_mesh = distributed.local_mesh(mesh)
  model, init_params, tokenizer = model_and_tokenizer(cfg, base_seed(cfg), mesh)
  spec = registry.get(cfg.env.name)
  train_tasks, valid_tasks = spec.tasks(cfg.env)
  g, v = cfg.grpo, cfg.validation
  panel = validation_panel(valid_tasks, v.num_tasks, cfg.env.name)
  task_share = distributed.share(g.tasks_per_iteration, "grpo.tasks_per_iteration")
  panel_share = distributed.share(len(panel), "validation.num_tasks", even=False)
  batch = (task_share.stop - task_share.start) * g.group_size
  train_engine = rollout_engine(cfg, model, tokenizer, local_mesh, cfg.rollout.refill_slots or batch)
  val_engine = rollout_engine(cfg, model, tokenizer, local_mesh, (panel_share.stop - panel_share.start) * v.attempts)
  live = LiveReport()
  sink = (WandbSink(workdir / "logs", cfg.logging.wandb_project, workdir.name, json.loads(config_json),
                    cfg.logging.wandb_entity) if primary and cfg.logging.wandb else None)
  log = (MetricsLogger(workdir / "logs", use_tensorboard=cfg.logging.tensorboard, on_log=live, wandb=sink)
         if primary else NullLogger())
  optimizer = make_optimizer(cfg.optim)
  use_reference = cfg.loss.kl_coef > 0
  runs_at = sampling(cfg)
  loss = loss_params(cfg)
  names = method_names(cfg)
  methods = tuple(make_method(name, cfg) for name in names)
  check_composition(methods)
  return RunParts(
      cfg=cfg, config_json=config_json, workdir=workdir, primary=primary, mesh=mesh, local_mesh=local_mesh,
      model=model, init_params=init_params, abstract_params=sharded_abstract_params(model, mesh), tokenizer=tokenizer,
      train_tasks=train_tasks, phases=data.phase_pools(train_tasks, spec.task_group, g.task_phases, cfg.env.name,
                                                       g.tasks_per_iteration),
      panel=panel, group_of=spec.group_of, task_share=task_share, panel_share=panel_share, sampling=runs_at,
      validation_key=validation_key(cfg), key=jax.random.key(cfg.seed), train_engine=train_engine,
      val_engine=val_engine, pool=CheckpointPool(workdir / "checkpoints", keep=cfg.checkpoint.keep or None),
      live=live, log=log, optimizer=optimizer, bad_updates=BadUpdates(cfg.optim.max_bad_updates),
      use_reference=use_reference, loss=loss, objective=get_objective(loss.objective),
      train_step=cached_train_step(model, loss, cfg.optim, mesh, use_reference,
                                 temperature=runs_at.train.temperature,  # the rollouts' temperature
                                 lora=cfg.lora if cfg.lora.rank else None),
      methods=methods)
