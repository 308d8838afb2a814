"""Golden traces: the hand-written games of the research notes' Appendix A, rebuilt as generator inputs, must print
exactly what the real engine (TextWorld 1.7.0 + alfworld 0.4.2) printed there, byte for byte.

The fast engine is always checked; the real engine too when textworld is importable (it is the source of the traces).
Appendix A.2's `help` line is not checked: it came from a 2.1.1 variant that kept the help action, while real 2.1.1
games have none (alfworld's patch script adds it for 2.1.2).
"""
import importlib.util

import pytest

if importlib.util.find_spec("alfworld") is None:
  pytest.skip("alfworld is not installed: games are built from its alfred.pddl/.twl2", allow_module_level=True)

from agentopd_jax.envs.alfworld import generator, scenes  # noqa: E402
from agentopd_jax.envs.alfworld.engine_fast import FastEngine  # noqa: E402

HAS_TEXTWORLD = importlib.util.find_spec("textworld") is not None

HELP = ("Available commands:\n"
        "  look:                             look around your current location\n"
        "  inventory:                        check your current inventory\n"
        "  go to (receptacle):               move to a receptacle\n"
        "  open (receptacle):                open a receptacle\n"
        "  close (receptacle):               close a receptacle\n"
        "  take (object) from (receptacle):  take an object from a receptacle\n"
        "  move (object) to (receptacle):  place an object in or on a receptacle\n"
        "  examine (something):              examine a receptacle or an object\n"
        "  use (object):                     use an object\n"
        "  heat (object) with (receptacle):  heat an object using a receptacle\n"
        "  clean (object) with (receptacle): clean an object using a receptacle\n"
        "  cool (object) with (receptacle):  cool an object using a receptacle\n"
        "  slice (object) with (object):     slice an object using a sharp object\n")
KITCHEN_RESET = ("-= Welcome to TextWorld, ALFRED! =-\n\nYou are in the middle of a room. Looking quickly around you, "
                 "you see a cabinet 2, a cabinet 1, a countertop 1, a diningtable 1, a fridge 1, a garbagecan 1, a "
                 "microwave 1, a sinkbasin 1, and a stoveburner 1.\n\nYour task is to: put a hot potato in countertop.")
GOTOS = ["go to cabinet 1", "go to cabinet 2", "go to countertop 1", "go to diningtable 1", "go to fridge 1",
         "go to garbagecan 1", "go to microwave 1", "go to sinkbasin 1", "go to stoveburner 1"]

# Appendix A.1 (2.1.3): (command, feedback, won).
A1 = [
    ("look", "You are in the middle of a room. Looking quickly around you, you see nothing.", False),
    ("inventory", "You are not carrying anything.", False),
    ("examine countertop 1", "Nothing happens.", False),
    ("open fridge 1", "Nothing happens.", False),
    ("go to countertop 1", "You arrive at countertop 1. On the countertop 1, you see a apple 2, and a knife 1.", False),
    ("go to countertop 1", "Nothing happens.", False),
    ("look", "You are facing the countertop 1. Next to it, you see nothing.", False),
    ("examine countertop 1", "On the countertop 1, you see a apple 2, and a knife 1.", False),
    ("examine apple 1", "Nothing happens.", False),
    ("go to fridge 1", "You arrive at fridge 1. The fridge 1 is closed.", False),
    ("open fridge 1", "You open the fridge 1. The fridge 1 is open. In it, you see a apple 1, and a egg 1.", False),
    ("open fridge 1", "Nothing happens.", False),
    ("close fridge 1", "You close the fridge 1.", False),
    ("open fridge 1", "You open the fridge 1. The fridge 1 is open. In it, you see a apple 1, and a egg 1.", False),
    ("take egg 1 from fridge 1", "You pick up the egg 1 from the fridge 1.", False),
    ("inventory", "You are carrying: a egg 1.", False),
    ("examine egg 1", "There's nothing special about egg 1.", False),
    ("cool egg 1 with fridge 1", "You cool the egg 1 using the fridge 1.", False),
    ("examine egg 1", "This is a cold egg 1.", False),
    ("take apple 2 from fridge 1", "Nothing happens.", False),
    ("go to cabinet 2", "You arrive at cabinet 2. The cabinet 2 is closed.", False),
    ("open cabinet 2", "You open the cabinet 2. The cabinet 2 is open. In it, you see a mug 1.", False),
    ("go to garbagecan 1", "You arrive at garbagecan 1. On the garbagecan 1, you see nothing.", False),
    ("put egg 1 in/on garbagecan 1", "Nothing happens.", False),
    ("move egg 1 to garbagecan 1", "You move the egg 1 to the garbagecan 1.", False),
    ("go to diningtable 1",
     "You arrive at diningtable 1. On the diningtable 1, you see a bread 1, a potato 1, and a spatula 1.", False),
    ("help", HELP, False),
    ("take potato 1 from diningtable 1", "You pick up the potato 1 from the diningtable 1.", False),
    ("go to microwave 1", "You arrive at microwave 1. The microwave 1 is closed.", False),
    ("heat potato 1 with microwave 1", "You heat the potato 1 using the microwave 1.", False),
    ("examine potato 1", "This is a hot potato 1.", False),
    ("go to sinkbasin 1", "You arrive at sinkbasin 1. On the sinkbasin 1, you see nothing.", False),
    ("clean potato 1 with sinkbasin 1", "You clean the potato 1 using the sinkbasin 1.", False),
    ("examine potato 1", "This is a hot and clean potato 1.", False),
    ("go to countertop 1", "You arrive at countertop 1. On the countertop 1, you see a apple 2, and a knife 1.", False),
    ("Go to countertop 1", "Nothing happens.", False),
    ("move potato 1 to countertop 1", "You move the potato 1 to the countertop 1.", True),
]
A1_FINAL = ["examine countertop 1"] + [g for g in GOTOS if g != "go to countertop 1"] + [
    "help", "inventory", "look", "take apple 2 from countertop 1", "take knife 1 from countertop 1",
    "take potato 1 from countertop 1"]

# Appendix A.2 (2.1.1): the same episode; the lines the notes record.
A2 = {
    4: "You arrive at loc 10. On the countertop 1, you see a apple 2, and a knife 1.",
    5: "Nothing happens.",
    9: "You arrive at loc 7. The fridge 1 is closed.",
    23: "Nothing happens.",  # move egg 1 to garbagecan 1
    24: "You put the egg 1 in/on the garbagecan 1.",
    34: "You arrive at loc 10. On the countertop 1, you see a apple 2, and a knife 1.",
    36: "You put the potato 1 in/on the countertop 1.",
}


def _without(lst, *items):
  return [x for x in lst if x not in items]


# Appendix A.3: (command, feedback, admissible afterwards), from a fresh episode.
A3 = [
    ("go to diningtable 1",
     "You arrive at diningtable 1. On the diningtable 1, you see a bread 1, a potato 1, and a spatula 1.",
     ["examine diningtable 1"] + _without(GOTOS, "go to diningtable 1") + [
         "help", "inventory", "look", "take bread 1 from diningtable 1", "take potato 1 from diningtable 1",
         "take spatula 1 from diningtable 1"]),
    ("take potato 1 from diningtable 1", "You pick up the potato 1 from the diningtable 1.",
     ["examine diningtable 1", "examine potato 1"] + _without(GOTOS, "go to diningtable 1") + [
         "help", "inventory", "look", "move potato 1 to diningtable 1"]),
    ("go to microwave 1", "You arrive at microwave 1. The microwave 1 is closed.",
     ["examine microwave 1", "examine potato 1"] + _without(GOTOS, "go to microwave 1") + [
         "heat potato 1 with microwave 1", "help", "inventory", "look", "open microwave 1"]),
    ("open microwave 1", "You open the microwave 1. The microwave 1 is open. In it, you see nothing.",
     ["close microwave 1", "examine microwave 1", "examine potato 1"] + _without(GOTOS, "go to microwave 1") + [
         "heat potato 1 with microwave 1", "help", "inventory", "look", "move potato 1 to microwave 1"]),
    ("go to cabinet 1", "You arrive at cabinet 1. The cabinet 1 is closed.",
     ["examine cabinet 1", "examine potato 1"] + _without(GOTOS, "go to cabinet 1") + [
         "help", "inventory", "look", "open cabinet 1"]),
    ("open cabinet 1", "You open the cabinet 1. The cabinet 1 is open. In it, you see nothing.",
     ["close cabinet 1", "examine cabinet 1", "examine potato 1"] + _without(GOTOS, "go to cabinet 1") + [
         "help", "inventory", "look"]),
    ("move potato 1 to cabinet 1", "Nothing happens.",
     ["close cabinet 1", "examine cabinet 1", "examine potato 1"] + _without(GOTOS, "go to cabinet 1") + [
         "help", "inventory", "look"]),
    ("go to fridge 1", "You arrive at fridge 1. The fridge 1 is closed.",
     ["cool potato 1 with fridge 1", "examine fridge 1", "examine potato 1"] + _without(GOTOS, "go to fridge 1") + [
         "help", "inventory", "look", "open fridge 1"]),
    ("open fridge 1", "You open the fridge 1. The fridge 1 is open. In it, you see a apple 1, and a egg 1.",
     ["close fridge 1", "cool potato 1 with fridge 1", "examine fridge 1", "examine potato 1"] + _without(
         GOTOS, "go to fridge 1") + ["help", "inventory", "look", "move potato 1 to fridge 1"]),
    ("move potato 1 to fridge 1", "You move the potato 1 to the fridge 1.",
     ["close fridge 1", "examine fridge 1"] + _without(GOTOS, "go to fridge 1") + [
         "help", "inventory", "look", "take apple 1 from fridge 1", "take egg 1 from fridge 1",
         "take potato 1 from fridge 1"]),
    ("take apple 1 from fridge 1", "You pick up the apple 1 from the fridge 1.",
     ["close fridge 1", "cool apple 1 with fridge 1", "examine apple 1", "examine fridge 1"] + _without(
         GOTOS, "go to fridge 1") + ["help", "inventory", "look", "move apple 1 to fridge 1"]),
    ("examine fridge 1", "The fridge 1 is open. In it, you see a egg 1, and a potato 1.",
     ["close fridge 1", "cool apple 1 with fridge 1", "examine apple 1", "examine fridge 1"] + _without(
         GOTOS, "go to fridge 1") + ["help", "inventory", "look", "move apple 1 to fridge 1"]),
    ("close fridge 1", "You close the fridge 1.",
     ["cool apple 1 with fridge 1", "examine apple 1", "examine fridge 1"] + _without(GOTOS, "go to fridge 1") + [
         "help", "inventory", "look", "open fridge 1"]),
    ("examine fridge 1", "The fridge 1 is closed.",
     ["cool apple 1 with fridge 1", "examine apple 1", "examine fridge 1"] + _without(GOTOS, "go to fridge 1") + [
         "help", "inventory", "look", "open fridge 1"]),
    ("look", "You are facing the fridge 1. Next to it, you see nothing.",
     ["cool apple 1 with fridge 1", "examine apple 1", "examine fridge 1"] + _without(GOTOS, "go to fridge 1") + [
         "help", "inventory", "look", "open fridge 1"]),
]

# Appendix A.4: look_at_obj_in_light, (command, feedback, won, admissible afterwards).
A4_RESET = ("-= Welcome to TextWorld, ALFRED! =-\n\nYou are in the middle of a room. Looking quickly around you, "
            "you see a desk 1, a drawer 1, and a sidetable 1.\n\n"
            "Your task is to: look at alarmclock under the desklamp.")
A4_START = ["go to desk 1", "go to drawer 1", "go to sidetable 1", "help", "inventory", "look"]
_AT_TABLE = ["examine sidetable 1", "go to desk 1", "go to drawer 1", "help", "inventory", "look",
             "take pen 1 from sidetable 1", "use desklamp 1"]
A4 = [
    ("go to sidetable 1", "You arrive at sidetable 1. On the sidetable 1, you see a desklamp 1, and a pen 1.", False,
     _AT_TABLE),
    ("use desklamp 1", "You turn on the desklamp 1.", False, _AT_TABLE),
    ("use desklamp 1", "You turn on the desklamp 1.", False, _AT_TABLE),
    ("examine desklamp 1", "Nothing happens.", False, _AT_TABLE),
    ("go to drawer 1", "You arrive at drawer 1. The drawer 1 is closed.", False,
     ["examine drawer 1", "go to desk 1", "go to sidetable 1", "help", "inventory", "look", "open drawer 1"]),
    ("open drawer 1", "You open the drawer 1. The drawer 1 is open. In it, you see a book 1.", False,
     ["close drawer 1", "examine drawer 1", "go to desk 1", "go to sidetable 1", "help", "inventory", "look",
      "take book 1 from drawer 1"]),
    ("go to desk 1", "You arrive at desk 1. On the desk 1, you see a alarmclock 1.", False,
     ["examine desk 1", "go to drawer 1", "go to sidetable 1", "help", "inventory", "look",
      "take alarmclock 1 from desk 1"]),
    ("take alarmclock 1 from desk 1", "You pick up the alarmclock 1 from the desk 1.", False,
     ["examine alarmclock 1", "examine desk 1", "go to drawer 1", "go to sidetable 1", "help", "inventory", "look",
      "move alarmclock 1 to desk 1"]),
    ("examine alarmclock 1", "There's nothing special about alarmclock 1.", False,
     ["examine alarmclock 1", "examine desk 1", "go to drawer 1", "go to sidetable 1", "help", "inventory", "look",
      "move alarmclock 1 to desk 1"]),
    ("go to sidetable 1", "You arrive at sidetable 1. On the sidetable 1, you see a desklamp 1, and a pen 1.", True,
     ["examine alarmclock 1", "examine sidetable 1", "go to desk 1", "go to drawer 1", "help", "inventory", "look",
      "move alarmclock 1 to sidetable 1", "use desklamp 1"]),
]


def _kitchen():
  """Appendix A's kitchen. Location names sort countertop first and fridge fourth among the ten locations, which is
  what numbered them `loc 10` and `loc 7` there; `Apple|1` (countertop) sorts first, so it is `apple 2`, and
  `Cabinet|1` (holding the mug) is `cabinet 2`."""
  order = ["CounterTop", "Cabinet|1", "Cabinet|2", "Fridge", "DiningTable", "GarbageCan", "Microwave", "SinkBasin",
           "StoveBurner"]
  receps = {}
  for i, key in enumerate(order):
    kind = key.split("|")[0]
    rid = "Sink|1|SinkBasin" if kind == "SinkBasin" else (key if "|" in key else f"{kind}|1")
    receps[key] = scenes.Receptacle(kind, rid, f"loc|{i + 1}|0|0|0")
  layout = scenes.Layout(1, "Kitchen", tuple(receps.values()), "loc|9|9|0|0")
  placed = [("Apple", "Apple|1", receps["CounterTop"]), ("Knife", "Knife|1", receps["CounterTop"]),
            ("Apple", "Apple|2", receps["Fridge"]), ("Egg", "Egg|1", receps["Fridge"]),
            ("Mug", "Mug|1", receps["Cabinet|1"]), ("Bread", "Bread|1", receps["DiningTable"]),
            ("Potato", "Potato|1", receps["DiningTable"]), ("Spatula", "Spatula|1", receps["DiningTable"])]
  task = generator.Task("pick_heat_then_place_in_recep", "Potato", "CounterTop")
  return generator.compose(task, layout, placed, "put a hot {obj} in {recep}", "trial_golden_kitchen")


def _bedroom():
  receps = {k: scenes.Receptacle(k, f"{k}|1", f"loc|{i + 1}|0|0|0") for i, k in enumerate(["Desk", "Drawer",
                                                                                            "SideTable"])}
  layout = scenes.Layout(301, "Bedroom", tuple(receps.values()), "loc|9|9|0|0")
  placed = [("DeskLamp", "DeskLamp|1", receps["SideTable"]), ("Pen", "Pen|1", receps["SideTable"]),
            ("Book", "Book|1", receps["Drawer"]), ("AlarmClock", "AlarmClock|1", receps["Desk"])]
  task = generator.Task("look_at_obj_in_light", "AlarmClock", "DeskLamp")
  return generator.compose(task, layout, placed, "look at {obj} under the {toggle}", "trial_golden_bedroom")


def _engines(game, version, tmp_path):
  path = generator.write_game(str(tmp_path), "train", game, version, None)
  out = [FastEngine(path)]
  if HAS_TEXTWORLD:
    from agentopd_jax.envs.alfworld.engine_textworld import TextWorldEngine
    out.append(TextWorldEngine(path))
  return out


def test_kitchen_trace_213(tmp_path):
  for env in _engines(_kitchen(), "2.1.3", tmp_path):
    obs, infos = env.reset()
    assert obs == KITCHEN_RESET
    assert infos["admissible_commands"] == GOTOS + ["help", "inventory", "look"]
    for command, feedback, won in A1:
      obs, score, done, infos = env.step(command)
      assert (obs, infos["won"], done, score) == (feedback, won, won, float(won)), (type(env).__name__, command)
    assert infos["admissible_commands"] == A1_FINAL


def test_kitchen_trace_211(tmp_path):
  for env in _engines(_kitchen(), "2.1.1", tmp_path):
    obs, infos = env.reset()
    assert obs == KITCHEN_RESET
    assert infos["admissible_commands"] == GOTOS + ["inventory", "look"]  # no help before alfworld 0.4
    for i, (command, _, won) in enumerate(A1):
      command = {"move egg 1 to garbagecan 1": "put egg 1 in/on garbagecan 1",
                 "put egg 1 in/on garbagecan 1": "move egg 1 to garbagecan 1",
                 "move potato 1 to countertop 1": "put potato 1 in/on countertop 1"}.get(command, command)
      obs, score, done, infos = env.step(command)
      if i in A2:
        assert obs == A2[i], (type(env).__name__, command)
      assert infos["won"] == won


def test_heat_admissible_trace(tmp_path):
  for env in _engines(_kitchen(), "2.1.3", tmp_path):
    env.reset()
    for command, feedback, admissible in A3:
      obs, _, _, infos = env.step(command)
      assert (obs, infos["admissible_commands"]) == (feedback, sorted(admissible)), (type(env).__name__, command)


def test_look_trace(tmp_path):
  for env in _engines(_bedroom(), "2.1.3", tmp_path):
    obs, infos = env.reset()
    assert (obs, infos["admissible_commands"]) == (A4_RESET, A4_START)
    for command, feedback, won, admissible in A4:
      obs, score, done, infos = env.step(command)
      assert (obs, infos["won"], done, infos["admissible_commands"]) == (feedback, won, won, admissible), command


# Rules the generated games rarely reach: slicing and the sliced/hot/clean/cool texts, a receptacle-object, two
# cabinets reached from one spot, a lamp. Both engines must agree; the texts follow alfred.twl2's rule order.
RARE = [
    ("go to countertop 1", None),
    ("take knife 1 from countertop 1", None),
    ("slice apple 1 with knife 1", "You sliced the apple 1 with the knife 1."),
    ("examine knife 1", "There's nothing special about knife 1."),
    ("move knife 1 to countertop 1", None),
    ("take apple 1 from countertop 1", None),
    ("examine apple 1", "This is a sliced apple 1."),
    ("go to microwave 1", None), ("heat apple 1 with microwave 1", None),
    ("examine apple 1", "This is a hot sliced apple 1."),
    ("go to sinkbasin 1", None), ("clean apple 1 with sinkbasin 1", None),
    ("examine apple 1", "This is a hot and clean sliced apple 1."),
    ("go to fridge 1", None), ("cool apple 1 with fridge 1", None),
    ("examine apple 1", "This is a cool and clean sliced apple 1."),
    ("go to cabinet 1", "You arrive at cabinet 1. The cabinet 1 is closed."),
    ("look", "You are facing the cabinet 2, and cabinet 1. Next to it, you see nothing."),
    ("go to cabinet 2", "Nothing happens."),
    ("examine cabinet 2", "The cabinet 2 is closed."),
    ("open cabinet 2", "You open the cabinet 2. The cabinet 2 is open. In it, you see a mug 1."),
    ("go to countertop 1", None), ("move apple 1 to countertop 1", None), ("take mug 2 from countertop 1", None),
    ("examine mug 2", "This is a normal mug 2. In it, you see nothing."),
    ("go to diningtable 1", None),
    ("use desklamp 1", "You turn on the desklamp 1."),
    ("inventory", "You are carrying: a mug 2."),
]


def test_rare_rules(tmp_path):
  receps = {rid: scenes.Receptacle(rid.split("|")[0].replace("Sink", "SinkBasin"), rid, loc)
            for rid, loc in [("CounterTop|1", "loc|1|0|0|0"), ("Cabinet|1", "loc|2|0|0|0"),
                             ("Cabinet|2", "loc|2|0|0|0"), ("Microwave|1", "loc|3|0|0|0"),
                             ("Sink|1|SinkBasin", "loc|4|0|0|0"), ("Fridge|1", "loc|5|0|0|0"),
                             ("DiningTable|1", "loc|6|0|0|0")]}
  layout = scenes.Layout(1, "Kitchen", tuple(receps.values()), "loc|9|9|0|0")
  placed = [("Apple", "Apple|1", receps["CounterTop|1"]), ("Knife", "Knife|1", receps["CounterTop|1"]),
            ("Mug", "Mug|1", receps["CounterTop|1"]), ("DeskLamp", "DeskLamp|1", receps["DiningTable|1"]),
            ("Mug", "Mug|2", receps["Cabinet|1"])]  # Mug|1 sorts first: it is "mug 2"; Cabinet|1 is "cabinet 2"
  task = generator.Task("pick_and_place_simple", "Mug", "Microwave")
  game = generator.compose(task, layout, placed, "put a {obj} in {recep}", "trial_golden_rare")
  engines = _engines(game, "2.1.3", tmp_path)
  outputs = [[env.reset()] for env in engines]
  for command, feedback in RARE:
    for env, out in zip(engines, outputs):
      out.append(env.step(command))
    if feedback is not None:
      assert outputs[0][-1][0] == feedback, command
  assert all(out == outputs[0] for out in outputs)
