"""Evaluate a checkpoint of a run, or a Hugging Face folder, on the validation panel; writes JSON + markdown.

  python experiments/evaluate.py --config=configs/alfworld.py --step=best          # a checkpoint of config.workdir
  python experiments/evaluate.py --config=configs/alfworld.py --step=latest --attempts=4 --ks=1,4
  python experiments/evaluate.py --config=configs/alfworld.py --hf_path=/models/Qwen2.5-3B-Instruct
  python experiments/evaluate.py --config=configs/webshop.py --step=0 --traces   # + every episode's replies
  python experiments/evaluate.py --config=configs/alfworld.py --step=0 --skill_prompt=raw   # skills in context
  python experiments/evaluate.py --config=configs/alfworld.py --step=0 --opid_hindsight   # reads OPID's skills?
  python experiments/evaluate.py --config=configs/alfworld.py --step=latest --panel_half=report --attempts=16

Reports success overall and per group (the env's report columns: ALFWorld's task types, search-QA's data sources),
mean reward, valid-action ratio, episode length and pass@k (k <= the attempts per problem), using the config's
validation sampling (temperature) on its fixed panel. `--traces` also writes `traces.jsonl`: per episode its problem,
outcome, env infos and each step's reply. `--skill_prompt` is the
Skill-Prompt evaluation: every prompt carries the skills retrieved from the env's bank (`skills.bank_dir`,
`skills.retrieval`), "raw" before the chat template as SDAR's privileged teacher reads them, "user" inside the user
message as Skill-GRPO's student does, its prompts whole as its preset keeps them (`skill_grpo.keep_prompts_whole`).
`--opid_hindsight` plays the panel again with the oracle analyzer's episode skill of each first play spliced in as
OPID injects it, and reports the paired difference (`agentopd_jax/methods/opid/retry.py`; the report's
`opid_hindsight` entry, the first play being the plain one).
`--panel_half` plays one half of the panel as Agentic-OPD's held-out split cuts it (`agentic_opd.selection_panel`):
"report", the problems no teacher choice has seen, or "selection".
"""
import json
import os
import sys

from absl import app, flags
from ml_collections import config_flags

from agentopd_jax import host_memory
from agentopd_jax.eval.report import evaluation_summary, write_report
from agentopd_jax.eval.validate import validate
from agentopd_jax.parallel.sharding import make_mesh
from agentopd_jax.envs import registry
from agentopd_jax.methods.agentic_opd.pool import split_panel
from agentopd_jax.methods.opid.injection import Anchors
from agentopd_jax.methods.opid.oracle import OracleAnalyzer
from agentopd_jax.methods.opid.retry import hindsight_skills, retry_context, retry_summary
from agentopd_jax.methods.skill_grpo import keep_prompts_whole
from agentopd_jax.skills.context import SkillContext
from agentopd_jax.storage.logs import configure_cli_logging
from agentopd_jax.training.assembly import (
  VALIDATION_STREAM,
  checkpoint_policy,
  model_and_tokenizer,
  rollout_engine,
  sampling,
  validation_key,
  validation_panel,
)
from agentopd_jax.training.config import from_config_dict, stale_flags

_CONFIG = config_flags.DEFINE_config_file("config", "configs/alfworld.py", "Run config.", lock_config=True)
_STEP = flags.DEFINE_string("step", "best", "checkpoint step of config.workdir: an integer, 'best' or 'latest'")
_HF_PATH = flags.DEFINE_string("hf_path", "", "evaluate this HF folder instead of a checkpoint")
_ATTEMPTS = flags.DEFINE_integer("attempts", 0, "episodes per panel problem (0: config.validation.attempts)")
_KS = flags.DEFINE_list("ks", ["1"], "pass@k values to report")
_OUT = flags.DEFINE_string("out", "", "report folder (default: <workdir>/eval)")
_SKILL_PROMPT = flags.DEFINE_enum("skill_prompt", "", ["", "raw", "user"],
                                  "put retrieved skills in every prompt: 'raw' (SDAR's teacher) or 'user' (Skill-GRPO)")
_OPID = flags.DEFINE_bool("opid_hindsight", False,
                          "replay the panel with the oracle's OPID episode skill of each first play in its prompts")
_HALF = flags.DEFINE_enum("panel_half", "", ["", "selection", "report"],
                           "play one half of the panel as agentic_opd's held-out split cuts it ('': all of it)")
_TRACES = flags.DEFINE_bool("traces", False, "also write traces.jsonl (each episode's replies) to the report folder")


def _params(c, mesh):
  """(model config, params, tokenizer, label) of the evaluated policy."""
  if _HF_PATH.value:
    with c.unlocked():
      c.model.path = _HF_PATH.value
    config, params, tokenizer = model_and_tokenizer(c, c.seed, mesh)
    return config, params, tokenizer, _HF_PATH.value
  config, params, tokenizer, step = checkpoint_policy(c, _STEP.value, mesh)
  return config, params, tokenizer, f"{c.workdir} step {step}"


def opid_retry(c, engine, params, panel, attempts, first, validation_sampling):
  """The hindsight retry's summary (`methods.opid.retry`): the panel replayed with the same random numbers."""
  tasks = [p for p in panel for _ in range(attempts)]
  analyzer = OracleAnalyzer(c.env.name, c.env, c.opid.max_step_skills)
  skills = hindsight_skills(first, tasks, analyzer, engine.text_env_factory().project)
  second = []
  validate(engine, params, panel, attempts, validation_key(c), validation_sampling, second,
           context=retry_context(skills, Anchors.of(engine.text_env_factory().prompt_anchors)),
           group_of=registry.get(c.env.name).group_of)
  return retry_summary(first, second, skills)


def main(argv):
  del argv
  host_memory.tune()  # before JAX starts its backend
  configure_cli_logging()
  c = _CONFIG.value
  if _SKILL_PROMPT.value == "user":  # Skill-GRPO's student prompts
    keep_prompts_whole(c)
  mesh = make_mesh(tuple(c.mesh_shape))
  config, params, tokenizer, label = _params(c, mesh)
  attempts = _ATTEMPTS.value or c.validation.attempts
  spec = registry.get(c.env.name)
  _, valid_games = spec.tasks(c.env)
  panel = validation_panel(valid_games, c.validation.num_tasks, c.env.name)
  if _HALF.value:
    groups = {str(task): spec.group_of(task) for task in panel}  # the trainer's panel_groups
    halves = dict(zip(("selection", "report"), split_panel(list(groups), groups.get)))
    panel = [task for task in panel if str(task) in halves[_HALF.value]]
    label += f", {_HALF.value} half of the panel"
  engine = rollout_engine(c, config, tokenizer, mesh, len(panel) * attempts)
  if _OPID.value and _SKILL_PROMPT.value:
    sys.exit("--opid_hindsight and --skill_prompt are two evaluations: pass one of them")
  traces = [] if _TRACES.value or _OPID.value else None
  context = None
  if _SKILL_PROMPT.value:
    skills = SkillContext(c.env.name, c.skills.bank_dir, c.skills.retrieval, c.seed, c.skills.ucb_c)
    context, _ = skills.prompt_context([p for p in panel for _ in range(attempts)], VALIDATION_STREAM,
                                       placement=_SKILL_PROMPT.value)
    label += (f" with skills ({_SKILL_PROMPT.value}, {c.skills.retrieval}), prompts up to "
              f"{c.rollout.max_prompt_tokens} tokens")
  try:
    validation_sampling = sampling(from_config_dict(c)).validation
    records, outcomes, _ = validate(engine, params, panel, attempts, validation_key(c), validation_sampling,
                                    traces, context=context, group_of=spec.group_of)
    if _OPID.value:
      retry = opid_retry(c, engine, params, panel, attempts, traces, validation_sampling)
  finally:
    engine.env.close()
  ks = [int(k) for k in _KS.value if int(k) <= attempts]
  summary = evaluation_summary(records, spec.report.columns, outcomes, ks=ks)
  summary["evaluated"] = label
  summary["env"] = c.env.name
  if _OPID.value:
    summary["opid_hindsight"] = retry
  out = _OUT.value or os.path.join(c.workdir, "eval")
  json_path, md_path = write_report(summary, out, title=f"{c.env.name} evaluation: {label}")
  if _TRACES.value:
    with open(os.path.join(out, "traces.jsonl"), "w") as f:
      f.writelines(json.dumps(t) + "\n" for t in traces)
  line = {"success_rate": summary["success_rate"], "json": json_path, "markdown": md_path}
  if _OPID.value:
    line["opid_hindsight"] = {k: retry[k] for k in ("success_without", "success_with", "paired_difference")}
  print(json.dumps(line))


if __name__ == "__main__":
  stale = stale_flags(sys.argv)  # a flag of the single-section layout: its key in the method groups
  if stale:
    sys.exit("\n".join(stale))
  app.run(main)
