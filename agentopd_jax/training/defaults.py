"""The env-agnostic part of a run config (model, rollout, SFT, GRPO, loss, optimizer, validation, checkpoints,
logging), shared by `configs/alfworld.py`, `configs/webshop.py` and `configs/searchqa.py`.

The values are the CPU default (tiny model, built-in tokenizer, SFT warm start then GRPO), tuned on ALFWorld
(docs/results.md); each env config sets its `env` section and overrides what its episodes need. Paper presets
start from here too, so a field exists in every config and an override of it is never an unknown-key error.
"""
from typing import Callable, Dict, Optional

import ml_collections

# Paper-setting variant name (`get_config` arg) -> model preset; weights come from `--config.model.path`.
PAPER_MODELS = {"qwen2p5_3b": "qwen2.5-3b", "qwen2p5_7b": "qwen2.5-7b", "qwen3_1p7b": "qwen3-1.7b"}


def cpu_base(env_name: str) -> ml_collections.ConfigDict:
  c = ml_collections.ConfigDict()
  c.seed = 0
  c.workdir = f"runs/{env_name}_cpu"
  c.method = "grpo"                    # "grpo" or "agentic_opd" (the `agentic_opd` variant: distil a GRPO run's pool)
  c.mesh_shape = (-1, 1, 1)            # (data, fsdp, tensor)
  c.warm_start_run = ""                # a run folder: its step-0 checkpoint (the warm start) is this run's start, no
                                       # SFT (methods compared from one warm start; the model config must match)
  c.warm_start_step = "0"              # which checkpoint of warm_start_run: "0" (its warm start), "best", "latest" or
                                       # a step (continued GRPO from where a run ended, against Agentic-OPD's student)
  c.pack_width = 512                   # training rows hold several samples, up to this many tokens (rows widen to the
                                       # longest sample); 0: one sample per row. Not with the seq-mean-token-mean
                                       # or seq-mean-token-sum loss_agg_mode (a packed row is not one sequence)

  c.model = ml_collections.ConfigDict()
  c.model.preset = "tiny"              # used when model.path is empty (random init)
  c.model.path = ""                    # local HF folder (config.json + *.safetensors + tokenizer)
  c.model.param_dtype = ""             # storage of params and Adam moments: "" = the checkpoint's (a preset: f32)
  c.model.dtype = ""                   # matmul (compute) dtype: "" = follow param_dtype, else the checkpoint's;
                                       # softmax, log-softmax and losses are f32 whatever it is
  c.model.attention_impl = ""          # "" (the einsum path, "xla"), "dot_product" (jax.nn.dot_product_attention)
                                       # or "cudnn" (its cuDNN kernel: NVIDIA GPUs, bf16/f16 compute)
  c.model.remat = False                # recompute each layer in the backward pass: activations for compute (a 7B
                                       # model needs it: experiments/plan.py)
  c.model.chat_template_kwargs = ml_collections.ConfigDict()  # e.g. enable_thinking=False (Qwen3)
  c.tokenizer_path = ""                # "" -> model.path's tokenizer, else the built-in one:
  c.builtin_tokenizer = ml_collections.ConfigDict()
  c.builtin_tokenizer.vocab_size = 2048  # its BPE vocabulary (a random-init model's vocab grows to fit the tokenizer)
  c.builtin_tokenizer.env_corpus = False  # also train it on the env's own text (catalogue, encyclopedia) so the env's
                                          # words are single tokens, and make ids copied verbatim (ASINs) whole tokens

  c.env = ml_collections.ConfigDict()  # the env config adds its own fields
  c.env.name = env_name
  c.env.history_length = 2
  c.env.compact_prompt = True          # the compact template (no <think>), suited to a tiny model
  c.env.prompt_flavor = "verl-agent"
  c.env.invalid_penalty = 0.1
  c.env.num_workers = 2                # env worker processes
  c.env.step_timeout_s = 60.0          # a worker that has not stepped its envs by then is killed and replaced (its
                                       # episodes fail); allow for an env's slowest step times the envs per worker
  c.env.backend = "process"            # "process" (this host) or "ray" (actors anywhere in a Ray cluster; docs/scale_out.md)
  c.env.ray_actor_options = ml_collections.ConfigDict({"num_cpus": 1})  # each Ray env worker's resources

  c.rollout = ml_collections.ConfigDict()
  c.rollout.layout = "step"            # "step" (verl-agent) or "trajectory" (verl-tool)
  c.rollout.max_steps = 10
  c.rollout.max_prompt_tokens = 1024
  c.rollout.max_response_tokens = 24
  c.rollout.max_observation_tokens = 500
  c.rollout.max_total_tokens = 4096
  c.rollout.temperature = 1.0           # the train step scores logits / T too (verl): PPO optimises the sampled policy
  c.rollout.top_p = 1.0
  c.rollout.top_k = 0
  c.rollout.recompute_old_logprobs = False  # π_old from the trainer's own forward instead of the sampler's (verl):
                                            # where the sampler runs at another precision or sharding (paper presets)

  c.sft = ml_collections.ConfigDict()
  c.sft.steps = 330                    # 0 skips the warm start
  c.sft.seed = 0                       # the warm start's seed (init, batch order): fixed, so every run seed starts RL
                                       # from one base model, as runs from a pretrained checkpoint do; -1: `seed`
  c.sft.demos = 1200                   # expert episodes from the training split (diverse demos generalise)
  c.sft.batch_size = 16                # small batches, many steps: copying from the context forms with steps
  c.sft.micro_batch_size = 16          # rows per micro-batch
  c.sft.learning_rate = 2e-3
  c.sft.warmup_steps = 10
  c.sft.lr_schedule = "cosine"         # "cosine" (decays to 0.1x by the last step) or "constant"
  c.sft.train_on_prompt = True         # loss on every token of a demonstration, not only on the replies
  c.sft.reply_weight = 20.0            # with train_on_prompt: loss weight of reply tokens relative to the rest
  c.sft.expert = "explorer"            # one of the env spec's experts; ALFWorld's: "explorer" (searches; imitable)
                                       # or "planner"
  c.sft.mistake_rate = 0.0             # recovery demonstrations: P(a stale action, answered "Nothing happens.", is
                                       # played before an expert action); the mistake is not imitated (ALFWorld)
  c.sft.skill_fraction = 0.0           # this share of the demo tasks also gets a demonstration behind SDAR's privileged
                                       # skill prompt, so the self-teacher learns to read skills (0: none)
  c.sft.skill_expert = ""              # the expert of those demonstrations ("": sft.expert), one that does what the
                                       # skills say
  c.sft.max_demo_steps = 0             # expert episodes must win within this many steps (0: rollout.max_steps, so
                                       # the warm start imitates only episodes the policy's horizon can finish)

  c.grpo = ml_collections.ConfigDict()
  c.grpo.iterations = 8
  c.grpo.tasks_per_iteration = 4
  c.grpo.group_size = 8                # 8 attempts per task: groups with a win are common at ~10 % success
  c.grpo.advantage = "grpo"            # registry key: "grpo" (mean_std_norm) or "grpo_mean_norm"; "opid" /
                                       # "opid_mean_norm": the same plus OPID's skill log-prob shift (`opid.*`)
  c.grpo.filter_groups = False         # DAPO dynamic sampling: train only on groups whose episodes' rewards differ
  c.grpo.task_phases = ""              # a task mix that shifts: "groupA@1,groupB@9" draws iterations 1-8 from group A's
                                       # training tasks, 9- from B's ("a+b": both; groups as in val/<group>_success_rate:
                                       # ALFWorld task types, search data sources); "": every iteration, the whole pool
  c.grpo.mini_batch_size = 160         # samples per optimizer step (rows padded up to a multiple)
  c.grpo.micro_batch_size = 16         # rows per micro-batch (a packed row holds several samples)

  c.loss = ml_collections.ConfigDict()
  c.loss.objective = "grpo"
  c.loss.clip_ratio_low = 0.2
  c.loss.clip_ratio_high = 0.2
  c.loss.clip_ratio_c = 3.0
  c.loss.kl_coef = 0.0
  c.loss.kl_type = "low_var_kl"
  c.loss.entropy_coef = 0.0
  c.loss.loss_agg_mode = "token-mean"  # or seq-mean-token-mean, seq-mean-token-sum, seq-mean-token-sum-norm (verl's)
  c.loss.loss_scale_factor = 0         # seq-mean-token-sum-norm's divisor L (verl: the padded response length)
  c.loss.pg_loss_coef = 1.0
  c.loss.opd_loss_coef = 1.0           # Agentic-OPD (loss.objective="agentic_opd"): weight of the distillation term
  c.loss.task_loss_coef = 0.0          #   GRPO task term on every rollout; 0 = pure OPD (the authors' default)
  c.loss.opd_top_k = 16                #   the student's top-k support of the reverse KL
  c.loss.opd_max_abs_log_ratio = 0.0   #   clamp of the top-k log-ratio (0: none)
  c.loss.opd_variant = "topk_reverse_kl"  # or "sampled_token" (the documented PG-OPD advantage)
  c.loss.lad_other = "none"            #   what rollouts LAD does not route get: "none" or "grpo"
  c.loss.sdar_coef = 0.01              # SDAR family (sdar, grpo_opsd, opsd): λ of the gated self-distillation term
  c.loss.gate_beta = 5.0               #   β of the gate σ(β·Δ) (grpo_opsd forces 0: g = 0.5)
  c.loss.sdar_gate = "gap"             #   "gap", "entropy" or "soft_or"
  c.loss.sdar_divergence = "reverse_kl"  # or "topk_forward_kl", "topk_jsd" (over the teacher's top-k)
  c.loss.distill_top_k = 16            #   k of the top-k divergences
  c.loss.skill_sd_coef = 0.001         # Skill-SD: λ_SDL of the ρ_on·k3 term
  c.loss.rlsd_lambda = 0.5             # RLSD: λ_0, warmed down linearly to 0 over
  c.loss.rlsd_warmdown_steps = 50      #   this many iterations W (the authors' code default; their scripts: 100)
  c.loss.rlsd_schedule = "released_code"  # λ_i = λ_0·max(0, 1 − i/W) at iteration i, as the authors' trainer;
                                          # "from_lambda0": λ_0·max(0, 1 − (i − 1)/W), λ_0 at the first iteration
  c.loss.rlsd_eps_w = 0.2              #   clip of the reweighting factor to [1 − ε_w, 1 + ε_w]

  c.skills = ml_collections.ConfigDict()  # SDAR's SkillBank (agentopd_jax/skills; docs/skills.md)
  c.skills.bank_dir = ""               # "" -> the env's shipped bank; or the SDAR authors' skills/<env>/ folder
  c.skills.retrieval = "km"            # km (the authors' keyword matching), km_words, full, random, ucb
  c.skills.ucb_c = 1.0                 # ucb: exploration constant c of r̄(e) + c·sqrt(ln N / n(e))

  c.teacher = ml_collections.ConfigDict()  # the teacher of self-distillation objectives (teachers/privileged.py)
  c.teacher.source = "self"            # "self": the rollout-time policy π_old; "pool": a checkpoint of pool_run
  c.teacher.context = "skills"         # "skills": the privileged skill prefix; "plain": the student's own prompt
  c.teacher.pool_run = ""              # source "pool": the run folder whose checkpoint teaches
  c.teacher.pool_step = "best"         #   "best", "latest" or a step

  c.opid = ml_collections.ConfigDict()  # OPID (grpo.advantage "opid"; teachers/hindsight.py, docs/opid.md)
  c.opid.analyzer = "oracle"           # "oracle" (offline, the env's expert), "stats" (the oracle's text at the
                                       # steps OPID's statistical selector picks), "openai" (an OpenAI-compatible
                                       # endpoint) or "local" (agentopd_jax.serve on opid.analyzer_model)
  c.opid.analyzer_model = ""           # openai: the model name; local: a model folder or run folder
  c.opid.base_url = ""                 # openai: "" -> OPENAI_BASE_URL
  c.opid.timeout_s = 600.0
  c.opid.max_completion_tokens = 4096
  c.opid.workers = 128                 # concurrent analyzer requests
  c.opid.parse_attempts = 2            # answers per trajectory (the later ones from the JSON-repair prompt)
  c.opid.api_retries = 5               # calls per answer, with exponential backoff
  c.opid.max_step_skills = 5           # K (OPID's scripts: ALFWorld/WebShop 5, search 2)
  c.opid.route = "step_priority"       # or "additive"
  c.opid.w_episode = 0.001             # w_ep, w_step: the scripts' weights of Δ^ep and Δ^step
  c.opid.w_step = 0.001
  c.opid.normalize = False             # z-score each Δ over its routed tokens
  c.opid.clip = 0.0                    # clamp each Δ to ±clip (0: none)
  c.opid.gamma = 0.95                  # discount of the analyzer's "Return:" lines
  c.opid.start_after = -1              # the skill term only after this iteration (-1: from the first)
  c.opid.stop_after = -1               # ... and up to this one (-1: to the last)
  c.opid.failed_only = False           # analyse failed episodes only
  c.opid.failed_only_after = -1        # all episodes up to this iteration, then failed only (-1: unset)
  c.opid.paper_mode = "mean_std_norm"  # the episode advantage of the opid_<model> variants (OPID's scripts)

  c.optim = ml_collections.ConfigDict()
  c.optim.learning_rate = 1e-4         # 2e-4 degraded the warm start, 5e-5 left it unchanged (docs/results.md)
  c.optim.warmup_steps = 0
  c.optim.weight_decay = 0.01
  c.optim.grad_clip = 1.0
  c.optim.max_bad_updates = 3          # consecutive non-finite (skipped) updates before the run stops

  c.validation = ml_collections.ConfigDict()
  c.validation.num_tasks = 48          # the fixed panel: the first N tasks of the validation split
  c.validation.attempts = 2            # episodes per panel problem (pass@k needs k <= attempts)
  c.validation.temperature = 0.4
  c.validation.every = 4               # GRPO iterations between validations; each one saves a checkpoint

  c.checkpoint = ml_collections.ConfigDict()
  c.checkpoint.keep = 0                # 0 keeps every checkpoint (the teacher pool); k keeps the newest k + best

  c.logging = ml_collections.ConfigDict()
  c.logging.tensorboard = True
  c.logging.plot = True

  # Multi-host (docs/scale_out.md): one process per host, each running the same command. Set the three fields, or
  # leave them and let `auto` find SLURM, Open MPI, a TPU slice or JAX_COORDINATOR_ADDRESS.
  c.distributed = ml_collections.ConfigDict()
  c.distributed.coordinator_address = ""  # "host:port" of process 0
  c.distributed.num_processes = 1
  c.distributed.process_id = 0
  c.distributed.auto = True

  c.opd = ml_collections.ConfigDict()  # Agentic-OPD only (method="agentic_opd"; training/opd_trainer.py)
  c.opd.teacher_run = f"runs/{env_name}_cpu"  # the GRPO run whose checkpoints are the student and the teachers
  c.opd.student_step = "best"          # "best" (validation) or a step of that run
  c.opd.scheduler = "hcn"              # hcn (v3), hcn_global, static_best, random, round_robin
  c.opd.selection_interval = 4         # iterations between teacher re-selections (a multiple of validation.every)
  c.opd.solved_rule = "any"            # a problem is solved by a checkpoint if any attempt won ("majority": most)
  c.opd.prune_dominated = False        # drop teachers whose solved set another teacher's contains
  c.opd.lad = "group_rates"            # LAD routing: "group_rates" (teacher rollouts on the same tasks) or "off"
  return c


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


# Integer fields and their least value. ml_collections refuses unknown fields and values of the wrong type; nothing
# else reads these before the model is loaded and the env workers are spawned, and group_size 0 or a negative batch
# would then fail deep in a shape error, or not at all.
_AT_LEAST = {
    "grpo.iterations": 0, "grpo.tasks_per_iteration": 1, "grpo.group_size": 1, "grpo.mini_batch_size": 1,
    "grpo.micro_batch_size": 1, "sft.steps": 0, "sft.demos": 0, "sft.batch_size": 1, "sft.micro_batch_size": 1,
    "sft.warmup_steps": 0, "sft.max_demo_steps": 0, "validation.num_tasks": 1, "validation.attempts": 1,
    "validation.every": 1, "checkpoint.keep": 0, "env.num_workers": 1, "env.history_length": 0,
    "optim.max_bad_updates": 1,
}


def check_config(c: ml_collections.ConfigDict) -> None:
  """One clear error naming the first bad field of run config `c`, before anything is loaded or spawned: the
  ranges above, `mesh_shape`, and the registry names (`env.name`, `grpo.advantage`) and config sections (loss, optim,
  rollout, teacher, sampling; opid when the advantage reads it) that a run would otherwise first look up minutes in,
  after the model loads or, for `grpo.advantage`, after the SFT warm start; and that the `agentic_opd` objective
  runs under its own trainer."""
  from agentopd_jax.envs import registry
  from agentopd_jax.objectives.advantages import ADVANTAGE_ESTIMATORS, SKILL_SHIFT_ESTIMATORS
  from agentopd_jax.objectives.registry import LossConfig
  from agentopd_jax.rollout.engine import RolloutConfig
  from agentopd_jax.teachers.hindsight import OpidConfig
  from agentopd_jax.teachers.privileged import TeacherConfig
  from agentopd_jax.training.train_step import OptimConfig
  from agentopd_jax.training.trainer import config_dataclass, validation_sampling

  for name, least in _AT_LEAST.items():
    section, field = name.split(".")
    value = c[section][field]
    if type(value) is not int or value < least:
      raise ValueError(f"{name} must be an integer >= {least}, got {value!r}")
  if type(c.env.step_timeout_s) is not float or not c.env.step_timeout_s > 0:
    raise ValueError(f"env.step_timeout_s must be a number of seconds > 0, got {c.env.step_timeout_s!r}")
  if len(c.mesh_shape) != 3 or any(type(n) is not int or n == 0 or n < -1 for n in c.mesh_shape):
    raise ValueError(f"mesh_shape must be 3 positive integers (data, fsdp, tensor), one of them may be -1; "
                     f"got {tuple(c.mesh_shape)}")
  registry.get(c.env.name)
  if c.grpo.advantage not in ADVANTAGE_ESTIMATORS:
    raise ValueError(f"grpo.advantage must be one of {sorted(ADVANTAGE_ESTIMATORS)}, got {c.grpo.advantage!r}")
  for cls, section in ((LossConfig, c.loss), (OptimConfig, c.optim), (RolloutConfig, c.rollout),
                       (TeacherConfig, c.teacher)):
    config_dataclass(cls, section)
  if c.loss.objective == "agentic_opd" and c.method != "agentic_opd":
    raise ValueError(f"loss.objective='agentic_opd' needs method='agentic_opd', got method={c.method!r}: the "
                     "objective takes its top-k ids (and the sampled-token variant its student log-probs) from the "
                     "live policy, which is π_old only while one optimizer step is taken per batch, as the Agentic-OPD "
                     "trainer does; the GRPO trainer takes one per grpo.mini_batch_size samples")
  if c.grpo.advantage in SKILL_SHIFT_ESTIMATORS:
    config_dataclass(OpidConfig, c.opid)
  validation_sampling(c)


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
