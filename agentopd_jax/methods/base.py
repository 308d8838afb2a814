"""The method interface: what a training method adds to the one GRPO loop (`training/trainer.py`).

Every run is the same loop: draw tasks -> roll out -> GRPO advantages -> the methods' signals -> mini-batches ->
updates, and every `validation.every` iterations validate -> checkpoint. A method plugs into it through the hooks of
`Method`, each a no-op by default, so GRPO is the method with no hooks and every other method states only what it
adds: skills in the student's prompt (Skill-GRPO), a hindsight shift of the advantages (OPID), a privileged
teacher's per-token signals (SDAR and its baselines), or its own starting params, a resident teacher and routing
weights (Agentic-OPD). Methods stack: the run config's `method` names one primary method, which declares the run's
objective (loss registry key), optionally followed by add-ons that declare none (`sdar+opid`), and the loop calls each
hook of each method in the run's order (the add-ons', then the primary's).

Methods sit below `training/`, so they see the run through `MethodContext` (the parts they may use, filled by
`training/assembly.py`) and `Iteration` (one iteration's data as the loop builds it), never through the config.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

import jax

Metrics = Dict[str, float]


@dataclasses.dataclass(frozen=True)
class MethodContext:
  """The run's built parts a method may use.

  `play_panel(params, context_of=None)` plays the validation panel (this process's share, records gathered) and
  returns (episode records, per-problem outcomes, stats); `context_of(tasks, first_episode)` gives the prompt
  context of the panel's episodes (Skill-GRPO validates with skills too); `panel_groups` maps the panel's problem
  ids, in the order it is played, to their task groups (`EnvSpec.group_of`; None: none). `scoring` holds the keyword
  arguments every batch-time scorer takes: the rollout temperature, the packing width, the rows per call and this
  process's mesh.
  """
  model: Any
  tokenizer: Any
  chat: Any
  env_name: str
  env_cfg: Any
  layout: str                 # rollout.layout: "step" (one sample per env step) or "trajectory"
  max_prompt_tokens: int
  seed: int
  micro_batch_size: int       # this process's rows per micro-batch (`grpo.micro_batch_size` over its processes)
  mesh: Any
  local_mesh: Any
  abstract_params: Any        # the params' shapes and shardings on `mesh` (to restore checkpoints into)
  train_engine: Any
  train_sampling: Any         # the rollouts' SamplingParams
  scoring: Mapping[str, Any]  # temperature, pack_width, rows_per_call, mesh
  loss: Any                   # the run's `objectives.registry.LossParams` (objective, loss core, method group)
  play_panel: Callable[..., tuple]
  panel_groups: Mapping[str, Optional[str]]
  validation_stream: int      # the int key of the panel's draws (skill retrieval at validation)
  log: Any                    # the run's metrics logger (a method logs its own phases, e.g. "opd")
  workdir: Path
  primary: bool               # this process writes the run's files


@dataclasses.dataclass
class Iteration:
  """One iteration's data, filled by the loop as it goes. `tasks`, `envs`, `groups` and `first_episode` are this
  process's share; `params` the rollout-time policy on this process; `samples` and `advantages` the samples the
  update trains on (after `grpo.filter_groups` and the behaviour recompute) and their advantages, which a method's
  `signals` may replace."""
  iteration: int
  key: jax.Array
  tasks: List[Any]
  envs: List[Any]
  groups: List[int]
  first_episode: int
  params: Any
  prompt_state: Any = None
  rollout: Any = None
  samples: List[Any] = dataclasses.field(default_factory=list)
  advantages: List[Any] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class Signals:
  """What a method adds to an iteration's update: replaced `advantages`, per-sample `teacher` signals, per-sample
  `distill_weights` (None: nothing), and metrics for the train log line."""
  advantages: Optional[List[Any]] = None
  teacher: Optional[List[Any]] = None
  distill_weights: Optional[Sequence[float]] = None
  metrics: Metrics = dataclasses.field(default_factory=dict)


class Method:
  """A training method's hooks; each default does nothing.

  name        its name in the run config's `method` string ("sdar", "opid", ...)
  objective   the loss registry key it trains with (a primary method), or None (an add-on, such as OPID: it stacks
              on a primary, `sdar+opid`, and alone means GRPO with it, `opid`)
  group       the run-config section the objective's functions read as `LossParams.method` (None: none)
  takes_addons  whether add-ons may stack on it (a primary method)
  sections    the run-config sections its constructor takes, in order (assembly passes them, typed)
  provides    the `Signals` fields the method sets (two methods of a run may not set the same one)
  log_phases  the extra metric phases it logs, kept on resume
  fixed_draw  whether it reads the iteration's task draw as drawn, before or beside the rollout (a prompt context per
              episode, rollouts of its own): continuous refill (`rollout.refill`), which batches the first groups
              to complete, is refused for it
  preset(c, paper) -> c: the method's variant of the env configs (`configs/<env>.py:<name>`) on top of the CPU
              default (paper False) or of a paper model (`<name>_<model>`, paper True, only with `paper_variants`);
              None: no variant
  """
  name: str = ""
  objective: Optional[str] = None
  group: Optional[str] = None
  takes_addons: bool = True
  sections: tuple = ()
  provides: frozenset = frozenset()
  log_phases: tuple = ()
  fixed_draw: bool = False
  preset: Optional[Callable] = None
  paper_variants: bool = True

  def start(self, ctx: MethodContext) -> None:
    """Builds what the method needs, before the run resumes or starts."""

  def load_state_dict(self, extra: Mapping[str, Any]) -> None:
    """Puts back the method's state from the resumed checkpoint's `extra` record."""

  def initial_params(self) -> Any:
    """The policy's starting params (None: the run's warm start)."""
    return None

  def prompt_context(self, it: Iteration) -> Any:
    """The rollout's prompt context (None: the plain prompts); may set `it.prompt_state`."""
    return None

  def after_rollout(self, it: Iteration) -> None:
    """Runs right after the rollout, before the advantages (e.g. starts a background analysis)."""

  def signals(self, it: Iteration) -> Signals:
    return Signals()

  def minibatch_size(self, it: Iteration) -> Optional[int]:
    """This process's mini-batch size (None: the run's `grpo.mini_batch_size`)."""
    return None

  def teacher_params(self) -> Any:
    """Params the train step scores as the teacher (None: no teacher forward in the step)."""
    return None

  def validation_metrics(self, params, outcomes: Mapping[str, Any], iteration: int) -> Metrics:
    """Extra metrics of a validation, from the policy's params (to play the panel again) or the panel's per-problem
    outcomes (no extra play); logged with `val/...` and kept in the checkpoint's metrics."""
    return {}

  def after_validation(self, outcomes: Mapping[str, Any], iteration: int) -> None:
    """Runs after each validation, before the checkpoint (which saves `state_dict`)."""

  def state_dict(self) -> Dict[str, Any]:
    """The method's state, saved in every checkpoint's `extra` record."""
    return {}

  def summary(self) -> Dict[str, Any]:
    """Entries added to the run's summary.json."""
    return {}

  def close(self) -> None:
    """Releases what `start` built (threads, servers, device buffers)."""


def check_composition(methods: Sequence[Method]) -> None:
  """One clear error when two methods of a run set the same signal."""
  seen: Dict[str, str] = {}
  for m in methods:
    for field in m.provides:
      if field in seen:
        raise ValueError(f"method: {seen[field]!r} and {m.name!r} both provide {field!r}; a run's methods must "
                         f"provide different signals")
      seen[field] = m.name
