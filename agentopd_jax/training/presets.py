"""The run presets: the CPU default of each env (`cpu_base`) and what the variants of `configs/<env>.py` change on
top of it (the paper setting, and each method's own preset: `Method.preset` in `agentopd_jax.methods`), chosen by
`select_variant`.

The field defaults are the typed sections of `training/config.py` (`RunConfig`) and the env's own section class
(`EnvSpec.config`): the CPU default (tiny model, built-in tokenizer, SFT warm start then GRPO), tuned on ALFWorld
(docs/results.md). Paper presets start from it too, so a field exists in every config and an override of it is never
an unknown-key error.
"""
from typing import Callable, Dict, Optional, Tuple

import ml_collections

from agentopd_jax.envs import registry
from agentopd_jax.methods import METHODS
from agentopd_jax.methods.agentic_opd.config import AgenticOpdConfig
from agentopd_jax.training.config import RunConfig, to_config_dict

# Paper-setting variant name (`get_config` arg) -> model preset; weights come from `--config.model.path`.
PAPER_MODELS = {"qwen2p5_3b": "qwen2.5-3b", "qwen2p5_7b": "qwen2.5-7b", "qwen3_1p7b": "qwen3-1.7b"}


def cpu_base(env_name: str) -> ml_collections.ConfigDict:
  """The CPU default run config of env `env_name`: every section's defaults and the env's own `env` section, the
  workdir `runs/<env>_cpu` (also Agentic-OPD's `agentic_opd.teacher_run`: the GRPO run it distils)."""
  env = registry.get(env_name).config(name=env_name)
  workdir = f"runs/{env_name}_cpu"
  return to_config_dict(RunConfig(env=env, workdir=workdir, agentic_opd=AgenticOpdConfig(teacher_run=workdir)))


def method_variants() -> Tuple[Tuple[str, ...], Tuple[str, ...]]:
  """(the methods with a variant of their own, those of them with a `<method>_<model>` variant per paper model):
  the registered methods whose `preset` is set (`Method.paper_variants`)."""
  own = tuple(sorted(name for name, m in METHODS.items() if m.preset is not None))
  return own, tuple(name for name in own if METHODS[name].paper_variants)


def paper_overrides(c: ml_collections.ConfigDict, variant: str) -> ml_collections.ConfigDict:
  """The verl-agent / SDAR paper setting on pretrained weights (`PAPER_MODELS[variant]`): no SFT, lr 1e-6, KL 0.01,
  entropy 0.001, 16 tasks x 8 group, rollout T=1.0, validation on 128 tasks at T=0.4, prompt/response 2048/512, full
  templates, RLSD's λ warmed down over 100 iterations. The workdir is `runs/<env>_<variant>`."""
  preset = PAPER_MODELS[variant]
  c.workdir = f"runs/{c.env.name}_{variant}"
  c.model.preset = preset
  # Mixed precision: f32 master weights and Adam moments, bf16 matmuls. At lr 1e-6 an Adam step (~1e-6) is far
  # below half the bf16 rounding step of a 0.02-sized weight (~4e-5), so bf16 master weights would not move;
  # bf16 compute halves the bytes each matmul streams and runs on the accelerators' bf16 units.
  c.model.param_dtype = "float32"
  c.model.dtype = "bfloat16"
  c.model.remat = True                 # without it no 8-device mesh holds a 7B step's activations (docs/planning.md)
  # Shared prompt heads keep their activations, keys and values through a whole mini-batch, beside the micro-batch's;
  # the memory planner does not count them, so the paper settings train whole rows.
  c.share_prefixes = False
  c.env.compact_prompt = False
  c.env.num_workers = 16
  c.rollout.max_prompt_tokens = 2048
  c.rollout.max_response_tokens = 512
  c.rollout.recompute_old_logprobs = True  # the sampler's bf16 cache and decode-time sharding differ from the update's
  c.sft.steps = 0
  c.sft.train_on_prompt = False
  c.grpo.iterations = 150
  c.grpo.tasks_per_iteration = 16
  c.grpo.group_size = 8
  c.grpo.mini_batch_size = 256
  c.grpo.micro_batch_size = 32
  c.loss.kl_coef = 0.01
  c.loss.entropy_coef = 0.001
  c.rlsd.warmdown_steps = 100          # SDAR's RLSD scripts (the `rlsd` method only)
  c.optim.learning_rate = 1e-6
  if preset.startswith("qwen3"):
    c.model.chat_template_kwargs = ml_collections.ConfigDict({"enable_thinking": False})  # as the verl-agent runs
  c.validation.num_tasks = 128
  c.validation.attempts = 2
  c.validation.temperature = 0.4
  c.validation.every = 5
  return c


def lora_overrides(c: ml_collections.ConfigDict, paper: bool) -> ml_collections.ConfigDict:
  """GRPO trains LoRA adapters instead of every weight. On a paper model verl-agent's LoRA script
  (run_alfworld_lora.sh: Qwen2.5-7B, rank 64, alpha 64, lr 3e-6, three times its full fine-tuning rate); on the CPU
  default the same alpha = rank and the same 3x ratio to its full-FT rate (1e-4), at rank 16 of the tiny model's 256
  (docs/results.md, LoRA against full fine-tuning)."""
  c.lora.rank = 64 if paper else 16
  c.lora.alpha = float(c.lora.rank)
  if paper:  # the base is never updated, so f32 master weights buy nothing; the adapters and their moments stay f32
    c.model.param_dtype = "bfloat16"
  c.optim.learning_rate = float(f"{3 * c.optim.learning_rate:.6g}")
  c.workdir = f"{c.workdir}_lora"
  return c


def select_variant(arg: str, config_file: str, cpu: Callable[[], ml_collections.ConfigDict],
                   paper_fn: Callable[[str], ml_collections.ConfigDict],
                   extra: Optional[Dict[str, Callable[[], ml_collections.ConfigDict]]] = None
                   ) -> ml_collections.ConfigDict:
  """`get_config(arg)` of an env config: "" or "cpu" -> `cpu()`, a PAPER_MODELS key -> `paper(arg)`; a method with a
  preset (`method_variants`: SDAR and its baselines, Skill-GRPO, OPID, Agentic-OPD, kl_to_best), alone or before a
  PAPER_MODELS key where it has paper variants ("sdar", "sdar_qwen2p5_3b", "opid_qwen3_1p7b"), -> its `preset` on the
  CPU default or on the paper setting; a key of `extra` -> that env config's own variant (ALFWorld's "forgetting");
  any of them + "_lora" ("qwen2p5_7b_lora", "sdar_lora"), or "lora" alone for the CPU default, -> with LoRA
  (`lora_overrides`)."""
  variant = arg or "cpu"
  extra = extra or {}
  if variant == "lora" or variant.endswith("_lora"):
    inner = variant[:-len("_lora")] if variant != "lora" else "cpu"
    paper = any(inner == m or inner.endswith("_" + m) for m in PAPER_MODELS)
    return lora_overrides(select_variant(inner, config_file, cpu, paper_fn, extra), paper)
  if variant == "cpu":
    return cpu()
  if variant in extra:
    return extra[variant]()
  if variant in PAPER_MODELS:
    return paper_fn(variant)
  own, on_paper = method_variants()
  if variant in own:
    return METHODS[variant].preset(cpu(), paper=False)
  for name in on_paper:
    if variant.startswith(name + "_") and variant[len(name) + 1:] in PAPER_MODELS:
      return METHODS[name].preset(paper_fn(variant[len(name) + 1:]), paper=True)
  raise ValueError(f"unknown {config_file} variant {variant!r}; choose cpu, "
                   f"{''.join(name + ', ' for name in sorted(extra))}one of {sorted(PAPER_MODELS)}, a method "
                   f"{list(own)} or <method>_<model> for a method of {list(on_paper)} (e.g. sdar_qwen2p5_3b, "
                   f"opid_qwen2p5_3b)")
