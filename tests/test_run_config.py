"""The typed run config (`training/config.py`): the ConfigDict generated from the dataclasses converts back to them,
every shipped preset and sweep point converts, `--config.x.y=` overrides keep their type checks, and every bad
field is one ValueError that starts with its dotted name."""
import dataclasses
import glob
import importlib.util
import os
import re

import ml_collections
import pytest
from absl import flags
from ml_collections import config_flags

from agentopd_jax.envs import registry
from agentopd_jax.training import sweep as sweeps
from agentopd_jax.training.config import RunConfig, from_config_dict, to_config_dict
from agentopd_jax.training.presets import PAPER_MODELS, SKILL_METHODS

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV_CONFIGS = {"alfworld": "alfworld", "webshop": "webshop", "searchqa": "search"}  # config file -> env.name
VARIANTS = ("cpu", "agentic_opd", "opid", *SKILL_METHODS, *PAPER_MODELS,
            *(f"{m}_{p}" for m in ("opid", *SKILL_METHODS) for p in PAPER_MODELS))


def _config(name, variant="cpu"):
  spec = importlib.util.spec_from_file_location(f"run_config_{name}", os.path.join(ROOT, "configs", f"{name}.py"))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config(variant)


@pytest.mark.parametrize("env", sorted(set(ENV_CONFIGS.values())))
def test_round_trip(env):
  cfg = RunConfig(env=registry.get(env).config())
  c = to_config_dict(cfg)
  assert from_config_dict(c) == cfg
  assert isinstance(c.optim.learning_rate, float) and c.get_type("mesh_shape") is tuple
  assert isinstance(c.env.ray_actor_options, ml_collections.ConfigDict)
  assert isinstance(c.model.chat_template_kwargs, ml_collections.ConfigDict)


def test_defaults_are_the_cpu_runs():
  cfg = RunConfig(env=registry.get("alfworld").config())
  assert (cfg.optim.learning_rate, cfg.rollout.max_steps, cfg.rollout.max_prompt_tokens,
          cfg.rollout.max_response_tokens) == (1e-4, 10, 1024, 24)


def test_a_none_default_is_a_typed_field_reference():
  @dataclasses.dataclass(frozen=True)
  class Section:
    limit: "int | None" = None

  c = to_config_dict(Section())
  assert c.limit is None and c.get_type("limit") is int
  c.limit = 3
  with pytest.raises(TypeError):
    c.limit = "three"


@pytest.mark.parametrize("name", sorted(ENV_CONFIGS))
def test_every_preset_converts(name):
  extra = ("forgetting",) if name == "alfworld" else ()
  for variant in VARIANTS + extra:
    cfg = from_config_dict(_config(name, variant))
    assert cfg.env.name == ENV_CONFIGS[name] and type(cfg.env) is registry.get(cfg.env.name).config


def _apply(c, dotted, value):
  *sections, field = dotted.split(".")
  node = c
  for section in sections:
    node = node[section]
  node[field] = value


@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(ROOT, "configs", "sweeps", "*.py"))),
                         ids=os.path.basename)
def test_every_sweep_point_converts(path, monkeypatch):
  monkeypatch.chdir(ROOT)  # sweep bases are relative to the repository root
  points = sweeps.expand(sweeps.load_sweep(path))
  assert points
  for point in points:
    c = sweeps.load_run_config(point.base, point.name)
    c.workdir, c.seed = point.workdir, point.seed
    for dotted, value in point.overrides:
      _apply(c, dotted, value)
    from_config_dict(c)


def _flags_config(*overrides):
  """The ConfigDict train.py gets from `--config=configs/alfworld.py` and `overrides`."""
  argv = ["train.py", f"--config={os.path.join(ROOT, 'configs', 'alfworld.py')}", *overrides]
  values = flags.FlagValues()
  config_flags.DEFINE_config_file("config", flag_values=values, lock_config=True, sys_argv=argv)
  values(argv)
  return values.config


def test_overrides_keep_their_types():
  c = _flags_config("--config.optim.learning_rate=1", "--config.rollout.max_steps=20", "--config.mesh_shape=(2,1,1)")
  cfg = from_config_dict(c)
  assert cfg.optim.learning_rate == 1.0 and type(cfg.optim.learning_rate) is float
  assert cfg.rollout.max_steps == 20 and cfg.mesh_shape == (2, 1, 1)
  with pytest.raises(flags.IllegalFlagValueError, match="sft.steps"):
    _flags_config("--config.sft.steps=abc")
  c = _config("alfworld")
  c.optim.learning_rate = 3  # an int into a float field is stored as a float
  assert type(from_config_dict(c).optim.learning_rate) is float
  with pytest.raises(TypeError):
    c.sft.steps = "abc"


@pytest.mark.parametrize("dotted,value,named", [
    ("sft.steps", "abc", "sft.steps"),                  # wrong type (a ConfigDict built without the types)
    ("rollout.temperature", "hot", "rollout.temperature"),
    ("grpo.group_size", 0, "grpo.group_size"),          # out of range
    ("rollout.max_steps", 0, "rollout.max_steps"),
    ("optim.learning_rate", -1.0, "optim.learning_rate"),
    ("loss.clip_ratio_c", 0.5, "loss.clip_ratio_c"),
    ("env.num_workers", 0, "env.num_workers"),
    ("env.step_timeout_s", 0.0, "env.step_timeout_s"),
    ("validation.temperature", -1.0, "validation.temperature"),
    ("sft.skill_fraction", 2.0, "sft.skill_fraction"),
    ("mesh_shape", (1, 2), "mesh_shape"),
    ("grpo.advantage", "ppo", "grpo.advantage"),        # bad registry names
    ("loss.objective", "dpo", "loss.objective"),
    ("env.name", "minecraft", "env.name"),
    ("skills.retrieval", "bm25", "skills.retrieval"),
    ("opd.scheduler", "fifo", "opd.scheduler"),
    ("teacher.source", "oracle", "teacher.source"),
    ("opid.route", "sideways", "opid.route"),
    ("model.dtype", "int8", "model.dtype"),
])
def test_errors_start_with_the_field(dotted, value, named):
  c = _config("alfworld").to_dict()  # a plain nested dict: no ConfigDict type check stands in the way
  _apply(c, dotted, value)
  with pytest.raises(ValueError, match="^" + re.escape(named) + ": "):
    from_config_dict(ml_collections.ConfigDict(c))


def test_unknown_fields_are_named():
  c = _config("alfworld")
  c.grpo.iteratoins = 3
  with pytest.raises(ValueError, match=r"^grpo.iteratoins: unknown field"):
    from_config_dict(c)
  c = _config("alfworld")
  c.env.num_products = 10  # a WebShop field in an ALFWorld run
  with pytest.raises(ValueError, match=r"^env.num_products: unknown field"):
    from_config_dict(c)
