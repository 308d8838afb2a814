"""agentopd_jax: RL post-training and on-policy distillation for LLM agents, in JAX."""

__version__ = "0.1.0"
