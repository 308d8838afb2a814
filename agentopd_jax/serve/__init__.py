"""An OpenAI-compatible chat server over any model this project loads (`python -m agentopd_jax.serve`).

Why our own: OPID's analyzer LLM talks to an "openai" backend through the official client, and serving it from our
own loaders and KV-cache sampler means any local Hugging Face folder or any checkpoint of our training runs can be
that analyzer, with the same tokenizer, chat template and stop tokens it was trained and validated with, and with
concurrent requests batched into few sampler calls. Modules:

  loading   `--model` (a HF folder or a run folder + step) -> `ServedModel`
  protocol  OpenAI request validation (errors name the field) and response JSON
  batcher   the request queue and the one worker thread that runs batched `Sampler.generate` calls
  server    `Server(...).start()` / `.stop()`: the HTTP endpoints over the batcher
"""
from agentopd_jax.serve.loading import ServedModel, load_served_model
from agentopd_jax.serve.server import Server

__all__ = ["Server", "ServedModel", "load_served_model"]
