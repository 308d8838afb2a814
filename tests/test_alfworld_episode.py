"""Episode rules of the real ALFWorld stack that a plain step-by-step reading of alfred.pddl/.twl2 misses, pinned on a
hand-built game for both engines (the real one when textworld is importable; its outputs are the traces below):

* once an episode is done (won, or out of steps) every step returns that final step's result unchanged: alfworld's
  env is textworld's batch env, which copies a finished game's last state over instead of playing on;
* `look` lists, "next to" the receptacles sharing the agent's spot, each object there once per receptacle there it was
  taken out of and not put back into (TextWorld keeps `not_inreceptacle` facts from `take` effects, and alfred.twl2's
  `list_objects_on_the_floor` reads them), so what it says depends on the episode's history.
"""
import importlib.util

import pytest

if importlib.util.find_spec("alfworld") is None:
  pytest.skip("alfworld is not installed: games are built from its alfred.pddl/.twl2", allow_module_level=True)

from agentopd_jax.envs.alfworld import generator, scenes  # noqa: E402
from agentopd_jax.envs.alfworld.engine_fast import FastEngine  # noqa: E402
from agentopd_jax.envs.alfworld.env import AlfworldEnv  # noqa: E402
from agentopd_jax.envs.alfworld.expert import solve  # noqa: E402

ENGINES = ("fast", "textworld") if importlib.util.find_spec("textworld") is not None else ("fast",)
FACING = "You are facing the cabinet 2, cabinet 1, and drawer 1. Next to it, you see "
WIN = ["go to cabinet 1", "open cabinet 1", "take mug 1 from cabinet 1", "go to countertop 1",
       "move mug 1 to countertop 1"]
# Real engine (TextWorld 1.7.0 + alfworld 0.4.2), both text versions: the moves, and what each `look` said. Ids sort
# Cabinet|1 < Cabinet|2 and Mug|1 < Mug|2, so cabinet 2 holds mug 2 and cabinet 1 holds mug 1.
SHUFFLE = [
    ("go to cabinet 1", None),
    ("look", FACING + "nothing."),
    ("open cabinet 1", None), ("open cabinet 2", None), ("open drawer 1", None),
    ("take soapbar 1 from drawer 1", None),
    ("look", FACING + "nothing."),  # held objects are at no location
    ("move soapbar 1 to cabinet 1", None),
    ("look", FACING + "a soapbar 1."),  # it left the drawer
    ("take soapbar 1 from cabinet 1", None), ("move soapbar 1 to cabinet 2", None),
    ("look", FACING + "a soapbar 1, and a soapbar 1."),  # it left the drawer and cabinet 1
    ("take mug 1 from cabinet 1", None), ("move mug 1 to cabinet 2", None),
    ("look", FACING + "a mug 1, a soapbar 1, and a soapbar 1."),  # objects in id order
    ("take soapbar 1 from cabinet 2", None), ("move soapbar 1 to drawer 1", None),
    ("look", FACING + "a mug 1, a soapbar 1, and a soapbar 1."),  # back in the drawer, out of both cabinets
    ("close drawer 1", None),
    ("look", FACING + "a mug 1, a soapbar 1, and a soapbar 1."),  # closing hides nothing
    ("open drawer 1", None), ("take soapbar 1 from drawer 1", None), ("go to countertop 1", None),
    ("move soapbar 1 to countertop 1", None),
    ("look", "You are facing the countertop 1. Next to it, you see nothing."),  # it never left the countertop
    ("take cloth 1 from countertop 1", None), ("go to cabinet 2", None), ("move cloth 1 to cabinet 1", None),
    ("look", FACING + "a mug 1."),  # the cloth left a receptacle elsewhere; the soap bar is away
    ("take mug 1 from cabinet 2", None), ("move mug 1 to cabinet 1", None),
    ("look", FACING + "a mug 1."),  # back in cabinet 1, out of cabinet 2 now
]


def _game(tmp_path, version: str) -> str:
  """A kitchen corner: two cabinets and a drawer reached from one spot, a countertop, two shelves sharing another."""
  receps = {rid: scenes.Receptacle(rid.split("|")[0], rid, loc)
            for rid, loc in [("CounterTop|1", "loc|1|0|0|0"), ("Cabinet|1", "loc|2|0|0|0"),
                             ("Cabinet|2", "loc|2|0|0|0"), ("Drawer|1", "loc|2|0|0|0"), ("Shelf|1", "loc|3|0|0|0"),
                             ("Shelf|2", "loc|3|0|0|0")]}
  layout = scenes.Layout(1, "Kitchen", tuple(receps.values()), "loc|9|9|0|0")
  placed = [("Mug", "Mug|1", receps["Cabinet|1"]), ("Mug", "Mug|2", receps["Cabinet|2"]),
            ("SoapBar", "SoapBar|1", receps["Drawer|1"]), ("Candle", "Candle|1", receps["Shelf|1"]),
            ("Cloth", "Cloth|1", receps["CounterTop|1"])]
  task = generator.Task("pick_and_place_simple", "Mug", "CounterTop")
  game = generator.compose(task, layout, placed, "put a {obj} in {recep}", "trial_episode_rules")
  return generator.write_game(str(tmp_path), "train", game, version, None)


def _in_version(command: str, version: str) -> str:
  if version == "2.1.1" and command.startswith("move "):
    obj, recep = command[len("move "):].split(" to ")
    return f"put {obj} in/on {recep}"
  return command


def _env(engine: str, gamefile: str, max_steps: int = 50):
  env = AlfworldEnv(engine, max_steps=max_steps)
  env.reset(gamefile)
  return env


@pytest.mark.parametrize("engine", ENGINES)
def test_a_won_episode_is_frozen(engine, tmp_path):
  env = _env(engine, _game(tmp_path, "2.1.3"))
  for command in WIN:
    final = env.step(command)
  assert final[1:3] == (1, True) and final[3]["won"]
  assert "take mug 1 from countertop 1" in final[3]["admissible_commands"]
  for command in ["take mug 1 from countertop 1", "look", "go to shelf 1", "inventory", "xyzzy", ""]:
    assert env.step(command) == final, command  # taking the mug back would un-win a live game


@pytest.mark.parametrize("engine", ENGINES)
def test_an_episode_out_of_steps_is_frozen(engine, tmp_path):
  env = _env(engine, _game(tmp_path, "2.1.3"), max_steps=3)
  env.step("go to cabinet 1")
  assert env.step("open cabinet 1")[2] is False
  final = env.step("take mug 1 from cabinet 1")
  assert final[:3] == ("You pick up the mug 1 from the cabinet 1.", 0, True) and not final[3]["won"]
  for command in WIN[3:] + ["look", "inventory", "xyzzy"]:
    assert env.step(command) == final, command  # the winning move included


@pytest.mark.parametrize("version", ["2.1.3", "2.1.1"])
def test_look_lists_objects_moved_between_receptacles_sharing_a_spot(version, tmp_path):
  gamefile = _game(tmp_path, version)
  envs = [_env(engine, gamefile) for engine in ENGINES]
  for command, feedback in SHUFFLE:
    outs = [env.step(_in_version(command, version)) for env in envs]
    assert all(out == outs[0] for out in outs), (command, outs)
    assert outs[0][0] != "Nothing happens.", command
    if feedback is not None:
      assert outs[0][0] == feedback, command


def test_the_package_exports_alfworld_env():
  import agentopd_jax.envs.alfworld as alfworld
  assert alfworld.AlfworldEnv is AlfworldEnv and "AlfworldEnv" in alfworld.__all__  # as docs/usage.md uses it


def test_the_expert_plans_within_the_episode(tmp_path):
  engine = FastEngine(_game(tmp_path, "2.1.3"), max_steps=3)
  engine.reset()
  with pytest.raises(RuntimeError, match="step limit"):  # a frozen copy would never reach the goal
    solve(engine)
  engine.max_steps = 50
  assert len(solve(engine)) == len(WIN)  # go, open, take, go, move
