"""What `--model` names, ready to serve: a local Hugging Face folder, or a checkpoint of one of our training runs.

A run folder is told apart by its `checkpoints/` pool. Its params come through `assembly.checkpoint_policy`, as
`experiments/evaluate.py` loads them, driven by the run's own `config.json`: so the tokenizer (a built-in one
included), the chat template kwargs and the model config are the run's, and the served policy is the one that was
validated. A HF folder goes through `load_model_and_tokenizer` like a run's `model.path`, but must carry its own
tokenizer: the loader's fallback to the built-in tokenizer would silently serve the wrong one.
"""
from __future__ import annotations

import dataclasses
import json
import os
from typing import Any, Optional

import ml_collections

from agentopd_jax.models.config import ModelConfig
from agentopd_jax.models.loading import load_model_and_tokenizer
from agentopd_jax.parallel.sharding import make_mesh
from agentopd_jax.rollout.chat import ChatFormat


@dataclasses.dataclass
class ServedModel:
  config: ModelConfig
  params: Any
  tokenizer: Any
  chat: ChatFormat   # the chat template kwargs and the chat EOS every reply stops on
  mesh: Any          # where params (and so the sampler's KV cache) live
  name: str          # the default served model id
  label: str         # what was loaded, for logs


@dataclasses.dataclass(frozen=True)
class _HFModel:
  """The `model` config section `load_model_and_tokenizer` reads, for a bare folder."""
  path: str
  param_dtype: str = ""
  preset: str = ""


def load_served_model(model: str, step: str = "", mesh=None, param_dtype: str = "",
                      chat_template_kwargs: Optional[dict] = None, seed: int = 0) -> ServedModel:
  """`model`: a HF folder (config.json + safetensors + tokenizer) or a run folder (config.json + checkpoints/).

  step: a run's checkpoint ("best", "latest" or a number; default "latest"); an error for a HF folder.
  param_dtype: "" keeps the stored dtype. chat_template_kwargs: override the run's (or set the folder's) template
  kwargs, e.g. {"enable_thinking": False} for Qwen3.
  """
  path = os.path.abspath(os.path.expanduser(model))
  mesh = make_mesh() if mesh is None else mesh
  if os.path.isdir(os.path.join(path, "checkpoints")):
    return _run_checkpoint(path, step or "latest", mesh, param_dtype, chat_template_kwargs)
  if not os.path.isfile(os.path.join(path, "config.json")):
    raise FileNotFoundError(f"--model {path}: neither a Hugging Face folder (config.json) nor a run folder "
                            "(checkpoints/)")
  if step:
    raise ValueError(f"--step={step} is for a run folder (with checkpoints/); {path} is a Hugging Face folder")
  if not os.path.isfile(os.path.join(path, "tokenizer.json")):
    raise FileNotFoundError(f"--model {path}: no tokenizer.json; a served folder needs its own tokenizer (its chat "
                            "template and EOS)")
  config, params, tokenizer = load_model_and_tokenizer(_HFModel(path, param_dtype), "", seed, mesh)
  return ServedModel(config, params, tokenizer, ChatFormat(tokenizer, chat_template_kwargs), mesh,
                     name=os.path.basename(path), label=path)


def run_config(run_dir: str) -> ml_collections.ConfigDict:
  """The config a run was trained with (its `config.json`, in the method-group layout: `training.config.upgrade`),
  with `workdir` pointing at `run_dir` where it is now."""
  from agentopd_jax.training.config import upgrade  # heavy (methods, envs); only runs need it

  file = os.path.join(run_dir, "config.json")
  if not os.path.isfile(file):
    raise FileNotFoundError(f"run folder {run_dir} has checkpoints/ but no config.json (the trainer writes it)")
  with open(file) as f:
    raw = json.load(f)
  try:
    c = ml_collections.ConfigDict(upgrade(raw) if isinstance(raw, dict) else raw)
  except ValueError as e:
    raise ValueError(f"{file}: {e}") from None
  c.workdir = run_dir
  return c


def _run_checkpoint(run_dir: str, step: str, mesh, param_dtype: str, chat_template_kwargs) -> ServedModel:
  from agentopd_jax.training.assembly import chat_format, checkpoint_policy  # heavy (envs); only runs need it

  c = run_config(run_dir)
  try:
    if param_dtype:
      c.model.param_dtype = param_dtype
    if chat_template_kwargs:
      c.model.chat_template_kwargs.update(chat_template_kwargs)
    config, params, tokenizer, number = checkpoint_policy(c, step, mesh)
    chat = chat_format(c, tokenizer)
  except AttributeError as e:  # ConfigDict names only the missing key
    raise ValueError(f"{os.path.join(run_dir, 'config.json')}: the run config lacks the field {e} that loading "
                     "needs (a run from an older version of the code?)") from e
  return ServedModel(config, params, tokenizer, chat, mesh, name=f"{os.path.basename(run_dir)}-step{number}",
                     label=f"{run_dir} step {number}")
