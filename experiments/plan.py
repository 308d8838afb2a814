"""Plan before launch: per-device memory of a run config on a mesh, and whether it fits an accelerator.

  python experiments/plan.py --config=configs/alfworld.py:qwen2p5_7b --config.mesh_shape=1,8,1
  python experiments/plan.py --config=configs/alfworld.py:qwen2p5_7b --config.mesh_shape=1,8,1 --accelerator=h100
  python experiments/plan.py --config=configs/alfworld.py --num_devices=8 --json     # mesh_shape (-1, 1, 1)

Why: a config that does not fit fails after its weights are loaded and its first rollout or update compiled. This
reads the config as `experiments/train.py` does (same flags and overrides), builds nothing but shapes
(`jax.eval_shape`, an abstract mesh), and prints the per-device bytes of parameters, optimizer state, reference
and teacher copies, gradients, one micro-batch's activations with and without remat, the loss head, the sampler's
KV cache and prefill, then the verdict for each accelerator (agentopd_jax/training/memory_plan.py has the formulas,
docs/planning.md the measured checks). Sizes are worst cases: prompts at rollout.max_prompt_tokens, replies at
rollout.max_response_tokens.
"""
import dataclasses
import inspect
import json
import sys

from absl import app, flags
from ml_collections import config_flags

import agentopd_jax.methods  # noqa: F401  registers the methods' objectives
from agentopd_jax.batching.collate import bucket as shape_bucket, round_up  # shape_bucket: the sampler's rounding
from agentopd_jax.models.config import ModelConfig, preset
from agentopd_jax.models.loading import model_overrides
from agentopd_jax.objectives.registry import LossParams, get_objective
from agentopd_jax.sampling.sampler import Sampler
from agentopd_jax.scoring.fused import ScoreConfig
from agentopd_jax.training import memory_plan
from agentopd_jax.training.assembly import sampling
from agentopd_jax.training.config import from_config_dict, loss_params, stale_flags
from agentopd_jax.training.train_step import PAD_MULTIPLE, make_optimizer

_CONFIG = config_flags.DEFINE_config_file("config", "configs/alfworld.py", "Run config.", lock_config=True)
_ACCELERATOR = flags.DEFINE_enum("accelerator", "all", ["all", *memory_plan.ACCELERATORS], "verdict for this one only")
_NUM_DEVICES = flags.DEFINE_integer("num_devices", 0, "devices of the mesh; needed when config.mesh_shape has a -1")
_JSON = flags.DEFINE_bool("json", False, "print one JSON object instead of the table")


def model_config(c) -> ModelConfig:
  """The ModelConfig a run of `c` builds, without its weights: model.path's config.json, else the preset, with the
  run config's dtypes applied as `load_model_and_tokenizer` applies them."""
  overrides = model_overrides(c.model)
  if c.model.path:
    return ModelConfig.from_hf_dir(c.model.path, **overrides)
  if "param_dtype" in overrides:
    overrides.setdefault("dtype", overrides["param_dtype"])
  return preset(c.model.preset).replace(**overrides)


def workload(c, loss: LossParams, score_cfg: ScoreConfig) -> memory_plan.Workload:
  """The train step's micro-batch and the sampler's largest cache under `c`, as the trainer and engine size them."""
  rollout = from_config_dict(c).rollout
  step_layout = rollout.layout == "step"
  longest = (rollout.max_prompt_tokens + rollout.max_response_tokens if step_layout else rollout.max_total_tokens)
  seq_len = max(c.pack_width, round_up(longest, PAD_MULTIPLE))  # make_minibatches' row width
  envs = max(c.grpo.tasks_per_iteration * c.grpo.group_size, c.validation.num_tasks * c.validation.attempts)
  bucket = inspect.signature(Sampler).parameters["bucket"].default  # the engine's samplers keep the default
  if step_layout:
    # One generate per env step, live envs padded to batch_bucket rows; the engine drops the previous step's output
    # (its cache) before the next generate allocates its own: one cache at a time.
    rows, capacity, caches = round_up(envs, rollout.batch_bucket), shape_bucket(longest, bucket), 1
    prefill = shape_bucket(rollout.max_prompt_tokens, bucket)
  else:  # one cache of max_total_tokens per episode, donated from turn to turn
    rows, capacity, caches = envs, rollout.max_total_tokens, 1
    prefill = shape_bucket(rollout.max_total_tokens - rollout.max_response_tokens, bucket)
  teacher_k = get_objective(loss.objective).teacher_top_k
  signals = 0 if teacher_k is None else 4 + 8 * teacher_k(loss)  # log-probs, top-k ids and log-probs
  return memory_plan.Workload(rows=min(c.grpo.micro_batch_size, c.grpo.mini_batch_size), seq_len=seq_len,
                              minibatch_rows=c.grpo.mini_batch_size, score=score_cfg, sampler_rows=rows,
                              cache_capacity=capacity, prefill_len=prefill, batch_bytes_per_token=24 + signals,
                              live_caches=caches)


def plan_from_config(c, num_devices: int = 0):
  """(model config, mesh shape, workload, plan) of run config `c`; allocates nothing."""
  model = model_config(c)
  mesh_shape = memory_plan.resolve_mesh_shape(tuple(c.mesh_shape), num_devices)
  cfg = from_config_dict(c)
  loss = loss_params(cfg)
  score_cfg = get_objective(loss.objective).score_config(loss, ScoreConfig(temperature=sampling(cfg).train.temperature))
  work = workload(c, loss, score_cfg)
  optimizer = make_optimizer(cfg.optim)
  result = memory_plan.plan(model, mesh_shape, optimizer, work, with_reference=loss.core.kl_coef > 0,
                            with_teacher=score_cfg.teacher == "params", lora=cfg.lora)
  return model, mesh_shape, work, result


def _gib(n: int) -> str:
  return f"{n / memory_plan.GiB:9.2f}"


def table(model: ModelConfig, mesh_shape, w: memory_plan.Workload, p: memory_plan.Plan, accelerators) -> str:
  lines = [
      f"model: {model.num_params() / 1e6:,.0f} M params, {model.num_layers} layers, params {model.param_dtype}, "
      f"compute {model.dtype}; mesh (data, fsdp, tensor) = {mesh_shape}",
      f"train micro-batch {w.rows} rows x {w.seq_len} tokens (mini-batch {w.minibatch_rows} rows); sampler "
      f"{w.sampler_rows} rows x {w.cache_capacity} cache slots, prefill {w.prefill_len} tokens",
      "", "GiB per device", *(f"  {name:<34}{_gib(n)}" for name, n in (
          ("parameters", p.params), ("LoRA adapters", p.adapters), ("LoRA: the sampler's merged policy", p.merged),
          ("optimizer state (AdamW mu, nu)", p.opt_state),
          ("reference params (KL)", p.reference), ("teacher params", p.teacher), ("= resident", p.resident),
          ("mini-batch input", p.minibatch), ("gradients (accumulator + micro)", p.gradients),
          ("optimizer update", p.optimizer_update), ("activations, no remat", p.activations[False]),
          ("activations, remat", p.activations[True]), ("loss head (vocab-chunked)", p.loss_head),
          ("= train step, no remat", p.train_step(False)), ("= train step, remat", p.train_step(True)),
          (f"KV cache (x {p.live_caches} live)", p.kv_cache), ("prefill", p.prefill), ("= rollout", p.rollout),
          ("PEAK, no remat", p.peak(False)), ("PEAK, remat", p.peak(True)))),
      "", f"verdict (peak <= {memory_plan.HEADROOM:.0%} of HBM; *: what the model config runs, remat={p.remat})"]
  for name in accelerators:
    for remat in (False, True):
      mark = "*" if remat == p.remat else " "
      lines.append(f" {mark}{name:<10} {'remat' if remat else 'no remat':<9} {p.verdict(name, remat)}")
  return "\n".join(lines)


def main(argv):
  del argv
  model, mesh_shape, work, result = plan_from_config(_CONFIG.value, _NUM_DEVICES.value)
  accelerators = list(memory_plan.ACCELERATORS) if _ACCELERATOR.value == "all" else [_ACCELERATOR.value]
  if _JSON.value:
    print(json.dumps({
        "model": dataclasses.asdict(model), "mesh_shape": mesh_shape, "workload": dataclasses.asdict(work),
        "bytes_per_device": result.to_dict(), "headroom": memory_plan.HEADROOM,
        "verdicts": {name: {"no_remat": result.verdict(name, False), "remat": result.verdict(name, True)}
                     for name in accelerators}}, indent=2))
  else:
    print(table(model, mesh_shape, work, result, accelerators))


if __name__ == "__main__":
  stale = stale_flags(sys.argv)  # a flag of the single-section layout: its key in the method groups
  if stale:
    sys.exit("\n".join(stale))
  app.run(main)
