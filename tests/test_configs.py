"""configs/alfworld.py: variants, the paper settings they encode, and clear errors for bad fields."""
import glob
import importlib.util
import os
import subprocess
import sys

import pytest

from agentopd_jax.training import sweep as sweeps
from agentopd_jax.training.config import from_config_dict
from agentopd_jax.training.data import parse_task_phases
from agentopd_jax.training.assembly import build_run

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _module(env="alfworld"):
  spec = importlib.util.spec_from_file_location(f"{env}_config", os.path.join(ROOT, "configs", f"{env}.py"))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module


@pytest.mark.parametrize("variant", ["", "cpu", "qwen2p5_3b", "qwen2p5_7b", "qwen3_1p7b", "forgetting"])
def test_variants_build_their_dataclasses(variant):
  from_config_dict(_module().get_config(variant))


def test_paper_setting():
  c = _module().get_config("qwen2p5_3b")
  assert (c.grpo.tasks_per_iteration, c.grpo.group_size) == (16, 8)
  assert (c.optim.learning_rate, c.loss.kl_coef, c.loss.entropy_coef) == (1e-6, 0.01, 0.001)
  assert (c.loss.clip_ratio_low, c.loss.clip_ratio_high, c.loss.clip_ratio_c) == (0.2, 0.2, 3.0)
  assert (c.rollout.max_steps, c.env.history_length, c.env.invalid_penalty) == (50, 2, 0.1)
  assert (c.rollout.temperature, c.validation.num_tasks, c.validation.temperature) == (1.0, 128, 0.4)
  assert (c.rollout.max_prompt_tokens, c.rollout.max_response_tokens) == (2048, 512)
  assert c.rollout.layout == "step" and c.sft.steps == 0 and not c.env.compact_prompt
  assert (c.model.param_dtype, c.model.dtype) == ("float32", "bfloat16")  # f32 master weights, bf16 matmuls
  qwen3 = _module().get_config("qwen3_1p7b")
  assert qwen3.model.preset == "qwen3-1.7b" and qwen3.model.chat_template_kwargs.to_dict() == {"enable_thinking": False}
  assert c.model.chat_template_kwargs.to_dict() == {}


def test_rlsd_warm_down_is_the_scripts_on_paper_presets():
  assert _module().get_config("rlsd").rlsd.warmdown_steps == 50            # the authors' code default
  for variant in ("rlsd_qwen2p5_3b", "rlsd_qwen3_1p7b"):
    c = _module().get_config(variant)
    assert (c.method, c.rlsd.warmdown_steps, c.rlsd.schedule) == ("rlsd", 100, "released_code")


def test_agentic_opd_selects_teachers_after_student_validations():
  """The `agentic_opd` variant's method decides its objective; a re-selection interval that misses the student's
  validations is an error naming the field."""
  c = _module().get_config("agentic_opd")
  assert from_config_dict(c).method == "agentic_opd"
  c.agentic_opd.selection_interval = 3
  with pytest.raises(ValueError, match=r"^agentic_opd.selection_interval: 3 is not a multiple of validation.every"):
    from_config_dict(c)
  c.method = "grpo"  # the interval is Agentic-OPD's only
  from_config_dict(c)


def test_forgetting_variant_shifts_the_task_mix_and_keeps_every_validation():
  c = _module().get_config("forgetting")
  assert parse_task_phases(c.grpo.task_phases) == [(1, ("look_at_obj_in_light",)), (9, ("pick_and_place",))]
  assert (c.grpo.iterations, c.validation.every, c.checkpoint.keep, c.optim.learning_rate) == (20, 2, 0, 3e-4)
  assert c.workdir == "runs/alfworld_forgetting" and c.method == "grpo"


def test_search_pool_variant_is_grpo_keeping_a_validated_checkpoint_every_4_of_24_iterations():
  c = _module("searchqa").get_config("pool")   # configs/sweeps/searchqa_opd.py's teacher pool
  assert (c.method, c.grpo.iterations, c.validation.every, c.checkpoint.keep) == ("grpo", 24, 4, 0)
  assert from_config_dict(c).env.name == "search"


@pytest.mark.parametrize("path", sorted(glob.glob(os.path.join(ROOT, "configs", "sweeps", "*.py"))),
                         ids=os.path.basename)
def test_every_shipped_sweep_expands(path, monkeypatch):
  monkeypatch.chdir(ROOT)  # sweep bases are relative to the repository root
  points = sweeps.expand(sweeps.load_sweep(path))
  assert points and len({p.workdir for p in points}) == len(points)


def test_unknown_variant_is_an_error():
  with pytest.raises(ValueError, match="unknown configs/alfworld.py variant"):
    _module().get_config("gpt5")


def test_paper_preset_needs_weights(tmp_path):
  c = _module().get_config("qwen2p5_3b")
  c.workdir = str(tmp_path)
  with pytest.raises(ValueError, match="model.path"):
    build_run(c)


def test_unknown_override_names_the_field():
  out = subprocess.run([sys.executable, os.path.join(ROOT, "experiments", "train.py"),
                        f"--config={os.path.join(ROOT, 'configs', 'alfworld.py')}", "--config.grpo.iteratoins=3"],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
  assert out.returncode != 0 and "iteratoins" in out.stderr


def test_warm_start_seed_is_shared_across_run_seeds_unless_minus_one():
  """`sft.seed` fixes the base model's init and SFT order for every run seed; -1 follows the run seed."""
  from agentopd_jax.training.assembly import base_seed
  c = _module().get_config()
  seeds = []
  for run_seed in (0, 1, 2):
    c.seed = run_seed
    seeds.append(base_seed(c))
  assert seeds == [0, 0, 0]
  c.sft.seed = -1
  assert base_seed(c) == 2
  c.sft.seed = -2
  with pytest.raises(ValueError, match="^sft.seed: "):
    from_config_dict(c)
