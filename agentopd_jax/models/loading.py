"""Model + tokenizer from a config: a local Hugging Face folder, or a preset with random weights and the built-in
tokenizer (the no-download default); and a run's checkpointed weights, a LoRA run's merged onto its base. Shared by
every experiment entry point."""
from __future__ import annotations

import dataclasses
import logging
import os
from typing import Any, Dict, Optional, Sequence, Tuple

import jax
from jax.sharding import NamedSharding, PartitionSpec as P

from agentopd_jax.models import hf_io, lora, transformer
from agentopd_jax.models.config import _DTYPES, ATTENTION_IMPLS, preset
from agentopd_jax.models.tokenizer import BUILTIN_VOCAB_SIZE, builtin_tokenizer, has_tokenizer, load_tokenizer
from agentopd_jax.storage.checkpoints import CheckpointPool

logger = logging.getLogger(__name__)

VOCAB_MULTIPLE = 128  # a random-init vocabulary grown to fit the tokenizer is rounded up to this (matmul-friendly)


@dataclasses.dataclass(frozen=True)
class ModelSpec:
  """The run config's `model` section: which model, and the run's overrides of its ModelConfig
  (`model_overrides`)."""
  preset: str = "tiny"                 # used when path is empty (random init)
  path: str = ""                       # local HF folder (config.json + *.safetensors + tokenizer)
  adapter: str = ""                    # a PEFT LoRA folder (adapter_config.json + adapter_model.safetensors) trained
                                       # on `path`'s base: the model is the base with it merged (`models/lora.py`)
  param_dtype: str = ""                # storage of params and Adam moments: "" = the checkpoint's (a preset: f32)
  dtype: str = ""                      # matmul (compute) dtype: "" = follow param_dtype, else the checkpoint's;
                                       # softmax, log-softmax and losses are f32 whatever it is
  attention_impl: str = ""             # "" (the einsum path, "xla"), "dot_product" (jax.nn.dot_product_attention)
                                       # or "cudnn" (its cuDNN kernel: NVIDIA GPUs, bf16/f16 compute)
  remat: bool = False                  # recompute each layer in the backward pass: activations for compute (a 7B
                                       # model needs it: experiments/plan.py)
  chat_template_kwargs: Dict[str, Any] = dataclasses.field(default_factory=dict)  # e.g. enable_thinking=False (Qwen3)

  def __post_init__(self):
    model_overrides(self)


def load_model_and_tokenizer(model_cfg, tokenizer_path: str, seed: int, mesh, builtin_vocab: int = BUILTIN_VOCAB_SIZE,
                             env_corpus: Optional[Tuple[Sequence[str], Sequence[str]]] = None,
                             builtin_corpus: Sequence[str] = ()):
  """(ModelConfig, params on `mesh`, tokenizer). `model_cfg` needs `path` and `preset` fields; its `param_dtype`,
  `dtype`, `attention_impl` and `remat` fields, when present, set those of the ModelConfig (`model_overrides`).

  The tokenizer is `tokenizer_path`'s, else `model_cfg.path`'s, else the built-in one with `builtin_vocab` BPE tokens,
  trained on `builtin_corpus` (the base corpus, `envs.verl_agent.corpus.default_corpus()`; needed only then) and
  also on `env_corpus` = (env texts, whole words) when given. A model folder with any tokenizer file must load
  its tokenizer (one with tokenizer.json deleted is an error, not a silent switch to the built-in one); one with none
  falls back with a warning. A preset's random-init vocabulary grows to fit the tokenizer (rounded up to a multiple of
  128); pretrained weights must already fit it.
  """
  overrides = model_overrides(model_cfg)  # first: a bad value fails before the tokenizer is trained
  tok_path = tokenizer_path or (model_cfg.path if model_cfg.path and has_tokenizer(model_cfg.path) else "")
  if tok_path:
    tokenizer = load_tokenizer(tok_path)
  else:
    if model_cfg.path:
      logger.warning("model.path %s has no tokenizer files: using the built-in tokenizer (set tokenizer_path to "
                     "the model's own)", model_cfg.path)
    texts, words = env_corpus or ((), ())
    tokenizer = builtin_tokenizer(builtin_corpus, vocab_size=builtin_vocab, env_texts=texts, whole_words=words)
  adapter = getattr(model_cfg, "adapter", "")
  if adapter and not model_cfg.path:
    raise ValueError(f"model.adapter={adapter!r} needs model.path: the HF base folder the adapter was trained on")
  if model_cfg.path:
    config, params = hf_io.load_hf(model_cfg.path, mesh=mesh, **overrides)
    if adapter:
      adapters, lora_cfg = lora.import_peft(adapter, config, params)
      params = lora.merge(params, adapters, lora_cfg)
      if mesh is not None:
        params = jax.device_put(params, transformer.param_shardings(config, mesh))
      logger.info("model.adapter %s: LoRA r=%d, alpha=%g on %s merged into %s", adapter, lora_cfg.rank,
                  lora_cfg.alpha, ",".join(lora_cfg.targets), model_cfg.path)
  else:
    config = preset(model_cfg.preset)
    if "param_dtype" in overrides:  # compute follows storage unless set, as `load_hf` does for a checkpoint
      overrides.setdefault("dtype", overrides["param_dtype"])
    needed = -(-len(tokenizer) // VOCAB_MULTIPLE) * VOCAB_MULTIPLE
    config = config.replace(vocab_size=max(config.vocab_size, needed), **overrides)
    params = jax.device_put(transformer.init_params(config, jax.random.key(seed)),
                            transformer.param_shardings(config, mesh))
  if len(tokenizer) > config.vocab_size:
    raise ValueError(f"tokenizer ({tok_path or 'built-in'}) has {len(tokenizer)} tokens but the model's vocab_size "
                     f"({model_cfg.path or model_cfg.preset}) is {config.vocab_size}: ids past "
                     f"{config.vocab_size - 1} would have no embedding row")
  return config, params, tokenizer


def model_overrides(model_cfg) -> dict:
  """The ModelConfig fields a run config's `model` section sets: `param_dtype` (params and, through the optimizer,
  Adam moments), `dtype` (matmuls), `attention_impl` ("xla", "dot_product", "cudnn") and `remat` (recompute each
  layer in the backward pass); "" (False for remat) leaves a field to the checkpoint or preset.

  A missing field means the same: run configs written before a field existed (a run folder's config.json,
  configs/sample.py) and serve's bare-folder section lack them. A bad value is an error that names the run-config
  field, not the ModelConfig one it feeds.
  """
  overrides = {}
  for field, allowed in (("param_dtype", _DTYPES), ("dtype", _DTYPES), ("attention_impl", ATTENTION_IMPLS)):
    value = getattr(model_cfg, field, "")
    if not value:
      continue
    if value not in allowed:
      raise ValueError(f"model.{field} must be one of {allowed} or \"\" (the checkpoint's), got {value!r}")
    overrides[field] = value
  if getattr(model_cfg, "remat", False):
    overrides["remat"] = True
  return overrides


def pool_params(pool: CheckpointPool, step: int, abstract_params):
  """Checkpoint `step`'s full weights, laid out like `abstract_params`: its params, or for a LoRA run (whose steps
  hold adapters) the pool's base with that step's adapters merged at the LoRA config the step recorded. Every
  reader of a run's weights goes through here: a warm start, a teacher pool, serving."""
  if "adapters" not in pool.saved_keys(step):
    return pool.restore_params(step, abstract_params)
  record = (pool.metadata(step)["extra"] or {}).get("lora")
  if not record:
    raise ValueError(f"step {step} in {pool.directory} holds adapters but no 'lora' record in its extra")
  cfg = lora.LoraConfig(**{**record, "targets": tuple(record["targets"])})
  placed = [a.sharding for a in jax.tree.leaves(abstract_params) if getattr(a, "sharding", None) is not None]
  abstract = lora.abstract_adapters(abstract_params, cfg)
  mesh = next((s.mesh for s in placed if isinstance(s, NamedSharding)), None)
  if mesh is not None:  # the adapters replicated over the base's devices, where the merge runs
    abstract = jax.tree.map(lambda a: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=NamedSharding(mesh, P())),
                            abstract)
  adapters = pool.restore_params(step, abstract, key="adapters")
  merged = lora.merge(pool.restore_base(abstract_params), adapters, cfg)
  if len(placed) == len(jax.tree.leaves(abstract_params)):
    merged = jax.device_put(merged, jax.tree.map(lambda a: a.sharding, abstract_params))
  return merged


def run_params(run_dir, step, abstract_params, field: str = "step") -> Tuple[Any, int]:
  """(params, step number) of checkpoint `step` ("best", "latest" or a number) of the run folder `run_dir`'s pool
  (`pool_params`), restored onto `abstract_params` (shapes, dtypes, shardings); a bad step is an error naming the
  config `field`."""
  with CheckpointPool(os.path.join(run_dir, "checkpoints"), read_only=True) as pool:
    number = pool.resolve_step(step, field)
    return pool_params(pool, number, abstract_params), number
