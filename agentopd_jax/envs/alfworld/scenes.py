"""Room layouts: the furniture of each scene number, where it stands, and where the agent starts.

In ALFRED a scene (AI2-THOR floor plan) fixes the furniture and each trial re-places the small objects, so the layout
here is a pure function of the scene number; held-out (unseen) layouts are simply the test scene numbers. Ids and
location names follow ALFRED's conventions (`Cabinet|+00.95|+02.10|-01.23`, `Sink|...|SinkBasin`,
`loc|x|z|rotation|horizon`), because TextWorld names and numbers entities from them.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Dict, List, Tuple

from agentopd_jax.envs.alfworld import vocab

# Some neighbouring cabinets and drawers are reached from one spot (alfworld issues #97/#121: `go to` the other one
# then says "Nothing happens.").
SHARED_LOCATION_PROB = 0.2
_SHAREABLE = ("Cabinet", "Drawer")
_BASINS = {"SinkBasin": "Sink", "BathtubBasin": "Bathtub"}


@dataclass(frozen=True)
class Receptacle:
  kind: str  # ALFRED type, e.g. "CounterTop"
  alfred_id: str
  location: str  # ALFRED location name, e.g. "loc|-4|3|2|45"


@dataclass(frozen=True)
class Layout:
  scene: int
  room: str
  receptacles: Tuple[Receptacle, ...]
  start: str

  def kinds(self) -> Dict[str, List[Receptacle]]:
    out: Dict[str, List[Receptacle]] = {}
    for r in self.receptacles:
      out.setdefault(r.kind, []).append(r)
    return out


def room_of(scene: int) -> str:
  for room, scenes in vocab.ROOM_SCENES.items():
    if scene in scenes:
      return room
  raise ValueError(f"scene {scene} is not an ALFRED scene number")


def is_unseen(scene: int) -> bool:
  return scene % 100 in vocab.UNSEEN_SCENE_OFFSETS


def scenes(room: str, unseen: bool) -> List[int]:
  return [s for s in vocab.ROOM_SCENES[room] if is_unseen(s) == unseen]


def alfred_id(kind: str, rng: random.Random) -> str:
  """An ALFRED object id: type and a world position; sink and bathtub basins carry their parent's name first."""
  xyz = "|".join(f"{rng.uniform(-4.0, 4.0):+06.2f}" for _ in range(3))
  return f"{_BASINS[kind]}|{xyz}|{kind}" if kind in _BASINS else f"{kind}|{xyz}"


def layout(scene: int) -> Layout:
  rng = random.Random(f"alfworld-scene-{scene}")
  room = room_of(scene)
  spots = rng.sample([(x, z) for x in range(-12, 13) for z in range(-12, 13)], 64)

  def new_location() -> str:
    x, z = spots.pop()
    return f"loc|{x}|{z}|{rng.randrange(4)}|{rng.choice((0, 15, 30, 45, 60))}"

  receptacles = []
  for kind, (lo, hi) in vocab.ROOM_RECEPTACLES[room].items():
    for i in range(rng.randint(lo, hi)):
      if kind in _SHAREABLE and i > 0 and rng.random() < SHARED_LOCATION_PROB:
        location = receptacles[-1].location
      else:
        location = new_location()
      receptacles.append(Receptacle(kind, alfred_id(kind, rng), location))
  return Layout(scene, room, tuple(receptacles), new_location())
