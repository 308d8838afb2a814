"""The method interface (`methods/base.py`): which methods a config runs, in which order, and one error when two
methods of a run set the same signal. The loop itself runs every method in tests/test_trainer.py."""
import importlib.util
import os

import pytest

from agentopd_jax.methods.base import Method, Signals, check_composition
from agentopd_jax.training.assembly import method_names
from agentopd_jax.training.config import from_config_dict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _config(variant: str, **overrides):
  spec = importlib.util.spec_from_file_location("alfworld_config", os.path.join(ROOT, "configs", "alfworld.py"))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  c = module.get_config(variant)
  for key, value in overrides.items():
    section, field = key.split("__")
    c[section][field] = value
  return from_config_dict(c)


@pytest.mark.parametrize("variant, overrides, names", [
    ("cpu", {}, ("grpo",)),
    ("sdar", {}, ("sdar",)),
    ("grpo_opsd", {}, ("sdar",)),
    ("opsd", {}, ("sdar",)),
    ("rlsd", {}, ("sdar",)),
    ("skill_sd", {}, ("sdar",)),
    ("skill_grpo", {}, ("skill_grpo",)),
    ("opid", {}, ("opid",)),
    ("sdar", {"grpo__advantage": "opid"}, ("opid", "sdar")),  # OPID shifts the advantages before SDAR's teacher
    ("agentic_opd", {}, ("agentic_opd",)),
])
def test_each_config_runs_its_methods_in_hook_order(variant, overrides, names):
  assert method_names(_config(variant, **overrides)) == names


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
  assert m.signals(None) == Signals() and m.state_dict() == {} and m.validation_metrics(None, 0) == {}


def test_every_registered_method_is_built_from_the_sections_it_names():
  from agentopd_jax.methods import METHODS
  from agentopd_jax.training.assembly import make_method
  cfg = _config("cpu")
  for name, cls in METHODS.items():
    assert all(hasattr(cfg, section) for section in cls.sections), name
    method = make_method(name, cfg)
    assert isinstance(method, cls) and method.name == name
