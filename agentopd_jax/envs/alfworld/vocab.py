"""ALFWorld vocabulary: task types, goal phrasings, rooms, receptacles, object affordances and what fits where.

Everything here restates the facts ALFWorld's games are built from (alfworld `gen/constants.py` and
`gen/goal_library.py`, summarised in the research notes §1.2, §1.8, §1.9) so the generator can produce games with the
same vocabulary and the expert can reason about them. Sliced variants are left out: ALFWorld skips slice tasks, so no
generated game contains a sliced object type.
"""
from __future__ import annotations

from typing import FrozenSet


def _types(names: str) -> FrozenSet[str]:
  return frozenset(names.split())


TASK_TYPES = {
    1: "pick_and_place_simple",
    2: "look_at_obj_in_light",
    3: "pick_clean_then_place_in_recep",
    4: "pick_heat_then_place_in_recep",
    5: "pick_cool_then_place_in_recep",
    6: "pick_two_obj_and_place",
}

# Two templates per task; {obj}, {recep} and {toggle} are the lower-cased ALFRED type names.
GOAL_TEMPLATES = {
    "pick_and_place_simple": ("put a {obj} in {recep}", "put some {obj} on {recep}"),
    "look_at_obj_in_light": ("look at {obj} under the {toggle}", "examine the {obj} with the {toggle}"),
    "pick_clean_then_place_in_recep": ("put a clean {obj} in {recep}", "clean some {obj} and put it in {recep}"),
    "pick_heat_then_place_in_recep": ("put a hot {obj} in {recep}", "heat some {obj} and put it in {recep}"),
    "pick_cool_then_place_in_recep": ("put a cool {obj} in {recep}", "cool some {obj} and put it in {recep}"),
    "pick_two_obj_and_place": ("put two {obj} in {recep}", "find two {obj} and put them in {recep}"),
}

# Rooms by AI2-THOR scene number; scenes 1-6 of each room type are ALFRED's test (unseen) scenes.
ROOM_SCENES = {
    "Kitchen": range(1, 31),
    "LivingRoom": range(201, 231),
    "Bedroom": range(301, 331),
    "Bathroom": range(401, 431),
}
UNSEEN_SCENE_OFFSETS = range(1, 7)

TASK_ROOMS = {
    "pick_and_place_simple": ("Kitchen", "LivingRoom", "Bathroom", "Bedroom"),
    "pick_two_obj_and_place": ("Kitchen", "LivingRoom", "Bathroom", "Bedroom"),
    "look_at_obj_in_light": ("LivingRoom", "Bedroom"),
    "pick_clean_then_place_in_recep": ("Kitchen", "Bathroom"),
    "pick_heat_then_place_in_recep": ("Kitchen",),
    "pick_cool_then_place_in_recep": ("Kitchen",),
}

STATIC_RECEPTACLES = _types("ArmChair BathtubBasin Bed Cabinet Cart CoffeeMachine CoffeeTable CounterTop Desk "
                            "DiningTable Drawer Dresser Fridge GarbageCan HandTowelHolder LaundryHamper Microwave "
                            "Ottoman PaintingHanger Safe Shelf SideTable SinkBasin Sofa StoveBurner TVStand Toaster "
                            "Toilet ToiletPaperHanger TowelHolder")
# Receptacles in AI2-THOR that ALFWorld's text games treat as plain objects (nothing can be put into them).
MOVABLE_RECEPTACLES = _types("Bowl Box Cup Mug Plate Pan Pot")

OPENABLE = _types("Fridge Cabinet Microwave Drawer Safe Box")
HEATABLE = _types("Apple Bread Cup Egg Mug Plate Potato Tomato")
COOLABLE = _types("Apple Bowl Bread Cup Egg Lettuce Mug Pan Plate Pot Potato Tomato WineBottle")
CLEANABLE = _types("Apple Bowl ButterKnife Cloth Cup DishSponge Egg Fork Kettle Knife Ladle Lettuce Mug Pan Plate Pot "
                   "Potato SoapBar Spatula Spoon Tomato")
TOGGLEABLE = _types("DeskLamp FloorLamp")
SLICEABLE = _types("Apple Bread Egg Lettuce Potato Tomato")
KNIVES = _types("Knife ButterKnife")
# The appliance each transforming task needs (alfred.pddl fixes the receptacle type of each action).
TASK_APPLIANCE = {
    "pick_clean_then_place_in_recep": "SinkBasin",
    "pick_heat_then_place_in_recep": "Microwave",
    "pick_cool_then_place_in_recep": "Fridge",
}
TASK_AFFORDANCE = {
    "pick_clean_then_place_in_recep": CLEANABLE,
    "pick_heat_then_place_in_recep": HEATABLE,
    "pick_cool_then_place_in_recep": COOLABLE,
}

_TABLE_TOP = _types("AlarmClock Apple BaseballBat BasketBall Book Bowl Box Bread ButterKnife CD Candle CellPhone Cloth "
                    "CreditCard Cup DishSponge Egg Fork Glassbottle HandTowel Kettle KeyChain Knife Ladle Laptop "
                    "Lettuce Mug Newspaper Pan PaperTowel Pen Pencil PepperShaker Plate Pot Potato RemoteControl "
                    "SaltShaker SoapBar SoapBottle Spatula Spoon SprayBottle Statue TennisRacket TissueBox ToiletPaper "
                    "ToiletPaperRoll Tomato Vase Watch WateringCan WineBottle")
_DESK = _types("AlarmClock BasketBall Book Bowl Box CD Candle CellPhone Cloth CreditCard Cup Glassbottle KeyChain "
               "Laptop Mug Newspaper Pen Pencil Plate RemoteControl SoapBottle SprayBottle Statue TennisRacket "
               "TissueBox ToiletPaper ToiletPaperRoll Vase Watch WateringCan WineBottle")
_SEAT = _types("BasketBall Book Box CellPhone Cloth CreditCard KeyChain Laptop Newspaper Pillow RemoteControl")

# canContain: which object types a receptacle type accepts (PutObject is only admissible for these pairs).
CAN_CONTAIN = {
    "CoffeeMachine": _types("Mug"),
    "StoveBurner": _types("Kettle Pan Pot"),
    "Toaster": _types(""),
    "TVStand": _types("TissueBox"),
    "LaundryHamper": _types("Cloth"),
    "TowelHolder": _types("Towel"),
    "HandTowelHolder": _types("HandTowel"),
    "ToiletPaperHanger": _types("ToiletPaper ToiletPaperRoll"),
    "PaintingHanger": _types(""),
    "Microwave": _types("Apple Bowl Bread Cup Egg Glassbottle Mug Plate Potato Tomato"),
    "Fridge": _types("Apple Bowl Bread Cup Egg Glassbottle Lettuce Mug Pan Plate Pot Potato Tomato WineBottle"),
    "SinkBasin": _types("Apple Bowl ButterKnife Cloth Cup DishSponge Egg Fork Glassbottle HandTowel Kettle Knife Ladle "
                        "Lettuce Mug Pan Plate Pot Potato SoapBar Spatula Spoon Tomato"),
    "BathtubBasin": _types("Cloth DishSponge HandTowel SoapBar"),
    "GarbageCan": _types("Apple Bread CD Cloth DishSponge Egg HandTowel Lettuce Newspaper PaperTowel Pen Pencil Potato "
                         "SoapBar SoapBottle SprayBottle TissueBox ToiletPaper ToiletPaperRoll Tomato WineBottle"),
    "Cabinet": _types("Book Bowl Box CD Candle Cloth Cup DishSponge Glassbottle HandTowel Kettle Ladle Mug Newspaper "
                      "Pan PepperShaker Plate Plunger Pot SaltShaker SoapBar SoapBottle SprayBottle TissueBox "
                      "ToiletPaper ToiletPaperRoll Vase WateringCan WineBottle"),
    "Drawer": _types("Book ButterKnife CD Candle CellPhone Cloth CreditCard DishSponge Fork HandTowel KeyChain Knife "
                     "Ladle Newspaper Pen Pencil PepperShaker RemoteControl SaltShaker SoapBar SoapBottle Spatula "
                     "Spoon SprayBottle TissueBox ToiletPaper ToiletPaperRoll Watch WateringCan"),
    "Safe": _types("CD CellPhone CreditCard KeyChain Statue Vase Watch"),
    "Shelf": _types("AlarmClock Book Bowl Box CD Candle CellPhone Cloth CreditCard Cup DishSponge Glassbottle "
                    "HandTowel Kettle KeyChain Mug Newspaper PaperTowel Pen Pencil PepperShaker Plate Pot "
                    "RemoteControl SaltShaker SoapBar SoapBottle SprayBottle Statue TissueBox ToiletPaper "
                    "ToiletPaperRoll Vase Watch WateringCan WineBottle"),
    "CounterTop": _TABLE_TOP,
    "DiningTable": _TABLE_TOP,
    "CoffeeTable": _TABLE_TOP,
    "SideTable": _TABLE_TOP,
    "Desk": _DESK,
    "Dresser": _DESK - {"SoapBottle"},
    "Bed": _types("BaseballBat BasketBall Book CellPhone Laptop Newspaper Pillow TennisRacket"),
    "Sofa": _SEAT,
    "ArmChair": _SEAT,
    "Ottoman": _SEAT,
    "Toilet": _types("Candle Cloth DishSponge HandTowel Newspaper PaperTowel SoapBar SoapBottle SprayBottle TissueBox "
                     "ToiletPaper ToiletPaperRoll"),
    "Cart": _types("Candle Cloth DishSponge HandTowel Mug PaperTowel Plunger SoapBar SoapBottle SprayBottle Statue "
                   "TissueBox ToiletPaper ToiletPaperRoll Vase"),
}

# Room furniture: receptacle type -> (min, max) instances. Types with min 0 appear in some scenes only.
ROOM_RECEPTACLES = {
    "Kitchen": {"Cabinet": (3, 10), "CounterTop": (1, 3), "Drawer": (1, 8), "Fridge": (1, 1), "Microwave": (1, 1),
                "SinkBasin": (1, 1), "StoveBurner": (2, 4), "GarbageCan": (1, 1), "CoffeeMachine": (0, 1),
                "Toaster": (0, 1), "DiningTable": (0, 1), "Shelf": (0, 3), "SideTable": (0, 1)},
    "LivingRoom": {"Sofa": (1, 1), "ArmChair": (0, 2), "CoffeeTable": (0, 2), "SideTable": (1, 3), "TVStand": (0, 1),
                   "Drawer": (0, 6), "Cabinet": (0, 4), "Shelf": (0, 6), "Dresser": (0, 1), "GarbageCan": (1, 1),
                   "DiningTable": (0, 1), "Ottoman": (0, 1), "Safe": (0, 1)},
    "Bedroom": {"Bed": (1, 1), "Desk": (0, 1), "Drawer": (2, 10), "Dresser": (0, 1), "Shelf": (0, 6),
                "SideTable": (1, 2), "GarbageCan": (1, 1), "LaundryHamper": (0, 1), "Safe": (0, 1), "ArmChair": (0, 1)},
    "Bathroom": {"BathtubBasin": (0, 1), "Cabinet": (2, 4), "CounterTop": (1, 1), "Drawer": (0, 4),
                 "GarbageCan": (1, 1), "HandTowelHolder": (0, 2), "SinkBasin": (1, 2), "Toilet": (1, 1),
                 "ToiletPaperHanger": (1, 1), "TowelHolder": (0, 1), "Shelf": (0, 3), "Dresser": (0, 1),
                 "Cart": (0, 1)},
}

# Small objects that occur in each room (lamps are placed separately, on furniture, and cannot be picked up).
ROOM_OBJECTS = {
    "Kitchen": ("Apple", "Bowl", "Bread", "ButterKnife", "Cup", "DishSponge", "Egg", "Fork", "Glassbottle", "Kettle",
                "Knife", "Ladle", "Lettuce", "Mug", "Pan", "PepperShaker", "Plate", "Pot", "Potato", "SaltShaker",
                "SoapBottle", "Spatula", "Spoon", "Tomato", "WineBottle", "CreditCard", "CellPhone", "PaperTowel"),
    "LivingRoom": ("Book", "Bowl", "Box", "CellPhone", "CreditCard", "KeyChain", "Laptop", "Newspaper", "Pillow",
                   "Plate", "RemoteControl", "Statue", "TissueBox", "Vase", "Watch", "WateringCan", "Candle", "CD"),
    "Bedroom": ("AlarmClock", "BaseballBat", "BasketBall", "Book", "Bowl", "Box", "CD", "CellPhone", "Cloth",
                "CreditCard", "KeyChain", "Laptop", "Mug", "Pen", "Pencil", "Pillow", "TennisRacket", "TissueBox",
                "Vase", "Watch", "Statue", "Newspaper"),
    "Bathroom": ("Candle", "Cloth", "DishSponge", "HandTowel", "Plunger", "SoapBar", "SoapBottle", "SprayBottle",
                 "TissueBox", "ToiletPaper", "ToiletPaperRoll", "Towel", "PaperTowel"),
}

# Lamps stand on furniture; the look task needs a lamp on a receptacle the agent can go to.
LAMP_SUPPORTS = ("Desk", "SideTable", "Dresser", "CoffeeTable")
ROOM_LAMPS = {"LivingRoom": ("FloorLamp", "DeskLamp"), "Bedroom": ("DeskLamp", "FloorLamp")}

# Destinations excluded per task: an appliance is never the destination of the task that uses it.
TASK_EXCLUDED_DESTINATIONS = {
    "pick_clean_then_place_in_recep": _types("SinkBasin BathtubBasin"),
    "pick_heat_then_place_in_recep": _types("Microwave"),
    "pick_cool_then_place_in_recep": _types("Fridge"),
}
