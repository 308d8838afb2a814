"""Model + tokenizer from a config: a local Hugging Face folder, or a preset with random weights and the built-in
tokenizer (the no-download default). Shared by every experiment entry point."""
from __future__ import annotations

import os

import jax

from agentopd_jax.models import hf_io, transformer
from agentopd_jax.models.config import preset
from agentopd_jax.models.tokenizer import builtin_tokenizer, load_tokenizer


def load_model_and_tokenizer(model_cfg, tokenizer_path: str, seed: int, mesh):
  """(ModelConfig, params on `mesh`, tokenizer). `model_cfg` needs `path`, `preset` and `param_dtype` fields."""
  if model_cfg.path:
    overrides = {"param_dtype": model_cfg.param_dtype} if model_cfg.param_dtype else {}
    config, params = hf_io.load_hf(model_cfg.path, mesh=mesh, **overrides)
  else:
    config = preset(model_cfg.preset)
    if model_cfg.param_dtype:
      config = config.replace(param_dtype=model_cfg.param_dtype)
    params = jax.device_put(transformer.init_params(config, jax.random.key(seed)),
                            transformer.param_shardings(config, mesh))
  has_tokenizer = model_cfg.path and os.path.isfile(os.path.join(model_cfg.path, "tokenizer.json"))
  tok_path = tokenizer_path or (model_cfg.path if has_tokenizer else "")
  tokenizer = load_tokenizer(tok_path) if tok_path else builtin_tokenizer()
  if len(tokenizer) > config.vocab_size:
    raise ValueError(f"tokenizer has {len(tokenizer)} tokens but the model's vocab_size is {config.vocab_size}")
  return config, params, tokenizer
