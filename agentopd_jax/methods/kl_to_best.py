"""kl_to_best: GRPO with a per-token KL pull toward the best checkpoint of an earlier run.

Continued GRPO can drift away from what its best-validated checkpoint solved. This method trains with GRPO and adds
a KL penalty toward that checkpoint, π_best, the way `loss.kl_coef` pulls toward the starting policy. π_best is a
frozen parameter pytree, scored on the student's own tokens as the teacher of the train step's fused scoring call
(teacher mode "params", as Agentic-OPD's resident teacher is). The whole method is this module: its config group
`kl_to_best`, its objective registered as "kl_to_best", and the hooks that load π_best (`start`) and hand it to the
train step (`teacher_params`).
"""
from __future__ import annotations

import dataclasses
import math
from pathlib import Path
from typing import Any, Dict, Tuple

import jax.numpy as jnp

from agentopd_jax.batching.collate import TrainBatch
from agentopd_jax.methods.base import Method, MethodContext
from agentopd_jax.objectives.losses import KL_KINDS, Normalizer, agg_loss, kl_penalty, require_score
from agentopd_jax.objectives.registry import (LossParams, Metrics, Objective, grpo_branches, grpo_loss,
                                              register_objective)
from agentopd_jax.scoring.fused import Scores
from agentopd_jax.models.loading import run_params

BEST = -1  # `kl_to_best.step`: the run's best-validation checkpoint


@dataclasses.dataclass(frozen=True)
class KlToBestConfig:
  """`kl_to_best.*`: the anchor checkpoint and the KL term's weight and estimator (frozen: a static jit argument)."""
  run: str = ""                # the run folder whose checkpoint is π_best (required with method kl_to_best)
  coef: float = 0.05           # weight of the KL term; 0 = GRPO exactly (π_best is not scored)
  kl_type: str = "low_var_kl"  # the per-token estimator (`objectives.losses.kl_penalty`)
  step: int = BEST             # -1: the checkpoint with the best recorded validation success, else that step

  def __post_init__(self):
    coef = self.coef
    if isinstance(coef, bool) or not isinstance(coef, (int, float)) or not math.isfinite(coef) or coef < 0:
      raise ValueError(f"kl_to_best.coef: must be a finite number >= 0, got {coef!r}")
    if self.kl_type not in KL_KINDS:
      raise ValueError(f"kl_to_best.kl_type: must be one of {KL_KINDS}, got {self.kl_type!r}")
    if isinstance(self.step, bool) or not isinstance(self.step, int) or self.step < BEST:
      raise ValueError(f"kl_to_best.step: must be -1 (the best checkpoint) or a step >= 0, got {self.step!r}")


def kl_to_best_loss(scores: Scores, batch: TrainBatch, params: LossParams,
                    norm: Normalizer) -> Tuple[jnp.ndarray, Metrics]:
  """GRPO plus the KL pull toward π_best, over one micro-batch:

    L = L_GRPO + coef · agg(KL_t(π_θ ‖ π_best))
    KL_t = kl_penalty(log π_θ(y_t | s_t), sg[log π_best(y_t | s_t)], kl_type)
         = e^δ − δ − 1,  δ = log π_best(y_t | s_t) − log π_θ(y_t | s_t)    (low_var_kl, the default)

  L_GRPO is `grpo_loss` (its KL to the reference included), agg the loss core's `loss_agg_mode` over the response
  tokens (the loss mask), coef and the estimator the `kl_to_best` group's. Metrics: GRPO's, plus `kl_to_best/kl`, the
  aggregated KL before its coefficient (a micro-batch contribution, as every metric). With coef = 0 the loss is
  `grpo_loss` exactly and π_best is not scored (`kl_to_best_branches`).
  """
  loss, metrics = grpo_loss(scores, batch, params, norm)
  cfg = params.method
  if cfg.coef == 0:
    return loss, metrics
  best = require_score(scores.teacher_logprobs, "teacher_logprobs", "kl_to_best")
  kl = agg_loss(kl_penalty(scores.policy_logprobs, best, cfg.kl_type), batch.loss_mask.astype(jnp.float32),
                params.core.loss_agg_mode, norm)
  return loss + cfg.coef * kl, dict(metrics, **{"kl_to_best/kl": kl})


def kl_to_best_branches(params: LossParams) -> Dict[str, Any]:
  """GRPO's branches, plus π_best as the "params" teacher while its term is on."""
  return dict(grpo_branches(params), teacher="params" if params.method.coef > 0 else "none")


register_objective("kl_to_best", Objective(name="kl_to_best", loss_fn=kl_to_best_loss, branches=kl_to_best_branches,
                                           group=KlToBestConfig))


class KlToBest(Method):
  """The hooks: `start` restores π_best from the run's checkpoint pool, `teacher_params` hands it to every train
  step, `summary` names its step."""
  name = "kl_to_best"
  objective = "kl_to_best"
  group = "kl_to_best"
  sections = ("kl_to_best",)
  provides = frozenset({"teacher_params"})
  paper_variants = False       # its variant anchors to the CPU default's GRPO run

  def __init__(self, cfg: KlToBestConfig):
    self.cfg = cfg
    self.params, self.step = None, None

  @staticmethod
  def preset(c, paper: bool):
    """GRPO again from the CPU default run's warm start (its step 0, no SFT), pulled toward that run's best
    checkpoint. The workdir is `runs/<env>_kl_to_best`."""
    del paper
    c.method = "kl_to_best"
    c.kl_to_best.run = c.warm_start_run = c.workdir
    c.workdir = f"runs/{c.env.name}_kl_to_best"
    return c

  def start(self, ctx: MethodContext) -> None:
    """Restores π_best onto the params' shardings (`ctx.abstract_params`); the best step is the checkpoint pool's
    (`CheckpointPool.best_step`, the rule Agentic-OPD's student and `--step=best` follow)."""
    run = self.cfg.run
    if not run or not (Path(run) / "checkpoints").is_dir():
      raise ValueError(f"kl_to_best.run: no run at {run!r} (expected {run or '<run>'}/checkpoints); run `python "
                       f"experiments/train.py --config=configs/{ctx.env_name}.py` first and point kl_to_best.run "
                       f"at its workdir")
    step = "best" if self.cfg.step == BEST else self.cfg.step
    self.params, self.step = run_params(run, step, ctx.abstract_params, "kl_to_best.step")

  def teacher_params(self):
    return self.params

  def summary(self) -> Dict[str, Any]:
    return {"kl_to_best_step": self.step}
