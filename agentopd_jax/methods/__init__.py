"""The training methods, one package each: SDAR and its self-distillation baselines (`sdar`), OPID's hindsight skill
advantage (`opid`) and Agentic-OPD's checkpoint-teacher distillation (`agentic_opd`).

Importing this package registers every method's objectives in `objectives.registry` (each `losses` module calls
`register_objective` when imported), so code that looks an objective up by name imports it first.
"""
import agentopd_jax.methods.agentic_opd.losses  # noqa: F401  "agentic_opd"
import agentopd_jax.methods.sdar.losses  # noqa: F401  "sdar", "grpo_opsd", "opsd", "rlsd", "skill_sd", "skill_grpo"
