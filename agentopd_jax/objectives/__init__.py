"""Advantage estimators, per-token loss terms and the objective registry (see the submodules' docstrings): the math
the methods share. The registry holds "grpo" and "sft"; each method's objectives register when `agentopd_jax.methods`
is imported."""
from agentopd_jax.objectives.advantages import (ADVANTAGE_ESTIMATORS, GRPO_MODES, broadcast_to_tokens,
                                                get_advantage_estimator, grpo_advantages, informative_groups,
                                                step_scores)
from agentopd_jax.objectives.losses import (AGG_MODES, KL_KINDS, Normalizer, PolicyLossTerms, agg_loss, kl_penalty,
                                            normalizer_for, ppo_dual_clip_loss, sft_nll)
from agentopd_jax.objectives.registry import (OBJECTIVES, LossCore, LossParams, Objective, get_objective,
                                              grpo_branches, grpo_loss, register_objective, sft_branches, sft_loss)

__all__ = [
    "ADVANTAGE_ESTIMATORS", "GRPO_MODES", "broadcast_to_tokens", "get_advantage_estimator", "grpo_advantages",
    "informative_groups", "step_scores", "AGG_MODES", "KL_KINDS", "Normalizer", "PolicyLossTerms", "agg_loss", "kl_penalty",
    "normalizer_for", "ppo_dual_clip_loss", "sft_nll", "OBJECTIVES", "LossCore", "LossParams", "Objective",
    "get_objective", "grpo_branches", "grpo_loss", "register_objective", "sft_branches", "sft_loss",
]
