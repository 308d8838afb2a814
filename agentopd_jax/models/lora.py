"""LoRA adapters on our parameter pytrees, and Hugging Face PEFT's adapter files.

Our models are pure functions over a params pytree whose layers are stacked (`("layers", "attn", "q_kernel")` is
[L, d, h, hd]), so no module wrapper (qwix, PEFT) can reach them. An adapter tree mirrors the targets instead:
`adapters[target] = {"a": [L, in, r], "b": [L, r, out]}`, `in` and `out` the kernel's input and output axes
flattened in our layout's order (which is HF's: q's out is (h, hd), o's in is (h, hd)). The adapted kernel is

    W' = W + s · (a @ b),   s = alpha / r   (rsLoRA: alpha / √r),

PEFT's `LoraLayer` with `use_rslora`. `a` starts as PEFT's `kaiming_uniform_(a=√5)` of lora_A, U(±1/√in), and `b`
at zero, so the adapted model at step 0 is the base. Embeddings, norms, biases and the lm_head are never adapted.

PEFT files: `adapter_model.safetensors` with `base_model.model.model.layers.{i}.self_attn.q_proj.lora_A.weight`
[r, in] and `...lora_B.weight` [out, r] per layer and target, and `adapter_config.json` (`export_peft`,
`import_peft`); PEFT's `PeftModel.from_pretrained` loads them onto the HF base (tests/test_lora.py).
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
from typing import Any, Dict, Tuple

import jax
import jax.numpy as jnp
import numpy as np

from agentopd_jax.models.config import ModelConfig

# target: (our kernel's path, its number of input axes after the layer axis, HF module path below the layer)
TARGETS: Dict[str, Tuple[Tuple[str, ...], int, str]] = {
    "q": (("layers", "attn", "q_kernel"), 1, "self_attn.q_proj"),
    "k": (("layers", "attn", "k_kernel"), 1, "self_attn.k_proj"),
    "v": (("layers", "attn", "v_kernel"), 1, "self_attn.v_proj"),
    "o": (("layers", "attn", "o_kernel"), 2, "self_attn.o_proj"),
    "gate": (("layers", "mlp", "gate_kernel"), 1, "mlp.gate_proj"),
    "up": (("layers", "mlp", "up_kernel"), 1, "mlp.up_proj"),
    "down": (("layers", "mlp", "down_kernel"), 1, "mlp.down_proj"),
}
PEFT_PREFIX = "base_model.model.model.layers"
ADAPTER_WEIGHTS, ADAPTER_CONFIG = "adapter_model.safetensors", "adapter_config.json"


@dataclasses.dataclass(frozen=True)
class LoraConfig:
  """The run config's `lora` section: rank 0 trains every weight (no adapters)."""
  rank: int = 0
  alpha: float = 16.0
  rslora: bool = False                 # scale alpha / sqrt(rank) (rsLoRA) instead of alpha / rank
  targets: Tuple[str, ...] = tuple(TARGETS)

  def __post_init__(self):
    if type(self.rank) is not int or self.rank < 0:
      raise ValueError(f"lora.rank must be an integer >= 0 (0: no adapters), got {self.rank!r}")
    if not self.alpha > 0:
      raise ValueError(f"lora.alpha must be > 0, got {self.alpha!r}")
    unknown = [t for t in self.targets if t not in TARGETS]
    if unknown or not self.targets or len(set(self.targets)) != len(self.targets):
      raise ValueError(f"lora.targets must be distinct names among {tuple(TARGETS)}, got {tuple(self.targets)}")

  @property
  def scale(self) -> float:
    return self.alpha / (math.sqrt(self.rank) if self.rslora else self.rank)


def _split(kernel_shape, n_in: int) -> Tuple[int, int]:
  """(flattened input size, flattened output size) of a stacked kernel [L, *in, *out]."""
  return int(np.prod(kernel_shape[1:1 + n_in])), int(np.prod(kernel_shape[1 + n_in:]))


def _kernel(params, path):
  for k in path:
    params = params[k]
  return params


def init_adapters(params, cfg: LoraConfig, key: jax.Array):
  """Fresh f32 adapters for `params`' kernels: a ~ U(±1/√in) (PEFT's default), b = 0."""
  out = {}
  for target, k in zip(cfg.targets, jax.random.split(key, len(cfg.targets))):
    path, n_in, _ = TARGETS[target]
    shape = _kernel(params, path).shape
    fan_in, fan_out = _split(shape, n_in)
    bound = 1.0 / math.sqrt(fan_in)
    out[target] = {"a": jax.random.uniform(k, (shape[0], fan_in, cfg.rank), jnp.float32, -bound, bound),
                   "b": jnp.zeros((shape[0], cfg.rank, fan_out), jnp.float32)}
  return out


def abstract_adapters(params, cfg: LoraConfig):
  """The shapes and dtypes of `init_adapters(params, cfg, key)` (params may be abstract)."""
  return jax.eval_shape(lambda: init_adapters(params, cfg, jax.random.key(0)))


def delta(kernel_shape, n_in: int, adapter, scale: float) -> jnp.ndarray:
  """s · (a @ b) of every layer, shaped like the stacked kernel, in f32."""
  return (scale * jnp.einsum("lir,lro->lio", adapter["a"], adapter["b"])).reshape(kernel_shape)


def _with_leaves(params, adapters, leaves):
  """`params` copied along each adapted kernel's path (every other leaf shared), its node updated by
  `leaves(kernel name, kernel, n_in, adapter)` -> {name: leaf}."""
  out = dict(params)
  for target, adapter in adapters.items():
    path, n_in, _ = TARGETS[target]
    node = out
    for k in path[:-1]:
      node[k] = dict(node[k])
      node = node[k]
    node.update(leaves(path[-1], node[path[-1]], n_in, adapter))
  return out


def merge(params, adapters, cfg: LoraConfig):
  """`params` with every adapted kernel replaced by W + s·(a@b), computed in f32 and stored in W's dtype: the
  sampler's policy, merged once per refresh."""
  def merged(name, w, n_in, adapter):
    return {name: (w.astype(jnp.float32) + delta(w.shape, n_in, adapter, cfg.scale)).astype(w.dtype)}
  return _with_leaves(params, adapters, merged)


def attach(params, adapters, cfg: LoraConfig):
  """`params` with each adapted kernel's factors beside it, `{kernel}_lora_a` = s·a [L, in, r] and
  `{kernel}_lora_b` = b [L, r, out]: `transformer.forward` then adds x·(s·a)·b to the kernel's product (the
  training path; differentiable in `adapters`, the base untouched)."""
  return _with_leaves(params, adapters, lambda name, w, n_in, adapter: {
      f"{name}_lora_a": cfg.scale * adapter["a"], f"{name}_lora_b": adapter["b"]})


# --- Hugging Face PEFT files -------------------------------------------------------------------------------------

def export_peft(path: str, model: ModelConfig, adapters, cfg: LoraConfig, base_model: str = "") -> None:
  """Writes `adapter_model.safetensors` + `adapter_config.json` that PEFT loads onto the HF base of `model`."""
  from safetensors.numpy import save_file

  os.makedirs(path, exist_ok=True)
  tensors = {}
  for target, adapter in adapters.items():
    module = TARGETS[target][2]
    a, b = np.asarray(jax.device_get(adapter["a"]), np.float32), np.asarray(jax.device_get(adapter["b"]), np.float32)
    for i in range(model.num_layers):
      tensors[f"{PEFT_PREFIX}.{i}.{module}.lora_A.weight"] = np.ascontiguousarray(a[i].T)
      tensors[f"{PEFT_PREFIX}.{i}.{module}.lora_B.weight"] = np.ascontiguousarray(b[i].T)
  save_file(tensors, os.path.join(path, ADAPTER_WEIGHTS), metadata={"format": "pt"})
  config = {"peft_type": "LORA", "task_type": "CAUSAL_LM", "base_model_name_or_path": base_model or None,
            "r": cfg.rank, "lora_alpha": cfg.alpha, "use_rslora": cfg.rslora, "lora_dropout": 0.0, "bias": "none",
            "fan_in_fan_out": False, "target_modules": sorted(TARGETS[t][2].split(".")[-1] for t in adapters),
            "inference_mode": True}
  with open(os.path.join(path, ADAPTER_CONFIG), "w") as f:
    json.dump(config, f, indent=2)


def import_peft(path: str, model: ModelConfig, params) -> Tuple[Any, LoraConfig]:
  """(adapters, config) from a PEFT LoRA folder written for `model`'s HF base; `params` gives the kernel shapes."""
  from safetensors.numpy import load_file

  config_file, weights_file = os.path.join(path, ADAPTER_CONFIG), os.path.join(path, ADAPTER_WEIGHTS)
  for f in (config_file, weights_file):
    if not os.path.isfile(f):
      raise FileNotFoundError(f"{f}: a PEFT LoRA adapter folder holds {ADAPTER_CONFIG} and {ADAPTER_WEIGHTS}")
  with open(config_file) as f:
    peft = json.load(f)
  for field, ok, want in (("peft_type", peft.get("peft_type") == "LORA", "'LORA'"),
                          ("bias", peft.get("bias", "none") == "none", "'none'"),
                          ("fan_in_fan_out", not peft.get("fan_in_fan_out", False), "false"),
                          ("use_dora", not peft.get("use_dora", False), "false"),
                          ("rank_pattern", not peft.get("rank_pattern"), "empty"),
                          ("alpha_pattern", not peft.get("alpha_pattern"), "empty")):
    if not ok:
      raise ValueError(f"{config_file}: {field} must be {want} here, got {peft.get(field)!r}")
  modules = peft.get("target_modules")
  by_module = {spec[2].split(".")[-1]: t for t, spec in TARGETS.items()}
  if modules == "all-linear":
    modules = list(by_module)
  if isinstance(modules, str) or not modules or any(m not in by_module for m in modules):
    raise ValueError(f"{config_file}: target_modules must list modules among {sorted(by_module)} (or be "
                     f"'all-linear'), got {modules!r}")
  cfg = LoraConfig(rank=int(peft["r"]), alpha=float(peft.get("lora_alpha", 8)), rslora=bool(peft.get("use_rslora")),
                   targets=tuple(t for t in TARGETS if t in {by_module[m] for m in modules}))
  tensors = load_file(weights_file)
  adapters = {}
  for target in cfg.targets:
    kernel_path, n_in, module = TARGETS[target]
    fan_in, fan_out = _split(_kernel(params, kernel_path).shape, n_in)
    a, b = [], []
    for i in range(model.num_layers):
      for side, out, shape in (("A", a, (cfg.rank, fan_in)), ("B", b, (fan_out, cfg.rank))):
        name = f"{PEFT_PREFIX}.{i}.{module}.lora_{side}.weight"
        if name not in tensors:
          raise ValueError(f"{weights_file}: no tensor {name} (target_modules lists {module})")
        if tensors[name].shape != shape:
          raise ValueError(f"{weights_file}: {name} has shape {tensors[name].shape}, expected {shape} for this "
                           f"model at r={cfg.rank}")
        out.append(tensors[name].astype(np.float32).T)
    adapters[target] = {"a": jnp.asarray(np.stack(a)), "b": jnp.asarray(np.stack(b))}
  return adapters, cfg
