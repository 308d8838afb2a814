"""The checkpoint pool of one training run: what resume reads, and what Agentic-OPD reads as its teacher pool.

Agentic-OPD takes the best-validation checkpoint of a run as its student and the run's other checkpoints as
teachers, and schedules teachers by which validation problems each one solved (research/methods.md §2.1-2.2).
So next to the train state every checkpoint carries a small JSON record: validation metrics, per-problem
(successes, attempts) on the fixed validation panel, the run config and resume info. The best step is
recomputed from those records whenever it is asked for, never stored in a separate file that could go stale.

On disk this is an `orbax.checkpoint.CheckpointManager` directory, one sub-directory per step with two items:
`state` (the pytree, PyTreeSave/PyTreeRestore) and `meta` (JSON). Orbax writes a step under
`<step>.orbax-checkpoint-tmp-<time>` and renames it to `<step>` only once every item is written, and lists only
renamed steps, so a crash mid-save never leaves a step that lists as valid; a writable pool deletes such leftovers
when it is reopened. Saves are synchronous: once `save` returns the step is on disk.

Damage: orbax itself checks little (a flipped byte in a tensor file restores silently as a wrong number), so every
save also records the step folder's sha256 in `checksums.json` at the pool's root. `restore_newest` (what resume
calls) takes the newest step whose record reads, whose checksum matches and whose state restores; a newer step that
fails is moved aside to `<pool>.damaged/` with a warning (never deleted: it may still hold something a person
wants), so the run redoes it. A save that fails (a full disk) raises one error naming the folder and leaves every
earlier step as it was.

PRNG keys: typed keys (`jax.random.key`) are stored as their raw uint32 `key_data`, their impl name is recorded in
the step's metadata (`prng_keys`), and `restore` rewraps them wherever the target holds a typed key.
"""
from __future__ import annotations

import copy
import errno
import hashlib
import json
import logging
import math
import os
import shutil
import time
from collections.abc import Iterable
from typing import Any, Self

import jax
import numpy as np
import orbax.checkpoint as ocp
from etils import epath
from jax.experimental import multihost_utils
from orbax.checkpoint import checkpoint_managers as cm

from agentopd_jax.storage.atomic import atomic_write_json
from agentopd_jax import faults

logger = logging.getLogger(__name__)
_STATE, _META = "state", "meta"
CHECKSUMS = "checksums.json"
_HASH_CHUNK = 1 << 20
_DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


class DamagedCheckpointError(RuntimeError):
  """A checkpoint step whose files do not read back as they were written."""


def _meta_handler() -> ocp.JsonCheckpointHandler:
  """The record's handler, with the `checkpoint/write` fail point: orbax writes the record after the train state,
  so a kill there leaves a step folder holding part of a save, as a crash mid-write would. (Wrapped on the instance:
  orbax picks handlers by their registered class, which a subclass is not.)"""
  handler = ocp.JsonCheckpointHandler()
  write = handler.async_save

  async def async_save(*args, **kwargs):
    faults.point("checkpoint/write")
    return await write(*args, **kwargs)

  handler.async_save = async_save
  return handler


def checkpoint_sha256(path: str | os.PathLike) -> str:
  """sha256 over a checkpoint directory: for every file in sorted relative-path order, its path (POSIX separators),
  its byte length and its bytes, read in 1 MiB chunks, so a 30 GB checkpoint never sits in memory."""
  root = os.fspath(path)
  if not os.path.isdir(root):
    raise FileNotFoundError(f"no checkpoint directory {root}")
  files = sorted(os.path.relpath(os.path.join(d, f), root).replace(os.sep, "/")
                 for d, _, names in os.walk(root) for f in names)
  h = hashlib.sha256()
  for rel in files:
    full = os.path.join(root, rel)
    h.update(rel.encode() + b"\0" + os.path.getsize(full).to_bytes(8, "little"))
    with open(full, "rb") as f:
      while chunk := f.read(_HASH_CHUNK):
        h.update(chunk)
  return h.hexdigest()





def _is_key(x) -> bool:
  return jax.dtypes.issubdtype(getattr(x, "dtype", None), jax.dtypes.prng_key)


def path_str(path) -> str:
  """'opt_state/0/mu/w': the same string whether a node is a namedtuple, a dict or orbax's metadata tree."""
  parts = []
  for k in path:
    for attr in ("key", "name", "idx"):
      if hasattr(k, attr):
        parts.append(str(getattr(k, attr)))
        break
    else:
      parts.append(str(k))
  return "/".join(parts)


def _strip_keys(state) -> tuple[Any, dict[str, str]]:
  """state with typed PRNG keys replaced by their key_data, and {path: impl name} of those keys."""
  impls = {}

  def raw(path, x):
    if not _is_key(x):
      return x
    impls[path_str(path)] = str(jax.random.key_impl(x))
    return jax.random.key_data(x)

  return jax.tree_util.tree_map_with_path(raw, state), impls


def _restore_leaf(x):
  """Orbax template for one target leaf: a typed key becomes its key_data; a struct without sharding goes to device 0
  (orbax would otherwise hand back a numpy array)."""
  sharding = getattr(x, "sharding", None)
  if _is_key(x):
    data = jax.eval_shape(jax.random.key_data, x)
    return jax.ShapeDtypeStruct(data.shape, data.dtype, sharding=sharding or _default_sharding())
  if isinstance(x, jax.ShapeDtypeStruct) and sharding is None:
    return jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=_default_sharding())
  return x


def _default_sharding():
  return jax.sharding.SingleDeviceSharding(jax.devices()[0])


def _json_ready(value, what: str):
  try:
    json.dumps(value)
  except (TypeError, ValueError) as e:
    raise TypeError(f"CheckpointPool.save: {what} must be JSON-serialisable: {e}") from e
  return value


class _NewestAndBest:
  """Orbax preservation policy: keep the newest `keep` steps plus the pool's best step."""

  def __init__(self, keep: int, best_of):
    self._keep, self._best_of = keep, best_of

  def should_preserve(self, checkpoints, *, context=None) -> list[bool]:
    steps = [c.step for c in checkpoints]
    newest = set(sorted(steps)[-self._keep:])
    best = self._best_of(steps)
    return [s in newest or s == best for s in steps]


class CheckpointPool:
  """All checkpoints of one run in `directory`; opening an existing directory re-opens its pool (resume).

  keep: None keeps every checkpoint (the pool is the teacher pool); k keeps the newest k plus the best one.
  best_metric / best_mode: the validation metric (and "max" or "min") that picks the best step; ties go to the newer
  step, and steps whose metrics lack it (or hold NaN) are never best.
  read_only: open a pool for reading only (e.g. another run's teachers): no saves, and no clean-up of unfinished
  saves, which could belong to a run still writing.
  """

  def __init__(self, directory, keep: int | None = None, best_metric: str = "val/success_rate",
               best_mode: str = "max", *, read_only: bool = False):
    if keep is not None and keep < 1:
      raise ValueError(f"CheckpointPool keep must be None (keep all) or >= 1, got {keep}")
    if best_mode not in ("max", "min"):
      raise ValueError(f"CheckpointPool best_mode must be 'max' or 'min', got {best_mode!r}")
    self.directory = os.path.abspath(os.fspath(directory))
    if read_only and not os.path.isdir(self.directory):
      raise FileNotFoundError(f"no checkpoint pool at {self.directory}")
    self.keep, self.best_metric, self.best_mode, self.read_only = keep, best_metric, best_mode, read_only
    self._metas: dict[int, dict] = {}
    policy = cm.LatestN(n=None) if keep is None else _NewestAndBest(keep, self._best_of)  # n=None: keep all
    options = ocp.CheckpointManagerOptions(
        create=not read_only, read_only=read_only, enable_async_checkpointing=False,
        cleanup_tmp_directories=not read_only, preservation_policy=policy)
    # Handlers bound up front: a fresh manager cannot read an item's metadata before it has seen its args type.
    handlers = {_STATE: ocp.PyTreeCheckpointHandler(), _META: _meta_handler()}
    self._mgr = ocp.CheckpointManager(self.directory, options=options, item_handlers=handlers)

  # --- writing ------------------------------------------------------------------------------------------------

  def save(self, step: int, state, *, metrics: dict[str, float], outcomes: dict[str, tuple[int, int]] | None,
           config: dict, extra: dict | None = None) -> None:
    """Writes `state` (any pytree of jax/numpy arrays and scalars; typed PRNG keys allowed) and its record.

    metrics: validation metrics; outcomes: {problem_id (str): (successes, attempts)} on the fixed validation panel,
    or None when this step was not validated; config: the JSON-able run config; extra: JSON-able resume info.
    Returns once the step is on disk (and, with `keep`, once older steps outside the policy are deleted).
    """
    if self.read_only:
      raise PermissionError(f"CheckpointPool at {self.directory} was opened read_only")
    step = int(step)
    if step < 0:
      raise ValueError(f"checkpoint step must be >= 0, got {step}")
    if step in self.steps():
      raise ValueError(f"checkpoint pool {self.directory} already holds step {step}")
    raw_state, prng_keys = _strip_keys(state)
    meta = {"step": step, "metrics": {str(k): float(v) for k, v in metrics.items()},
            "outcomes": None if outcomes is None else _check_outcomes(outcomes),
            "config": _json_ready(config, "config"), "extra": _json_ready(extra, "extra"), "prng_keys": prng_keys}
    # The retention policy runs inside orbax's `save` and ranks steps by their records: load the existing ones now
    # (so it never re-enters orbax mid-save) and put this step's in first.
    if self.keep is not None:
      self._best_of(self.steps())
    self._metas[step] = meta
    try:
      # force: orbax otherwise silently skips a step lower than its latest one.
      saved = self._mgr.save(step, args=ocp.args.Composite(
          **{_STATE: ocp.args.PyTreeSave(raw_state), _META: ocp.args.JsonSave(meta)}), force=True)
      self._mgr.wait_until_finished()
    except BaseException as e:
      self._metas.pop(step, None)
      if isinstance(e, OSError) and e.errno in _DISK_FULL:
        self._drop_unfinished(step)  # frees what it took; the earlier steps were never touched
        raise OSError(e.errno, f"checkpoint step {step}: the disk is full writing {self.directory} ({e}); steps "
                               f"{self.steps()} are intact. Free space and rerun the same command to resume") from e
      raise
    if not saved:
      raise RuntimeError(f"orbax declined to save step {step} in {self.directory}")
    if jax.process_index() == 0:
      self._record_checksum(step)

  def save_base(self, params) -> None:
    """Writes the frozen base of a run whose checkpoints hold only what it trains (LoRA adapters) once, in
    `<pool>.base/` beside the pool, so that the pool alone gives every step's full weights
    (`models.loading.pool_params`). Orbax renames the folder into place only once it is whole; a base already there
    is kept (a resumed run). Beside, not inside: the checkpoint manager deletes unfinished folders inside the pool
    from a background thread when it opens, which would take a base being written at that moment."""
    if self.read_only:
      raise PermissionError(f"CheckpointPool at {self.directory} was opened read_only")
    if not self.has_base():
      ocp.PyTreeCheckpointer().save(self._base_dir(), params)

  def has_base(self) -> bool:
    return os.path.isdir(self._base_dir())

  def restore_base(self, abstract_params):
    """The base written by `save_base`, laid out like `abstract_params`."""
    self._require_base()
    item = jax.tree.map(_restore_leaf, abstract_params)
    return ocp.PyTreeCheckpointer().restore(self._base_dir(), item=item,
                                            restore_args=ocp.checkpoint_utils.construct_restore_args(item))

  def saved_base(self):
    """ShapeDtypeStructs of the base as `save_base` wrote it, from its array metadata (no model config needed)."""
    self._require_base()
    meta = ocp.PyTreeCheckpointHandler().metadata(epath.Path(self._base_dir()))
    return jax.tree.map(lambda m: jax.ShapeDtypeStruct(tuple(m.shape), m.dtype), getattr(meta, "tree", meta))

  def saved_keys(self, step: int) -> list[str]:
    """The top-level entries of `step`'s saved state ("params" or "adapters", "opt_state", ...)."""
    self._meta(step)
    saved = self._mgr.item_metadata(step)[_STATE].tree
    return sorted(saved) if isinstance(saved, dict) else []

  # --- reading ------------------------------------------------------------------------------------------------

  def steps(self) -> list[int]:
    return sorted(self._mgr.all_steps())

  def latest_step(self) -> int | None:
    steps = self.steps()
    return steps[-1] if steps else None

  def restore_newest(self, target) -> tuple[int | None, Any]:
    """(step, state laid out like `target`) of the newest good step, or (None, None) when none is: what resume
    reads. A newer step that is damaged (record unreadable, checksum mismatch, state not restorable) is moved to
    `<pool>.damaged/` with a warning, so a resumed run saves that step afresh; earlier steps are left alone."""
    for step in reversed(self.steps()):
      try:
        return step, self.restore(step, target)
      except DamagedCheckpointError as e:
        self._quarantine(step, e)
    return None, None

  def verify(self, step: int) -> None:
    """Raises DamagedCheckpointError when `step`'s record does not read or its files no longer match the checksum
    recorded at save time (a step saved by a run killed before recording it has none, and is checked by restoring)."""
    self._meta(step)
    expected = self._checksums().get(str(step))
    if expected is not None and checkpoint_sha256(self._step_dir(step)) != expected:
      raise DamagedCheckpointError(f"checkpoint step {step} in {self.directory}: its files changed since it was "
                                   f"saved (sha256 differs from {CHECKSUMS})")

  def best_step(self) -> int | None:
    """The step with the best `best_metric` (ties: the newer one); None if no step has that metric."""
    return self._best_of(self.steps())

  def resolve_step(self, step: int | str, field: str = "step") -> int:
    """The checkpoint number `step` names: "best", "latest" or a saved step; anything else is an error naming the
    config `field` it came from."""
    if step in ("best", "latest"):
      number = self.best_step() if step == "best" else self.latest_step()
      if number is None:
        raise ValueError(f"{field}={step!r}: no checkpoint in {self.directory}"
                         + (f" has the validation metric {self.best_metric!r}; pass an explicit step"
                            if step == "best" and self.steps() else ""))
      return number
    if isinstance(step, str) and not step.isdigit():
      raise ValueError(f"{field} must be 'best', 'latest' or a step number, got {step!r}")
    if int(step) not in self.steps():
      raise ValueError(f"{field}={step}: not a checkpoint of {self.directory}; it holds {self.steps()}")
    return int(step)

  def metadata(self, step: int) -> dict:
    """{step, metrics, outcomes ({id: (successes, attempts)} or None), config, extra, prng_keys} of `step`."""
    meta = copy.deepcopy(self._meta(step))
    if meta["outcomes"] is not None:
      meta["outcomes"] = {p: (int(s), int(a)) for p, (s, a) in meta["outcomes"].items()}
    return meta

  def outcomes_matrix(self, steps: Iterable[int] | None = None
                      ) -> tuple[list[int], list[str], np.ndarray, np.ndarray]:
    """(steps, problems sorted, successes [C, P], attempts [C, P]) over `steps` (default: all, ascending).

    A problem a checkpoint was not evaluated on counts 0/0 there, so attempts > 0 tells evaluated from unsolved.
    """
    steps = self.steps() if steps is None else [int(s) for s in steps]
    outcomes = [self._meta(s)["outcomes"] or {} for s in steps]
    problems = sorted(set().union(*outcomes)) if outcomes else []
    col = {p: j for j, p in enumerate(problems)}
    succ = np.zeros((len(steps), len(problems)), np.int64)
    att = np.zeros_like(succ)
    for i, out in enumerate(outcomes):
      for p, (s, a) in out.items():
        succ[i, col[p]], att[i, col[p]] = s, a
    return steps, problems, succ, att

  def restore(self, step: int, target):
    """The saved state of `step`, laid out like `target`.

    target: the state's pytree with `jax.ShapeDtypeStruct` leaves (their `.sharding` is where each array lands;
    no sharding means device 0) or concrete arrays as a template (restored onto their sharding). A typed PRNG key
    in the target gets the saved key back as a typed key. The structure must equal the saved one.
    """
    self.verify(step)
    item = jax.tree.map(_restore_leaf, target)
    self._check_target(step, item)
    try:
      out = self._mgr.restore(step, args=ocp.args.Composite(**{_STATE: ocp.args.PyTreeRestore(
          item, restore_args=ocp.checkpoint_utils.construct_restore_args(item))}))[_STATE]
    except (ValueError, OSError) as e:  # tensorstore's DATA_LOSS / NOT_FOUND: the target was checked above
      raise DamagedCheckpointError(f"checkpoint step {step} in {self.directory} does not restore: "
                                   f"{_first_line(e)}") from e
    return self._rewrap(step, target, out)

  def restore_params(self, step: int, abstract_params, key: str = "params"):
    """Only `state[key]` of `step` (e.g. a teacher's weights, without the optimizer state), laid out like
    `abstract_params` (`transformer.abstract_params` with shardings, or concrete arrays). Reads just that subtree."""
    self._meta(step)
    target = {key: abstract_params}
    saved = self._mgr.item_metadata(step)[_STATE].tree
    if not isinstance(saved, dict) or key not in saved:
      top = sorted(saved) if isinstance(saved, dict) else type(saved).__name__
      raise KeyError(f"step {step} in {self.directory} has no state entry {key!r}; it has {top}")
    have = {path_str(p) for p, _ in jax.tree_util.tree_flatten_with_path(saved)[0]}
    missing = sorted({path_str(p) for p, _ in jax.tree_util.tree_flatten_with_path(target)[0]} - have)
    if missing:
      # Orbax's partial restore would silently hand these back unrestored.
      raise KeyError(f"step {step} in {self.directory} lacks {missing[:5]}{' ...' if len(missing) > 5 else ''}")
    item = jax.tree.map(_restore_leaf, target)
    out = self._mgr.restore(step, args=ocp.args.Composite(**{_STATE: ocp.args.PyTreeRestore(
        item, restore_args=ocp.checkpoint_utils.construct_restore_args(item), partial_restore=True)}))[_STATE]
    return self._rewrap(step, target, out)[key]

  # --- housekeeping -------------------------------------------------------------------------------------------

  def reload(self) -> None:
    """Re-reads the step list from disk (another process may have saved or deleted steps)."""
    self._mgr.reload()
    self._metas.clear()

  def close(self) -> None:
    self._mgr.close()

  def __enter__(self) -> Self:
    return self

  def __exit__(self, *exc) -> None:
    self.close()

  # --- internals ----------------------------------------------------------------------------------------------

  def _meta(self, step: int) -> dict:
    step = int(step)
    # Checked even when cached: retention may have deleted the step since.
    if step not in self._mgr.all_steps():
      raise FileNotFoundError(f"no checkpoint for step {step} in {self.directory}; it holds steps {self.steps()}")
    if step not in self._metas:
      try:
        meta = self._mgr.restore(step, args=ocp.args.Composite(**{_META: ocp.args.JsonRestore()}))[_META]
      except (ValueError, OSError) as e:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise DamagedCheckpointError(f"checkpoint step {step} in {self.directory}: its record "
                                     f"({_META}/metadata) does not read: {_first_line(e)}") from e
      if not isinstance(meta, dict) or not {"metrics", "outcomes", "extra"} <= set(meta):
        raise DamagedCheckpointError(f"checkpoint step {step} in {self.directory}: its record lacks "
                                     "metrics/outcomes/extra")
      self._metas[step] = meta
    return self._metas[step]

  def _check_target(self, step: int, item) -> None:
    """A target whose entries or shapes differ from the saved state's is the caller's error (another model config),
    raised as a ValueError before restoring, so that it is never taken for a damaged checkpoint."""
    try:
      saved = self._mgr.item_metadata(step)[_STATE]
    except (ValueError, OSError) as e:
      raise DamagedCheckpointError(f"checkpoint step {step} in {self.directory}: its array metadata does not "
                                   f"read: {_first_line(e)}") from e
    shapes = {path_str(p): tuple(x.shape) for p, x in jax.tree_util.tree_flatten_with_path(
        getattr(saved, "tree", saved))[0]}
    wanted = {path_str(p): tuple(x.shape) for p, x in jax.tree_util.tree_flatten_with_path(item)[0]}
    wrong = sorted(set(shapes) ^ set(wanted)) or sorted(k for k in wanted if wanted[k] != shapes[k])
    if wrong:
      k = wrong[0]
      raise ValueError(f"checkpoint step {step} in {self.directory} holds a different state than the one asked for "
                       f"(another model or optimizer config?): {len(wrong)} entries differ, e.g. {k!r}: saved "
                       f"{shapes.get(k, 'nothing')}, asked for {wanted.get(k, 'nothing')}")

  def _base_dir(self) -> str:
    return f"{self.directory}.base"

  def _require_base(self) -> None:
    if not self.has_base():
      inside = os.path.join(self.directory, "base")
      hint = (f"; {inside} is a base written inside the pool, where the checkpoint manager may delete it: move it to "
              f"{self._base_dir()}") if os.path.isdir(inside) else ""
      raise FileNotFoundError(f"no base weights at {self._base_dir()}: this pool's checkpoints hold adapters, and "
                              f"the base they were trained on was never written{hint}")

  def _step_dir(self, step: int) -> str:
    return os.path.join(self.directory, str(step))

  def _checksums(self) -> dict[str, str]:
    """{step: sha256} of `checksums.json`; an unreadable file (a crash while it was replaced cannot cause one, a
    damaged disk can) counts as empty, with a warning: the steps are then checked by restoring alone."""
    path = os.path.join(self.directory, CHECKSUMS)
    if not os.path.exists(path):
      return {}
    try:
      with open(path, encoding="utf-8") as f:
        doc = json.load(f)
      if isinstance(doc, dict) and all(isinstance(v, str) for v in doc.values()):
        return doc
      reason = "not a {step: sha256} object"
    except (ValueError, OSError) as e:
      reason = str(e)
    logger.warning("%s does not read (%s); checkpoints are checked by restoring alone until the next save", path,
                   reason)
    return {}

  def _record_checksum(self, step: int) -> None:
    sums = {s: h for s, h in self._checksums().items() if s.isdigit() and int(s) in self._mgr.all_steps()}
    sums[str(step)] = checkpoint_sha256(self._step_dir(step))
    atomic_write_json(os.path.join(self.directory, CHECKSUMS), dict(sorted(sums.items(), key=lambda kv: int(kv[0]))))

  def _quarantine(self, step: int, error: Exception) -> None:
    """Moves damaged `step` to `<pool>.damaged/<step>-<unix time>` (process 0 moves it, the others wait); a
    read-only pool moves nothing and re-raises."""
    if self.read_only:
      raise error
    target = os.path.join(f"{self.directory}.damaged", f"{step}-{int(time.time())}")
    if jax.process_index() == 0:
      os.makedirs(os.path.dirname(target), exist_ok=True)
      shutil.move(self._step_dir(step), target)
    if jax.process_count() > 1:
      multihost_utils.sync_global_devices(f"checkpoint quarantine {step}")
    logger.warning("%s; moved it to %s and resuming from an earlier step", error, target)
    self._metas.pop(step, None)
    self._mgr.reload()

  def _drop_unfinished(self, step: int) -> None:
    for name in os.listdir(self.directory):
      if name.startswith(f"{step}.orbax-checkpoint-tmp"):
        shutil.rmtree(os.path.join(self.directory, name), ignore_errors=True)

  def _best_of(self, steps: Iterable[int]) -> int | None:
    best, best_value = None, None
    for step in sorted(steps):
      value = self._meta(step)["metrics"].get(self.best_metric)
      if value is None or math.isnan(value):
        continue
      better = best is None or (value >= best_value if self.best_mode == "max" else value <= best_value)
      if better:  # >= / <=: a tie goes to the newer step
        best, best_value = step, value
    return best

  def _rewrap(self, step: int, target, restored):
    impls = self._meta(step).get("prng_keys", {})

    def fix(path, t, r):
      if not _is_key(t):
        return r
      name = path_str(path)
      if name not in impls:
        raise ValueError(f"step {step} in {self.directory}: target leaf {name!r} is a typed PRNG key but a plain "
                         "array was saved there; restore it with a uint32 target")
      k = jax.random.wrap_key_data(r, impl=impls[name])
      if k.dtype != t.dtype:
        raise ValueError(f"step {step}: key {name!r} was saved as {k.dtype}, the target asks for {t.dtype}")
      return k

    return jax.tree_util.tree_map_with_path(fix, target, restored)


def _first_line(error: Exception) -> str:
  """An error's gist: tensorstore appends its whole JSON spec to the first line of its messages."""
  return str(error).splitlines()[0].split(" [tensorstore_spec")[0][:500]


def _check_outcomes(outcomes: dict[str, tuple[int, int]]) -> dict[str, list[int]]:
  out = {}
  for problem, (succ, att) in outcomes.items():
    if not isinstance(problem, str):
      raise TypeError(f"outcomes keys must be str problem ids (JSON object keys), got {problem!r}")
    succ, att = int(succ), int(att)
    if not 0 <= succ <= att:
      raise ValueError(f"outcomes[{problem!r}] = ({succ}, {att}): need 0 <= successes <= attempts")
    out[problem] = [succ, att]
  return out
