"""Training metrics to a JSONL file, to TensorBoard and optionally to Weights & Biases, plus curve plots and a
progress bar.

`metrics.jsonl` is the record of truth: plain text that survives any tool change, is easy to diff between runs and
is what `plot_curves` reads. The TensorBoard event files (written by tensorboardX, so no TensorFlow) and the W&B run
(`WandbSink`, the `wandb` extra) are for watching a run live. Only the main process should own a `MetricsLogger`.
"""
from __future__ import annotations

import json
import logging
import math
import os
import sys
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any, Callable, Self

import numpy as np

logger = logging.getLogger(__name__)

METRICS_FILE = "metrics.jsonl"
# verl's timing names (`timing_s/*`) for what the records written before them call `time/*_s`: `renamed` reads an old
# record under today's names, so every reader (tables, compare, the notebooks) takes old and new records alike.
LEGACY_NAMES = {"time/env_s": "timing_s/env", "time/generate_s": "timing_s/gen", "time/advantage_s": "timing_s/adv",
                "time/update_s": "timing_s/update_actor", "time/iteration_s": "timing_s/step",
                "time/recompute_old_s": "timing_s/old_log_prob", "val/time_s": "timing_s/testing",
                "time/teacher_s": "timing_s/teacher", "time/opid_s": "timing_s/opid", "time/lad_s": "timing_s/lad"}
GENERATIONS_FILE = "val_generations.jsonl"
_RESERVED = ("step", "phase", "time")
# Substrings of the keys that `plot_curves` draws by default; spread keys (`reward/max`, `.../min`) are left out.
_PLOT_PATTERNS = ("success", "reward", "loss", "kl", "entropy", "clipfrac", "drift")


def _scalar(key: str, value: Any) -> float | str | None:
  """A JSON-ready value: numbers (python, numpy or jax, incl. bools) become float, non-finite ones None (JSON has
  no NaN/Infinity, and a strict reader would reject the whole line). Strings pass through (JSONL only)."""
  if value is None or isinstance(value, str):
    return value
  arr = np.asarray(value)  # a jax array converts without importing jax here
  if arr.size != 1 or not (np.issubdtype(arr.dtype, np.number) or arr.dtype == np.bool_):
    raise TypeError(f"metric {key!r} must be a scalar number or a string, got {type(value).__name__} {arr.shape}")
  x = float(arr.reshape(()))
  return x if math.isfinite(x) else None


def _tag(key: str, phase: str) -> str:
  """A metric's TensorBoard and W&B tag: the key itself when already namespaced ("actor/pg_loss"), else phase/key."""
  return key if "/" in key else f"{phase}/{key}"


def _drop_torn_tail(path: Path) -> None:
  """Cut a last line left half-written by a crash; appending after it would glue two records into bad JSON."""
  if not path.exists() or path.stat().st_size == 0:
    return
  data = path.read_bytes()
  if not data.endswith(b"\n"):
    with open(path, "r+b") as f:
      f.truncate(data.rfind(b"\n") + 1)


def _summary_writer_class():
  """tensorboardX's SummaryWriter, imported with torch held off where torch is not loaded yet: its writer module
  imports torch only to accept torch tensors, which cost every run start about 2 s where torch is installed, and this
  logger passes floats. No code of this package imports torch, so no thread of a run can meet the block; the
  transformers loaders that do (AutoTokenizer, a model folder's conversion) run before the first log."""
  if "tensorboardX" in sys.modules or "torch" in sys.modules:
    from tensorboardX import SummaryWriter
    return SummaryWriter
  sys.modules["torch"] = None  # `import torch` raises ImportError while this is set
  try:
    from tensorboardX import SummaryWriter
  finally:
    del sys.modules["torch"]
  return SummaryWriter


class MetricsLogger:
  """Appends one JSON line per `log` call to `log_dir/metrics.jsonl` and mirrors numbers to TensorBoard.

  Append mode lets a resumed run continue the same file; call `truncate_after(checkpoint_step, phases)` first so
  steps logged after that checkpoint by the crashed run are not plotted twice. TensorBoard tags are `phase/key`, except
  keys already namespaced with "/" (verl-agent's `episode/...`, `val/...`), which are used as they are.
  """

  def __init__(self, log_dir: str | os.PathLike, use_tensorboard: bool = True, flush_every: int = 1,
               own_axis_phases: Iterable[str] = ("sft",),
               on_log: Callable[[int, Mapping[str, Any], str], None] | None = None,
               wandb: "WandbSink | None" = None):
    """on_log(step, metrics, phase): also called on every record (e.g. a `LiveReport`). `wandb`: a `WandbSink` fed
    the same scalars under the same tags as TensorBoard."""
    if flush_every < 1:
      raise ValueError(f"flush_every must be >= 1, got {flush_every}")
    self.log_dir = Path(log_dir)
    self.log_dir.mkdir(parents=True, exist_ok=True)
    self.path = self.log_dir / METRICS_FILE
    self.use_tensorboard = use_tensorboard
    self.flush_every = flush_every
    # Phases counted on their own step axis (SFT steps, not GRPO iterations) get their own TensorBoard run folder,
    # since TensorBoard purges a resumed run's events by step across every tag of a folder.
    self.own_axis_phases = tuple(own_axis_phases)
    _drop_torn_tail(self.path)
    self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115  (held open across log calls)
    self._writers = {}  # TensorBoard folder -> writer, opened on first use so a resume's purge step can be set first
    self._purge_steps: dict[Path, int] = {}
    self._pending = 0
    self.on_log = on_log
    self.wandb = wandb

  def _tb_dir(self, phase: str) -> Path:
    return self.log_dir / phase if phase in self.own_axis_phases else self.log_dir

  def _tensorboard(self, phase: str):
    folder = self._tb_dir(phase)
    if folder not in self._writers:
      SummaryWriter = _summary_writer_class()
      # Event file names carry only the second and the host, and tensorboardX opens them with "wb": without a
      # unique suffix a writer reopened within the same second (a quick resume) would erase the earlier file.
      suffix = f".{uuid.uuid4().hex[:8]}"
      self._writers[folder] = SummaryWriter(str(folder), purge_step=self._purge_steps.pop(folder, None),
                                            filename_suffix=suffix)
    return self._writers[folder]

  def log(self, step: int, metrics: Mapping[str, Any], phase: str = "train") -> None:
    clash = [k for k in metrics if k in _RESERVED]
    if clash:
      raise ValueError(f"metric keys {clash} clash with the record's own fields {_RESERVED}")
    values = {k: _scalar(k, v) for k, v in metrics.items()}
    record = {"step": int(step), "phase": phase, "time": time.time(), **values}
    self._file.write(json.dumps(record, allow_nan=False) + "\n")
    if self.use_tensorboard:
      writer = self._tensorboard(phase)
      for key, value in metrics.items():
        if not isinstance(value, str) and value is not None:
          tag = _tag(key, phase)
          writer.add_scalar(tag, float(np.asarray(value).reshape(())), int(step))  # NaN kept: TB shows it
    if self.wandb is not None:
      self.wandb.log(int(step), metrics, phase, phase in self.own_axis_phases)
    self._pending += 1
    if self._pending >= self.flush_every:
      self.flush()
    if self.on_log is not None:
      self.on_log(step, metrics, phase)

  def log_generations(self, step: int, episodes: Sequence[Mapping[str, Any]]) -> None:
    """Validation episodes as rows of (step, episode, problem, won, reward, turn, prompt, reply): appended to
    `val_generations.jsonl` and, with W&B, logged as the table "val/generations" (verl's log_val_generations)."""
    rows = [{"step": int(step), "episode": i, "problem": ep["problem"], "won": bool(ep["won"]),
             "reward": float(ep["reward"]), "turn": t, "prompt": turn["prompt"], "reply": turn["reply"]}
            for i, ep in enumerate(episodes) for t, turn in enumerate(ep["steps"])]
    with open(self.log_dir / GENERATIONS_FILE, "a", encoding="utf-8") as f:
      f.writelines(json.dumps(row) + "\n" for row in rows)
    if self.wandb is not None:
      self.wandb.table("val/generations", int(step), rows)

  def flush(self) -> None:
    self._file.flush()
    for writer in self._writers.values():
      writer.flush()
    self._pending = 0

  def truncate_after(self, step: int, phases: Iterable[str] | None = None) -> int:
    """Drop JSONL lines with step > `step` of `phases` (default: every phase) and have TensorBoard hide the same
    events (tensorboardX `purge_step`). A resume from checkpoint N truncates its iteration phases after N; a restart
    from scratch truncates everything after -1. Returns the number of lines dropped."""
    chosen = None if phases is None else set(phases)
    self._file.close()
    lines = [line for line in self.path.read_text(encoding="utf-8").splitlines(keepends=True) if line.strip()]
    records = [json.loads(line) for line in lines]
    kept = [line for line, r in zip(lines, records)
            if r["step"] <= step or (chosen is not None and r["phase"] not in chosen)]
    tmp = self.path.with_suffix(".jsonl.tmp")
    tmp.write_text("".join(kept), encoding="utf-8")
    os.replace(tmp, self.path)  # atomic: a crash here leaves the old or the new file, never half of one
    generations = self.log_dir / GENERATIONS_FILE
    if generations.exists() and (chosen is None or "val" in chosen):
      _drop_torn_tail(generations)
      rows = [line for line in generations.read_text(encoding="utf-8").splitlines(keepends=True) if line.strip()]
      tmp = generations.with_suffix(".jsonl.tmp")
      tmp.write_text("".join(r for r in rows if json.loads(r)["step"] <= step), encoding="utf-8")
      os.replace(tmp, generations)
    self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115
    folders = {self._tb_dir(p) for p in chosen} if chosen is not None else (
        {self.log_dir} | {self._tb_dir(p) for p in self.own_axis_phases})
    for folder in folders:
      if folder in self._writers:
        self._writers.pop(folder).close()
      self._purge_steps[folder] = int(step) + 1
    return len(lines) - len(kept)

  def close(self) -> None:
    if not self._file.closed:
      self.flush()
      self._file.close()
    for writer in self._writers.values():
      writer.close()
    self._writers = {}
    if self.wandb is not None:
      self.wandb.close()

  def __enter__(self) -> Self:
    return self

  def __exit__(self, *exc) -> None:
    self.close()


class WandbSink:
  """A Weights & Biases run fed the logger's numbers, with the run's resolved config. Optional: without the `wandb`
  package (`pip install -e '.[wandb]'`) it warns once and logs nothing, and nothing else of the run changes. It works
  offline (`WANDB_MODE=offline`: the run is written under `dir`/wandb, for `wandb sync` later).

  Tags are TensorBoard's (`phase/key`, or the key itself when it is already namespaced: `actor/pg_loss`,
  `episode/success_rate`, `val/...`). Iteration phases share the x-axis `iteration`; a phase on its own step axis (SFT)
  plots against `<phase>/step`. The run's id is kept in `dir`/wandb_run_id, so a resumed run continues the same W&B
  run (steps it logs again after its checkpoint appear twice there; metrics.jsonl is truncated, W&B cannot be)."""

  def __init__(self, dir: str | os.PathLike, project: str, name: str, config: Mapping[str, Any] | None = None,
               entity: str = ""):
    self.run, self._axes = None, {}
    try:
      import wandb
    except ImportError:
      logger.warning("logging.wandb is on but the wandb package is not installed (pip install -e '.[wandb]'): "
                     "no W&B run")
      return
    folder = Path(dir)
    folder.mkdir(parents=True, exist_ok=True)
    id_file = folder / "wandb_run_id"
    run_id = id_file.read_text().strip() if id_file.exists() else uuid.uuid4().hex[:12]
    id_file.write_text(run_id)
    self.run = wandb.init(project=project, entity=entity or None, name=name, id=run_id, resume="allow",
                          dir=str(folder), config=dict(config or {}))

  def log(self, step: int, metrics: Mapping[str, Any], phase: str, own_axis: bool) -> None:
    if self.run is None:
      return
    axis = f"{phase}/step" if own_axis else "iteration"
    data = {}
    for key, value in metrics.items():
      if isinstance(value, str) or value is None:
        continue
      tag = f"{phase}/{key}" if own_axis else _tag(key, phase)
      if tag not in self._axes:
        self._axes[tag] = axis
        self.run.define_metric(tag, step_metric=axis)
      data[tag] = float(np.asarray(value).reshape(()))
    if data:
      self.run.log({axis: step, **data})

  def table(self, key: str, step: int, rows: Sequence[Mapping[str, Any]]) -> None:
    """Rows (dicts with the same keys) as a W&B table `key` at iteration `step`."""
    if self.run is None or not rows:
      return
    import wandb
    columns = list(rows[0])
    self.run.log({"iteration": step, key: wandb.Table(columns=columns, data=[[r[c] for c in columns] for r in rows])})

  def close(self) -> None:
    if self.run is not None:
      self.run.finish()
      self.run = None


def renamed(record: Mapping[str, Any]) -> dict:
  """`record` with its keys under today's names (`LEGACY_NAMES`)."""
  return {LEGACY_NAMES.get(k, k): v for k, v in record.items()}


def untimed(record: Mapping[str, Any]) -> dict:
  """A metrics record without what differs between two runs that compute the same thing: wall times (`time*`,
  `timing_s/*`, `*_s`) and compilation counts (`compile/*`, which depend on what the compilation cache already
  held)."""
  return {k: v for k, v in record.items()
          if not (k.startswith(("time", "timing_s/", "compile/")) or k.endswith("_s"))}


def read_metrics(log_dir: str | os.PathLike) -> list[dict]:
  """The records of `log_dir/metrics.jsonl` in file order (null for non-finite values), under today's names
  (`renamed`). A half-written last line (crash while writing) is skipped; a bad line elsewhere is an error."""
  lines = [line for line in (Path(log_dir) / METRICS_FILE).read_text(encoding="utf-8").splitlines() if line.strip()]
  records = []
  for i, line in enumerate(lines):
    try:
      records.append(renamed(json.loads(line)))
    except json.JSONDecodeError:
      if i != len(lines) - 1:
        raise
  return records


def _default_plot_keys(records: list[dict]) -> list[str]:
  keys = dict.fromkeys(k for r in records for k in r if k not in _RESERVED)
  return [k for k in keys if any(p in k.lower() for p in _PLOT_PATTERNS) and not k.endswith(("/max", "/min"))]


def plot_curves(log_dir: str | os.PathLike, out_path: str | os.PathLike, keys: list[str] | None = None) -> str:
  """One subplot per key (x = step, one line per phase) from `log_dir/metrics.jsonl`, saved as PNG.

  Draws through the Agg canvas directly instead of pyplot, so no global backend is switched and no figure is
  left registered. Default keys: those naming success rate, reward, loss, KL, entropy, clip fraction or drift.
  """
  from matplotlib.backends.backend_agg import FigureCanvasAgg
  from matplotlib.figure import Figure

  records = read_metrics(log_dir)
  keys = _default_plot_keys(records) if keys is None else list(keys)
  if not keys:
    raise ValueError(f"no keys to plot in {Path(log_dir) / METRICS_FILE}")
  ncols = min(3, len(keys))
  nrows = math.ceil(len(keys) / ncols)
  fig = Figure(figsize=(4.5 * ncols, 3.2 * nrows), layout="constrained")
  FigureCanvasAgg(fig)
  axes = fig.subplots(nrows, ncols, squeeze=False).ravel()
  phases = list(dict.fromkeys(r["phase"] for r in records))
  for ax, key in zip(axes, keys):
    for phase in phases:
      points = sorted((r["step"], r[key]) for r in records if r["phase"] == phase and key in r
                      and not isinstance(r[key], str))
      if points:
        steps, ys = zip(*points)
        ys = [math.nan if y is None else y for y in ys]  # gaps where the value was non-finite
        ax.plot(steps, ys, label=phase, marker="o" if len(steps) < 30 else None, markersize=3)
    ax.set_title(key, fontsize=9)
    ax.set_xlabel("step")
    ax.grid(alpha=0.3)
    if len(phases) > 1:
      ax.legend(fontsize=7)
  for ax in axes[len(keys):]:
    ax.set_visible(False)
  out_path = Path(out_path)
  out_path.parent.mkdir(parents=True, exist_ok=True)
  fig.savefig(out_path, format="png", dpi=100)
  return str(out_path)


def progress(iterable_or_total: Iterable | int, desc: str | None = None, **kwargs):
  """tqdm over an iterable, or a manual bar (`.update(n)`) for an int total. Off when stderr is not a terminal
  (log files fill with carriage returns otherwise); AGENTOPD_PROGRESS=1 forces it on, =0 off."""
  from tqdm import tqdm

  forced = os.environ.get("AGENTOPD_PROGRESS")
  disable = forced != "1" if forced in ("0", "1") else not sys.stderr.isatty()
  kwargs.setdefault("disable", disable)
  if isinstance(iterable_or_total, int):
    return tqdm(total=iterable_or_total, desc=desc, **kwargs)
  return tqdm(iterable_or_total, desc=desc, **kwargs)


def headline(metrics: Mapping[str, Any], phase: str) -> str:
  """The figures of one record that say how a run is going: SFT loss; an iteration's success, reward, KL and time;
  a validation's success overall and per task type / data source (and WebShop's score). "" when it has none."""
  def get(key):
    value = metrics.get(key)
    return None if value is None or isinstance(value, str) else float(np.asarray(value).reshape(()))

  parts = []
  if phase == "sft":
    if get("sft/loss") is not None:
      parts.append(f"loss {get('sft/loss'):.3f}")
  elif phase == "val":
    if get("val/success_rate") is not None:
      parts.append(f"success {100 * get('val/success_rate'):.1f}%")
    groups = [(k[len("val/"):-len("_success_rate")], get(k)) for k in metrics
              if k.startswith("val/") and k.endswith("_success_rate") and k != "val/success_rate"]
    if groups:
      parts.append("(" + ", ".join(f"{name} {100 * v:.1f}%" for name, v in groups) + ")")
    score = next((k for k in metrics if k.startswith("val/webshop_task_score")), None)
    if score:
      parts.append(f"score {get(score):.3f}")
  else:
    for key, label, fmt in (("episode/success_rate", "success", "{:.1%}"), ("episode/reward/mean", "reward", "{:.2f}"),
                            ("actor/kl", "kl", "{:.3g}"), ("actor/ppo_kl", "ppo_kl", "{:.3g}"),
                            ("timing_s/step", "", "{:.0f}s/it")):
      if get(key) is not None and not (key == "actor/ppo_kl" and get("actor/kl") is not None):
        parts.append(((label + " ") if label else "") + fmt.format(get(key)))
  return " ".join(parts)


class NullLogger:
  """The `MetricsLogger` of every process but 0 in a multi-host run: all compute the same metrics, one writes them."""

  def log(self, step: int, metrics: Mapping[str, Any], phase: str = "train") -> None:
    del step, metrics, phase

  def log_generations(self, step: int, episodes: Sequence[Mapping[str, Any]]) -> None:
    del step, episodes

  def flush(self) -> None:
    pass

  def truncate_after(self, step: int, phases: Iterable[str] | None = None) -> int:
    del step, phases
    return 0

  def close(self) -> None:
    pass


class LiveReport:
  """What a run shows while it runs (a `MetricsLogger`'s `on_log`). On a terminal each record's `headline` goes into
  the watched progress bar's postfix (the latest of each phase); otherwise (nohup, cluster logs) it is one log line
  per iteration and per validation, and one per `sft_every` SFT steps."""

  def __init__(self, sft_every: int = 25):
    self.sft_every = sft_every
    self.bar = None
    self._latest: dict[str, str] = {}

  def watch(self, bar):
    """Reports into `bar` (a `progress` bar; None: none) from now on; returns it, to iterate over."""
    self.bar, self._latest = bar, {}
    return bar

  def __call__(self, step: int, metrics: Mapping[str, Any], phase: str) -> None:
    text = headline(metrics, phase)
    if not text:
      return
    if self.bar is not None and not self.bar.disable:
      self._latest[phase] = text
      self.bar.set_postfix_str(" | ".join(f"{p}: {t}" for p, t in self._latest.items()))
    elif phase != "sft" or step == 1 or step % self.sft_every == 0:
      logger.info("%s %d: %s", phase, step, text)


def configure_cli_logging():
  """What the experiment scripts print: our progress at INFO; libraries at WARNING (orbax logs every save and restore
  at INFO through absl)."""
  import logging

  from absl import logging as absl_logging

  absl_logging.set_verbosity(absl_logging.WARNING)
  logging.getLogger("agentopd_jax").setLevel(logging.INFO)
