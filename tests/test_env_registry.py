"""One registered spec per env (`envs.registry`): `training/` names no env, and an env registered from outside the
package (here the Countdown game under another name, with its own text side and a config field of its own) trains
end to end through the same entry point."""
import ast
import dataclasses
import functools
import json
import logging
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from agentopd_jax.envs import registry
from agentopd_jax.envs.countdown.env import CountdownEnv, solve
from agentopd_jax.rollout.text_envs import make_text_env
from agentopd_jax.training import presets
from conftest import TEST_MODEL

PACKAGE = Path(__file__).resolve().parents[1] / "agentopd_jax"
BUILT_IN = ("alfworld", "countdown", "search", "webshop")


def test_every_env_package_registers_its_spec():
  assert set(BUILT_IN) <= set(registry.names())
  for name in BUILT_IN:
    spec = registry.get(name)
    assert spec.name == name and spec.experts
    assert spec.text_env.name == name and isinstance(make_text_env(name), spec.text_env)
  with pytest.raises(ValueError, match=r"env.name must be one of .*'alfworld'.*got 'minecraft'"):
    registry.get("minecraft")
  with pytest.raises(ValueError, match="registered already"):
    registry.register(registry.EnvSpec(name="alfworld", tasks=None, worker=None, text_env=None, experts=(),
                                       expert=None))


def test_looking_specs_up_needs_no_env_extra():
  """Discovery imports every env package's spec, so it must not import TextWorld, bm25s, rapidfuzz or spaCy: an
  ALFWorld-only install still finds its spec, and each heavy package loads only when its env builds something."""
  code = textwrap.dedent("""
      import sys
      class Block:
        def find_spec(self, name, path=None, target=None):
          if name.split(".")[0] in ("textworld", "alfworld", "bm25s", "rapidfuzz", "spacy", "torch"):
            raise ImportError("blocked " + name)
      sys.meta_path.insert(0, Block())
      from agentopd_jax.envs import registry
      print(",".join(registry.names()))
  """)
  out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=PACKAGE.parent, timeout=300)
  assert out.returncode == 0, out.stderr[-2000:]
  assert set(BUILT_IN) <= set(out.stdout.strip().split(","))


def test_an_unknown_expert_names_the_field_and_the_env():
  experts = r"\('explorer', 'planner', 'skilled_explorer'\)"
  with pytest.raises(ValueError, match=rf"sft.expert must be one of {experts} for env 'alfworld'"):
    registry.get("alfworld").expert_policy(None, "oracle")
  with pytest.raises(ValueError, match=r"sft.expert must be one of \('oracle', 'question_searcher'\) for env 'search'"):
    registry.get("search").expert_policy(None, "explorer")


def test_alfworld_demonstrations_do_not_depend_on_where_the_games_live(tmp_path):
  """The explorers' searches are seeded by the game's folder below its data root, so the same games copied
  elsewhere (another user's cache) give the same demonstrations."""
  pytest.importorskip("alfworld", reason="generating games needs the alfworld wheel's domain files")
  import shutil

  from agentopd_jax.envs.alfworld import generator
  from agentopd_jax.envs.alfworld.spec import expert_actions, game_name

  here = tmp_path / "a"
  generator.generate(str(here), sizes={"valid_seen": 4})
  there = shutil.copytree(here, tmp_path / "elsewhere" / "cache")
  games = sorted(here.rglob("*.tw-pddl"))
  assert len(games) == 4
  for game in games:
    moved = there / game.relative_to(here)
    assert game_name(str(game)) == game_name(str(moved)) and game_name(str(game)).startswith("valid_seen/")
    for expert in ("explorer", "skilled_explorer"):
      assert expert_actions(str(game), expert) == expert_actions(str(moved), expert)


def test_training_names_no_env():
  """No module of `training/` imports an env package or compares against an env's name: what a run plays comes
  from the spec of `env.name`, so a new env touches only its own folder."""
  for path in sorted((PACKAGE / "training").glob("*.py")):
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
      if isinstance(node, ast.ImportFrom) and node.module:
        assert not re.match(r"agentopd_jax\.envs\.(alfworld|webshop|search)\b", node.module), (path, node.module)
      if isinstance(node, ast.Constant) and isinstance(node.value, str) and not _is_docstring(tree, node):
        assert node.value not in BUILT_IN, (path.name, node.lineno, node.value)


def _is_docstring(tree, node) -> bool:
  return any(isinstance(n, (ast.Module, ast.FunctionDef, ast.ClassDef)) and n.body and
             isinstance(n.body[0], ast.Expr) and n.body[0].value is node for n in ast.walk(tree))


# ---------------------------------------------------------------------------------------------- an outside env
class OutsideText:
  """The policy's side of the Countdown game, in the `TextEnv` interface, written outside the package."""

  name = "outside_countdown"

  def __init__(self, history_length: int = 2, compact: bool = True, flavor: str = "verl-agent",
               invalid_penalty: float = 0.1, reward_scale: float = 1.0):
    self.history_length, self.invalid_penalty, self.reward_scale = history_length, invalid_penalty, reward_scale
    self.task, self.observation, self.memory = "", "", []

  def begin(self, observation, infos):
    self.task, self.observation, self.memory = observation, observation, []

  def step_prompt(self):
    recent = "".join(f"{a} -> {o}\n" for a, o in self.memory[-self.history_length:] if self.history_length)
    return f"{self.task}\n{recent}{self.turn_prompt()}"

  def turn_prompt(self):
    return f"{self.observation}\nReply <action>add 1</action> or <action>double</action>."

  def project(self, response):
    match = re.search(r"<action>(.*?)</action>", response)
    action = match.group(1).strip() if match else response.strip()
    return action, int(action in CountdownEnv.COMMANDS)

  def demo_reply(self, action):
    return f"<action>{action}</action>"

  def observe(self, action, observation, infos):
    self.memory.append((action, observation))
    self.observation = observation

  def reward(self, score, done, infos):
    won = bool(infos.get("won", False))
    return self.reward_scale * 10.0 * won, won


@dataclasses.dataclass(frozen=True)
class OutsideConfig(registry.EnvCommon):
  """The outside env's `env` section: the shared fields plus its own."""
  name: str = "outside_countdown"
  num_games: int = 16
  reward_scale: float = 1.0


OUTSIDE = registry.EnvSpec(
    name="outside_countdown", config=OutsideConfig,
    tasks=lambda env_cfg: (list(range(100, 100 + env_cfg.num_games)), list(range(env_cfg.num_games))),
    worker=lambda env_cfg, max_steps=None: functools.partial(CountdownEnv, max_steps=max_steps or 8),
    text_env=OutsideText, experts=("bfs",), expert=lambda env_cfg, name: solve,
    text_options=lambda env_cfg: {"reward_scale": env_cfg.reward_scale})


def test_an_env_registered_from_outside_trains_end_to_end(tmp_path, monkeypatch):
  """SFT on the expert's episodes, GRPO, validation and a checkpoint, for an env the package has never heard of;
  its own config field (`env.reward_scale`) reaches its text side through `text_options`."""
  monkeypatch.setenv("AGENTOPD_CACHE", str(tmp_path / "cache"))
  from agentopd_jax.training.assembly import text_env_factory
  from agentopd_jax.training.trainer import train

  registry.register(OUTSIDE)
  c = presets.cpu_base("outside_countdown")
  c.workdir = str(tmp_path / "run")
  c.model.preset = TEST_MODEL
  c.env.num_games = 8
  c.env.reward_scale = 0.5
  c.env.num_workers = 1
  c.mesh_shape = (8, 1, 1)
  c.builtin_tokenizer.vocab_size = 512
  c.sft.update(dict(steps=2, demos=4, batch_size=8, micro_batch_size=8, expert="bfs"))
  c.grpo.update(dict(iterations=1, tasks_per_iteration=2, group_size=2, mini_batch_size=16, micro_batch_size=8))
  c.rollout.update(dict(max_steps=4, max_response_tokens=8))
  c.validation.update(dict(num_tasks=4, attempts=1, every=1))
  c.logging.update(dict(plot=False, tensorboard=False))
  assert text_env_factory(c)().reward(0, True, {"won": True}) == (5.0, True)
  summary = train(c)
  assert summary["steps"] == [0, 1] and 0.0 <= summary["final_success"] <= 1.0
  lines = [json.loads(line) for line in (tmp_path / "run" / "logs" / "metrics.jsonl").read_text().splitlines()]
  assert {line["phase"] for line in lines} >= {"sft", "train", "val"}
  episodes = [line for line in lines if line["phase"] == "train"]
  assert episodes and all(line["episode/length/mean"] >= 1 for line in episodes)


def test_a_panel_longer_than_the_envs_validation_tasks_is_all_of_them_and_says_so(caplog):
  from agentopd_jax.training.assembly import validation_panel

  with caplog.at_level(logging.WARNING):
    assert validation_panel(list(range(5)), 3, "alfworld") == [0, 1, 2]
    assert not caplog.records
    assert validation_panel(list(range(5)), 8, "alfworld") == [0, 1, 2, 3, 4]
  assert "validation.num_tasks=8, but env alfworld has 5 validation tasks: the panel is all 5" in caplog.text
