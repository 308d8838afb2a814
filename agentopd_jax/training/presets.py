"""The run presets: the CPU default of each env (`cpu_base`) and what the variants of `configs/<env>.py` change on
top of it (the paper setting, SDAR and its baselines, OPID, Agentic-OPD), chosen by `select_variant`.

The field defaults are the typed sections of `training/config.py` (`RunConfig`) and the env's own section class
(`EnvSpec.config`): the CPU default (tiny model, built-in tokenizer, SFT warm start then GRPO), tuned on ALFWorld
(docs/results.md). Paper presets start from it too, so a field exists in every config and an override of it is never
an unknown-key error.
"""
from typing import Callable, Dict, Optional

import ml_collections

from agentopd_jax.envs import registry
from agentopd_jax.methods.agentic_opd.config import OpdConfig
from agentopd_jax.training.config import RunConfig, to_config_dict

# Paper-setting variant name (`get_config` arg) -> model preset; weights come from `--config.model.path`.
PAPER_MODELS = {"qwen2p5_3b": "qwen2.5-3b", "qwen2p5_7b": "qwen2.5-7b", "qwen3_1p7b": "qwen3-1.7b"}


def cpu_base(env_name: str) -> ml_collections.ConfigDict:
  """The CPU default run config of env `env_name`: every section's defaults and the env's own `env` section, the
  workdir `runs/<env>_cpu` (also Agentic-OPD's `opd.teacher_run`: the GRPO run it distils)."""
  env = registry.get(env_name).config(name=env_name)
  workdir = f"runs/{env_name}_cpu"
  return to_config_dict(RunConfig(env=env, workdir=workdir, opd=OpdConfig(teacher_run=workdir)))


def agentic_opd_overrides(c: ml_collections.ConfigDict) -> ml_collections.ConfigDict:
  """Agentic-OPD (methods.md §2.3) on top of a run config: the student and teachers come from `opd.teacher_run`
  (that config's default GRPO run), so no SFT; pure top-k reverse-KL OPD (task_loss_coef 0, k = 16), G = 4 rollouts
  per task, one update per iteration (the OPD trainer makes the whole batch one mini-batch). The workdir is
  `runs/<env>_agentic_opd`."""
  c.method = "agentic_opd"
  c.opd.teacher_run = c.workdir
  c.workdir = f"runs/{c.env.name}_agentic_opd"
  c.sft.steps = 0
  c.loss.objective = "agentic_opd"     # the loss.opd_* defaults are the authors' (top-k 16, no task term, no KL)
  c.grpo.group_size = 4
  c.grpo.tasks_per_iteration = 8
  return c


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
  c.loss.rlsd_warmdown_steps = 100     # SDAR's RLSD scripts (the `rlsd` objective only)
  c.optim.learning_rate = 1e-6
  if preset.startswith("qwen3"):
    c.model.chat_template_kwargs = ml_collections.ConfigDict({"enable_thinking": False})  # as the verl-agent runs
  c.validation.num_tasks = 128
  c.validation.attempts = 2
  c.validation.temperature = 0.4
  c.validation.every = 5
  return c


# SDAR (methods.md §4) and the baselines of its table, each a `loss.objective` of the same GRPO run.
SKILL_METHODS = ("sdar", "grpo_opsd", "opsd", "rlsd", "skill_sd", "skill_grpo")


def skill_method_overrides(c: ml_collections.ConfigDict, method: str) -> ml_collections.ConfigDict:
  """SDAR or one of its baselines on top of a run config: `loss.objective` = `method` with SDAR's λ = 0.01, β = 5,
  the self-teacher (π_old) reading KM-retrieved skills; the workdir gets the method's name. GRPO+OPSD is the β = 0
  gate, OPSD the gated term without the policy gradient (their objectives force those values)."""
  c.loss.objective = method
  c.workdir = f"{c.workdir}_{method}"
  c.loss.sdar_coef = 0.01
  c.loss.gate_beta = 5.0
  c.teacher.source = "self"
  c.teacher.context = "skills"
  c.skills.retrieval = "km"
  return c


def opid_overrides(c: ml_collections.ConfigDict, paper: bool) -> ml_collections.ConfigDict:
  """OPID (methods.md §3.3) on top of a run config: GRPO's episode advantage plus the skill shift (w_ep = w_step =
  0.001, step_priority routing). On CPU the offline oracle analyzer; on the paper setting an OpenAI-compatible one
  (the authors' fallback model; point opid.base_url/analyzer_model at yours) and the scripts' advantage mode:
  mean_norm for Qwen3 and where the env config's `opid.paper_mode` says so (WebShop), mean_std_norm otherwise. The
  workdir gets "_opid"."""
  c.workdir = f"{c.workdir}_opid"
  mean_norm = paper and (c.opid.paper_mode == "mean_norm" or c.model.preset.startswith("qwen3"))
  c.grpo.advantage = "opid_mean_norm" if mean_norm else "opid"
  if paper:
    c.opid.analyzer = "openai"
    c.opid.analyzer_model = "gemini-2.5-flash"
  return c


def select_variant(arg: str, config_file: str, cpu: Callable[[], ml_collections.ConfigDict],
                   paper: Callable[[str], ml_collections.ConfigDict],
                   extra: Optional[Dict[str, Callable[[], ml_collections.ConfigDict]]] = None
                   ) -> ml_collections.ConfigDict:
  """`get_config(arg)` of an env config: "" or "cpu" -> `cpu()`, "agentic_opd" -> Agentic-OPD on the CPU default's
  GRPO run, a PAPER_MODELS key -> `paper(arg)`; "opid" or a SKILL_METHODS name, alone or before a PAPER_MODELS key
  ("sdar", "sdar_qwen2p5_3b", "opid_qwen3_1p7b"), -> that method on the CPU default or on the paper setting; a key of
  `extra` -> that env config's own variant (ALFWorld's "forgetting")."""
  variant = arg or "cpu"
  extra = extra or {}
  if variant == "cpu":
    return cpu()
  if variant in extra:
    return extra[variant]()
  if variant == "agentic_opd":
    return agentic_opd_overrides(cpu())
  if variant in PAPER_MODELS:
    return paper(variant)
  if variant == "opid":
    return opid_overrides(cpu(), paper=False)
  if variant.startswith("opid_") and variant[len("opid_"):] in PAPER_MODELS:
    return opid_overrides(paper(variant[len("opid_"):]), paper=True)
  for method in SKILL_METHODS:
    if variant == method:
      return skill_method_overrides(cpu(), method)
    if variant.startswith(method + "_") and variant[len(method) + 1:] in PAPER_MODELS:
      return skill_method_overrides(paper(variant[len(method) + 1:]), method)
  raise ValueError(f"unknown {config_file} variant {variant!r}; choose cpu, agentic_opd, opid, "
                   f"{''.join(name + ', ' for name in sorted(extra))}one of "
                   f"{sorted(PAPER_MODELS)}, one of {SKILL_METHODS} or <method>_<model> (e.g. sdar_qwen2p5_3b, "
                   f"opid_qwen2p5_3b)")
