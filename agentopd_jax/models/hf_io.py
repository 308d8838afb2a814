"""Hugging Face checkpoint I/O: local folder (config.json + *.safetensors) <-> our parameter pytree.

Loading memory-maps each safetensors file and builds every parameter with `jax.make_array_from_callback`, so each
device reads only its own shard from disk and the host never holds a full copy of a large model. We parse the
safetensors header ourselves because the library's numpy backend cannot represent bfloat16 (the dtype of every
public Qwen/Llama checkpoint); `ml_dtypes` (a jax dependency) can. Saving goes through the safetensors library's
flax backend, which writes bfloat16 too.
"""
from __future__ import annotations

import json
import math
import os
import re
from typing import Callable, Dict, Optional, Tuple

import jax
import jax.numpy as jnp
import ml_dtypes
import numpy as np
from jax.sharding import Mesh, SingleDeviceSharding

from agentopd_jax.models.config import ModelConfig, _read_json, token_ids
from agentopd_jax.models import transformer

_ST_DTYPES = {
    "F64": np.float64, "F32": np.float32, "F16": np.float16, "BF16": ml_dtypes.bfloat16,
    "I64": np.int64, "I32": np.int32, "I16": np.int16, "I8": np.int8, "U8": np.uint8, "BOOL": np.bool_,
}


def read_safetensors(path: str) -> Dict[str, np.ndarray]:
  """Zero-copy (memory-mapped) arrays of one .safetensors file, any dtype including bfloat16."""
  with open(path, "rb") as f:
    header_len = int.from_bytes(f.read(8), "little")
    try:
      header = json.loads(f.read(header_len))
    except ValueError as e:
      raise ValueError(f"{path}: not a safetensors file (bad header)") from e
  raw = np.memmap(path, dtype=np.uint8, mode="r", offset=8 + header_len)
  out = {}
  for name, info in header.items():
    if name == "__metadata__":
      continue
    if info["dtype"] not in _ST_DTYPES:
      raise ValueError(f"{path}: tensor {name!r} has unsupported dtype {info['dtype']}")
    begin, end = info["data_offsets"]
    dtype = np.dtype(_ST_DTYPES[info["dtype"]])
    if end > raw.size or end - begin != math.prod(info["shape"]) * dtype.itemsize:  # else numpy's reshape error
      raise ValueError(f"{path}: tensor {name!r} ({info['dtype']} {info['shape']}) does not fit bytes {begin}..{end} "
                       f"of the {raw.size}-byte data section (truncated or corrupt file)")
    out[name] = raw[begin:end].view(dtype).reshape(info["shape"])
  return out


# Weight files that are Python pickles: unpickling runs whatever code the file names, so they are never read.
_PICKLED = (".bin", ".pt", ".pth", ".ckpt", ".pkl")


def _hf_tensors(path: str) -> Dict[str, np.ndarray]:
  index = _read_json(os.path.join(path, "model.safetensors.index.json"))
  if index is not None:
    if not isinstance(index.get("weight_map"), dict):
      raise ValueError(f"{path}/model.safetensors.index.json: no weight_map object")
    files = sorted(set(index["weight_map"].values()))
  elif os.path.isfile(os.path.join(path, "model.safetensors")):
    files = ["model.safetensors"]
  else:
    files = sorted(n for n in os.listdir(path) if n.endswith(".safetensors"))
    pickled = sorted(n for n in os.listdir(path) if n.endswith(_PICKLED))
    if pickled and not files:
      raise FileNotFoundError(f"model folder {path!r} has only pickled weights ({', '.join(pickled)}); safetensors is "
                              "required (unpickling can run arbitrary code): convert them, e.g. transformers' "
                              "save_pretrained(folder, safe_serialization=True)")
    if not files:
      raise FileNotFoundError(f"no *.safetensors weights in model folder {path!r}")
  tensors = {}
  for name in files:
    file = os.path.join(path, name)
    if not os.path.isfile(file):
      raise FileNotFoundError(f"{file} is listed in model.safetensors.index.json but missing")
    tensors.update(read_safetensors(file))
  return tensors


# --- name and layout mapping ---------------------------------------------------------------------------------
# Each rule: our param path, HF name (with {i} for the layer), to-ours transform, to-HF transform.

def _rules(c: ModelConfig):
  d, h, kv, hd = c.hidden_size, c.num_heads, c.num_kv_heads, c.head_dim
  t = lambda w: w.T
  ident = lambda w: w
  rules = [
      (("embedding",), "model.embed_tokens.weight", ident, ident),
      (("final_norm", "scale"), "model.norm.weight", ident, ident),
      (("layers", "input_norm", "scale"), "model.layers.{i}.input_layernorm.weight", ident, ident),
      (("layers", "post_attn_norm", "scale"), "model.layers.{i}.post_attention_layernorm.weight", ident, ident),
      (("layers", "attn", "q_kernel"), "model.layers.{i}.self_attn.q_proj.weight",
       lambda w: w.T.reshape(d, h, hd), lambda w: w.reshape(d, h * hd).T),
      (("layers", "attn", "k_kernel"), "model.layers.{i}.self_attn.k_proj.weight",
       lambda w: w.T.reshape(d, kv, hd), lambda w: w.reshape(d, kv * hd).T),
      (("layers", "attn", "v_kernel"), "model.layers.{i}.self_attn.v_proj.weight",
       lambda w: w.T.reshape(d, kv, hd), lambda w: w.reshape(d, kv * hd).T),
      (("layers", "attn", "o_kernel"), "model.layers.{i}.self_attn.o_proj.weight",
       lambda w: w.T.reshape(h, hd, d), lambda w: w.reshape(h * hd, d).T),
      (("layers", "mlp", "gate_kernel"), "model.layers.{i}.mlp.gate_proj.weight", t, t),
      (("layers", "mlp", "up_kernel"), "model.layers.{i}.mlp.up_proj.weight", t, t),
      (("layers", "mlp", "down_kernel"), "model.layers.{i}.mlp.down_proj.weight", t, t),
  ]
  if c.qkv_bias:
    rules += [
        (("layers", "attn", "q_bias"), "model.layers.{i}.self_attn.q_proj.bias",
         lambda w: w.reshape(h, hd), lambda w: w.reshape(h * hd)),
        (("layers", "attn", "k_bias"), "model.layers.{i}.self_attn.k_proj.bias",
         lambda w: w.reshape(kv, hd), lambda w: w.reshape(kv * hd)),
        (("layers", "attn", "v_bias"), "model.layers.{i}.self_attn.v_proj.bias",
         lambda w: w.reshape(kv, hd), lambda w: w.reshape(kv * hd)),
    ]
  if c.o_bias:
    rules.append((("layers", "attn", "o_bias"), "model.layers.{i}.self_attn.o_proj.bias", ident, ident))
  if c.qk_norm:
    rules += [
        (("layers", "attn", "q_norm", "scale"), "model.layers.{i}.self_attn.q_norm.weight", ident, ident),
        (("layers", "attn", "k_norm", "scale"), "model.layers.{i}.self_attn.k_norm.weight", ident, ident),
    ]
  if not c.tie_embeddings:
    rules.append((("lm_head",), "lm_head.weight", t, t))
  return rules


def _get(tree, path):
  for key in path:
    tree = tree[key]
  return tree


def _set(tree, path, value):
  for key in path[:-1]:
    tree = tree.setdefault(key, {})
  tree[path[-1]] = value


def load_hf(path: str, mesh: Optional[Mesh] = None, rules: Optional[dict] = None,
            **config_overrides) -> Tuple[ModelConfig, dict]:
  """Loads a local HF folder into (ModelConfig, params), each array placed on its mesh sharding.

  The params' dtype is transformers' `from_pretrained` default (`dtype="auto"`): config.json's `dtype`, else its
  `torch_dtype`, else the safetensors' own dtype; the file's values are cast to it as they are read (f32 weights under a
  bfloat16 config are rounded to bfloat16, as transformers does). Compute runs in that dtype too. Override with e.g.
  `param_dtype="float32"` (which also sets the compute `dtype` unless `dtype` is given). The config's
  `stop_token_ids` are the folder's default EOS ids (`ModelConfig.from_hf_dir`).
  """
  if not os.path.isdir(path):
    raise FileNotFoundError(f"model folder {path!r} does not exist")
  tensors = _hf_tensors(path)
  embed = tensors.get("model.embed_tokens.weight")  # absent: the tensor checks below name it
  file_dtype = jnp.dtype(embed.dtype).name if embed is not None else "float32"
  config = ModelConfig.from_hf_dir(path, default_dtype=file_dtype, **config_overrides)
  abstract = transformer.abstract_params(config)
  if mesh is not None:
    shardings = transformer.param_shardings(config, mesh, rules)
  else:
    shardings = jax.tree.map(lambda _: SingleDeviceSharding(jax.devices()[0]), abstract)

  params: dict = {}
  used = set()
  for our_path, hf_name, to_ours, to_hf in _rules(config):
    target = _get(abstract, our_path)
    stacked = our_path[0] == "layers"
    names = [hf_name.format(i=i) for i in range(config.num_layers)] if stacked else [hf_name]
    expected = _hf_shape(to_hf, target.shape[1:] if stacked else target.shape)
    for name in names:  # every layer: one mis-shaped layer would otherwise fail inside the shard reader's np.stack
      if name not in tensors:
        tied = " (config.json has tie_word_embeddings=false)" if name == "lm_head.weight" else ""
        raise KeyError(f"{path}: checkpoint lacks tensor {name!r} required by config.json{tied}")
      if tensors[name].shape != expected:
        raise ValueError(f"{path}: tensor {name!r} has shape {tensors[name].shape}, config.json implies {expected}")
    used.update(names)
    sources = [tensors[n] for n in names]
    params_dtype = target.dtype
    _set(params, our_path, jax.make_array_from_callback(
        target.shape, _get(shardings, our_path), _shard_reader(sources, to_ours, stacked, params_dtype)))
  unused = [n for n in tensors if n not in used and not n.endswith("rotary_emb.inv_freq")]
  if config.tie_embeddings:
    unused = [n for n in unused if n != "lm_head.weight"]  # some tied checkpoints still store it
  if unused:
    raise ValueError(f"{path}: unexpected tensors not used by the model, e.g. {unused[:3]}")
  return config, params


def _hf_shape(to_hf: Callable, shape) -> Tuple[int, ...]:
  """The HF-layout shape of one of our params' `shape`: `to_hf` of a zero-stride view, which touches no memory."""
  return to_hf(np.broadcast_to(np.zeros((), np.int8), shape)).shape


def _shard_reader(sources, to_ours: Callable, stacked: bool, dtype):
  def read(index):
    if not stacked:
      return np.ascontiguousarray(to_ours(sources[0])[index]).astype(dtype)
    layers = range(len(sources))[index[0]]
    return np.stack([np.asarray(to_ours(sources[i])[index[1:]]) for i in layers]).astype(dtype)
  return read


def to_hf_tensors(config: ModelConfig, params) -> Dict[str, np.ndarray]:
  """Our params -> {HF tensor name: host array} in HF layout."""
  out = {}
  for our_path, hf_name, _, to_hf in _rules(config):
    value = np.asarray(jax.device_get(_get(params, our_path)))
    if our_path[0] == "layers":
      for i in range(config.num_layers):
        out[hf_name.format(i=i)] = np.ascontiguousarray(to_hf(value[i]))
    else:
      out[hf_name] = np.ascontiguousarray(to_hf(value))
  return out


def save_hf(path: str, config: ModelConfig, params, max_shard_bytes: int = 4 << 30) -> None:
  """Writes config.json + safetensors (sharded with an index past `max_shard_bytes`) loadable by transformers, and
  generation_config.json when the config's stop ids need one."""
  from safetensors.flax import save_file  # handles bfloat16, unlike the numpy backend

  os.makedirs(path, exist_ok=True)
  tensors = to_hf_tensors(config, params)
  shards, current, size = [], {}, 0
  for name in sorted(tensors, key=_natural_key):
    nbytes = tensors[name].nbytes
    if current and size + nbytes > max_shard_bytes:
      shards.append(current)
      current, size = {}, 0
    current[name] = tensors[name]
    size += nbytes
  shards.append(current)
  for stale in os.listdir(path):
    if stale.endswith(".safetensors") or stale in ("model.safetensors.index.json", "generation_config.json"):
      os.remove(os.path.join(path, stale))
  if len(shards) == 1:
    files = ["model.safetensors"]
  else:
    files = [f"model-{k + 1:05d}-of-{len(shards):05d}.safetensors" for k in range(len(shards))]
  weight_map = {}
  for file, shard in zip(files, shards):
    save_file({k: jnp.asarray(v) for k, v in shard.items()}, os.path.join(path, file), metadata={"format": "pt"})
    weight_map.update({k: file for k in shard})
  if len(shards) > 1:
    with open(os.path.join(path, "model.safetensors.index.json"), "w") as f:
      json.dump({"metadata": {"total_size": sum(t.nbytes for t in tensors.values())}, "weight_map": weight_map},
                f, indent=2, sort_keys=True)
  with open(os.path.join(path, "config.json"), "w") as f:
    json.dump(config.to_hf_config(), f, indent=2)
  # Stop ids other than config.json's EOS ids (what a folder without the file means) go where `load_hf` reads them;
  # other generation defaults of the source folder are not kept.
  if config.stop_token_ids != token_ids(config.eos_token_id):
    with open(os.path.join(path, "generation_config.json"), "w") as f:
      json.dump({"bos_token_id": config.bos_token_id, "eos_token_id": list(config.stop_token_ids) or None,
                 "pad_token_id": config.pad_token_id}, f, indent=2)


def _natural_key(name: str):
  return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name)]
