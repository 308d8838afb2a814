"""The training methods, each in one place, all run by the one loop of `training/trainer.py` through the hooks of
`methods.base.Method`: GRPO (`grpo`, the backbone every method shares), GiGPO's two-level advantage (`gigpo`), Skill-GRPO (`skill_grpo`), SDAR and its
self-distillation baselines (`sdar`), OPID's hindsight skill advantage (`opid`), Agentic-OPD's checkpoint-teacher
distillation (`agentic_opd`) and GRPO with a KL pull toward an earlier run's best checkpoint (`kl_to_best`).

`METHODS` holds every method by the name the run config's `method` string gives it: the primary methods, each with
its objective (loss registry key), config group and preset, and the add-ons (OPID). Importing this package registers
every method's objectives in `objectives.registry` (each `losses` module calls `register_objective` when imported),
so code that looks an objective up by name imports it first.
"""
from agentopd_jax.methods.agentic_opd.method import AgenticOpd
from agentopd_jax.methods.gigpo import Gigpo
from agentopd_jax.methods.grpo import Grpo
from agentopd_jax.methods.kl_to_best import KlToBest  # also registers "kl_to_best"
from agentopd_jax.methods.opid.method import Opid
from agentopd_jax.methods.sdar.method import GrpoOpsd, GrpoOpsdRkl, Opsd, Rlsd, Sdar, SkillSd
from agentopd_jax.methods.skill_grpo import SkillGrpo
import agentopd_jax.methods.agentic_opd.losses  # noqa: F401  "agentic_opd"
import agentopd_jax.methods.sdar.losses  # noqa: F401  "sdar", "grpo_opsd", "grpo_opsd_rkl", "opsd", "rlsd", "skill_sd"

# Every method by the name a run config's `method` string gives it.
METHODS = {m.name: m for m in (Grpo, Gigpo, SkillGrpo, Sdar, GrpoOpsd, GrpoOpsdRkl, Opsd, Rlsd, SkillSd, Opid, AgenticOpd,
                               KlToBest)}
