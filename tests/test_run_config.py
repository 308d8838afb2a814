"""The typed run config (`training/config.py`): the ConfigDict generated from the dataclasses converts back to them,
every shipped preset and sweep point converts, `--config.x.y=` overrides keep their type checks, every bad field is
one ValueError that starts with its dotted name, a config of the single-section layout loads through `upgrade`, and a
flag of that layout is one error naming its key in the method groups."""
import dataclasses
import glob
import importlib.util
import json
import os
import re
import subprocess
import sys

import ml_collections
import pytest

from conftest import nested
from absl import flags
from ml_collections import config_flags

from agentopd_jax.envs import registry
from agentopd_jax.training import sweep as sweeps
from agentopd_jax.training.config import (RunConfig, from_config_dict, loss_params, stale_flags, to_config_dict,
                                          upgrade)
from agentopd_jax.training.presets import PAPER_MODELS, method_variants

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV_CONFIGS = {"alfworld": "alfworld", "webshop": "webshop", "searchqa": "search"}  # config file -> env.name
OWN, ON_PAPER = method_variants()
VARIANTS = ("cpu", *OWN, *PAPER_MODELS, *(f"{m}_{p}" for m in ON_PAPER for p in PAPER_MODELS))


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


@pytest.mark.parametrize("name", sorted(ENV_CONFIGS))
def test_lora_variants_follow_verl_agents_script_on_a_paper_model_and_its_ratio_on_cpu(name):
  """`<variant>_lora`: verl-agent's run_alfworld_lora.sh (Qwen2.5-7B, rank 64, alpha 64, lr 3e-6) on a bf16 base;
  `lora` on the CPU default: alpha = rank = 16 and three times its full fine-tuning rate."""
  paper = from_config_dict(_config(name, "qwen2p5_7b_lora"))
  assert (paper.model.preset, paper.lora.rank, paper.lora.alpha, paper.optim.learning_rate) == (
      "qwen2.5-7b", 64, 64.0, 3e-6)
  assert paper.model.param_dtype == "bfloat16" and paper.lora.targets == ("q", "k", "v", "o", "gate", "up", "down")
  cpu, full = from_config_dict(_config(name, "lora")), from_config_dict(_config(name))
  assert (cpu.lora.rank, cpu.lora.alpha) == (16, 16.0)
  assert cpu.optim.learning_rate == pytest.approx(3 * full.optim.learning_rate, rel=1e-12)
  method = from_config_dict(_config(name, "sdar_qwen2p5_3b_lora"))
  assert (method.method, method.model.preset, method.lora.rank) == ("sdar", "qwen2.5-3b", 64)
  assert full.lora.rank == 0 and cpu.workdir == full.workdir + "_lora"


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
    ("method", "dpo", "method"),
    ("method", "sdar+rlsd", "method"),                  # two primary methods
    ("env.name", "minecraft", "env.name"),
    ("skills.retrieval", "bm25", "skills.retrieval"),
    ("agentic_opd.scheduler", "fifo", "agentic_opd.scheduler"),
    ("agentic_opd.variant", "dense", "agentic_opd.variant"),
    ("agentic_opd.top_k", 0, "agentic_opd.top_k"),
    ("agentic_opd.selection_panel", "first_half", "agentic_opd.selection_panel"),
    ("sdar.gate", "sigmoid", "sdar.gate"),
    ("sdar.top_k", 1, "sdar.top_k"),
    ("sdar.coef", -1.0, "sdar.coef"),
    ("rlsd.start_lambda", 2.0, "rlsd.start_lambda"),
    ("rlsd.schedule", "cosine", "rlsd.schedule"),
    ("skill_sd.coef", float("nan"), "skill_sd.coef"),
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


# --- the single-section layout ------------------------------------------------------------------------------------


# Top-level fields a preset sets to other than their default, added after the single-section layout.
ADDED_SINCE = ("share_prefixes",)


def _single_section(variant):
  """The run config dict of `configs/alfworld.py:<variant>` as the single-section layout wrote it
  (tests/fixtures/config_values_before_groups.json, unflattened): every method's loss fields in `loss`,
  Agentic-OPD's section `opd`, the method in `method`, `loss.objective` and `grpo.advantage`."""
  with open(os.path.join(ROOT, "tests", "fixtures", "config_values_before_groups.json")) as f:
    return nested(json.load(f)[f"configs/alfworld.py:{variant}"]["values"])


@pytest.mark.parametrize("variant, method", [
    ("cpu", "grpo"), ("sdar", "sdar"), ("grpo_opsd", "grpo_opsd"), ("opsd", "opsd"), ("rlsd", "rlsd"),
    ("skill_sd", "skill_sd"), ("skill_grpo", "skill_grpo"), ("opid", "opid"), ("opid_qwen3_1p7b", "opid"),
    ("agentic_opd", "agentic_opd"), ("forgetting", "grpo"),
])
def test_an_old_config_json_of_each_method_upgrades_and_builds(variant, method):
  """A run's config.json of each method, in the single-section layout, builds after `upgrade` into the same typed
  config as the preset gives: the method, its objective and every value of its group. Fields added since that
  layout are not in its config.json and take their defaults (`ADDED_SINCE`)."""
  old = _single_section(variant)
  cfg = from_config_dict(ml_collections.ConfigDict(upgrade(old)))
  preset = from_config_dict(_config("alfworld", variant))
  assert cfg == dataclasses.replace(preset, **{k: getattr(cfg, k) for k in ADDED_SINCE}) and cfg.method == method
  assert all(getattr(cfg, k) == RunConfig.__dataclass_fields__[k].default for k in ADDED_SINCE)
  assert "objective" not in json.dumps(upgrade(old)["loss"]) and "opd" not in upgrade(old)


@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(ROOT, "results", "*", "*", "config.json"))),
                         ids=lambda p: os.path.relpath(p, ROOT))
def test_the_recorded_runs_config_json_loads(path):
  """The config.json files the recorded runs wrote (results/), in the single-section layout or the method groups',
  build after `upgrade`, with the same method and SDAR coefficient."""
  with open(path) as f:
    old = json.load(f)
  cfg = from_config_dict(ml_collections.ConfigDict(upgrade(old)))
  coef = old["loss"]["sdar_coef"] if "sdar_coef" in old["loss"] else old["sdar"]["coef"]
  assert cfg.method == old["method"] and cfg.sdar.coef == coef


def test_upgrade_moves_each_key_and_the_stacked_method():
  old = _single_section("sdar")
  old["loss"].update(sdar_coef=0.5, distill_top_k=8, rlsd_lambda=0.25, skill_sd_coef=0.002, opd_top_k=4,
                     lad_other="grpo")
  old["grpo"]["advantage"] = "opid_mean_norm"
  old["opd"]["scheduler"] = "random"
  new = upgrade(old)
  assert new["method"] == "sdar+opid" and new["grpo"]["advantage"] == "grpo_mean_norm"
  assert (new["sdar"]["coef"], new["sdar"]["top_k"], new["rlsd"]["start_lambda"], new["skill_sd"]["coef"]) == (
      0.5, 8, 0.25, 0.002)
  assert (new["agentic_opd"]["top_k"], new["agentic_opd"]["lad_other"], new["agentic_opd"]["scheduler"]) == (
      4, "grpo", "random")
  cfg = from_config_dict(ml_collections.ConfigDict(new))
  assert loss_params(cfg).objective == "sdar" and loss_params(cfg).method.coef == 0.5
  assert upgrade(new) == new                       # the group layout comes back equal
  agentic = _single_section("agentic_opd")
  agentic["grpo"]["advantage"] = "opid"            # Agentic-OPD never ran OPID's shift: the estimator alone
  assert (upgrade(agentic)["method"], upgrade(agentic)["grpo"]["advantage"]) == ("agentic_opd", "grpo")
  with pytest.raises(ValueError, match=r"^loss.objective: 'sft' is no method's objective"):
    upgrade({"loss": {"objective": "sft"}})
  with pytest.raises(ValueError, match=r"^loss.sdar_coef: the config also sets sdar.coef"):
    upgrade({"loss": {"sdar_coef": 0.1}, "sdar": {"coef": 0.2}})


def test_a_key_of_the_single_section_layout_names_its_group_key():
  c = _config("alfworld").to_dict()
  c["loss"]["sdar_coef"] = 0.1
  with pytest.raises(ValueError, match=r"^loss.sdar_coef: unknown field .*; loss.sdar_coef is now sdar.coef$"):
    from_config_dict(ml_collections.ConfigDict(c))
  c = _config("alfworld").to_dict()
  c["opd"] = {"lad": "off"}
  with pytest.raises(ValueError, match=r"^opd: unknown field .*; opd is now agentic_opd$"):
    from_config_dict(ml_collections.ConfigDict(c))
  c = _config("alfworld").to_dict()
  c["grpo"]["advantage"] = "opid"
  with pytest.raises(ValueError, match=r"^grpo.advantage: .*is now method=<primary>\+opid"):
    from_config_dict(ml_collections.ConfigDict(c))
  assert stale_flags(["train.py", "--config.loss.objective", "sdar", "--config.opd.lad=off",
                      "--noconfig.opd.whole_batch_update", "--config.grpo.advantage=grpo", "--config.sdar.coef=1"]) == [
      "--config.loss.objective: loss.objective is now method: the method decides the objective (--config.method=sdar)",
      "--config.opd.lad: opd.lad is now agentic_opd.lad",
      "--noconfig.opd.whole_batch_update: opd.whole_batch_update is now agentic_opd.whole_batch_update"]


def test_a_stale_flag_is_one_error_before_anything_loads(tmp_path):
  """Through the real entry point: the flag's new key, and no run folder (nothing was loaded or written)."""
  workdir = tmp_path / "run"
  out = subprocess.run([sys.executable, os.path.join(ROOT, "experiments", "train.py"),
                        f"--config={os.path.join(ROOT, 'configs', 'alfworld.py')}:sdar", f"--config.workdir={workdir}",
                        "--config.loss.sdar_coef=0.1"], cwd=ROOT, capture_output=True, text=True, timeout=300,
                       env=dict(os.environ, PYTHONPATH=ROOT))
  assert out.returncode != 0, out.stdout
  assert out.stderr.strip().splitlines()[-1] == "--config.loss.sdar_coef: loss.sdar_coef is now sdar.coef", out.stderr
  assert not workdir.exists()
