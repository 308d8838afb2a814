"""The update step training LoRA adapters against training every weight, in one process: XLA's compiled memory
(arguments: params, optimizer state, reference; temporaries: activations, gradients) and the step time.

  python benchmarks/bench_lora.py --out /tmp/lora.json        # the CPU default's shape, then the `small` preset
  python benchmarks/bench_lora.py --quick                     # smoke test

Each arm compiles `training.train_step.make_train_step` for one mini-batch of GRPO step samples (random tokens,
every row full) with the KL reference on, as the CPU default trains: full fine-tuning with π_ref a copy of the
weights, LoRA (rank 16, alpha 16, every projection) with π_ref the frozen base. The time is the best of `--repeats`
calls after a compiling one.
"""
import argparse

import jax
import jax.numpy as jnp
import numpy as np

from common import best_time, emit_json

from agentopd_jax.batching.collate import TrainBatch
from agentopd_jax.models import config as model_config, lora, transformer
from agentopd_jax.objectives.registry import LossCore, LossParams
from agentopd_jax.training.train_step import (OptimConfig, init_state, make_optimizer, make_train_step,
                                              split_minibatches)


def minibatch(model, rows: int, micro: int, width: int):
  rng = np.random.default_rng(0)
  tokens = rng.integers(3, model.vocab_size, (rows, width)).astype(np.int32)
  mask = (np.arange(width)[None] >= width // 2).astype(np.float32).repeat(rows, 0)
  batch = TrainBatch(tokens=tokens, segment_ids=np.ones_like(tokens), positions=np.tile(np.arange(width), (rows, 1)),
                     loss_mask=mask, advantages=np.where(np.arange(rows) % 2, 1.0, -1.0)[:, None] * mask,
                     old_logprobs=-np.log(model.vocab_size) * mask)
  return split_minibatches(batch, rows, micro)[0]


def arm(model, rank: int, batch, repeats: int) -> dict:
  optimizer = make_optimizer(OptimConfig(learning_rate=1e-4))
  loss = LossParams(core=LossCore(kl_coef=0.01))
  params = transformer.init_params(model, jax.random.key(0))
  if rank:
    cfg = lora.LoraConfig(rank=rank, alpha=float(rank))
    state = init_state(lora.init_adapters(params, cfg, jax.random.key(1)), optimizer, base_params=params)
  else:
    cfg, state = None, init_state(params, optimizer, jax.tree.map(jnp.copy, params))
  step = make_train_step(model, loss, optimizer, with_reference=True, lora=cfg)
  memory = step.lower(state, batch).compile().memory_analysis()
  holder = {"state": step(state, batch)[0]}

  def call():
    holder["state"], metrics = step(holder["state"], batch)
    jax.block_until_ready(metrics)

  trained = sum(x.size for x in jax.tree.leaves(holder["state"].params))
  return {"lora_rank": rank, "trained_params": int(trained), "step_s": round(best_time(call, repeats), 4),
          "arguments_mib": round(memory.argument_size_in_bytes / 2**20, 2),
          "temporaries_mib": round(memory.temp_size_in_bytes / 2**20, 2)}


def main():
  p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  p.add_argument("--out", default="")
  p.add_argument("--repeats", type=int, default=3)
  p.add_argument("--quick", action="store_true")
  args = p.parse_args()
  cases = [("tiny", 16, 16, 512), ("small", 16, 16, 512)]
  if args.quick:
    cases = [("tiny", 4, 4, 64)]
  out = {"cases": []}
  for name, rows, micro, width in cases:
    model = model_config.preset(name)
    batch = minibatch(model, rows, micro, width)
    full, adapted = arm(model, 0, batch, args.repeats), arm(model, 16, batch, args.repeats)
    out["cases"].append({"preset": name, "rows": rows, "width": width, "full": full, "lora": adapted,
                         "lora_over_full": {k: round(adapted[k] / full[k], 3)
                                            for k in ("step_s", "arguments_mib", "temporaries_mib")}})
  emit_json(out, args.out)


if __name__ == "__main__":
  main()
