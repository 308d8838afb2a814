"""The method interface (`methods/base.py`) and the `method` string: which methods a config runs, in which order, which
objective and config group its loss reads, one error naming `method` for a bad string, and one error when two
methods of a run set the same signal. The loop itself runs every method in tests/test_trainer.py."""
import importlib.util
import os
import re
import types

import pytest

from agentopd_jax.methods import METHODS
from agentopd_jax.methods.base import Method, Signals, check_composition
from agentopd_jax.training.assembly import method_names
from agentopd_jax.training.config import from_config_dict, loss_params

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _config(variant: str, **overrides):
  spec = importlib.util.spec_from_file_location("alfworld_config", os.path.join(ROOT, "configs", "alfworld.py"))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  c = module.get_config(variant)
  for key, value in overrides.items():
    if "__" in key:
      section, field = key.split("__")
      c[section][field] = value
    else:
      c[key] = value
  return from_config_dict(c)


@pytest.mark.parametrize("variant, overrides, names", [
    ("cpu", {}, ("grpo",)),
    ("sdar", {}, ("sdar",)),
    ("grpo_opsd", {}, ("grpo_opsd",)),
    ("grpo_opsd_rkl", {}, ("grpo_opsd_rkl",)),
    ("opsd", {}, ("opsd",)),
    ("rlsd", {}, ("rlsd",)),
    ("skill_sd", {}, ("skill_sd",)),
    ("skill_grpo", {}, ("skill_grpo",)),
    ("opid", {}, ("opid", "grpo")),
    ("sdar", {"method": "sdar+opid"}, ("opid", "sdar")),  # OPID shifts the advantages before SDAR's teacher
    ("skill_grpo", {"method": "skill_grpo+opid"}, ("opid", "skill_grpo")),
    ("cpu", {"method": "grpo+opid"}, ("opid", "grpo")),
    ("agentic_opd", {}, ("agentic_opd",)),
    ("kl_to_best", {}, ("kl_to_best",)),
    ("kl_to_best", {"method": "kl_to_best+opid"}, ("opid", "kl_to_best")),
])
def test_each_config_runs_its_methods_in_hook_order(variant, overrides, names):
  cfg = _config(variant, **overrides)
  assert method_names(cfg) == names
  primary = names[-1]
  objective = METHODS[primary].objective
  assert loss_params(cfg).objective == objective and sum(METHODS[n].objective is not None for n in names) == 1
  assert loss_params(cfg).method == (getattr(cfg, METHODS[primary].group) if METHODS[primary].group else None)


@pytest.mark.parametrize("method, message", [
    ("ppo", "method: unknown method 'ppo' in 'ppo'"),
    ("sdar+opd", "method: unknown method 'opd' in 'sdar+opd'"),
    ("sdar+rlsd", "method: 'sdar+rlsd' names two primary methods ('sdar' and 'rlsd')"),
    ("opid+sdar", "method: name the primary method first, then its add-ons: 'sdar+opid', got 'opid+sdar'"),
    ("agentic_opd+opid", "method: 'agentic_opd' takes no add-on, got 'agentic_opd+opid'"),
    ("sdar+opid+opid", "method: 'sdar+opid+opid' names 'opid' twice"),
    ("", "method: expected a primary method"),
])
def test_a_bad_method_string_is_one_error_naming_method(method, message):
  with pytest.raises(ValueError, match="^" + re.escape(message)):
    _config("cpu", method=method)


def test_the_primary_method_decides_the_objective_and_its_group():
  assert (loss_params(_config("rlsd")).objective, type(loss_params(_config("rlsd")).method).__name__) == (
      "rlsd", "RlsdConfig")
  agentic = _config("agentic_opd", agentic_opd__top_k=8)
  assert loss_params(agentic).method.top_k == 8 and loss_params(agentic).objective == "agentic_opd"
  assert loss_params(_config("skill_grpo")) == loss_params(_config("cpu"))  # GRPO's loss; the skills are in the prompt


class _Teacher(Method):
  provides = frozenset({"teacher"})

  def __init__(self, name):
    self.name = name


def test_two_methods_setting_one_signal_are_refused():
  check_composition([_Teacher("a")])
  with pytest.raises(ValueError, match="'a' and 'b' both provide 'teacher'"):
    check_composition([_Teacher("a"), _Teacher("b")])


def test_a_method_without_hooks_adds_nothing():
  m = Method()
  assert m.initial_params() is None and m.teacher_params() is None and m.minibatch_size(None) is None
  assert m.signals(None) == Signals() and m.state_dict() == {} and m.validation_metrics(None, {}, 0) == {}


def test_validation_metrics_read_the_validations_outcomes_into_its_record():
  """The loop hands each method the panel's per-problem outcomes (no extra play); what it returns joins the `val/`
  metrics that the log and the checkpoint keep."""
  from agentopd_jax.envs.verl_agent.metrics import EpisodeRecord
  from agentopd_jax.storage.logs import NullLogger
  from agentopd_jax.training.trainer import Trainer

  class _Report(Method):
    def validation_metrics(self, params, outcomes, iteration):
      return {"val_report/success_rate": outcomes["b"][0] / outcomes["b"][1], "val_report/step": float(iteration)}

  trainer = Trainer.__new__(Trainer)  # only what `validate` reads: no model, no engines
  trainer.parts, trainer.methods, trainer.shared_start = types.SimpleNamespace(log=NullLogger()), (_Report(),), None
  trainer.cfg = types.SimpleNamespace(logging=types.SimpleNamespace(val_generations=0),
                                      env=types.SimpleNamespace(name="alfworld"),
                                      validation=types.SimpleNamespace(attempts=2))
  records = [EpisodeRecord("a", None, True, 1.0, 1, 1), EpisodeRecord("b", None, False, 0.0, 1, 1),
             EpisodeRecord("b", None, True, 1.0, 1, 1)]
  trainer.play_panel = lambda params, traces=None: (records, {"a": [1, 1], "b": [1, 2]},
                                                   {"env_s": 0.5, "generate_s": 0.25})
  val = trainer.validate(None, 3)
  assert val["outcomes"] == {"a": (1, 1), "b": (1, 2)}
  assert val["metrics"]["val/success_rate"] == 2 / 3
  assert val["metrics"]["val-core/alfworld/reward/mean@2"] == 2 / 3  # verl's core score: the mean episode reward
  assert (val["metrics"]["val_report/success_rate"], val["metrics"]["val_report/step"]) == (0.5, 3.0)


def test_every_registered_method_is_built_from_the_sections_it_names():
  from agentopd_jax.objectives.registry import get_objective
  from agentopd_jax.training.assembly import make_method
  cfg = _config("cpu")
  for name, cls in METHODS.items():
    assert all(hasattr(cfg, section) for section in cls.sections), name
    method = make_method(name, cfg)
    assert isinstance(method, cls) and method.name == name
    if cls.objective is not None:  # a primary method: its objective is registered and reads its group's class
      group = get_objective(cls.objective).group
      assert (group is None) == (cls.group is None) and (group is None or type(getattr(cfg, cls.group)) is group)
