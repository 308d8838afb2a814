"""Teacher pools for Agentic-OPD: which frozen checkpoint the student distils from next (see `hcn`'s docstring)."""
from agentopd_jax.teachers.hcn import (SCHEDULERS, STRATEGY_GLOBAL, STRATEGY_V3, GlobalWeightHCNScheduler,
                                       HCNScheduler, RandomScheduler, RoundRobinScheduler, Scheduler, Selection,
                                       StaticBestScheduler, Teacher, dataset_of, load_state, make_scheduler,
                                       prune_dominated, save_state)

__all__ = [
    "SCHEDULERS", "STRATEGY_GLOBAL", "STRATEGY_V3", "GlobalWeightHCNScheduler", "HCNScheduler", "RandomScheduler",
    "RoundRobinScheduler", "Scheduler", "Selection", "StaticBestScheduler", "Teacher", "dataset_of", "load_state",
    "make_scheduler", "prune_dominated", "save_state",
]
