"""SDAR: GRPO plus a gated self-distillation term from the rollout-time policy reading the retrieved skills, and its
baselines (GRPO+OPSD, OPSD, RLSD, Skill-SD, Skill-GRPO)."""
