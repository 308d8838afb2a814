"""Advantage estimators, per-token loss terms and the objective registry (see the submodules' docstrings).

Importing the package registers every objective (`distill` registers Agentic-OPD's, `self_distill` SDAR and its
baselines)."""
from agentopd_jax.objectives.advantages import (ADVANTAGE_ESTIMATORS, GRPO_MODES, broadcast_to_tokens,
                                                get_advantage_estimator, grpo_advantages, informative_groups,
                                                step_scores)
from agentopd_jax.objectives.distill import (LAD_MODES, agentic_opd_branches, agentic_opd_check, agentic_opd_loss,
                                             lad_mask, opd_policy_loss, problem_success_rates,
                                             sampled_token_opd_advantage, topk_reverse_kl)
from agentopd_jax.objectives.losses import (AGG_MODES, KL_KINDS, Normalizer, PolicyLossTerms, agg_loss, kl_penalty,
                                            normalizer_for, ppo_dual_clip_loss, sft_nll)
from agentopd_jax.objectives.registry import (LAD_OTHER, OBJECTIVES, OPD_VARIANTS, SDAR_DIVERGENCES, SDAR_GATES,
                                              LossConfig, Objective, get_objective, grpo_branches, grpo_loss,
                                              register_objective, sft_branches, sft_loss)
from agentopd_jax.objectives.self_distill import (grpo_opsd_loss, opsd_loss, require_teacher_signal, rlsd_advantages,
                                                  rlsd_lambda, rlsd_prepare, sampled_reverse_kl, sdar_gate, sdar_loss,
                                                  sdar_teacher_top_k, skill_sd_loss, skill_sd_per_token,
                                                  topk_forward_kl, topk_jsd)

__all__ = [
    "ADVANTAGE_ESTIMATORS", "GRPO_MODES", "broadcast_to_tokens", "get_advantage_estimator", "grpo_advantages",
    "informative_groups", "step_scores", "AGG_MODES", "KL_KINDS", "Normalizer", "PolicyLossTerms", "agg_loss", "kl_penalty",
    "normalizer_for", "ppo_dual_clip_loss", "sft_nll", "OBJECTIVES", "LossConfig", "Objective", "get_objective",
    "grpo_branches", "grpo_loss", "register_objective", "sft_branches", "sft_loss",
    "LAD_MODES", "LAD_OTHER", "OPD_VARIANTS", "agentic_opd_branches", "agentic_opd_check", "agentic_opd_loss",
    "lad_mask", "opd_policy_loss", "problem_success_rates", "sampled_token_opd_advantage",
    "topk_reverse_kl", "SDAR_DIVERGENCES", "SDAR_GATES", "grpo_opsd_loss", "opsd_loss", "require_teacher_signal",
    "rlsd_advantages", "rlsd_lambda", "rlsd_prepare", "sampled_reverse_kl", "sdar_gate", "sdar_loss",
    "sdar_teacher_top_k", "skill_sd_loss", "skill_sd_per_token", "topk_forward_kl", "topk_jsd",
]
