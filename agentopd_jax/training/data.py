"""Each iteration's task draw. What a run plays comes from its env's registered spec (`envs.registry`): the
training pool and validation tasks, the env workers, the expert demonstrations and the tokenizer corpus.

The tasks are fixed across run seeds, as a benchmark's are, so seed-to-seed spread measures training randomness (init,
data order, sampling), not a different task set per seed. The draw for iteration i is a pure function of (seed, i): a
resumed run replays the same tasks as an uninterrupted one without storing any data-loader state.
"""
from __future__ import annotations

from typing import List, Sequence

import numpy as np


def iteration_tasks(pool: Sequence[str], n: int, seed: int, iteration: int) -> List[str]:
  """n distinct tasks for one iteration (with replacement across iterations), a pure function of (seed, i)."""
  if n > len(pool):
    raise ValueError(f"grpo.tasks_per_iteration={n} exceeds the {len(pool)} training games")
  rng = np.random.default_rng([seed, iteration])
  return [pool[i] for i in rng.choice(len(pool), n, replace=False)]
