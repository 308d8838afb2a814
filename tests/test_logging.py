"""MetricsLogger: JSONL records (NaN -> null, resume truncation), TensorBoard events, curve plots, progress bar, and
what a run shows while it runs (`headline`, `LiveReport`)."""
import io
import json
import struct
from pathlib import Path

import numpy as np
import pytest

from agentopd_jax.storage.logs import (METRICS_FILE, LiveReport, MetricsLogger, headline, plot_curves, progress,
                                          read_metrics, untimed)


def _read_events(path):
  """Scalars of a TensorBoard event file as [(tag, step, value)], parsing TFRecord framing by hand (tensorboard's
  reader is not a dependency): u64 length, u32 length crc, payload, u32 payload crc."""
  from tensorboardX.proto.event_pb2 import Event

  data, pos, out, purge = path.read_bytes(), 0, [], []
  while pos < len(data):
    (length,) = struct.unpack("<Q", data[pos:pos + 8])
    event = Event.FromString(data[pos + 12:pos + 12 + length])
    pos += 12 + length + 4
    if event.HasField("session_log"):
      purge.append(event.step)
    out += [(v.tag, event.step, v.simple_value) for v in event.summary.value]
  assert pos == len(data)
  return out, purge


def _event_files(log_dir):
  return sorted(log_dir.glob("events.out.tfevents.*"))


def test_jsonl_records_types_and_nonfinite(tmp_path):
  with MetricsLogger(tmp_path, use_tensorboard=False) as log:
    log.log(1, {"loss": np.float32(0.5), "kl": np.array(2.0), "n": 3, "ok": np.bool_(True), "note": "hi"}, "train")
    log.log(2, {"loss": float("nan"), "kl": np.inf}, "train")
  lines = (tmp_path / METRICS_FILE).read_text().splitlines()
  assert all(json.loads(line) is not None for line in lines)
  assert "NaN" not in lines[1] and "Infinity" not in lines[1]  # strict JSON
  first, second = read_metrics(tmp_path)
  assert first["step"] == 1 and first["phase"] == "train" and isinstance(first["time"], float)
  assert first["loss"] == 0.5 and first["kl"] == 2.0 and first["n"] == 3.0 and first["ok"] == 1.0
  assert first["note"] == "hi"
  assert second["loss"] is None and second["kl"] is None


def test_jax_scalars_and_bad_values(tmp_path):
  import jax.numpy as jnp

  with MetricsLogger(tmp_path, use_tensorboard=False) as log:
    log.log(0, {"x": jnp.float32(1.5), "y": jnp.array([2])})
    with pytest.raises(TypeError):
      log.log(1, {"v": np.zeros(3)})
    with pytest.raises(ValueError):
      log.log(1, {"step": 1.0})
  (record,) = read_metrics(tmp_path)
  assert record["x"] == 1.5 and record["y"] == 2.0


def test_resume_appends_and_truncates(tmp_path):
  with MetricsLogger(tmp_path, use_tensorboard=False) as log:
    for step in range(1, 6):
      log.log(step, {"loss": float(step)})
  with open(tmp_path / METRICS_FILE, "a") as f:
    f.write('{"step": 6, "phase": "tr')  # a crash mid-line
  assert [r["step"] for r in read_metrics(tmp_path)] == [1, 2, 3, 4, 5]  # torn tail skipped on read
  with MetricsLogger(tmp_path, use_tensorboard=False) as log:  # resume from the step-3 checkpoint
    assert log.truncate_after(3) == 2
    log.log(4, {"loss": 40.0})
  records = read_metrics(tmp_path)
  assert [r["step"] for r in records] == [1, 2, 3, 4] and records[-1]["loss"] == 40.0


def test_resume_keeps_phases_on_their_own_step_axis(tmp_path):
  """SFT steps (own axis, own TensorBoard folder) survive a resume that truncates GRPO iterations after step 1."""
  with MetricsLogger(tmp_path) as log:
    for step in range(1, 4):
      log.log(step, {"nll": float(step)}, phase="sft")
    for step in range(0, 3):
      log.log(step, {"loss": float(step)}, phase="train")
  with MetricsLogger(tmp_path) as log:
    assert log.truncate_after(1, phases=("train", "val")) == 1
    log.log(2, {"loss": 20.0})
  records = read_metrics(tmp_path)
  assert [(r["phase"], r["step"]) for r in records] == [("sft", 1), ("sft", 2), ("sft", 3), ("train", 0),
                                                        ("train", 1), ("train", 2)]
  assert len(_event_files(tmp_path / "sft")) == 1 and len(_event_files(tmp_path)) == 2  # only the main run purged
  with MetricsLogger(tmp_path, use_tensorboard=False) as log:  # a restart from scratch drops everything
    assert log.truncate_after(-1) == 6
  assert read_metrics(tmp_path) == []


def test_tensorboard_scalars_and_purge(tmp_path):
  with MetricsLogger(tmp_path) as log:
    log.log(1, {"loss": 0.25, "episode/success_rate": 0.5}, phase="train")
    log.log(2, {"loss": 0.125}, phase="val")
  (path,) = _event_files(tmp_path)
  assert path.stat().st_size > 0
  scalars, purge = _read_events(path)
  assert scalars == [("train/loss", 1, 0.25), ("episode/success_rate", 1, 0.5), ("val/loss", 2, 0.125)]
  assert purge == []
  with MetricsLogger(tmp_path) as log:
    log.truncate_after(1)
    log.log(2, {"loss": 1.0})
  files = _event_files(tmp_path)
  assert len(files) == 2
  (new,) = [f for f in files if f != path]
  scalars, purge = _read_events(new)
  assert purge == [2] and scalars == [("train/loss", 2, 1.0)]  # TensorBoard hides old events with step >= 2


def test_tensorboard_events_are_written_without_importing_torch(tmp_path):
  """A fresh process logs its scalars to TensorBoard with torch installed but never imported (tensorboardX's writer
  would import it, about 2 s of each run's start), and can import torch itself afterwards."""
  import subprocess
  import sys

  probe = ("import sys; from agentopd_jax.storage.logs import MetricsLogger\n"
           f"with MetricsLogger({str(tmp_path)!r}) as log: log.log(1, {{'loss': 0.5}})\n"
           "print('torch' in sys.modules); import torch; print(torch.ones(1).item())")
  out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.split()
  assert out == ["False", "1.0"]
  (path,) = _event_files(tmp_path)
  assert _read_events(path) == ([("train/loss", 1, 0.5)], [])


def test_plot_curves_png(tmp_path):
  with MetricsLogger(tmp_path, use_tensorboard=False) as log:
    for step in range(4):
      log.log(step, {"loss": 1.0 / (step + 1), "kl": 0.1 * step, "reward/mean": step, "reward/max": 9, "lr": 1e-6})
      if step % 2:
        log.log(step, {"episode/success_rate": 0.2 * step, "reward/mean": float("nan")}, phase="val")
  out = plot_curves(tmp_path, tmp_path / "plots" / "curves.png")
  data = Path(out).read_bytes()
  assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 1000
  with pytest.raises(ValueError):
    plot_curves(tmp_path, tmp_path / "none.png", keys=[])
  from agentopd_jax.storage.logs import _default_plot_keys

  assert _default_plot_keys(read_metrics(tmp_path)) == ["loss", "kl", "reward/mean", "episode/success_rate"]


def test_progress_respects_env(monkeypatch):
  monkeypatch.setenv("AGENTOPD_PROGRESS", "0")
  bar = progress(range(3), "x")
  assert bar.disable and list(bar) == [0, 1, 2]
  monkeypatch.setenv("AGENTOPD_PROGRESS", "1")
  bar = progress(5, "y", file=io.StringIO())
  assert not bar.disable and bar.total == 5
  bar.update(5)
  bar.close()
  assert bar.n == 5


def test_headline_picks_the_figures_that_matter():
  assert headline({"sft/loss": 1.23456, "sft/grad_norm": 3.0}, "sft") == "loss 1.235"
  train = {"episode/success_rate": 0.125, "episode/reward/mean": 1.25, "actor/ppo_kl": 0.00123, "timing_s/step": 91.7,
           "actor/entropy": 2.0}
  assert headline(train, "train") == "success 12.5% reward 1.25 ppo_kl 0.00123 92s/it"
  assert headline({**train, "actor/kl": 0.02}, "train") == "success 12.5% reward 1.25 kl 0.02 92s/it"  # the ref KL
  val = {"val/success_rate": 0.2, "val/pick_and_place_success_rate": 0.1, "val/look_at_obj_in_light_success_rate": 0.4,
         "timing_s/testing": 60.0}
  assert headline(val, "val") == "success 20.0% (pick_and_place 10.0%, look_at_obj_in_light 40.0%)"
  shop = {"val/success_rate": 0.01, "val/webshop_task_score (not success_rate)": 0.346}
  assert headline(shop, "val") == "success 1.0% score 0.346"
  assert headline({"opd/teacher": "x"}, "opd") == ""


def test_live_report_logs_lines_without_a_terminal_and_fills_the_postfix_on_one(tmp_path, caplog, monkeypatch):
  live = LiveReport(sft_every=10)
  log = MetricsLogger(tmp_path, use_tensorboard=False, on_log=live)
  monkeypatch.setenv("AGENTOPD_PROGRESS", "0")  # stderr is not a terminal: log lines
  with caplog.at_level("INFO", logger="agentopd_jax.storage.logs"):
    for step in live.watch(progress(range(1, 21), "sft")):
      log.log(step, {"sft/loss": 1.0 / step}, phase="sft")
    live.watch(None)
    log.log(1, {"episode/success_rate": 0.5, "timing_s/step": 10.0}, phase="train")
    log.log(1, {"val/success_rate": 0.25}, phase="val")
  assert [r.getMessage() for r in caplog.records] == [
      "sft 1: loss 1.000", "sft 10: loss 0.100", "sft 20: loss 0.050", "train 1: success 50.0% 10s/it",
      "val 1: success 25.0%"]
  assert len(read_metrics(tmp_path)) == 22  # every record still reaches the JSONL file
  monkeypatch.setenv("AGENTOPD_PROGRESS", "1")  # a terminal: the postfix, no lines
  caplog.clear()
  out = io.StringIO()
  with caplog.at_level("INFO", logger="agentopd_jax.storage.logs"):
    bar = live.watch(progress(2, "grpo", file=out))
    log.log(2, {"episode/success_rate": 0.5}, phase="train")
    log.log(2, {"val/success_rate": 0.3}, phase="val")
    bar.close()
  assert not caplog.records
  assert "train: success 50.0% | val: success 30.0%" in out.getvalue()
  log.close()


def _wandb_records(folder):
  """The history rows and the config of the offline W&B run under `folder`. The run file is a ":W&B" header and
  LevelDB-log records (crc u32, length u16, type u8: 1 full, 2 first, 3 middle, 4 last; 32 KiB blocks) of wandb's
  `Record` protobuf."""
  from wandb.proto import wandb_internal_pb2

  (path,) = Path(folder, "wandb").glob("offline-run-*/run-*.wandb")
  data = path.read_bytes()
  assert data[:4] == b":W&B"
  pos, pending, records = 7, b"", []
  while pos + 7 <= len(data):
    if 32768 - pos % 32768 < 7:      # a block's tail too short for a record header is padding
      pos += 32768 - pos % 32768
      continue
    length, kind = int.from_bytes(data[pos + 4:pos + 6], "little"), data[pos + 6]
    pending += data[pos + 7:pos + 7 + length]
    pos += 7 + length
    if kind in (1, 4):
      records.append(wandb_internal_pb2.Record.FromString(pending))
      pending = b""
  rows, config = [], {}
  for record in records:
    kind = record.WhichOneof("record_type")
    if kind == "history":
      rows.append({item.key or "/".join(item.nested_key): json.loads(item.value_json) for item in record.history.item})
    elif kind in ("config", "run"):  # the run record carries the config given to wandb.init
      updates = record.config.update if kind == "config" else record.run.config.update
      config.update({item.key: json.loads(item.value_json) for item in updates})
  return rows, config


def test_wandb_sink_mirrors_the_scalars_offline_and_resumes_the_same_run(tmp_path, monkeypatch):
  from agentopd_jax.storage.logs import WandbSink

  monkeypatch.setenv("WANDB_MODE", "offline")
  monkeypatch.setenv("WANDB_SILENT", "true")
  sink = WandbSink(tmp_path, "agentopd_jax", "run_a", config={"seed": 3, "grpo": {"group_size": 8}})
  with MetricsLogger(tmp_path, use_tensorboard=False, wandb=sink) as log:
    log.log(0, {"loss": 2.5}, phase="sft")
    log.log(1, {"actor/pg_loss": 0.25, "episode/success_rate": 0.5, "note": "text"})
    log.log(1, {"success": 0.125}, phase="val")
  rows, config = _wandb_records(tmp_path)
  assert {"sft/step": 0, "sft/loss": 2.5}.items() <= rows[0].items()
  assert {"iteration": 1, "actor/pg_loss": 0.25, "episode/success_rate": 0.5}.items() <= rows[1].items()
  assert {"iteration": 1, "val/success": 0.125}.items() <= rows[2].items()
  assert config["seed"] == 3 and config["grpo"] == {"group_size": 8}
  first = (tmp_path / "wandb_run_id").read_text()
  WandbSink(tmp_path, "agentopd_jax", "run_a").close()     # a resumed run: the same W&B run id
  assert (tmp_path / "wandb_run_id").read_text() == first


def test_wandb_sink_without_the_package_warns_and_logs_nothing(tmp_path, monkeypatch, caplog):
  import sys

  from agentopd_jax.storage.logs import WandbSink

  monkeypatch.setitem(sys.modules, "wandb", None)  # `import wandb` raises ImportError
  sink = WandbSink(tmp_path, "agentopd_jax", "run_b")
  assert sink.run is None and "wandb package is not installed" in caplog.text
  with MetricsLogger(tmp_path, use_tensorboard=False, wandb=sink) as log:
    log.log(1, {"actor/pg_loss": 0.25})
  assert [json.loads(x)["actor/pg_loss"] for x in (tmp_path / METRICS_FILE).read_text().splitlines()] == [0.25]
  assert not (tmp_path / "wandb").exists()


def test_validation_generations_go_to_their_file_and_a_wandb_table_and_resume_truncates_them(tmp_path, monkeypatch):
  """The W&B side is checked at the SDK call (a `wandb.Table` per validation, at its iteration): what the SDK's
  service then writes of a table into the offline run's record is the SDK's own (a CI run's record once lacked both
  table rows that this machine's runs always carry)."""
  from agentopd_jax.storage.logs import GENERATIONS_FILE, WandbSink

  monkeypatch.setenv("WANDB_MODE", "offline")
  monkeypatch.setenv("WANDB_SILENT", "true")
  episode = {"problem": "p1", "won": True, "reward": 10.0,
             "steps": [{"prompt": "You are in a room.", "reply": "go to desk 1"},
                       {"prompt": "You arrive at desk 1.", "reply": "take mug 1 from desk 1"}]}
  sink = WandbSink(tmp_path, "p", "run")
  logged, log_to_wandb = [], sink.run.log
  sink.run.log = lambda data, **kw: (logged.append(data), log_to_wandb(data, **kw))
  with MetricsLogger(tmp_path, use_tensorboard=False, wandb=sink) as log:
    log.log_generations(0, [episode])
    log.log_generations(2, [dict(episode, problem="p2", won=False, reward=0.0, steps=episode["steps"][:1])])
  rows = [json.loads(x) for x in (tmp_path / GENERATIONS_FILE).read_text().splitlines()]
  assert rows[1] == {"step": 0, "episode": 0, "problem": "p1", "won": True, "reward": 10.0, "turn": 1,
                     "prompt": "You arrive at desk 1.", "reply": "take mug 1 from desk 1"}
  assert [(r["step"], r["problem"], r["turn"]) for r in rows] == [(0, "p1", 0), (0, "p1", 1), (2, "p2", 0)]
  tables = [(d["iteration"], d["val/generations"]) for d in logged]
  assert [(i, t.columns, [tuple(r) for r in t.data]) for i, t in tables] == [
      (0, list(rows[0]), [tuple(r.values()) for r in rows[:2]]), (2, list(rows[2]), [tuple(rows[2].values())])]
  with MetricsLogger(tmp_path, use_tensorboard=False) as log:  # resumed from checkpoint 1: step 2 is redone
    log.truncate_after(1, phases=("train", "val"))
  assert [r["step"] for r in map(json.loads, (tmp_path / GENERATIONS_FILE).read_text().splitlines())] == [0, 0]


def test_records_written_before_verls_timing_names_read_under_them(tmp_path):
  """`time/*_s` of older records (those in results/) read as verl's `timing_s/*`; every other key as written."""
  old = {"step": 3, "phase": "train", "time": 1.0, "time/generate_s": 4.0, "time/update_s": 9.0,
         "time/iteration_s": 14.0, "time/env_s": 0.5, "time/advantage_s": 0.1, "actor/pg_loss": 0.2}
  (tmp_path / METRICS_FILE).write_text(json.dumps(old) + "\n" + json.dumps({"step": 3, "phase": "val",
                                                                             "val/time_s": 6.0}) + "\n")
  train, val = read_metrics(tmp_path)
  assert train == {"step": 3, "phase": "train", "time": 1.0, "timing_s/gen": 4.0, "timing_s/update_actor": 9.0,
                   "timing_s/step": 14.0, "timing_s/env": 0.5, "timing_s/adv": 0.1, "actor/pg_loss": 0.2}
  assert val == {"step": 3, "phase": "val", "timing_s/testing": 6.0}
  assert untimed(train) == {"step": 3, "phase": "train", "actor/pg_loss": 0.2}
