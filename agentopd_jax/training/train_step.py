"""The update: one pure jitted `(state, minibatch) -> (state, metrics)` per optimizer step (purejaxrl style).

A mini-batch arrives as `[A, m, T]` arrays: A micro-batches of m sequences. The step computes the loss
normaliser over the whole mini-batch first, then scans the micro-batches accumulating gradients, so token-mean and
seq-mean losses are exact whatever A is; then clips, applies AdamW, and advances `state.step`. Scoring (policy,
reference and, for distillation objectives, teacher log-probs) is the one fused scoring call inside the loss.

A non-finite loss or gradient leaves params and optimizer state untouched (`metrics["skipped"] == 1`), so a bad
batch never reaches a checkpoint; `BadUpdates` logs its samples and stops a run whose updates keep failing.
"""
from __future__ import annotations

import dataclasses
import functools
import logging
import math
from typing import Any, Callable, List, Optional, Sequence, Tuple

import flax.struct
import jax
import jax.numpy as jnp
import numpy as np
import optax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from agentopd_jax.batching.collate import TeacherSignal, TrainBatch, collate, pack_rows, round_up, scored_targets
from agentopd_jax.batching.prefixes import shared_prefixes
from agentopd_jax.batching.samples import Sample
import agentopd_jax.methods  # noqa: F401  registers the methods' objectives
from agentopd_jax.models import lora as lora_lib, transformer
from agentopd_jax.models.config import ModelConfig
from agentopd_jax.models.lora import LoraConfig
from agentopd_jax.objectives.losses import normalizer_for
from agentopd_jax.objectives.registry import LossParams, get_objective
from agentopd_jax.parallel import distributed
from agentopd_jax.scoring.fused import ScoreConfig, score

logger = logging.getLogger(__name__)


@flax.struct.dataclass
class TrainState:
  step: jnp.ndarray             # applied optimizer updates
  params: Any                   # the trained weights: the model's, or a LoRA run's adapters (`models/lora.py`)
  opt_state: Any
  reference_params: Any = None  # frozen π_ref (KL); not checkpointed: it is rebuilt from its source on resume
  base_params: Any = None       # a LoRA run's frozen base: the policy is base + adapters, and π_ref is the base
                                # itself (no copy); saved once per run beside the checkpoints (`CheckpointPool`)


@dataclasses.dataclass(frozen=True)
class OptimConfig:
  """The run config's `optim` section: AdamW with warmup, clipping and an optional cosine decay (GRPO's optimizer;
  the SFT warm start builds its own from `sft.*` and these)."""
  learning_rate: float = 1e-4   # 2e-4 degraded the warm start, 5e-5 left it unchanged (docs/results.md)
  warmup_steps: int = 0
  decay_steps: int = 0          # > 0: cosine decay to `final_lr_ratio` x peak over this many post-warmup steps
  final_lr_ratio: float = 0.1
  weight_decay: float = 0.01
  grad_clip: float = 1.0
  b1: float = 0.9
  b2: float = 0.999
  eps: float = 1e-8
  max_bad_updates: int = 3      # consecutive non-finite (skipped) updates before the run stops

  def __post_init__(self):
    if self.learning_rate <= 0:
      raise ValueError(f"optim.learning_rate must be > 0, got {self.learning_rate}")
    if self.warmup_steps < 0 or self.grad_clip <= 0:
      raise ValueError(f"optim.warmup_steps must be >= 0 and optim.grad_clip > 0, got "
                       f"{self.warmup_steps} and {self.grad_clip}")
    if self.decay_steps < 0 or not 0 <= self.final_lr_ratio <= 1:
      raise ValueError(f"optim.decay_steps must be >= 0 and optim.final_lr_ratio in [0, 1], got "
                       f"{self.decay_steps} and {self.final_lr_ratio}")
    if type(self.max_bad_updates) is not int or self.max_bad_updates < 1:
      raise ValueError(f"optim.max_bad_updates must be an integer >= 1, got {self.max_bad_updates!r}")


def learning_rate_schedule(cfg: OptimConfig) -> optax.ScalarOrSchedule:
  """Linear warmup from 0 over `warmup_steps`, then constant (verl's default) or, with `decay_steps`, a cosine decay
  to `final_lr_ratio` x the peak (a fixed-length warm start ends at a lower loss). A constant rate stays a plain
  float, so the optimizer state has no schedule counter and older checkpoints restore into it."""
  if not cfg.warmup_steps and not cfg.decay_steps:
    return cfg.learning_rate
  after = (optax.cosine_decay_schedule(cfg.learning_rate, cfg.decay_steps, alpha=cfg.final_lr_ratio)
           if cfg.decay_steps else optax.constant_schedule(cfg.learning_rate))
  if not cfg.warmup_steps:
    return after
  return optax.join_schedules([optax.linear_schedule(0.0, cfg.learning_rate, cfg.warmup_steps), after],
                              [cfg.warmup_steps])


def make_optimizer(cfg: OptimConfig) -> optax.GradientTransformation:
  """Global-norm clipping then AdamW on `learning_rate_schedule(cfg)`."""
  return optax.chain(optax.clip_by_global_norm(cfg.grad_clip),
                     optax.adamw(learning_rate_schedule(cfg), b1=cfg.b1, b2=cfg.b2, eps=cfg.eps,
                                 weight_decay=cfg.weight_decay))


def state_shardings(model: ModelConfig, optimizer: optax.GradientTransformation, mesh: Mesh,
                    with_reference: bool, adapters=None) -> TrainState:
  """Shardings of a TrainState: params by the model's logical rules, Adam moments like their params. With
  `adapters` (a LoRA run's, or their shapes) the trained params are those, replicated (they are small), and the
  base takes the model's shardings."""
  model_params = transformer.param_shardings(model, mesh)
  replicated = NamedSharding(mesh, P())
  trained = model_params if adapters is None else jax.tree.map(lambda _: replicated, adapters)
  abstract = transformer.abstract_params(model) if adapters is None else adapters
  abstract_opt = jax.eval_shape(optimizer.init, abstract)
  opt = optax.tree_map_params(optimizer, lambda _, s: s, abstract_opt, trained,
                              transform_non_params=lambda _: replicated)
  return TrainState(step=replicated, params=trained, opt_state=opt,
                    reference_params=model_params if with_reference else None,
                    base_params=None if adapters is None else model_params)


def init_state(params, optimizer: optax.GradientTransformation, reference_params=None, mesh: Optional[Mesh] = None,
               model: Optional[ModelConfig] = None, base_params=None) -> TrainState:
  """A fresh TrainState; with a mesh (and the model config) every leaf is placed on its sharding. A LoRA run passes
  its adapters as `params` and the frozen model as `base_params` (and no reference: π_ref is the base)."""
  state = TrainState(step=jnp.zeros((), jnp.int32), params=params, opt_state=optimizer.init(params),
                     reference_params=reference_params, base_params=base_params)
  if mesh is None:
    return state
  return jax.device_put(state, state_shardings(model, optimizer, mesh, reference_params is not None,
                                               None if base_params is None else params))


def policy_params(state: TrainState, lora: Optional[LoraConfig] = None):
  """The policy's full weights: `state.params`, or a LoRA run's base with its adapters merged (what the sampler,
  validation and the teacher scorers read; merged once per policy refresh)."""
  if state.base_params is None:
    return state.params
  return _merged(lora)(state.base_params, state.params)


@functools.lru_cache(maxsize=None)
def _merged(lora: LoraConfig):
  return jax.jit(functools.partial(lora_lib.merge, cfg=lora))


def minibatch_sharding(mesh: Mesh, batch: TrainBatch):
  """[A, m, ...] arrays: micro-batch rows over data x fsdp."""
  return jax.tree.map(lambda x: NamedSharding(mesh, P(None, ("data", "fsdp"), *([None] * (x.ndim - 2)))), batch)


@functools.lru_cache(maxsize=8)
def cached_train_step(model: ModelConfig, loss: LossParams, optim: OptimConfig, mesh: Optional[Mesh] = None,
                      with_reference: bool = False, temperature: float = 1.0, lora: Optional[LoraConfig] = None):
  """`make_train_step` with `make_optimizer(optim)`, one per distinct set of arguments in a process: runs that share
  them (a notebook's reruns, in-process runs one after another) reuse its traced programs instead of tracing the
  model's forward and backward again, seconds per program. The optimizer is a pure function of `optim`, so a run's
  own `make_optimizer(optim)` initialises the state this step updates."""
  return make_train_step(model, loss, make_optimizer(optim), mesh, with_reference, temperature, lora)


def make_train_step(model: ModelConfig, loss: LossParams, optimizer: optax.GradientTransformation,
                    mesh: Optional[Mesh] = None, with_reference: bool = False, temperature: float = 1.0,
                    lora: Optional[LoraConfig] = None):
  """The jitted step for one (model, loss, optimizer) triple; the state argument is donated. `loss` names the
  objective and holds what its functions read (the `loss` core and the method's config group), static under jit.

  `temperature` is the rollout temperature: every branch is scored under logits / temperature, the policy the
  sampler drew from (as verl's actor and reference do), so the first PPO ratio of an iteration is 1. SFT uses 1.

  The step is `step(state, minibatch, teacher_params=None)`. A distillation objective (teacher="params", e.g.
  Agentic-OPD) needs `teacher_params`: the resident teacher is not part of the state, since the scheduler swaps it
  between steps and it is never trained or checkpointed with the student.

  With `lora` (rank > 0) `state.params` are the adapters and `state.base_params` the frozen model: the policy is
  scored as base + LoRA, unmerged (`lora.attach`), the gradient and the optimizer state are the adapters' only, and
  π_ref is the base.
  """
  objective = get_objective(loss.objective)
  score_cfg = objective.score_config(loss, ScoreConfig(temperature=temperature))
  adapted = lora is not None and lora.rank > 0

  def policy_of(params, base):
    return lora_lib.attach(base, params, lora) if adapted else params

  if score_cfg.reference and not (with_reference or adapted):
    raise ValueError(f"objective {loss.objective!r} with loss.kl_coef={loss.core.kl_coef} needs reference params")
  needs_teacher = score_cfg.teacher == "params"

  def micro_loss(params, policy_prefix, frozen, micro: TrainBatch, norm):
    """`policy_prefix`: the policy's prefix keys and values (differentiated); `frozen`: the reference and teacher
    params and their prefix caches, constants."""
    base, reference_params, teacher_params, prefixes = frozen
    if policy_prefix is not None:
      prefixes = dict(prefixes, policy=prefixes["policy"].replace(k=policy_prefix[0], v=policy_prefix[1]))
    scores = score(model, score_cfg, policy_of(params, base), reference_params if score_cfg.reference else None,
                   teacher_params, micro.score_batch(), prefixes)
    return objective.loss(scores, micro, loss, norm)

  grad_fn = jax.value_and_grad(micro_loss, argnums=(0, 1), has_aux=True)

  def step(state: TrainState, minibatch: TrainBatch, teacher_params=None):
    width = minibatch.loss_mask.shape[-1]
    distill = None if minibatch.distill_mask is None else minibatch.distill_mask.reshape(-1, width)
    norm = normalizer_for(minibatch.loss_mask.reshape(-1, width), minibatch.segment_ids.reshape(-1, width),
                          loss.core.loss_scale_factor, distill)
    prefixes, policy_prefix, pull = None, None, None
    reference_params = state.base_params if adapted else state.reference_params
    if minibatch.prefix_tokens is not None:
      # The mini-batch's shared prefixes: forwarded once here; every micro-batch's rows continue them, and the
      # gradients their keys and values collect over the micro-batches flow back through this forward once.
      tokens, segments = minibatch.prefix_tokens[0], minibatch.prefix_segment_ids[0]
      def keys_values(params):
        cache = transformer.prefix_cache(model, policy_of(params, state.base_params), tokens, segments)
        return (cache.k, cache.v), cache

      policy_prefix, pull, policy = jax.vjp(keys_values, state.params, has_aux=True)
      prefixes = {"policy": policy}
      if score_cfg.reference:
        prefixes["reference"] = transformer.prefix_cache(model, reference_params, tokens, segments)
      if needs_teacher:
        prefixes["teacher"] = transformer.prefix_cache(model, teacher_params, tokens, segments)
      minibatch = minibatch.replace(prefix_tokens=None, prefix_segment_ids=None)
    frozen = (state.base_params, reference_params, teacher_params, prefixes)

    def body(carry, micro):
      grads, prefix_grads, metrics = carry
      (_, m), (g, gp) = grad_fn(state.params, policy_prefix, frozen, micro, norm)
      prefix_grads = None if gp is None else jax.tree.map(lambda a, b: a + b.astype(jnp.float32), prefix_grads, gp)
      return (jax.tree.map(jnp.add, grads, g), prefix_grads, jax.tree.map(jnp.add, metrics, m)), None

    # The metrics' shapes from the loss alone: tracing its gradient too would double the step's tracing time.
    zero_metrics = jax.eval_shape(lambda: micro_loss(state.params, policy_prefix, frozen,
                                                     jax.tree.map(lambda x: x[0], minibatch), norm)[1])
    init = (jax.tree.map(jnp.zeros_like, state.params),
            None if policy_prefix is None else jax.tree.map(lambda x: jnp.zeros(x.shape, jnp.float32), policy_prefix),
            jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), zero_metrics))
    (grads, prefix_grads, metrics), _ = jax.lax.scan(body, init, minibatch)
    if pull is not None:
      (through_prefix,) = pull(jax.tree.map(lambda g, x: g.astype(x.dtype), prefix_grads, policy_prefix))
      grads = jax.tree.map(jnp.add, grads, through_prefix)
    grad_norm = optax.tree.norm(grads)
    finite = jnp.isfinite(metrics["loss"]) & jnp.isfinite(grad_norm)
    updates, opt_state = optimizer.update(grads, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    keep = functools.partial(jax.tree.map, lambda new, old: jnp.where(finite, new, old))
    new_state = state.replace(step=state.step + finite.astype(jnp.int32), params=keep(params, state.params),
                              opt_state=keep(opt_state, state.opt_state))
    metrics = dict(metrics, grad_norm=grad_norm, skipped=1.0 - finite.astype(jnp.float32),
                   tokens=norm.tokens.astype(jnp.float32))
    return new_state, metrics

  def checked(jitted, place=lambda minibatch: minibatch):
    """The step as called by trainers: the teacher check, the mini-batch placement, then the jitted function.
    `.lower(...)` lowers the same call ahead of time (benchmarks compile it once and time the compiled step)."""
    def args(state, minibatch, teacher_params):
      if needs_teacher and teacher_params is None:
        raise ValueError(f"objective {loss.objective!r} scores a teacher: pass teacher_params to the step")
      return state, place(minibatch), teacher_params if needs_teacher else None

    def call(state: TrainState, minibatch: TrainBatch, teacher_params=None):
      return jitted(*args(state, minibatch, teacher_params))

    call.lower = lambda state, minibatch, teacher_params=None: jitted.lower(*args(state, minibatch, teacher_params))
    return call

  if mesh is None:
    return checked(jax.jit(step, donate_argnums=0))
  adapters = lora_lib.abstract_adapters(transformer.abstract_params(model), lora) if adapted else None
  shardings = state_shardings(model, optimizer, mesh, with_reference and not adapted, adapters)
  replicated = NamedSharding(mesh, P())
  jitted = jax.jit(step, donate_argnums=0, out_shardings=(shardings, replicated))
  # Multi-host: each process passes its own rows of the mini-batch (`make_minibatches(agree=...)`).
  return checked(jitted, lambda minibatch: distributed.put_process_rows(minibatch, minibatch_sharding(mesh, minibatch),
                                                                        axis=1))


def split_minibatches(batch: TrainBatch, minibatch_size: int, micro_batch_size: int):
  """Host-side: [B, T] numpy arrays -> a list of [A, m, T] mini-batches in order (B must divide evenly)."""
  b = batch.tokens.shape[0]
  if b % minibatch_size or minibatch_size % micro_batch_size:
    raise ValueError(f"batch rows {b} must be a multiple of mini_batch_size {minibatch_size}, itself a multiple of "
                     f"micro_batch_size {micro_batch_size}")
  a = minibatch_size // micro_batch_size
  out = []
  for start in range(0, b, minibatch_size):
    out.append(jax.tree.map(lambda x: x[start:start + minibatch_size].reshape(a, micro_batch_size, *x.shape[1:]),
                            batch))
  return out


PAD_MULTIPLE = 128  # sequence-length bucket of unpacked batches: bounds recompilation as lengths vary
PACKED_ROW_MULTIPLE = 4  # row-count bucket of packed mini-batches, for the same reason


class BadUpdates:
  """Watches the train step's `skipped` flag: each skipped update is logged with the ids of its mini-batch's samples
  (to find the episode that broke it), and `limit` skipped in a row stop the run with an error, since a policy that
  only skips learns nothing. The count is part of the run's state (`count`), so a resumed run stops where the
  uninterrupted one would."""

  def __init__(self, limit: int, count: int = 0):
    if limit < 1:
      raise ValueError(f"optim.max_bad_updates must be >= 1, got {limit}")
    self.limit, self.count = limit, count

  def observe(self, metrics, samples: Sequence[Sample], where: str) -> None:
    """`metrics` of one update on the mini-batch of `samples` (`minibatch_samples`); `where`: e.g. "iteration 7"."""
    if not metrics["skipped"]:
      self.count = 0
      return
    self.count += 1
    ids = [f"{s.problem_id}#{s.traj_id}.{s.step_index}" for s in samples]
    logger.warning("%s: update skipped (loss %s, grad norm %s: not finite), %d in a row; its %d samples "
                   "(problem#episode.step): %s", where, float(metrics["loss"]), float(metrics["grad_norm"]),
                   self.count, len(ids), " ".join(ids))
    if self.count >= self.limit:
      raise FloatingPointError(f"{where}: {self.count} updates in a row had a non-finite loss or gradient "
                               f"(optim.max_bad_updates={self.limit}); params and checkpoints are from before them. "
                               "Lower optim.learning_rate, or look at the logged samples")


def minibatch_samples(samples: Sequence[Sample], minibatch_size: int, k: int) -> Sequence[Sample]:
  """The samples mini-batch k of `make_minibatches(samples, ..., minibatch_size, ...)` trains on."""
  return samples[k * minibatch_size:(k + 1) * minibatch_size]


def make_minibatches(samples: Sequence[Sample], advantages: Sequence[float], minibatch_size: int,
                     micro_batch_size: int, pack_width: int = 0, distill_weights: Optional[Sequence[float]] = None,
                     mesh: Optional[Mesh] = None, teacher: Optional[Sequence[TeacherSignal]] = None,
                     agree: Optional[Callable[[Sequence[int]], Sequence[int]]] = None,
                     share_prefixes: bool = False,
                     is_weights: Optional[Sequence[Sequence[float]]] = None) -> List[TrainBatch]:
  """The update's mini-batches, [A, m, T] host arrays each: runs of `minibatch_size` consecutive samples, one
  optimizer step each (the last run may be shorter).

  Unpacked (`pack_width` 0): a row is a sample; every mini-batch has `minibatch_size` rows, the last padded with empty
  rows, split into micro-batches of `micro_batch_size` rows (at most the mini-batch). Packed: each run is packed into
  rows of `pack_width` tokens (`collate`), and every mini-batch gets the same row count R (the most any run needs,
  rounded up to PACKED_ROW_MULTIPLE and to the data-parallel size of `mesh`, whose devices split a micro-batch's
  rows, then to a multiple of `micro_batch_size` rows when larger), so all mini-batches of an iteration share one
  compiled shape. Token-mean losses are identical either way. `teacher`: per-sample teacher signals, `is_weights`:
  per-sample importance weights of rollout correction (`collate`).

  `agree` (multi-host: `parallel.distributed.global_max`): each process passes its share of the samples, with
  `minibatch_size` and `micro_batch_size` its shares of the global sizes and `mesh` its local mesh; the mini-batch
  count, row width, row count and teacher top-k are agreed over processes (a run a process lacks is blank: all
  masked out), so that the shares assemble into global mini-batches (`parallel.distributed.put_process_rows`).

  `share_prefixes` (packed, one process): the prompt heads that samples of a mini-batch share (`batching.prefixes`)
  are left out of their rows and forwarded once per mini-batch, packed into head rows (`TrainBatch.prefix_*`); a row
  packs samples of one head. A sample longer than `pack_width` that shares nothing gets a head of its own (its
  prompt but the last token), so that rows stay `pack_width` wide. Every mini-batch of the iteration gets the same
  head row count (rounded up to PACKED_ROW_MULTIPLE and the data-parallel size) and width (to PAD_MULTIPLE). The
  iteration shares heads only if that forwards fewer token slots than whole rows (`_Packing.cost`: rows and head
  rows, padding included). The loss and gradients are those of whole rows, to rounding.

  Each row lists its loss targets (`TrainBatch.scored`, `with_scored`) where they are at most half of it, so the
  step's last layer and log-softmax run there only; the loss is that of every position, to rounding.
  """
  if share_prefixes and (not pack_width or agree is not None):
    raise ValueError("make_minibatches: share_prefixes needs packed rows (pack_width > 0) on one process")
  k = teacher[0].topk_ids.shape[-1] if teacher and teacher[0].topk_ids is not None else 0
  if agree is not None and teacher is not None:
    (k,) = agree((k,))
  blank = agree is not None and not samples
  if blank:  # this process trains on nothing this time, the others do: a blank share
    samples, advantages = [_blank_sample()], [0.0]
    distill_weights = None if distill_weights is None else [0.0]
    teacher = None if teacher is None else [_blank_signal(k)]
    is_weights = None if is_weights is None else [[0.0]]
  n = len(samples)
  runs = [slice(i, min(i + minibatch_size, n)) for i in range(0, n, minibatch_size)]
  data_parallel = mesh.shape["data"] * mesh.shape["fsdp"] if mesh is not None else 1
  plan = _Packing.of(samples, runs, pack_width, False, data_parallel, micro_batch_size)
  if share_prefixes:
    shared = _Packing.of(samples, runs, pack_width, True, data_parallel, micro_batch_size)
    plan = shared if shared.cost < plan.cost else plan
  width, rows = plan.width, (plan.rows if pack_width else minibatch_size)
  if agree is not None:
    n_runs, width, rows = agree((len(runs), width, rows))
    runs += [slice(n, n)] * (n_runs - len(runs))
  weights = (lambda run: None) if distill_weights is None else (lambda run: list(distill_weights[run]))
  signals = (lambda run: None) if teacher is None else (lambda run: list(teacher[run]))
  corrections = (lambda run: None) if is_weights is None else (lambda run: list(is_weights[run]))
  if not pack_width:
    batch = _widen(collate(samples, advantages, PAD_MULTIPLE, rows=len(runs) * minibatch_size,
                           distill_weights=None if distill_weights is None else list(distill_weights),
                           teacher=None if teacher is None else list(teacher),
                           is_weights=None if is_weights is None else list(is_weights)), width)
    out = split_minibatches(batch, minibatch_size, min(micro_batch_size, minibatch_size))
  else:
    micro = min(micro_batch_size, rows)
    rows = round_up(rows, micro)
    out = []
    for r, run in enumerate(runs):
      if run.start == run.stop:
        out.append(jax.tree.map(np.zeros_like, out[0]))
        continue
      layout, owner = plan.layouts[r]
      batch = _widen(collate(samples[run], advantages[run], PAD_MULTIPLE, rows=rows, pack_width=width,
                             distill_weights=weights(run), teacher=signals(run),
                             layout=layout if plan.count else None, skip=plan.skip[run],
                             is_weights=corrections(run)), width)
      batch = split_minibatches(batch, rows, micro)[0]
      if plan.count:
        place = plan.places[r]
        head_row = [place[w][0] if w >= 0 else -1 for w in owner] + [-1] * (rows - len(owner))
        segment = [place[w][1] if w >= 0 else 0 for w in owner] + [0] * (rows - len(owner))
        batch = batch.replace(prefix_of=np.asarray(head_row, np.int32).reshape(-1, micro),
                              prefix_segment=np.asarray(segment, np.int32).reshape(-1, micro),
                              **_head_rows(plan.heads[r], place, plan.count, plan.prefix_width))
      out.append(batch)
  # A blank share's rows are all padding (segment id 0), which the loss normaliser counts as no sequence.
  return with_scored([jax.tree.map(np.zeros_like, b) for b in out] if blank else out, agree)


def with_scored(batches: List[TrainBatch], agree=None) -> List[TrainBatch]:
  """The mini-batches with each row's loss targets listed (`TrainBatch.scored`) as their loss masks say (call it again
  after changing a loss mask, with the same `agree`), so that the step runs its last layer and log-softmax there only,
  in one width for the iteration: a quarter of the row width, doubled until it holds the most targets of any row
  (agreed over processes). Few widths mean few compilations: the CPU default's step samples always fit a quarter.
  Where the width would be over half a row's the rows stay as they are: reading most positions saves nothing."""
  most = max(int((b.loss_mask[..., 1:] > 0).sum(-1).max(initial=0)) for b in batches)
  if agree is not None:
    (most,) = agree((most,))
  row = batches[0].tokens.shape[-1]
  width = max(row // 4, 1)
  while width < most:
    width *= 2
  if 2 * width > row:
    return [b.replace(scored=None) for b in batches]
  return [b.replace(scored=scored_targets(b.loss_mask, width)) for b in batches]


@dataclasses.dataclass
class _Packing:
  """How an iteration's runs of samples are packed: whole, or after their shared heads (`share`)."""
  heads: List[List[List[int]]]       # per run: its heads' token ids
  skip: List[int]                    # per sample: its tokens in a head
  width: int                         # row width
  layouts: List[Tuple[List[List[int]], List[int]]]  # per run: `_prefix_layout`
  places: List[List[Tuple[int, int]]]  # per run, per head: (its head row, its segment there)
  rows: int                          # rows per mini-batch (rounded to PACKED_ROW_MULTIPLE and the data-parallel size)
  count: int                         # head rows per mini-batch (0: whole rows)
  prefix_width: int                  # head row width
  cost: int                          # token slots forwarded per iteration: rows and head rows, padding included

  @classmethod
  def of(cls, samples: Sequence[Sample], runs: Sequence[slice], pack_width: int, share: bool, data_parallel: int,
         micro_batch_size: int) -> "_Packing":
    plans = [_heads(samples[run], pack_width) if share else ([-1] * (run.stop - run.start), []) for run in runs]
    heads = [found for _, found in plans]
    skip = [len(found[w]) if w >= 0 else 0 for which, found in plans for w in which]
    width = max(pack_width, round_up(max(s.length - cut for s, cut in zip(samples, skip)), PAD_MULTIPLE))
    if not pack_width:
      return cls(heads, skip, width, [], [], 0, 0, 0, 0)
    layouts = [_prefix_layout(samples[run], skip[run], which, width) for run, (which, _) in zip(runs, plans)]
    rows = round_up(max(len(layout) for layout, _ in layouts), math.lcm(PACKED_ROW_MULTIPLE, data_parallel))
    prefix_width = round_up(max((len(h) for found in heads for h in found), default=1), PAD_MULTIPLE)
    places, count = [], 0
    for found in heads:  # the heads are packed into rows too, each a segment with positions from 0
      packed = pack_rows([len(h) for h in found], prefix_width)
      place = [(0, 0)] * len(found)
      for row, members in enumerate(packed):
        for segment, h in enumerate(members, start=1):
          place[h] = (row, segment)
      places.append(place)
      count = max(count, len(packed))
    count = round_up(count, math.lcm(PACKED_ROW_MULTIPLE, data_parallel)) if count else 0
    stepped = round_up(rows, min(micro_batch_size, rows))  # the rows the step runs: whole micro-batches
    return cls(heads, skip, width, layouts, places, rows, count, prefix_width,
               len(runs) * (stepped * width + count * prefix_width))


def _heads(samples: Sequence[Sample], pack_width: int) -> Tuple[List[int], List[List[int]]]:
  """(per sample its head or -1, the heads): the prompt heads the samples share (`shared_prefixes`), and for a
  sample that shares none and is longer than a row, its own prompt but the last token: its row then stays
  `pack_width` wide, the head going through the head rows."""
  which, heads = shared_prefixes([s.prompt_ids for s in samples])
  for i, s in enumerate(samples):
    if which[i] < 0 and s.length > pack_width and len(s.prompt_ids) > 1:
      which[i] = len(heads)
      heads.append(list(s.prompt_ids[:-1]))
  return which, heads


def _prefix_layout(samples: Sequence[Sample], skip: Sequence[int], which: Sequence[int], width: int
                   ) -> Tuple[List[List[int]], List[int]]:
  """(the sample indices of each packed row, each row's prefix or -1): the samples of one prefix share rows, those
  without one share the last rows; each sample without its first `skip` tokens."""
  layout, owner = [], []
  for prefix in sorted(set(which), key=lambda w: (w < 0, w)):
    part = [i for i, w in enumerate(which) if w == prefix]
    for row in pack_rows([samples[i].length - skip[i] for i in part], width):
      layout.append([part[j] for j in row])
      owner.append(prefix)
  return layout, owner


def _head_rows(heads: Sequence[Sequence[int]], places: Sequence[Tuple[int, int]], count: int, width: int) -> dict:
  """A mini-batch's head arrays: `count` rows of `width` tokens, head h as segment places[h][1] of row places[h][0],
  in row order (unused rows and slots are segment 0)."""
  tokens, segments = np.zeros((1, count, width), np.int32), np.zeros((1, count, width), np.int32)
  fill = [0] * count
  for ids, (row, segment) in sorted(zip(heads, places), key=lambda x: x[1]):
    span = slice(fill[row], fill[row] + len(ids))
    tokens[0, row, span], segments[0, row, span] = ids, segment
    fill[row] += len(ids)
  return dict(prefix_tokens=tokens, prefix_segment_ids=segments)


def _widen(batch: TrainBatch, width: int) -> TrainBatch:
  """`batch` with its rows padded (masked out) to `width` tokens: the width agreed with other processes."""
  return jax.tree.map(lambda x: np.pad(x, [(0, 0), (0, width - x.shape[1])] + [(0, 0)] * (x.ndim - 2)), batch)


def _blank_sample() -> Sample:
  return Sample(prompt_ids=[0], completion_ids=[0], completion_mask=[0], behaviour_logprobs=[0.0], group_id=0,
                problem_id="", traj_id=-1, step_index=-1, action_valid=0.0)


def _blank_signal(k: int) -> TeacherSignal:
  return TeacherSignal(logprobs=np.zeros(1, np.float32), topk_ids=np.zeros((1, k), np.int32) if k else None,
                       topk_logprobs=np.zeros((1, k), np.float32) if k else None)
