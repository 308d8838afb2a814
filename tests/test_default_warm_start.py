"""The CPU default's warm start, pinned: the README's first command, shortened, gives the same step-0 validation.

The recorded results of the default run (docs/results.md) start from its step-0 warm start. A change anywhere on that
path (demonstrations, SFT, the model, sampling and its random numbers, the env, the prompts) moves every number
quoted from it, so it must be a decision, not an accident. This runs `experiments/train.py` on the default config
and seed exactly as a user does (one CPU device, the generated games), with a shorter SFT and a smaller validation
panel, and compares the SFT losses, the step-0 validation metrics and the per-problem outcomes with pinned values.
When a change is meant to move them, re-pin here and re-record the default's numbers wherever docs quote them.
"""
import os
import subprocess
import sys

import pytest

pytest.importorskip("alfworld", reason="generating games needs the alfworld wheel's domain files ([envs] extra)")

from agentopd_jax.storage.checkpoints import CheckpointPool  # noqa: E402
from agentopd_jax.storage.logs import read_metrics  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHORTENED = {"grpo.iterations": 0, "sft.steps": 20, "sft.demos": 64, "validation.num_tasks": 16,
             "validation.attempts": 2, "logging.plot": False, "logging.tensorboard": False}

# The shortened default on seed 0, on one core: SFT loss at steps 1, 10 and 20 (to float32 rounding across CPUs),
# the step-0 validation metrics (exact: counts over 320 steps of 32 episodes) and per-problem (successes, attempts).
PINNED_SFT_LOSS = {1: 7.690342426300049, 10: 4.856492519378662, 20: 2.912813186645508}
PINNED_VALIDATION = {
    "val/success_rate": 0.0, "val/look_at_obj_in_light_success_rate": 0.0, "val/valid_action_ratio": 0.09375,
    "val/reward/mean": 0.0, "val/reward/max": 0.0, "val/reward/min": 0.0,
    "val/length/mean": 10.0, "val/length/max": 10.0, "val/length/min": 10.0}
PINNED_OUTCOMES = {
    "look_at_obj_in_light-Book-None-FloorLamp-225/trial_T20190616_181305_752237": [0, 2],
    "look_at_obj_in_light-Book-None-FloorLamp-225/trial_T20190703_102311_054344": [0, 2],
    "look_at_obj_in_light-Book-None-FloorLamp-225/trial_T20190705_184332_331039": [0, 2],
    "look_at_obj_in_light-CD-None-DeskLamp-225/trial_T20190615_141027_484135": [0, 2],
    "look_at_obj_in_light-Candle-None-DeskLamp-225/trial_T20190522_175326_609735": [0, 2],
    "look_at_obj_in_light-KeyChain-None-DeskLamp-225/trial_T20190925_210151_975442": [0, 2],
    "look_at_obj_in_light-Laptop-None-DeskLamp-225/trial_T20190527_202032_682406": [0, 2],
    "look_at_obj_in_light-Laptop-None-DeskLamp-225/trial_T20190818_024901_553627": [0, 2],
    "look_at_obj_in_light-Laptop-None-DeskLamp-225/trial_T20190903_194816_437270": [0, 2],
    "look_at_obj_in_light-Newspaper-None-DeskLamp-225/trial_T20190627_153725_330187": [0, 2],
    "look_at_obj_in_light-Pillow-None-DeskLamp-225/trial_T20190611_081547_159433": [0, 2],
    "look_at_obj_in_light-Pillow-None-DeskLamp-225/trial_T20190912_011206_652958": [0, 2],
    "look_at_obj_in_light-Plate-None-FloorLamp-225/trial_T20190824_004007_035798": [0, 2],
    "look_at_obj_in_light-RemoteControl-None-DeskLamp-225/trial_T20190628_042106_723992": [0, 2],
    "look_at_obj_in_light-Vase-None-DeskLamp-225/trial_T20190514_224315_591349": [0, 2],
    "look_at_obj_in_light-Vase-None-DeskLamp-225/trial_T20190903_212839_484156": [0, 2]}


@pytest.fixture(scope="module")
def shortened_default(tmp_path_factory):
  workdir = str(tmp_path_factory.mktemp("default"))
  env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}  # one CPU device, as a user's laptop has
  # On one core: XLA:CPU splits reductions by its thread count, so the same run differs in the last bits between
  # machines with different core counts, and over the 330 steps of the real warm start that grows into another
  # policy (docs/results.md, "Reproducing the default run").
  core = min(os.sched_getaffinity(0))
  cmd = [sys.executable, os.path.join(ROOT, "experiments", "train.py"),
         f"--config={os.path.join(ROOT, 'configs', 'alfworld.py')}", f"--config.workdir={workdir}"]
  cmd += [f"--config.{k}={v}" for k, v in SHORTENED.items()]
  proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900,
                        preexec_fn=lambda: os.sched_setaffinity(0, {core}))
  assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
  return workdir


def test_warm_start_sft_is_pinned(shortened_default):
  losses = {r["step"]: r["sft/loss"] for r in read_metrics(os.path.join(shortened_default, "logs"))
            if r.get("phase") == "sft" and r["step"] in PINNED_SFT_LOSS}
  assert losses == pytest.approx(PINNED_SFT_LOSS, rel=1e-5)


def test_warm_start_validation_is_pinned(shortened_default):
  (val,) = [r for r in read_metrics(os.path.join(shortened_default, "logs")) if r.get("phase") == "val"]
  metrics = {k: v for k, v in val.items() if k.startswith("val/") and not k.endswith("time_s")}
  assert val["step"] == 0 and metrics == PINNED_VALIDATION
  with CheckpointPool(os.path.join(shortened_default, "checkpoints"), read_only=True) as pool:
    outcomes = pool.metadata(0)["outcomes"]
  # A problem is its game folder below the split (the generated games' cache path differs between machines).
  assert {p.split("/valid_seen/")[1].rsplit("/", 1)[0]: list(o) for p, o in outcomes.items()} == PINNED_OUTCOMES
