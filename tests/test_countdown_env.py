"""Countdown, the smallest registered env (`agentopd_jax/envs/countdown/`): the game's rules on a game checked by hand,
the text side's prompts and reply parsing, the expert, the task pools, and one short run of configs/countdown.py
through experiments/train.py that logs the env's report columns."""
import itertools
import json
import os
import subprocess
import sys

import pytest

from agentopd_jax.envs import registry
from agentopd_jax.envs.countdown.env import COMMANDS, MAX_MOVES, CountdownEnv, apply, game, solve
from agentopd_jax.envs.countdown.spec import CountdownConfig
from agentopd_jax.envs.countdown.text import CountdownText
from agentopd_jax.rollout.text_envs import make_text_env
from conftest import TEST_MODEL

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SPEC = registry.get("countdown")
GROUPS = [f"moves_{n}" for n in range(1, MAX_MOVES + 1)]


def test_a_game_checked_by_hand():
  """Game 7 starts at 3 with target 7: double (6), an unknown word (a spent move), add 1 (7) wins."""
  env = CountdownEnv(max_steps=4)
  obs, infos = env.reset(7)
  assert obs == "You have 3. Reach exactly 7 in at most 4 moves. Each move is 'add 1' or 'double'."
  assert infos == {"admissible_commands": ["add 1", "double"], "won": False}
  assert env.step("double") == ("You have 6. 3 moves left to reach 7.", 0, False,
                                {"admissible_commands": ["add 1", "double"], "won": False})
  assert env.step("jump")[:3] == ("Nothing happens. You have 6. 2 moves left to reach 7.", 0, False)
  assert env.step("add 1") == ("You have 7. You reached 7: you win!", 1, True, {"admissible_commands": [], "won": True})
  with pytest.raises(RuntimeError, match="call reset first"):
    env.step("add 1")
  env.reset(7)  # the same seed is the same game
  assert env.step("double")[0] == "You have 6. 3 moves left to reach 7."
  assert env.step("double")[:3] == ("You have 12. That is past 7: you lose.", 0, True)  # no move goes back down
  env = CountdownEnv(max_steps=2)
  env.reset(7)
  env.step("add 1")
  assert env.step("add 1")[:3] == ("You have 5. No moves left: you lose.", 0, True)
  assert game(7) == (3, 7) and solve(7) == ["double", "add 1"]
  with pytest.raises(ValueError, match="max_steps must be >= 1"):
    CountdownEnv(max_steps=0)


def test_the_text_side_parses_replies_by_verl_agents_rules():
  compact, full = CountdownText(compact=True), CountdownText(compact=False)
  cases = {  # reply -> (action, valid) under the compact template, and under the full one (a <think> block needed)
      "<action>double</action>": (("double", 1), ("double", 0)),
      "<think>3 to 6, then 7.</think><action> Add 1 </action>": (("add 1", 1), ("add 1", 1)),
      "<action>jump</action>": (("jump", 1), ("jump", 0)),  # well formed: the game says "Nothing happens."
      "double": (("double", 0), ("double", 0)),  # no tags: the reply's last 30 characters, invalid
      "": (("", 0), ("", 0)),
      "<think>好</think><action>double</action>": (("double", 0), ("double", 0)),  # a CJK character
  }
  for reply, (want_compact, want_full) in cases.items():
    assert compact.project(reply) == want_compact, reply
    assert full.project(reply) == want_full, reply
  for text in (compact, full):
    assert text.project(text.demo_reply("add 1")) == ("add 1", 1)
    assert text.reward(1, True, {"won": True}) == (10.0, True) and text.reward(0, True, {"won": False}) == (0.0, False)
  with pytest.raises(ValueError, match="env.prompt_flavor"):
    CountdownText(flavor="react")


def test_prompts_show_the_game_and_the_last_moves():
  env, text = CountdownEnv(), CountdownText(history_length=1, compact=False)
  obs, infos = env.reset(7)
  text.begin(obs, infos)
  first = text.step_prompt()
  assert "playing a number game" in first and "ALFRED" not in first and obs in first
  assert "['add 1'\n 'double']" in first and "<think> </think>" in first
  for move in solve(7)[:1]:
    obs, _, _, infos = env.step(move)
    text.observe(move, obs, infos)
  later = text.step_prompt()
  assert "Your task is to: Reach exactly 7 in at most 8 moves." in later
  assert "Action 1: 'double'" in later and obs in later
  assert text.turn_prompt().startswith("\nYou are an expert agent playing a number game.\nYour current observation")
  assert isinstance(make_text_env("countdown", compact=True), CountdownText)


def test_the_expert_wins_every_task_in_the_fewest_moves():
  train, valid = SPEC.tasks(CountdownConfig())
  expert = SPEC.expert_policy(CountdownConfig(), "shortest")
  for task in train + valid:
    moves = expert(task)
    env = CountdownEnv(max_steps=MAX_MOVES)
    env.reset(task)
    results = [env.step(move) for move in moves]
    assert results[-1][2] and results[-1][3]["won"] and not any(done for _, _, done, _ in results[:-1])
    start, target = game(task)
    shorter = (seq for n in range(len(moves)) for seq in itertools.product(COMMANDS, repeat=n))
    assert all(_play(start, seq) != target for seq in shorter), task
    assert SPEC.group_of(task) == f"moves_{len(moves)}"
  with pytest.raises(ValueError, match=r"sft.expert must be one of \('shortest',\) for env 'countdown'"):
    SPEC.expert_policy(CountdownConfig(), "planner")


def _play(value, moves):
  for move in moves:
    value = apply(value, move)
  return value


def test_task_pools_are_fixed_and_disjoint_as_games():
  cfg = CountdownConfig(num_train=300, num_valid=64)
  train, valid = SPEC.tasks(cfg)
  assert (len(train), len(valid)) == (300, 64) and SPEC.tasks(cfg) == (train, valid)
  assert not {game(t) for t in train} & {game(t) for t in valid}
  assert SPEC.tasks(CountdownConfig(num_train=10, num_valid=8)) == (train[:10], valid[:8])  # a bigger pool extends
  assert {SPEC.group_of(t) for t in valid[:8]} == set(GROUPS)  # the test run's panel has every report column
  assert [group for _, group in SPEC.report.columns] == GROUPS and SPEC.report.headline == "All"
  for field in ("num_train", "num_valid"):
    with pytest.raises(ValueError, match=rf"env.{field} must be an integer >= 1, got 0"):
      CountdownConfig(**{field: 0})


def test_config_trains_through_the_entry_point(tmp_path):
  """SFT on the expert's episodes, two GRPO iterations validated (and checkpointed) at 0 and 2, and the env's
  per-group metrics in the log and in the report columns `experiments/compare.py` tabulates. On the tests' `nano`
  model most of its time is compiling."""
  from agentopd_jax.eval.compare import cells, load_run
  from agentopd_jax.storage.checkpoints import CheckpointPool
  from agentopd_jax.storage.logs import read_metrics

  workdir = str(tmp_path / "run")
  flags = {"workdir": workdir, "model.preset": TEST_MODEL, "env.num_workers": 1, "sft.steps": 2, "sft.demos": 8,
           "sft.batch_size": 8, "sft.micro_batch_size": 8, "grpo.iterations": 2, "grpo.tasks_per_iteration": 2,
           "grpo.group_size": 2, "grpo.mini_batch_size": 16, "grpo.micro_batch_size": 8,
           "rollout.max_steps": 4, "rollout.max_response_tokens": 8, "validation.num_tasks": 8,
           "validation.attempts": 1, "validation.every": 2, "logging.plot": False}
  cmd = [sys.executable, os.path.join(ROOT, "experiments", "train.py"),
         f"--config={os.path.join(ROOT, 'configs', 'countdown.py')}"] + [f"--config.{k}={v}" for k, v in flags.items()]
  out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
  assert out.returncode == 0, (out.stdout + out.stderr)[-4000:]
  assert json.loads(out.stdout.strip().splitlines()[-1])["steps"] == [0, 2]
  with CheckpointPool(os.path.join(workdir, "checkpoints"), read_only=True) as pool:
    assert pool.steps() == [0, 2]
    _, problems, _, attempts = pool.outcomes_matrix()
    assert len(problems) == 8 and (attempts == 1).all()
  records = read_metrics(os.path.join(workdir, "logs"))
  assert {r["phase"] for r in records} == {"sft", "train", "val"}
  for record in (r for r in records if r["phase"] == "val"):
    assert {f"val/{group}_success_rate" for group in GROUPS} <= set(record)
  train = [r for r in records if r["phase"] == "train"]
  assert len(train) == 2 and all(r["episode/length/mean"] >= 1 for r in train)
  assert all(any(key.startswith("episode/moves_") for key in r) for r in train)  # the drawn tasks' groups
  table = cells(load_run(workdir))
  assert list(table) == [label for label, _ in SPEC.report.columns] + ["All"]
  assert all(0.0 <= value <= 100.0 for value in table.values())
