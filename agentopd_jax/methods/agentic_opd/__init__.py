"""Agentic-OPD: on-policy distillation of the best checkpoint of a GRPO run from the run's other checkpoints, one
resident teacher at a time chosen by the HCN scheduler, with LAD routing of which rollouts to distil."""
