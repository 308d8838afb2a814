"""Sampling from a model with the KV-cache sampler: `python experiments/generate.py --config=configs/sample.py`.

Defaults run anywhere with no download: the tiny preset (random weights) and the built-in tokenizer.
Point `--config.model.path=/path/to/hf_folder` at a local Qwen2.5/Qwen3/Llama checkpoint to use real weights.
"""
import ml_collections


def get_config():
  c = ml_collections.ConfigDict()
  c.seed = 0
  c.model = ml_collections.ConfigDict()
  c.model.preset = "tiny"          # used when model.path is empty (random weights)
  c.model.path = ""                # local HF folder: config.json + *.safetensors (+ tokenizer files)
  c.model.param_dtype = ""         # "" keeps the checkpoint's dtype; or float32 / bfloat16
  c.tokenizer_path = ""            # "" -> model.path if it has a tokenizer, else the built-in tokenizer
  c.mesh_shape = (-1, 1, 1)        # (data, fsdp, tensor)
  c.prompts = ("You are in the middle of a room. Your task is to: put a clean apple in fridge.",)
  c.system = ""
  c.turns = 1                      # >1: each later turn appends `followup` as a user message (cache continuation)
  c.followup = "Continue."
  c.cache_size = 1024
  c.sampling = ml_collections.ConfigDict()
  c.sampling.max_new_tokens = 64
  c.sampling.temperature = 1.0
  c.sampling.top_k = 0
  c.sampling.top_p = 1.0
  c.sampling.stop_strings = ("</action>",)
  return c
