"""SDAR's SkillBank and skill retrieval: the privileged text the self-distillation teacher reads (docs/skills.md).

  retriever, query_fields = retriever_for("alfworld", bank_dir="", retrieval="km")
  got = retriever.retrieve(SkillQuery(prompt=templated_prompt, **query_fields(task)), key=0)
  teacher_text = privileged_prefix(got.text) + templated_prompt

Each env ships a bank in `skills/banks/<env>/` (SDAR's file layout) and names it, with its matching rule and the
query fields of its tasks, in its registered spec (`EnvSpec.skills`).
"""
from __future__ import annotations

import os
from typing import Callable, Dict, Tuple

from agentopd_jax.skills.bank import GENERAL, SkillBank
from agentopd_jax.skills.retrieval import (
    RETRIEVERS,
    RULES,
    Retrieved,
    Retriever,
    SkillQuery,
    make_retriever,
    privileged_prefix,
)

__all__ = ["GENERAL", "RETRIEVERS", "RULES", "Retrieved", "Retriever", "SkillBank", "SkillQuery", "make_retriever",
           "privileged_prefix", "retriever_for"]


def retriever_for(env_name: str, bank_dir: str = "", retrieval: str = "km", seed: int = 0, ucb_c: float = 1.0
                  ) -> Tuple[Retriever, Callable[[object], Dict[str, str]]]:
  """(retriever over `bank_dir`, or the env's shipped bank when "", with the env's rule; task -> its SkillQuery
  fields other than the prompt)."""
  from agentopd_jax.envs import registry

  spec = registry.get(env_name)
  if spec.skills is None:
    raise ValueError(f"env {env_name!r} has no skill bank (its EnvSpec.skills is None); SDAR needs one")
  if bank_dir and not os.path.isdir(os.path.expanduser(bank_dir)):
    raise ValueError(f"skills.bank_dir: no such folder {bank_dir}")
  bank = SkillBank.load(bank_dir or spec.skills.bank)
  return make_retriever(retrieval, bank, spec.skills.rule, seed, ucb_c), spec.skills.query
