"""`grpo.task_phases`: a task mix that shifts during a run (the forgetting benchmark's lever). Each iteration draws
from its phase's groups only, the groups are the names the validation metrics use, and a bad spec is one error
naming the field."""
import pytest

from agentopd_jax.envs import registry
from agentopd_jax.training import data


def test_phases_parse_in_order_with_multi_group_phases():
  assert data.parse_task_phases("") == []
  assert data.parse_task_phases("a@1, b+c@5,a@9") == [(1, ("a",)), (5, ("b", "c")), (9, ("a",))]


@pytest.mark.parametrize("spec, message", [
    ("a", "'a' is not 'group\\[\\+group\\]@iteration'"),
    ("a@x", "'a@x' is not"),
    ("@3", "'@3' is not"),
    ("a@2", "the first phase must start at iteration 1"),
    ("a@1,b@5,c@5", "the first phase .* each later one after it, got starts \\[1, 5, 5\\]"),
    ("a@1,b@5,c@3", "the first phase .* got starts \\[1, 5, 3\\]"),
])
def test_a_bad_phase_spec_is_one_error_naming_the_field(spec, message):
  with pytest.raises(ValueError, match="grpo.task_phases: " + message):
    data.parse_task_phases(spec)


POOL = [f"{group}-{i}" for group in ("a", "b", "c") for i in range(4)]


def _group(task):
  return task.split("-")[0]


def test_each_iteration_draws_from_its_phase_only():
  phases = data.phase_pools(POOL, _group, "a@1,b+c@3", "toy", 2)
  assert [(start, len(tasks)) for start, tasks in phases] == [(1, 4), (3, 8)]
  for iteration in range(1, 7):
    drawn = data.iteration_tasks(data.phase_pool(POOL, phases, iteration), 2, 0, iteration)
    assert {_group(t) for t in drawn} <= ({"a"} if iteration < 3 else {"b", "c"})
  assert data.phase_pool(POOL, [], 5) is POOL  # no phases: the whole pool


def test_phase_pools_check_groups_and_sizes_before_the_run():
  with pytest.raises(ValueError, match=r"no training tasks of group\(s\) \['d'\]; the pool has \['a', 'b', 'c'\]"):
    data.phase_pools(POOL, _group, "a@1,d@3", "toy", 2)
  with pytest.raises(ValueError, match=r"the phase from iteration 1 \(a\) has 4 training task\(s\), fewer than "
                                       r"grpo.tasks_per_iteration=5"):
    data.phase_pools(POOL, _group, "a@1", "toy", 5)
  with pytest.raises(ValueError, match="env 'toy' does not group its tasks"):
    data.phase_pools(POOL, None, "a@1", "toy", 2)
  assert data.phase_pools(POOL, None, "", "toy", 2) == []


def test_the_env_specs_group_tasks_as_their_validation_metrics_name_them():
  from agentopd_jax.envs.search import bundled_tasks
  from agentopd_jax.envs.alfworld.spec import ALFWORLD_TASK_TYPES

  alfworld = registry.get("alfworld").task_group
  assert alfworld("/x/train/pick_and_place_simple-Mug-None-Desk-308/trial_1/game.tw-pddl") == "pick_and_place"
  assert alfworld("/x/look_at_obj_in_light-CD-None-DeskLamp-308/trial_2/game.tw-pddl") in ALFWORLD_TASK_TYPES
  question = bundled_tasks("train", seed=0)[0]
  assert registry.get("search").task_group(question) == question.data_source
  assert registry.get("webshop").task_group is None


@pytest.fixture
def games(request):
  pytest.importorskip("alfworld", reason="generating games needs the alfworld wheel's domain files ([envs] extra)")
  return request.getfixturevalue("alfworld_games_root")


def test_a_run_draws_each_iteration_from_its_phase(games, tmp_path):
  """The trainer's draw (GRPO and Agentic-OPD share it) on generated games; a phase too small for one draw stops the
  run before it starts."""
  from conftest import tiny_alfworld_config
  from agentopd_jax.envs.alfworld.spec import alfworld_task_type
  from agentopd_jax.training.assembly import build_run
  from agentopd_jax.training.trainer import Trainer

  c = tiny_alfworld_config("", tmp_path / "run", games, grpo__tasks_per_iteration=1,
                           grpo__task_phases="look_at_obj_in_light@1,pick_and_place@3")
  trainer = Trainer(build_run(c))
  try:
    drawn = {i: {alfworld_task_type(g) for g in trainer.iteration_tasks(i)} for i in range(1, 6)}
  finally:
    trainer.close()
  assert drawn == {1: {"look_at_obj_in_light"}, 2: {"look_at_obj_in_light"}, 3: {"pick_and_place"},
                   4: {"pick_and_place"}, 5: {"pick_and_place"}}
  c.grpo.tasks_per_iteration = 2  # the generated pool has one Look game
  with pytest.raises(ValueError, match=r"grpo.task_phases: the phase from iteration 1 \(look_at_obj_in_light\)"):
    build_run(c)
