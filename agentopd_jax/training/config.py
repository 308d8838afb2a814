"""The run config: typed frozen sections, their defaults, and the ConfigDict the command line overrides.

Each section is a frozen dataclass next to the code that reads it (`rollout.engine.RolloutConfig`,
`training.train_step.OptimConfig`, `objectives.registry.LossCore`, the env's `EnvSpec.config`, each method's config
group in its package: `sdar`, `rlsd`, `skill_sd`, `opid`, `agentic_opd`, `kl_to_best`, ...) or, for the trainer's own
sections, here. `RunConfig` holds one of each plus the top-level fields, and its field defaults are the CPU default
run's values (the paper presets override them in `training.presets`). `method` names the run's methods
(`method_names`): one primary method, which decides the objective, and optional add-ons ("sdar+opid").

  c = to_config_dict(RunConfig(env=AlfworldConfig()))   # the ConfigDict: `--config.rollout.max_steps=20` etc.
  cfg = from_config_dict(c)                              # RunConfig: every section built and checked

`to_config_dict` gives each field the ConfigDict type of its annotation (ml_collections then refuses a string in an
int field and turns an int into a float in a float field), and `from_config_dict` turns any bad field into one
ValueError that starts with its dotted name (`grpo.group_size: ...`), before anything is loaded or spawned.

Run configs of the single-section layout (every method's loss fields in `loss`, Agentic-OPD's in `opd`, the method
spread over `method`, `loss.objective` and `grpo.advantage`) load through `upgrade`, and a command-line flag of that
layout is one error naming its key in the groups (`stale_flags`).
"""
from __future__ import annotations

import copy
import dataclasses
import functools
import re
import types
import typing
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import ml_collections

from agentopd_jax.envs import registry
from agentopd_jax.envs.registry import EnvCommon
from agentopd_jax.models.config import _DTYPES
from agentopd_jax.models.loading import ModelSpec
from agentopd_jax.models.lora import LoraConfig
from agentopd_jax.models.tokenizer import BuiltinTokenizerConfig
from agentopd_jax.methods import METHODS  # also registers the methods' objectives
from agentopd_jax.methods.agentic_opd.config import AgenticOpdConfig
from agentopd_jax.methods.gigpo import GigpoConfig
from agentopd_jax.methods.kl_to_best import KlToBestConfig
from agentopd_jax.methods.opid.config import OpidConfig
from agentopd_jax.methods.sdar.config import RlsdConfig, SdarConfig, SkillSdConfig
from agentopd_jax.methods.sdar.teacher import TeacherConfig
from agentopd_jax.objectives.advantages import ADVANTAGE_ESTIMATORS
from agentopd_jax.objectives.losses import PER_SEQUENCE_MODES
from agentopd_jax.objectives.registry import LossCore, LossParams
from agentopd_jax.objectives.rollout_correction import RolloutCorrectionConfig
from agentopd_jax.rollout.engine import RolloutConfig
from agentopd_jax.skills.retrieval import SkillsConfig
from agentopd_jax.training.train_step import OptimConfig

LR_SCHEDULES = ("cosine", "constant")


def _at_least(section: str, obj, least: Dict[str, int]) -> None:
  """Each named integer field of `obj` is an int >= its least value; else a ValueError naming `section.field`.
  ml_collections refuses values of the wrong type, but group_size 0 or a negative batch would fail deep in a shape
  error, or not at all."""
  for name, low in least.items():
    value = getattr(obj, name)
    if type(value) is not int or value < low:
      raise ValueError(f"{section}.{name} must be an integer >= {low}, got {value!r}")


@dataclasses.dataclass(frozen=True)
class SftConfig:
  """The SFT warm start on expert demonstrations (`training.warm_start.sft`)."""
  steps: int = 330                     # 0 skips the warm start
  seed: int = 0                        # the warm start's seed (init, batch order): fixed, so every run seed starts RL
                                       # from one base model, as runs from a pretrained checkpoint do; -1: `seed`
  demos: int = 1200                    # expert episodes from the training split (diverse demos generalise)
  batch_size: int = 16                 # small batches, many steps: copying from the context forms with steps
  micro_batch_size: int = 16           # rows per micro-batch
  learning_rate: float = 2e-3
  warmup_steps: int = 10
  lr_schedule: str = "cosine"          # "cosine" (decays to 0.1x by the last step) or "constant"
  train_on_prompt: bool = True         # loss on every token of a demonstration, not only on the replies
  reply_weight: float = 20.0           # with train_on_prompt: loss weight of reply tokens relative to the rest
  expert: str = "explorer"             # one of the env spec's experts; ALFWorld's: "explorer" (searches; imitable)
                                       # or "planner"
  mistake_rate: float = 0.0            # recovery demonstrations: P(a stale action, answered "Nothing happens.", is
                                       # played before an expert action); the mistake is not imitated (ALFWorld)
  skill_fraction: float = 0.0          # this share of the demo tasks also gets a demonstration behind SDAR's privileged
                                       # skill prompt, so the self-teacher learns to read skills (0: none)
  skill_expert: str = ""               # the expert of those demonstrations ("": sft.expert), one that does what the
                                       # skills say
  opid_fraction: float = 0.0           # this share of the demo tasks also gets demonstrations in OPID's injection
                                       # format (methods/opid/demos.py), so the policy reads OPID's skills (0: none)
  opid_targets: str = "skills"         # what those steps imitate: "skills" (the action the skills point to) or
                                       # "expert" (the demonstration's own action where it has one)
  opid_retries: int = 0                # with opid_fraction: each won one of those episodes also played again from its
                                       # start by the env's expert that reads its workflow, the workflow in every
                                       # prompt (the hindsight retry's setting: the skill decides where to search), in
                                       # this many copies (0: none; more weigh that setting more in the SFT mix)
  max_demo_steps: int = 0              # expert episodes must win within this many steps (0: rollout.max_steps, so
                                       # the warm start imitates only episodes the policy's horizon can finish)
  dtype: str = ""                      # the warm start's compute precision ("": model.dtype), so that RL can compute
                                       # in another one than the SFT it starts from (master weights: model.param_dtype)

  def __post_init__(self):
    if self.dtype not in ("", *_DTYPES):
      raise ValueError(f"sft.dtype must be '' or one of {', '.join(_DTYPES)}, got {self.dtype!r}")
    _at_least("sft", self, {"steps": 0, "demos": 0, "batch_size": 1, "micro_batch_size": 1, "warmup_steps": 0,
                            "max_demo_steps": 0, "opid_retries": 0})
    if self.seed < -1:
      raise ValueError(f"sft.seed must be >= 0, or -1 to follow `seed`; got {self.seed}")
    if self.lr_schedule not in LR_SCHEDULES:
      raise ValueError(f"sft.lr_schedule must be 'cosine' or 'constant', got {self.lr_schedule!r}")
    if self.opid_targets not in ("skills", "expert"):
      raise ValueError(f"sft.opid_targets must be 'skills' or 'expert', got {self.opid_targets!r}")
    if self.opid_retries and not self.opid_fraction:
      raise ValueError("sft.opid_retries replays OPID's demonstrations, so it needs sft.opid_fraction > 0")
    for name in ("skill_fraction", "opid_fraction"):
      if not 0.0 <= getattr(self, name) <= 1.0:
        raise ValueError(f"sft.{name} must be in [0, 1], got {getattr(self, name)}")


@dataclasses.dataclass(frozen=True)
class GrpoConfig:
  """GRPO's iterations, task draw, groups, advantage and batching."""
  iterations: int = 8
  tasks_per_iteration: int = 4
  group_size: int = 8                  # 8 attempts per task: groups with a win are common at ~10 % success
  advantage: str = "grpo"              # registry key: "grpo" (mean_std_norm) or "grpo_mean_norm" (OPID's add-on
                                       # shifts either per token)
  filter_groups: bool = False          # DAPO dynamic sampling: train only on groups whose episodes' rewards differ
  task_phases: str = ""                # a task mix that shifts: "groupA@1,groupB@9" draws iterations 1-8 from group
                                       # A's training tasks, 9- from B's ("a+b": both; groups as in
                                       # val/<group>_success_rate: ALFWorld task types, search data sources); "": every
                                       # iteration, the whole pool
  mini_batch_size: int = 160           # samples per optimizer step (rows padded up to a multiple)
  micro_batch_size: int = 16           # rows per micro-batch (a packed row holds several samples)

  def __post_init__(self):
    _at_least("grpo", self, {"iterations": 0, "tasks_per_iteration": 1, "group_size": 1, "mini_batch_size": 1,
                             "micro_batch_size": 1})
    if self.advantage not in ADVANTAGE_ESTIMATORS:
      hint = stale_key("grpo.advantage", self.advantage)
      raise ValueError(f"grpo.advantage must be one of {sorted(ADVANTAGE_ESTIMATORS)}, got {self.advantage!r}"
                       + (f" ({hint})" if hint else ""))


@dataclasses.dataclass(frozen=True)
class ValidationConfig:
  num_tasks: int = 48                  # the fixed panel: the first N tasks of the validation split
  attempts: int = 2                    # episodes per panel problem (pass@k needs k <= attempts)
  temperature: float = 0.4             # 0: greedy
  every: int = 4                       # GRPO iterations between validations; each one saves a checkpoint

  def __post_init__(self):
    _at_least("validation", self, {"num_tasks": 1, "attempts": 1, "every": 1})
    if not self.temperature >= 0:
      raise ValueError(f"validation.temperature must be >= 0, got {self.temperature}")


@dataclasses.dataclass(frozen=True)
class CheckpointConfig:
  keep: int = 0                        # 0 keeps every checkpoint (the teacher pool); k keeps the newest k + best

  def __post_init__(self):
    _at_least("checkpoint", self, {"keep": 0})


@dataclasses.dataclass(frozen=True)
class LoggingConfig:
  tensorboard: bool = True
  plot: bool = True
  wandb: bool = False                  # also log to Weights & Biases (the `wandb` extra; WANDB_MODE=offline works)
  wandb_project: str = "agentopd_jax"
  wandb_entity: str = ""               # "" -> the W&B default entity
  val_generations: int = 4             # the first N episodes of each validation, prompt and reply per turn, to
                                       # logs/val_generations.jsonl and W&B's "val/generations" table (verl's
                                       # trainer.log_val_generations); 0: none


@dataclasses.dataclass(frozen=True)
class DistributedConfig:
  """Multi-host (docs/scale_out.md): one process per host, each running the same command. Set the three fields, or
  leave them and let `auto` find SLURM, Open MPI, a TPU slice or JAX_COORDINATOR_ADDRESS."""
  coordinator_address: str = ""        # "host:port" of process 0
  num_processes: int = 1
  process_id: int = 0
  auto: bool = True


def parse_method(method: str) -> Tuple[str, Tuple[str, ...]]:
  """(primary method, add-ons) of a `method` string: one primary method of `METHODS` (it declares the objective),
  then add-ons joined by "+" ("sdar+opid"); add-ons alone stack on GRPO ("opid"). Anything else is one ValueError
  that starts with `method:`."""
  primaries = sorted(n for n, m in METHODS.items() if m.objective is not None)
  addons = sorted(n for n, m in METHODS.items() if m.objective is None)
  choices = f"a primary method {primaries}, optionally followed by add-ons {addons} joined by '+' (e.g. 'sdar+opid')"
  if not isinstance(method, str) or not method:
    raise ValueError(f"method: expected {choices}, got {method!r}")
  parts = method.split("+")
  unknown = [p for p in parts if p not in METHODS]
  if unknown:
    raise ValueError(f"method: unknown method {unknown[0]!r} in {method!r}; expected {choices}")
  named = [p for p in parts if METHODS[p].objective is not None]
  if len(named) > 1:
    raise ValueError(f"method: {method!r} names two primary methods ({named[0]!r} and {named[1]!r}); a run has one, "
                     f"optionally followed by add-ons {addons}")
  if named and parts[0] != named[0]:
    raise ValueError(f"method: name the primary method first, then its add-ons: "
                     f"{'+'.join(named + [p for p in parts if p not in named])!r}, got {method!r}")
  primary, rest = (parts[0], parts[1:]) if named else ("grpo", parts)
  twice = sorted({p for p in rest if rest.count(p) > 1})
  if twice:
    raise ValueError(f"method: {method!r} names {twice[0]!r} twice")
  if rest and not METHODS[primary].takes_addons:
    raise ValueError(f"method: {primary!r} takes no add-on, got {method!r}")
  return primary, tuple(rest)


def method_names(method: str) -> Tuple[str, ...]:
  """The methods of a `method` string in the order their hooks run: the add-ons (OPID's advantage shift), then the
  primary method (a teacher-reading objective's teacher, Skill-GRPO's prompt skills, Agentic-OPD's routing)."""
  primary, addons = parse_method(method)
  return addons + (primary,)


@dataclasses.dataclass(frozen=True)
class RunConfig:
  """A whole run: the top-level fields and one field per section. `env` is the env's own section class
  (`registry.get(name).config`), so a RunConfig is built for one env: `RunConfig(env=AlfworldConfig())`."""
  env: EnvCommon
  seed: int = 0
  workdir: str = "runs/cpu"
  method: str = "grpo"                 # the primary method, optionally with add-ons joined by "+": "grpo", "sdar",
                                       # "grpo_opsd", "opsd", "rlsd", "skill_sd", "skill_grpo", "agentic_opd" (distil a
                                       # GRPO run's pool), "kl_to_best" (GRPO pulled toward a run's best checkpoint),
                                       # "opid" (GRPO with OPID's shift), "sdar+opid"; the primary decides the
                                       # objective (`METHODS[name].objective`)
  mesh_shape: Tuple[int, ...] = (-1, 1, 1)  # (data, fsdp, tensor)
  warm_start_run: str = ""             # a run folder: its step-0 checkpoint (the warm start) is this run's start, no
                                       # SFT (methods compared from one warm start; the model config must match)
  warm_start_step: str = "0"           # which checkpoint of warm_start_run: "0" (its warm start), "best", "latest" or
                                       # a step (continued GRPO from where a run ended, against Agentic-OPD's student)
  pack_width: int = 512                # training rows hold several samples, up to this many tokens (rows widen to the
                                       # longest sample); 0: one sample per row. Not with the seq-mean-token-mean
                                       # or seq-mean-token-sum loss_agg_mode (a packed row is not one sequence)
  share_prefixes: bool = True          # packed rows on one process: the prompt heads samples of a mini-batch share
                                       # (the G rollouts' prompt, a skill text) are forwarded once per mini-batch and
                                       # continued as a KV cache (training/train_step.py); False, or pack_width=0, or
                                       # several processes: every row holds whole samples
  tokenizer_path: str = ""             # "" -> model.path's tokenizer, else the built-in one
  compilation_cache: bool = True       # CPU runs: JAX's persistent compilation cache in the user's cache
                                       # ($AGENTOPD_CACHE/jax_compilation), so no run compiles what another did
  reuse_warm_start: bool = True        # the SFT warm start and its step-0 validation are computed once per key in
                                       # the user's cache and reused by every run that shares them (training/reuse.py)
  model: ModelSpec = dataclasses.field(default_factory=ModelSpec)
  lora: LoraConfig = dataclasses.field(default_factory=LoraConfig)  # rank > 0: GRPO trains LoRA adapters on the
                                       # starting policy (the SFT warm start trains every weight)
  builtin_tokenizer: BuiltinTokenizerConfig = dataclasses.field(default_factory=BuiltinTokenizerConfig)
  rollout: RolloutConfig = dataclasses.field(default_factory=RolloutConfig)
  rollout_correction: RolloutCorrectionConfig = dataclasses.field(default_factory=RolloutCorrectionConfig)
  sft: SftConfig = dataclasses.field(default_factory=SftConfig)
  grpo: GrpoConfig = dataclasses.field(default_factory=GrpoConfig)
  gigpo: GigpoConfig = dataclasses.field(default_factory=GigpoConfig)
  loss: LossCore = dataclasses.field(default_factory=LossCore)
  sdar: SdarConfig = dataclasses.field(default_factory=SdarConfig)
  rlsd: RlsdConfig = dataclasses.field(default_factory=RlsdConfig)
  skill_sd: SkillSdConfig = dataclasses.field(default_factory=SkillSdConfig)
  skills: SkillsConfig = dataclasses.field(default_factory=SkillsConfig)
  teacher: TeacherConfig = dataclasses.field(default_factory=TeacherConfig)
  opid: OpidConfig = dataclasses.field(default_factory=OpidConfig)
  optim: OptimConfig = dataclasses.field(default_factory=OptimConfig)
  validation: ValidationConfig = dataclasses.field(default_factory=ValidationConfig)
  checkpoint: CheckpointConfig = dataclasses.field(default_factory=CheckpointConfig)
  logging: LoggingConfig = dataclasses.field(default_factory=LoggingConfig)
  distributed: DistributedConfig = dataclasses.field(default_factory=DistributedConfig)
  agentic_opd: AgenticOpdConfig = dataclasses.field(default_factory=AgenticOpdConfig)
  kl_to_best: KlToBestConfig = dataclasses.field(default_factory=KlToBestConfig)

  def __post_init__(self):
    """The checks that read more than one section."""
    primary, _ = parse_method(self.method)
    if len(self.mesh_shape) != 3 or any(type(n) is not int or n == 0 or n < -1 for n in self.mesh_shape):
      raise ValueError(f"mesh_shape must be 3 positive integers (data, fsdp, tensor), one of them may be -1; "
                       f"got {tuple(self.mesh_shape)}")
    if self.pack_width < 0 or (self.pack_width and self.loss.loss_agg_mode in PER_SEQUENCE_MODES):
      raise ValueError(f"pack_width={self.pack_width}: packing needs pack_width > 0 and a loss.loss_agg_mode other "
                       f"than {PER_SEQUENCE_MODES} (a packed row is not one sequence); got "
                       f"{self.loss.loss_agg_mode!r}. Set pack_width=0 for one sample per row")
    if self.rollout.refill:
      fixed = [n for n in (primary, *parse_method(self.method)[1]) if METHODS[n].fixed_draw]
      if fixed:
        raise ValueError(f"rollout.refill: method {fixed[0]!r} reads the iteration's task draw as drawn, which "
                         f"refill changes (it batches the first groups to complete); set rollout.refill=False")
    if self.rollout.max_staleness and not (self.rollout.recompute_old_logprobs and self.rollout_correction.is_level):
      raise ValueError(f"rollout.max_staleness={self.rollout.max_staleness}: stale samples need π_old recomputed "
                       f"under the current policy and corrected against the sampler's (set "
                       f"rollout.recompute_old_logprobs=True and rollout_correction.is_level to 'token' or 'sequence')")
    if primary == "agentic_opd" and self.agentic_opd.selection_interval % self.validation.every:
      raise ValueError(f"agentic_opd.selection_interval: {self.agentic_opd.selection_interval} is not a multiple of "
                       f"validation.every ({self.validation.every}); a teacher is re-selected after a student "
                       f"validation")


def loss_params(cfg: RunConfig) -> LossParams:
  """What the run's train step and objective read: the primary method's objective, the `loss` core and the
  method's config group (`Method.group`)."""
  method = METHODS[parse_method(cfg.method)[0]]
  return LossParams(method.objective, cfg.loss, getattr(cfg, method.group) if method.group else None)


# ------------------------------------------------------------------------------------------- the single-section layout

# A key of the single-section layout -> its key in the method groups (`upgrade`, `stale_key`).
UPGRADED_KEYS = {
    "loss.sdar_coef": "sdar.coef", "loss.gate_beta": "sdar.gate_beta", "loss.sdar_gate": "sdar.gate",
    "loss.sdar_divergence": "sdar.divergence", "loss.distill_top_k": "sdar.top_k",
    "loss.rlsd_lambda": "rlsd.start_lambda", "loss.rlsd_warmdown_steps": "rlsd.warmdown_steps",
    "loss.rlsd_schedule": "rlsd.schedule", "loss.rlsd_eps_w": "rlsd.eps_w",
    "loss.skill_sd_coef": "skill_sd.coef",
    "loss.opd_loss_coef": "agentic_opd.loss_coef", "loss.task_loss_coef": "agentic_opd.task_loss_coef",
    "loss.opd_top_k": "agentic_opd.top_k", "loss.opd_max_abs_log_ratio": "agentic_opd.max_abs_log_ratio",
    "loss.opd_variant": "agentic_opd.variant", "loss.lad_other": "agentic_opd.lad_other",
    **{f"opd.{name}": f"agentic_opd.{name}" for name in (
        "teacher_run", "student_step", "scheduler", "selection_interval", "solved_rule", "prune_dominated", "lad",
        "whole_batch_update")},
}
# The `grpo.advantage` names of OPID's shift in that layout -> the estimator it shifts.
OPID_ESTIMATORS = {"opid": "grpo", "opid_mean_norm": "grpo_mean_norm"}


def stale_key(dotted: str, value: Optional[str] = None) -> Optional[str]:
  """What key of the method groups `dotted` (a key of the single-section layout, set to `value` where that matters)
  is, as one sentence ("loss.sdar_coef is now sdar.coef"); None for a key of the groups."""
  if dotted in UPGRADED_KEYS:
    return f"{dotted} is now {UPGRADED_KEYS[dotted]}"
  if dotted == "opd":
    return "opd is now agentic_opd"
  if dotted == "loss.objective":
    named = f" (--config.method={value})" if value else ""
    return f"loss.objective is now method: the method decides the objective{named}"
  if dotted == "grpo.advantage" and value in OPID_ESTIMATORS:
    return (f"grpo.advantage={value} is now method=<primary>+opid (or method=opid for GRPO) with "
            f"grpo.advantage={OPID_ESTIMATORS[value]}")
  return None


def stale_flags(argv: Sequence[str], name: str = "config") -> List[str]:
  """One error per flag of `argv` that sets a key of the single-section layout (`--config.loss.sdar_coef=0.1`,
  `--config.opd.lad off`, `--config.grpo.advantage=opid`): `--config.loss.sdar_coef: loss.sdar_coef is now
  sdar.coef`. Scripts check their argv with it before ml_collections parses the flags."""
  errors = []
  for i, arg in enumerate(argv):
    for prefix in (f"--{name}.", f"--no{name}."):
      if arg.startswith(prefix):
        key, eq, value = arg[len(prefix):].partition("=")
        if not eq and i + 1 < len(argv) and not argv[i + 1].startswith("-"):
          value = argv[i + 1]
        message = stale_key(key, value or None) or (stale_key(key.split(".")[0]) if "." in key else None)
        if message:
          errors.append(f"{prefix}{key}: {message}")
  return errors


def upgrade(old: Mapping[str, Any]) -> Dict[str, Any]:
  """The run config dict `old` (a run's `config.json`, a checkpoint record's config) in the method-group layout:
  each key of `UPGRADED_KEYS` under its group key, the `opd` section as `agentic_opd`, and `method`, `loss.objective`
  and an OPID `grpo.advantage` as one `method` string (objective "sdar" with advantage "opid" -> method
  "sdar+opid", grpo.advantage "grpo"). Values are kept as they are. A dict of the group layout comes back equal."""
  c = copy.deepcopy(dict(old))
  for section in ("loss", "opd", "grpo"):
    if section in c and not isinstance(c[section], Mapping):
      raise ValueError(f"{section}: expected a section (a mapping), got {type(c[section]).__name__}")
    if section in c:
      c[section] = dict(c[section])
  objective = c["loss"].pop("objective", None) if "loss" in c else None
  moves = [(k.split("."), v.split(".")) for k, v in UPGRADED_KEYS.items() if k.startswith("loss.")]
  moves += [(("opd", field), ("agentic_opd", field)) for field in c.get("opd", {})]
  for (section, field), (group, name) in moves:
    if field not in c.get(section, {}):
      continue
    target = c.setdefault(group, {})
    if name in target:
      raise ValueError(f"{section}.{field}: the config also sets {group}.{name}; keep one of them")
    target[name] = c[section].pop(field)
  if "opd" in c:
    del c["opd"]
  advantage = c.get("grpo", {}).get("advantage")
  if objective is None and advantage not in OPID_ESTIMATORS:
    return c
  if c.get("method", "grpo") == "agentic_opd":
    primary = "agentic_opd"
  else:
    primary = objective or "grpo"
    if primary not in METHODS or METHODS[primary].objective is None:
      raise ValueError(f"loss.objective: {primary!r} is no method's objective; methods: "
                       f"{sorted(n for n, m in METHODS.items() if m.objective is not None)}")
  shifted = advantage in OPID_ESTIMATORS
  if shifted:
    c["grpo"]["advantage"] = OPID_ESTIMATORS[advantage]
  if shifted and METHODS[primary].takes_addons:
    c["method"] = "opid" if primary == "grpo" else f"{primary}+opid"
  else:
    c["method"] = primary
  return c


# ------------------------------------------------------------------------------------------- the ConfigDict side


@functools.lru_cache(maxsize=None)
def _hints(cls) -> Dict[str, Any]:
  return typing.get_type_hints(cls)


def _unwrap_optional(tp) -> Tuple[Any, bool]:
  """(the type inside Optional[...], whether it was Optional)."""
  if typing.get_origin(tp) in (typing.Union, types.UnionType):
    args = [a for a in typing.get_args(tp) if a is not type(None)]
    if len(args) == 1 and len(typing.get_args(tp)) == 2:
      return args[0], True
  return tp, False


def _plain(tp):
  """The ConfigDict type of annotation `tp`: tuple, dict, or the class itself."""
  origin = typing.get_origin(tp)
  if origin in (tuple, typing.Tuple):
    return tuple
  if origin in (dict, typing.Dict) or tp in (dict, typing.Dict) or origin is typing.Mapping:
    return dict
  return tp


def _to_value(tp, value):
  inner, optional = _unwrap_optional(tp)
  plain = _plain(inner)
  if value is None:
    return ml_collections.FieldReference(None, field_type=plain)
  if dataclasses.is_dataclass(value):
    return to_config_dict(value)
  if plain is dict:
    return ml_collections.ConfigDict(dict(value))
  if plain is float and type(value) is int:
    return float(value)
  if plain is tuple:
    return tuple(value)
  return value


def to_config_dict(cfg) -> ml_collections.ConfigDict:
  """The nested ConfigDict of dataclass `cfg` (a RunConfig or one section), each field typed by its annotation: a
  None default is a FieldReference of the annotated type, float fields hold floats, tuples stay tuples and free-form
  mapping fields (model.chat_template_kwargs, env.ray_actor_options) are ConfigDicts."""
  hints = _hints(type(cfg))
  c = ml_collections.ConfigDict()
  for f in dataclasses.fields(cfg):
    c[f.name] = _to_value(hints[f.name], getattr(cfg, f.name))
  return c


def _from_value(path: str, tp, value):
  """`value` (a ConfigDict leaf) as annotation `tp` asks, or a TypeError naming `path`."""
  inner, optional = _unwrap_optional(tp)
  if value is None:
    if optional:
      return None
    raise TypeError(f"{path}: must not be None")
  plain = _plain(inner)
  if plain is dict:
    if isinstance(value, (ml_collections.ConfigDict, ml_collections.FrozenConfigDict)):
      return value.to_dict()
    if isinstance(value, dict):
      return dict(value)
  elif plain is tuple:
    if isinstance(value, (tuple, list)):
      return tuple(value)
  elif plain is float:
    if type(value) in (int, float):
      return float(value)
  elif plain in (int, bool, str):
    if type(value) is plain:
      return value
  else:
    return value
  raise TypeError(f"{path}: expected {plain.__name__}, got {type(value).__name__} {value!r}")


def _field_of(message: str, section: str, cls) -> str:
  """The dotted field an error message of section `section` (class `cls`; "" for the top level) is about: the first
  `section.field`, `Class.field` or bare field name it mentions (at the top level, also any `section.field` of the
  run config), else the section."""
  prefix = f"{section}." if section else ""
  candidates = []  # (regex, dotted path)
  for f in dataclasses.fields(cls):
    path = prefix + f.name
    candidates += [(rf"\b{re.escape(owner)}\.{f.name}\b", path) for owner in filter(None, (section, cls.__name__))]
    candidates.append((rf"(?<![\w.]){f.name}\b", path))
    if not section and dataclasses.is_dataclass(_hints(cls)[f.name]):
      candidates += [(rf"\b{f.name}\.{g.name}\b", f"{f.name}.{g.name}")
                     for g in dataclasses.fields(_hints(cls)[f.name])]
  found = [(m.start(), -len(m.group(0)), path) for regex, path in candidates for m in [re.search(regex, message)] if m]
  return min(found)[2] if found else (section or "config")


def _named(path: str, error: Exception) -> ValueError:
  message = str(error)
  return ValueError(message if message.startswith(f"{path}:") else f"{path}: {message}")


def _build(section: str, cls, c, **fixed):
  """`cls` from ConfigDict section `c` (every field checked and converted), or one ValueError naming the field."""
  hints = _hints(cls)
  names = {f.name for f in dataclasses.fields(cls)}
  prefix = f"{section}." if section else ""
  kwargs = dict(fixed)
  for key in c.keys():
    if key in fixed:
      continue
    if key not in names:
      hint = stale_key(prefix + key)
      raise ValueError(f"{prefix}{key}: unknown field of {section or 'the run config'} ({cls.__name__})"
                       + (f"; {hint}" if hint else ""))
    try:
      kwargs[key] = _from_value(prefix + key, hints[key], c[key])
    except (TypeError, ValueError) as e:
      raise _named(prefix + key, e) from None
  try:
    return cls(**kwargs)
  except (TypeError, ValueError) as e:
    raise _named(_field_of(str(e), section, cls), e) from None


def _section_classes() -> Dict[str, type]:
  hints = _hints(RunConfig)
  return {f.name: hints[f.name] for f in dataclasses.fields(RunConfig) if dataclasses.is_dataclass(hints[f.name])}


def from_config_dict(c: ml_collections.ConfigDict) -> RunConfig:
  """The RunConfig of run config `c`: every section built from its fields and checked (types, ranges, registry
  names, the checks across sections). Any bad field is one ValueError that starts with `section.field:`."""
  sections = _section_classes()
  if "env" not in c or "name" not in c.env:
    raise ValueError("env.name: the run config has no env section")
  try:
    env_cls = registry.get(c.env.name).config
  except ValueError as e:
    raise _named("env.name", e) from None
  built = {"env": _build("env", env_cls, c.env)}
  for name, cls in sections.items():
    if name != "env" and name in c:
      built[name] = _build(name, cls, c[name])
  top = {k: c[k] for k in c.keys() if k not in sections}
  return _build("", RunConfig, top, **built)
