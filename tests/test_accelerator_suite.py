"""benchmarks/accelerator_suite.py's parts on the tiny preset with minimal shapes, so that the day an accelerator is
at hand the suite runs and its JSON means what it says.

The GRPO part is the trainer's own `Trainer.iteration` (tests/test_trainer.py runs it); building a Run and compiling
its rollout and update takes over a minute here, so `--quick` is where the suite's wrapper of it is exercised.
"""
import os
import sys

import jax
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))
import accelerator_suite as suite  # noqa: E402

from agentopd_jax.models import transformer  # noqa: E402
from agentopd_jax.models.config import preset  # noqa: E402


@pytest.mark.parametrize("kind,dtype,gflops", [
    ("NVIDIA H100 80GB HBM3", "bfloat16", 989e3), ("NVIDIA H100 PCIe", "bfloat16", 756e3),
    ("NVIDIA H200", "bfloat16", 989e3), ("NVIDIA A100-SXM4-80GB", "float16", 312e3),
    ("TPU v5 lite", "bfloat16", 197e3), ("TPU v5", "bfloat16", 459e3), ("TPU v4", "bfloat16", 275e3)])
def test_known_devices_use_their_datasheet_bf16_peak(kind, dtype, gflops):
  assert suite.device_peak(kind, "gpu" if "NVIDIA" in kind else "tpu", dtype)["gflops"] == gflops


def test_train_step_and_decode_report_sane_figures():
  peak = suite.device_peak("cpu", "cpu", "float32")  # no datasheet figure for f32: a GEMM measured now
  assert peak["gflops"] > 0 and "measured" in peak["source"]
  cfg = preset("tiny", attention_impl="dot_product")
  step = suite.measure_train_step(cfg, batch=1, seq=32, micro=1, repeats=1, peak_gflops=peak["gflops"])
  assert 0 < step["mfu"] <= 1 and step["peak_gflops"] == peak["gflops"]
  assert step["median_s"] > 0 and step["tokens_per_s"] > 0 and step["model_gflop_per_step"] > 0
  assert 0 < step["scoring_vs_update"]["median_s"]
  decode = suite.measure_decode(cfg, transformer.init_params(cfg, jax.random.key(0)), batch=1, prompt_len=8,
                                new_tokens=32, repeats=3)
  assert decode["generate"]["tokens_per_s"] > 0 and decode["prefill_plus_1_step"]["median_s"] > 0
  assert decode["decode_ms_per_step"] > 0 and decode["decode_tokens_per_s"] > 0


def test_rollout_part_plays_every_arm_and_the_on_policy_ones_agree():
  out = suite.measure_rollout(preset("tiny"), tasks=2, group=1, max_steps=1, delays_ms=["0"], repeats=1)
  arms = out["delays"]["0ms"]
  assert out["episodes"] == 2 and out["slots"] == 1 and arms["same_samples"]
  for name in ("lock_step", "overlap_env", "waves", "refill", "refill_stale"):
    assert arms[name]["wall_s"] > 0 and arms[name]["samples"] > 0 and arms[name]["idle_slot_turns"] >= 0
  assert arms["refill"]["stale_samples"] == 0 and arms["waves"]["turns"] >= arms["refill"]["turns"]
