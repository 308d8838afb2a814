"""benchmarks/iteration_roof.py's accounting, by hand: the FLOPs of a forward pass and the roof of each part of an
iteration from a run's recorded work, against a given machine."""
import json
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))

import iteration_roof  # noqa: E402
from agentopd_jax.models.config import preset  # noqa: E402

MODEL = preset("tiny")  # D 256, I 704, 4 layers, 4 heads x 64, 2 KV heads, vocab 2048


def test_forward_flops_by_hand():
  # One token through one layer: q (256x256), k and v (256x128 each), o (256x256), gate/up/down (3 x 256x704), each
  # 2 FLOPs per multiply-add; attention over 10 keys: QK and PV, 2 x 2 x 256 x 10.
  layer = 2 * (256 * 256 + 2 * 256 * 128 + 256 * 256 + 3 * 256 * 704) + 4 * 256 * 10
  assert iteration_roof.forward_flops(MODEL, 1, 10, 0) == 4 * layer
  assert iteration_roof.forward_flops(MODEL, 3, 10, 2) == 3 * 4 * layer + 2 * 2 * 256 * 2048


def _run(tmp_path, dtype, kl=0.0):
  run = tmp_path / dtype
  (run / "logs").mkdir(parents=True)
  (run / "config.json").write_text(json.dumps({"model": {"preset": "tiny", "path": "", "dtype": dtype},
                                               "loss": {"kl_coef": kl}}))
  row = {"phase": "train", "batch/samples": 100, "batch/trained_samples": 100, "batch/tokens": 20000,
         "rollout/prefill_tokens": 19000, "rollout/generated_tokens": 1000, "rollout/decode_steps": 100,
         "time/generate_s": 4.0, "time/update_s": 9.0, "time/env_s": 0.5, "time/iteration_s": 14.0}
  (run / "logs" / "metrics.jsonl").write_text("\n".join(json.dumps(dict(row, step=i)) for i in range(3)))
  return run


@pytest.mark.parametrize("kl", [0.0, 0.01])
def test_parts_roofs_by_hand(tmp_path, kl):
  machine = {"jax_weight_stream_gb_per_s": 10.0}
  gemm = {"bfloat16": {"gflops": 1000.0}}
  got = iteration_roof.run_roof(_run(tmp_path, "bfloat16", kl), machine, gemm)
  flops = iteration_roof.forward_flops
  roof = 1000e9
  prefill = flops(MODEL, 19000 - 100, 190 / 2, 0) / roof
  weights = iteration_roof.param_count(MODEL) * 2
  step = flops(MODEL, 10, 190 + 10 / 2, 10) / roof
  decode = 100 * max(weights / 10e9, step)
  update = (4 if kl else 3) * flops(MODEL, 20000, 201 / 2, 20000) / roof
  parts = got["parts"]
  assert parts["generate"]["roof_s"] == pytest.approx(prefill + decode, abs=1e-3)
  assert parts["update"]["roof_s"] == pytest.approx(update, abs=1e-3)
  assert parts["other"]["measured_s"] == pytest.approx(14.0 - 4.0 - 9.0 - 0.5)
  assert got["iterations"] == 2 and got["ratio"] == pytest.approx(14.0 / got["roof_s"], rel=1e-2)
  assert got["biggest_gap"] == "update"  # 9 s against a fraction of a second


def test_a_run_without_the_rollout_counters_is_refused(tmp_path):
  run = _run(tmp_path, "float32")
  rows = [json.loads(line) for line in (run / "logs" / "metrics.jsonl").read_text().splitlines()]
  (run / "logs" / "metrics.jsonl").write_text("\n".join(json.dumps({k: v for k, v in r.items()
                                                                    if not k.startswith("rollout/")}) for r in rows))
  with pytest.raises(SystemExit, match="rollout/decode_steps"):
    iteration_roof.run_roof(run, {"jax_weight_stream_gb_per_s": 10.0}, {"float32": {"gflops": 100.0}})
