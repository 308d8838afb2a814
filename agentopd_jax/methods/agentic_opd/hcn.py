"""HCN ("Highest Coverage Next") teacher scheduling for Agentic-OPD, plus the baselines it is compared against.

Why: the best-validation checkpoint of a GRPO run (the student) fails on problems that earlier checkpoints of the same
run solved, and the union of the checkpoints' solved sets is much larger than any single one. Agentic-OPD distils
from one resident teacher checkpoint at a time and, after every student validation, picks the teacher that covers
most of what the student still gets wrong — weighted so that a teacher which keeps covering unsolved problems but
keeps losing is not starved (research/methods.md §2.1). Notation: U = validation problems, P = the student's solved
set at its latest validation, Q_i = teacher i's solved set, M_i = Q_i − P its marginal set.

Strategies (`SCHEDULERS`):
  hcn          per-teacher weights (state version 3, `per_teacher_weighted_qi_minus_pt_reset_selected`, the default):
               priority_i = Σ_{q∈M_i} w_i(q); the selected teacher's weights reset, the others' age on M_i.
  hcn_global   the older variant (state v≤2): one weight per problem, aged once per round while anyone covers it.
  static_best  the teacher that solved the most problems (or a given one), every round.
  random       a uniformly random teacher from a seeded numpy Generator.
  round_robin  teachers 0, 1, …, K−1, 0, … in the given order.

Ties between teachers of equal priority (both HCN variants, see `Scheduler._hcn_choice`): larger |M_i|, then
larger mean over datasets d of |M_i^d| / |U^d| (the "coverage ratio"; problem ids are namespaced `dataset:uid`),
compared as exact fractions, then earlier checkpoint step, then lower index. The newest original code keeps every
teacher eligible, so nothing is pruned unless the caller applies `prune_dominated` (the older startup pruning).

Layout, for speed (100 teachers × 10 000 problems in ~2 ms a round): problems are indexed to ints once, ordered by
(dataset, id) so each dataset is a column range; the solved sets are one bool matrix [K, N] and the v3 weights one
int8 matrix [K, N] (only the entries q ∈ Q_i are ever read). Checkpoints solve a large share of the validation set,
so dense costs at most a few times the memory of a sparse layout (2·K·N bytes: 2 MB here) and makes a round a handful
of contiguous vector passes — no Python loop over problems or teachers.

State: `state_dict()` is JSON (version, strategy, a fingerprint of the teachers and problems, the round, the last
selection and the strategy's weights or RNG state); `save_state` publishes it atomically, so a reader (the worker
that swaps the resident teacher) sees the old file or the new one, never half of one.
"""
from __future__ import annotations

import abc
import dataclasses
import functools
import hashlib
import json
import os
from collections.abc import Iterable, Sequence
from fractions import Fraction
from typing import Any

import numpy as np

from agentopd_jax.storage.atomic import atomic_write_json

STRATEGY_V3 = "per_teacher_weighted_qi_minus_pt_reset_selected"
STRATEGY_GLOBAL = "global_weighted_qi_minus_pt"


@dataclasses.dataclass(frozen=True)
class Teacher:
  """A frozen checkpoint of the GRPO run: its name (unique in a pool), global step and validation solved set Q_i."""
  name: str
  step: int
  solved: frozenset[str]

  def __post_init__(self):
    object.__setattr__(self, "solved", frozenset(self.solved))


@dataclasses.dataclass(frozen=True)
class Selection:
  """One scheduling round: the chosen teacher and, per teacher, what the choice was made on (for logging).

  priority: Σ_{q∈M_i} w_i(q), the original's `weighted_marginal_gain` (unit weights for the baselines, = |M_i|).
  marginal: |M_i|.  gain: mean over datasets of |M_i^d| / |U^d| (`mean_normalized_marginal_gain`).
  """
  round: int
  index: int
  name: str
  priority: tuple[int, ...]
  marginal: tuple[int, ...]
  gain: tuple[float, ...]


def dataset_of(problem: str) -> str:
  """'nq:123' -> 'nq': the part before the first ':'; ids without ':' all belong to one dataset, ''."""
  head, sep, _ = problem.partition(":")
  return head if sep else ""


class Scheduler(abc.ABC):
  """Shared part of every strategy: the problem index, the solved-set matrix, `select` and the state round trip.

  A round: `select(P)` computes every teacher's marginal set against the student's solved set P (ids outside
  `problems` are ignored: no teacher can have solved them), ranks with `_priorities` and `_choose`, then `_update`s
  the strategy's state. Subclasses set `strategy`/`version` and override those hooks.
  """
  strategy = ""
  version = 0

  def __init__(self, teachers: Sequence[Teacher], problems: Iterable[str]):
    self.teachers = tuple(teachers)
    if not self.teachers:
      raise ValueError("a teacher scheduler needs at least one teacher")
    names = [t.name for t in self.teachers]
    if len(set(names)) != len(names):
      raise ValueError(f"teacher names must be unique (state files refer to teachers by name): {names}")
    self.problems = tuple(sorted(set(problems), key=lambda q: (dataset_of(q), q)))
    if not self.problems:
      raise ValueError("a teacher scheduler needs a non-empty problem set U")
    self._index = {q: k for k, q in enumerate(self.problems)}
    self.datasets = tuple(sorted({dataset_of(q) for q in self.problems}))
    dataset_ids = {d: k for k, d in enumerate(self.datasets)}
    problem_dataset = np.array([dataset_ids[dataset_of(q)] for q in self.problems], np.int64)  # non-decreasing
    self._dataset_starts = np.searchsorted(problem_dataset, np.arange(len(self.datasets)))  # column range of each d
    self._dataset_sizes = np.bincount(problem_dataset)  # |U^d|
    self._solved_by = np.zeros((len(self.teachers), len(self.problems)), bool)  # row i = Q_i
    for i, t in enumerate(self.teachers):
      unknown = t.solved.difference(self._index)
      if unknown:
        raise ValueError(f"teacher {t.name!r} solved {len(unknown)} problems outside `problems`, e.g. "
                         f"{sorted(unknown)[:3]}")
      self._solved_by[i, [self._index[q] for q in t.solved]] = True
    self.round = 0
    self.selected: int | None = None  # index of the last selected teacher

  def select(self, student_solved: Iterable[str]) -> Selection:
    """Pick the next teacher given the student's solved set P_t and update the strategy's state."""
    solved = np.zeros(len(self.problems), bool)
    solved[[k for q in student_solved if (k := self._index.get(q)) is not None]] = True
    missing = self._solved_by & ~solved  # [K, N]: q ∈ M_i
    per_dataset = np.add.reduceat(missing, self._dataset_starts, axis=1, dtype=np.int64)  # [K, D]: |M_i^d|
    marginal = per_dataset.sum(axis=1)
    priority = self._priorities(solved, missing, marginal)
    i = self._choose(priority, marginal, per_dataset)
    self._update(i, missing)
    self.round += 1
    self.selected = i
    gain = (per_dataset / self._dataset_sizes).mean(axis=1)
    return Selection(self.round, i, self.teachers[i].name, tuple(priority.tolist()), tuple(marginal.tolist()),
                     tuple(gain.tolist()))

  def _priorities(self, solved: np.ndarray, missing: np.ndarray, marginal: np.ndarray) -> np.ndarray:
    """[K] int64 priorities from the student's [N] solved mask, the [K, N] mask q ∈ M_i and |M_i|; unit weights."""
    return marginal

  @abc.abstractmethod
  def _choose(self, priority: np.ndarray, marginal: np.ndarray, per_dataset: np.ndarray) -> int:
    """The chosen teacher's index: each strategy's own rule."""

  def _update(self, i: int, missing: np.ndarray) -> None:
    """Strategy state after teacher i was chosen; baselines have none."""

  def _hcn_choice(self, priority: np.ndarray, marginal: np.ndarray, per_dataset: np.ndarray) -> int:
    """argmax priority; ties → larger |M_i| → larger mean_d |M_i^d|/|U^d| → earlier step → lower index.

    The coverage ratio is compared as an exact fraction (Σ_d |M_i^d|/|U^d|; the 1/D of the mean does not change the
    order), so two teachers whose ratios are mathematically equal fall through to the step rule whatever the float
    rounding."""
    tied = np.flatnonzero(priority == priority.max())
    tied = tied[marginal[tied] == marginal[tied].max()]
    if len(tied) == 1:
      return int(tied[0])
    sizes = self._dataset_sizes.tolist()

    def key(i):
      ratio = sum(Fraction(c, u) for c, u in zip(per_dataset[i].tolist(), sizes))
      return -ratio, self.teachers[i].step, i

    return min(tied.tolist(), key=key)

  # ------------------------------------------------------------------ state

  @functools.cached_property
  def fingerprint(self) -> str:
    """sha256 of the problem set and every teacher's name, step and solved set: a state file is only valid for the
    pool it was written for."""
    h = hashlib.sha256("\0".join(self.problems).encode())
    for i, t in enumerate(self.teachers):
      h.update(f"\1{t.name}\0{t.step}\0".encode())
      h.update(np.packbits(self._solved_by[i]).tobytes())
    return h.hexdigest()

  def _config(self) -> dict[str, Any]:
    """Constructor settings the state was produced under; a state saved under other settings is refused."""
    return {}

  def _extra_state(self) -> dict[str, Any]:
    return {}

  def _load_extra(self, state: dict) -> None:
    """Validate the strategy's part of `state` completely, then adopt it (all or nothing)."""

  def state_dict(self) -> dict[str, Any]:
    """JSON-serialisable state; `load_state_dict` on a scheduler built the same way continues identically."""
    selected = None if self.selected is None else self.teachers[self.selected].name
    return {"version": self.version, "strategy": self.strategy, "fingerprint": self.fingerprint,
            "teachers": [t.name for t in self.teachers], "config": self._config(), "round": self.round,
            "selected": selected, **self._extra_state()}

  def load_state_dict(self, state: dict) -> None:
    """Adopt a `state_dict()`; a ValueError says what does not match, and nothing is changed then."""
    try:
      if not isinstance(state, dict):
        raise ValueError(f"expected a JSON object, got {type(state).__name__}")
      for key, want in (("version", self.version), ("strategy", self.strategy)):
        if state.get(key) != want:
          raise ValueError(f"{key} is {state.get(key)!r}, this scheduler is {want!r}")
      if state.get("fingerprint") != self.fingerprint:
        raise ValueError(f"it was written for another teacher pool or problem set (teachers {state.get('teachers')}, "
                         f"here {[t.name for t in self.teachers]})")
      if state.get("config") != self._config():
        raise ValueError(f"config is {state.get('config')}, this scheduler has {self._config()}")
      round_ = _field(state, "round", int)
      selected = state.get("selected")
      names = [t.name for t in self.teachers]
      if round_ < 0 or (selected is not None and selected not in names) or (selected is None) != (round_ == 0):
        raise ValueError(f"inconsistent round {round_} / selected {selected!r}")
      self._load_extra(state)
    except (KeyError, TypeError, ValueError) as e:
      raise ValueError(f"{self.strategy} scheduler state does not fit: {e}") from e
    self.round = round_
    self.selected = None if selected is None else names.index(selected)


def _field(state: dict, key: str, kind: type):
  if key not in state:
    raise ValueError(f"missing field {key!r}")
  if not isinstance(state[key], kind):
    raise ValueError(f"field {key!r} must be {kind.__name__}, got {type(state[key]).__name__}")
  return state[key]


def _int_array(values, n: int, low: int, high: int, what: str) -> np.ndarray:
  """A saved weight list as int8, checked: length n, integers in [low, high]."""
  if not isinstance(values, list) or len(values) != n:
    raise ValueError(f"{what}: expected a list of {n} weights")
  a = np.asarray(values)
  if n and (a.dtype.kind != "i" or a.min() < low or a.max() > high):
    raise ValueError(f"{what}: weights must be integers in [{low}, {high}]")
  return a.astype(np.int8)


class _Weighted(Scheduler):
  """Weight bounds shared by both HCN variants: weights start at `weight_init` and never exceed `weight_cap`.
  init ≥ 1 keeps every priority of a non-empty marginal set positive; int8 storage bounds the cap."""

  def __init__(self, teachers, problems, weight_init: int = 1, weight_cap: int = 5):
    super().__init__(teachers, problems)
    if not 1 <= weight_init <= weight_cap <= 127:
      raise ValueError(f"need 1 <= weight_init <= weight_cap <= 127, got init {weight_init}, cap {weight_cap}")
    self.weight_init, self.weight_cap = int(weight_init), int(weight_cap)

  def _config(self):
    return {"weight_init": self.weight_init, "weight_cap": self.weight_cap}

  def _choose(self, priority, marginal, per_dataset):
    return self._hcn_choice(priority, marginal, per_dataset)


class HCNScheduler(_Weighted):
  """HCN, newest version (state v3, `per_teacher_weighted_qi_minus_pt_reset_selected`): per-teacher weights.

  Each teacher i has a weight w_i(q) ∈ [init, cap] (default 1..5) for every q ∈ Q_i, initialised to init. A round,
  given the student's solved set P:
    M_i = Q_i − P,   priority_i = Σ_{q∈M_i} w_i(q),   i* = argmax_i priority_i   (ties: see `_hcn_choice`)
    w_{i*}(q) ← init            for all q ∈ Q_{i*}          (the selected teacher starts over)
    w_i(q)    ← min(cap, w_i(q) + 1)   for i ≠ i*, q ∈ M_i     (teachers that keep covering unsolved problems age)

  Anti-starvation, and its limit. Hold P fixed (so every m_i = |M_i| is fixed); c = init, C = cap, K = #teachers.
  If teacher j satisfies  C·m_j > min(C, c + K − 2)·m_i  for every i ≠ j,  it is selected within C − c + K rounds
  of this P, from any state. Proof: while j loses, its weights on M_j grow by one a round, so at round t ≥ C − c + 1
  its priority is C·m_j. In the K rounds C − c + 1 … C − c + K the other K − 1 teachers win, so one of them, i,
  wins twice, at s < t, and not in between; its weights were reset to c at s and aged at most t − s − 1 ≤ K − 2
  times, so priority_i(t) ≤ m_i·min(C, c + K − 2) < C·m_j ≤ priority_j(t): i cannot win at t, a contradiction.
  Without the condition a teacher can starve: with two teachers, m_1 = 6 and m_2 = 1, teacher 1 wins every round on
  priority 6 against teacher 2's at most 5.
  """
  strategy, version = STRATEGY_V3, 3

  def __init__(self, teachers: Sequence[Teacher], problems: Iterable[str], weight_init: int = 1, weight_cap: int = 5):
    super().__init__(teachers, problems, weight_init, weight_cap)
    # w_i(q) at [i, q]; entries with q ∉ Q_i are never aged (M_i ⊆ Q_i) nor read, and stay at init.
    self._weights = np.full(self._solved_by.shape, self.weight_init, np.int8)

  def _priorities(self, solved, missing, marginal):
    return (self._weights * missing).sum(axis=1, dtype=np.int64)

  def _update(self, i, missing):
    self._weights += missing & (self._weights < self.weight_cap)
    self._weights[i] = self.weight_init  # the reset overrides the aging of the selected teacher

  def weights(self, i: int) -> dict[str, int]:
    """{q: w_i(q)} over Q_i."""
    cols = np.flatnonzero(self._solved_by[i])
    return dict(zip((self.problems[k] for k in cols), self._weights[i, cols].tolist()))

  def _extra_state(self):
    """Per teacher, its weights over Q_i in the order of `problems` (by dataset, then id)."""
    return {"weights": [w[q].tolist() for w, q in zip(self._weights, self._solved_by)]}

  def _load_extra(self, state):
    rows = _field(state, "weights", list)
    if len(rows) != len(self.teachers):
      raise ValueError(f"weights: {len(rows)} teachers, expected {len(self.teachers)}")
    weights = np.full(self._solved_by.shape, self.weight_init, np.int8)
    for i, (row, t) in enumerate(zip(rows, self.teachers)):
      weights[i, self._solved_by[i]] = _int_array(row, len(t.solved), self.weight_init, self.weight_cap,
                                                  f"weights of {t.name!r}")
    self._weights = weights


class GlobalWeightHCNScheduler(_Weighted):
  """HCN, older version (state v≤2): one global weight w(q) ∈ [init, cap] per problem, initialised to init.

  A round, given the student's solved set P — the increment comes first, then the priorities are computed with the
  incremented weights:
    w(q) ← min(cap, w(q) + 1)   once for every q ∈ ∪_i (Q_i − P)   (once, however many teachers cover q)
    priority_i = Σ_{q ∈ Q_i − P} w(q),   i* = argmax_i priority_i   (ties: see `_hcn_choice`)
  Nothing is ever reset: w(q) − init counts (up to the cap) the rounds q was left unsolved while some teacher covered
  it, so long-unsolved problems count more, but a teacher that keeps losing gains nothing over the winner on the
  problems they share — there is no per-teacher anti-starvation.
  """
  strategy, version = STRATEGY_GLOBAL, 2

  def __init__(self, teachers: Sequence[Teacher], problems: Iterable[str], weight_init: int = 1, weight_cap: int = 5):
    super().__init__(teachers, problems, weight_init, weight_cap)
    self._weights = np.full(len(self.problems), self.weight_init, np.int8)  # w(q), one per problem of U
    self._covered = self._solved_by.any(axis=0)  # q ∈ ∪_i Q_i

  def _priorities(self, solved, missing, marginal):
    """Ages ∪_i M_i = (∪_i Q_i) − P first (the rule increments before scoring), then scores with the new weights."""
    self._weights += self._covered & ~solved & (self._weights < self.weight_cap)
    return (missing * self._weights).sum(axis=1, dtype=np.int64)

  def weights(self, i: int) -> dict[str, int]:
    """{q: w(q)} over Q_i (the global weights teacher i's priority sums)."""
    cols = np.flatnonzero(self._solved_by[i])
    return dict(zip((self.problems[k] for k in cols), self._weights[cols].tolist()))

  def _extra_state(self):
    """The weights in the order of `problems` (by dataset, then id)."""
    return {"weights": self._weights.tolist()}

  def _load_extra(self, state):
    self._weights = _int_array(_field(state, "weights", list), len(self.problems), self.weight_init,
                               self.weight_cap, "weights")


class StaticBestScheduler(Scheduler):
  """Baseline: one teacher every round — `index` if given, else the one with the largest |Q_i| (ties: earlier step,
  then lower index)."""
  strategy, version = "static_best", 1

  def __init__(self, teachers: Sequence[Teacher], problems: Iterable[str], index: int | None = None):
    super().__init__(teachers, problems)
    if index is None:
      index = min(range(len(self.teachers)), key=lambda i: (-len(self.teachers[i].solved), self.teachers[i].step, i))
    if not 0 <= index < len(self.teachers):
      raise ValueError(f"static teacher index {index} is outside 0..{len(self.teachers) - 1}")
    self.index = int(index)

  def _config(self):
    return {"index": self.index}

  def _choose(self, priority, marginal, per_dataset):
    return self.index


class RandomScheduler(Scheduler):
  """Baseline: a uniformly random teacher each round from `np.random.default_rng(seed)`; the generator's state is
  part of the scheduler's state, so a restored run draws the same teachers as an uninterrupted one."""
  strategy, version = "random", 1

  def __init__(self, teachers: Sequence[Teacher], problems: Iterable[str], seed: int = 0):
    super().__init__(teachers, problems)
    self._rng = np.random.default_rng(seed)

  def _choose(self, priority, marginal, per_dataset):
    return int(self._rng.integers(len(self.teachers)))

  def _extra_state(self):
    return {"rng": self._rng.bit_generator.state}

  def _load_extra(self, state):
    rng = np.random.Generator(np.random.PCG64())
    rng.bit_generator.state = _field(state, "rng", dict)
    self._rng = rng


class RoundRobinScheduler(Scheduler):
  """Baseline: teachers in their given order, 0, 1, …, K−1, 0, … (round r picks r mod K)."""
  strategy, version = "round_robin", 1

  def _choose(self, priority, marginal, per_dataset):
    return self.round % len(self.teachers)


SCHEDULERS: dict[str, type[Scheduler]] = {
    "hcn": HCNScheduler,
    "hcn_global": GlobalWeightHCNScheduler,
    "static_best": StaticBestScheduler,
    "random": RandomScheduler,
    "round_robin": RoundRobinScheduler,
}


def make_scheduler(name: str, teachers: Sequence[Teacher], problems: Iterable[str], **kw) -> Scheduler:
  """The scheduler registered as `name`, built on `teachers` over the validation problems U; `kw` goes to its
  constructor (weight_init/weight_cap for the HCN variants, index for static_best, seed for random)."""
  if name not in SCHEDULERS:
    raise ValueError(f"unknown teacher scheduler {name!r}; choices: {sorted(SCHEDULERS)}")
  return SCHEDULERS[name](teachers, problems, **kw)


def prune_dominated(teachers: Sequence[Teacher]) -> list[Teacher]:
  """Startup pruning of the older version: drop teacher i if some j ≠ i has Q_i ⊆ Q_j; of teachers with equal solved
  sets the lowest (step, name) stays (then the earlier position). Survivors keep their order."""
  ranked = [(t.step, t.name, i) for i, t in enumerate(teachers)]
  return [t for i, t in enumerate(teachers)
          if not any(t.solved < u.solved or (t.solved == u.solved and ranked[j] < ranked[i])
                     for j, u in enumerate(teachers) if j != i)]


def save_state(path: str | os.PathLike, scheduler: Scheduler) -> None:
  """Write `scheduler.state_dict()` to `path` atomically (`atomic_write_json`)."""
  atomic_write_json(path, scheduler.state_dict())


def load_state(path: str | os.PathLike, scheduler: Scheduler) -> None:
  """Restore `scheduler` from a `save_state` file; an unreadable, corrupt or mismatched file raises one ValueError
  that names it (a missing file raises FileNotFoundError)."""
  with open(path, encoding="utf-8") as f:
    text = f.read()
  try:
    scheduler.load_state_dict(json.loads(text))
  except ValueError as e:
    raise ValueError(f"teacher scheduler state file {os.fspath(path)}: {e}") from e
