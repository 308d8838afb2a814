"""One registered spec per environment: everything a run needs of an env, looked up by the config's `env.name`.

`training/` asks the spec and never names an env, so a new env (or a new per-env part such as SDAR's skill bank or
OPID's oracle analyzer) touches only its own package: `agentopd_jax/envs/<package>/spec.py` calls `register(...)`,
and `get` finds it by importing every env package's `spec` module the first time a name is missing. Code outside
this package (a notebook, a user's own env) registers the same way before it builds a run.

Spec functions take the run config's `env` section, so each env reads its own fields (`env.data_root`,
`env.num_products`, ...) and nothing else has to know them. They import their env's heavy modules (TextWorld,
bm25s, rapidfuzz) only when called, so looking a spec up is cheap.
"""
from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import pkgutil
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

TaskPools = Tuple[list, list]  # (training tasks, validation tasks); the validation panel is a prefix of the second


def _no_options(env_cfg) -> Dict[str, Any]:
  return {}


def _no_corpus(env_cfg) -> Tuple[List[str], List[str]]:
  return [], []


def _same_name(problem: str) -> str:
  return problem


def shipped_skill_bank(env_name: str) -> str:
  """The folder of the SkillBank an env ships (`agentopd_jax/skills/banks/<env>/`), found without importing skills/."""
  return str(Path(__file__).resolve().parents[1] / "skills" / "banks" / env_name)


@dataclasses.dataclass(frozen=True)
class SkillSpec:
  """An env's SDAR skill bank (`agentopd_jax.skills`).

  bank: the folder of the bank it ships (SDAR's layout), used when `skills.bank_dir` is "".
  rule: how SDAR's keyword matching tells its tasks apart: "gamefile" (ALFWorld), "keywords" (WebShop) or "search".
  query: task -> its `SkillQuery` fields other than the prompt (e.g. {"gamefile": path}); a module-level function,
    so it pickles.
  """
  bank: str
  rule: str
  query: Callable[[Any], Dict[str, str]]


def no_skill_query(task) -> Dict[str, str]:
  """For envs whose rule reads only the prompt."""
  return {}


BACKENDS = ("process", "ray")


@dataclasses.dataclass(frozen=True)
class EnvCommon:
  """The run config's `env` section fields every env has; each env's `spec.py` subclasses it with its own fields and
  defaults (`EnvSpec.config`)."""
  name: str = ""
  history_length: int = 2
  compact_prompt: bool = True          # the compact template (no <think>), suited to a tiny model
  prompt_flavor: str = "verl-agent"
  invalid_penalty: float = 0.1
  num_workers: int = 2                 # env worker processes
  step_timeout_s: float = 60.0         # a worker that has not stepped its envs by then is killed and replaced (its
                                       # episodes fail); allow for an env's slowest step times the envs per worker
  backend: str = "process"             # "process" (this host) or "ray" (actors anywhere in a Ray cluster;
                                       # docs/scale_out.md)
  ray_actor_options: Dict[str, Any] = dataclasses.field(default_factory=lambda: {"num_cpus": 1})  # per Ray worker

  def __post_init__(self):
    for field, least in (("num_workers", 1), ("history_length", 0)):
      value = getattr(self, field)
      if type(value) is not int or value < least:
        raise ValueError(f"env.{field} must be an integer >= {least}, got {value!r}")
    if isinstance(self.step_timeout_s, bool) or not isinstance(self.step_timeout_s, (int, float)) \
        or not self.step_timeout_s > 0:
      raise ValueError(f"env.step_timeout_s must be a number of seconds > 0, got {self.step_timeout_s!r}")
    if self.backend not in BACKENDS:
      raise ValueError(f"env.backend must be one of {BACKENDS}, got {self.backend!r}")


HEADLINES = ("All", "Avg", "Score")


@dataclasses.dataclass(frozen=True)
class ReportSpec:
  """How an env's results are tabulated (`eval.report.group_table`, `eval.compare`).

  columns: ((label, group), ...), one column per task group in the papers' order; a cell is the success rate of the
    group's episodes (the metric `<group>_success_rate`, the group as `EnvSpec.task_group` names it).
  headline: the column a comparison tests and plots: "All" (success over every episode), "Avg" (the mean of the
    group columns, as the papers average their datasets) or "Score" (the task score, WebShop's, with success beside
    it as "Succ").
  """
  columns: Tuple[Tuple[str, str], ...] = ()
  headline: str = "All"

  def __post_init__(self):
    if self.headline not in HEADLINES:
      raise ValueError(f"ReportSpec.headline must be one of {HEADLINES}, got {self.headline!r}")


@dataclasses.dataclass(frozen=True)
class EnvSpec:
  """What a run needs of one env.

  name: the config's `env.name`.
  tasks: env_cfg -> (training tasks, validation tasks), fixed across run seeds as a benchmark's are.
  worker: (env_cfg, max_steps) -> a picklable zero-arg env constructor for the vector-env workers and for expert
    demonstrations; `max_steps` None keeps the env's own horizon.
  text_env: the `TextEnv` class (prompts, action projection, rewards; see `rollout.text_envs`).
  experts: the names `sft.expert` may take.
  expert: (env_cfg, name) -> (task -> the expert's actions), the SFT warm start's demonstrations ([] skips a task).
  text_options: env_cfg -> extra `text_env` keywords of this env's own (e.g. WebShop's reward kind).
  tokenizer_corpus: env_cfg -> (texts, whole words) for the built-in tokenizer (`builtin_tokenizer.env_corpus`).
  skills: the env's SDAR skill bank and matching rule (`SkillSpec`); None: the env has none.
  hindsight: env_cfg -> ((task, executed env actions) -> `envs.hindsight.Review`), the episode replayed from the
    task's start beside the env's expert, which OPID's oracle analyzer (`methods.opid.oracle`) turns into skills;
    None: the env has no oracle (OPID then needs its LLM analyzer).
  skill_follower: env_cfg -> ((task, OPID episode skill) -> the actions of the env's expert when it uses what that
    skill says and nothing else): the demonstrations of the hindsight retry's setting (`sft.opid_retries`); None:
    the env has none.
  task_group: task -> its group, the name its validation metrics use (`val/<group>_success_rate`: ALFWorld's task
    type, search-QA's data source); what `grpo.task_phases` draws by. None: the env's tasks have no groups.
  report: the env's report columns and headline (`ReportSpec`).
  record_name: problem id -> its name in run records (`experiments/record_run.py`): one that does not depend on
    where the env's data lives, and that names itself (a record's name maps to itself). Default: the id.
  config: the class of the run config's `env` section for this env: `EnvCommon` or a subclass with the env's own
    fields and their defaults (`training.config.RunConfig.env`).
  """
  name: str
  tasks: Callable[[Any], TaskPools]
  worker: Callable[[Any, Optional[int]], Callable[[], Any]]
  text_env: Callable[..., Any]
  experts: Tuple[str, ...]
  expert: Callable[[Any, str], Callable[[Any], List[str]]]
  text_options: Callable[[Any], Mapping[str, Any]] = _no_options
  tokenizer_corpus: Callable[[Any], Tuple[List[str], List[str]]] = _no_corpus
  skills: Optional[SkillSpec] = None
  hindsight: Optional[Callable[[Any], Callable[[Any, Sequence[str]], Any]]] = None
  skill_follower: Optional[Callable[[Any], Callable[[Any, str], List[str]]]] = None
  task_group: Optional[Callable[[Any], Optional[str]]] = None
  report: ReportSpec = ReportSpec()
  record_name: Callable[[str], str] = _same_name
  config: type = EnvCommon

  def group_of(self, task) -> Optional[str]:
    """The task's group (`task_group`); None when the env's tasks have no groups."""
    return None if self.task_group is None else self.task_group(task)

  def expert_policy(self, env_cfg, name: str) -> Callable[[Any], List[str]]:
    """task -> the named expert's actions; an unknown name is an error naming `sft.expert`."""
    if name not in self.experts:
      raise ValueError(f"sft.expert must be one of {self.experts} for env {self.name!r}, got {name!r}")
    return self.expert(env_cfg, name)


_SPECS: Dict[str, EnvSpec] = {}


def register(spec: EnvSpec) -> EnvSpec:
  """Registers `spec` under `spec.name`; registering another spec under a taken name is an error."""
  known = _SPECS.get(spec.name)
  if known is not None and known is not spec:
    raise ValueError(f"env {spec.name!r} is registered already")
  _SPECS[spec.name] = spec
  return spec


def _discover() -> None:
  """Imports `agentopd_jax.envs.<package>.spec` for every env package that has one (each registers itself)."""
  from agentopd_jax import envs

  for info in pkgutil.iter_modules(envs.__path__):
    if info.ispkg and importlib.util.find_spec(f"{envs.__name__}.{info.name}.spec") is not None:
      importlib.import_module(f"{envs.__name__}.{info.name}.spec")


def names() -> Sequence[str]:
  """Every registered env name, sorted."""
  _discover()
  return sorted(_SPECS)


def get(name: str) -> EnvSpec:
  """The spec registered as `name` (the config's `env.name`); an unknown name is one error listing the known ones."""
  if name not in _SPECS:
    _discover()
  if name not in _SPECS:
    raise ValueError(f"env.name must be one of {tuple(sorted(_SPECS))}, got {name!r}")
  return _SPECS[name]
