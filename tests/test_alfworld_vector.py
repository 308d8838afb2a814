"""ALFWorld in the vector env: GRPO groups play the same game in worker processes; results equal in-process play."""
import functools

import pytest

pytest.importorskip("alfworld", reason="generating games needs the alfworld wheel's domain files ([envs] extra)")

from agentopd_jax.envs.alfworld import data, generator  # noqa: E402
from agentopd_jax.envs.alfworld.env import AlfworldEnv  # noqa: E402
from agentopd_jax.envs.alfworld.expert import solve  # noqa: E402
from agentopd_jax.envs.alfworld.engine_fast import FastEngine  # noqa: E402
from agentopd_jax.envs.vector import VectorEnv, group_tasks  # noqa: E402


@pytest.fixture(scope="module")
def games(tmp_path_factory):
  root = str(tmp_path_factory.mktemp("alfworld"))
  generator.generate(root, sizes={"train": 3})
  return data.game_files("train", root)


def test_groups_play_the_same_game_and_match_in_process(games):
  tasks, group_ids = group_tasks(games, 2)
  plans = {}
  for g in games:
    engine = FastEngine(g)
    engine.reset()
    plans[g] = solve(engine)
  with VectorEnv(functools.partial(AlfworldEnv, "fast"), num_workers=2, num_envs=len(tasks)) as venv:
    obs, infos = venv.reset(tasks)
    assert obs[0] == obs[1] and obs[2] == obs[3] and obs[0] != obs[2]
    assert group_ids == [0, 0, 1, 1, 2, 2]
    assert all(info["gamefile"] == task for info, task in zip(infos, tasks))
    reference = [AlfworldEnv("fast") for _ in tasks]
    for env, task in zip(reference, tasks):
      env.reset(task)
    # Odd members follow the expert, even members waste their first step on an inadmissible action.
    actions = [["Go To Nowhere"] + plans[t] if i % 2 == 0 else list(plans[t]) for i, t in enumerate(tasks)]
    done = [False] * len(tasks)
    for step in range(max(len(a) for a in actions)):
      batch = [a[step] if step < len(a) and not d else None for a, d in zip(actions, done)]
      obs, scores, dones, infos = venv.step(batch)
      for i, action in enumerate(batch):
        if action is None:
          continue
        expected = reference[i].step(action)
        assert (obs[i], scores[i], dones[i]) == expected[:3]
        assert infos[i]["admissible_commands"] == expected[3]["admissible_commands"]
        done[i] = dones[i]
    assert all(info["won"] for info in infos)


def test_unknown_engine_is_a_clear_error():
  with pytest.raises(ValueError, match="engine must be one of"):
    AlfworldEnv("other")
