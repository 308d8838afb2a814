"""OPID: an advantage add-on that scores the policy's own responses with hindsight skills, written by an analyzer
from its finished trajectories, in context, and adds the log-prob shift to GRPO's episode advantage."""
