"""Which decisions has a checkpoint learnt? Teacher-forced accuracy on expert demonstrations, per command verb.

  python experiments/probe_demos.py --config=configs/alfworld.py --step=0 --games=40

Replays the config's expert (`sft.expert`) on the first `games` validation-panel tasks through the policy's own
step-wise prompts and prints, per kind of the expert's decision (an ALFWorld verb; WebShop's search / click[product] /
click[option] / click[buy now]; search-QA's search / answer), how often the checkpoint's argmax is the first token
and the whole reply, and their mean probabilities (JSON). Episodes the expert loses are not probed.
See `agentopd_jax/eval/probe.py`.

  python experiments/probe_demos.py --config=configs/alfworld.py --config.workdir=runs/opid_table/warm_start --opid

`--opid`: the same probe on the demonstrations in OPID's injection format (`sft.opid_targets`, `opid.*`;
agentopd_jax/methods/opid/demos.py) of the skill expert (`sft.skill_expert`), each step scored with its routed
skills and with its plain prompt: does the checkpoint read OPID's sections where the trajectory is the
demonstration's? Split by route (episode, step) and by the review (a whole, won episode; one cut short), and
"retry/whole": the hindsight retry's setting, each won episode replayed by the env's skill follower with its workflow
in every prompt (`sft.opid_retries`), where the workflow decides where to search; "retry/first": their first steps.
"""
import dataclasses
import json
import sys

from absl import app, flags
from ml_collections import config_flags

from agentopd_jax import host_memory
from agentopd_jax.eval.probe import demo_accuracy
from agentopd_jax.parallel.sharding import make_mesh
from agentopd_jax.methods.opid.demos import opid_demonstration_samples, retry_demonstration_samples
from agentopd_jax.methods.opid.injection import STEP_SECTION, Anchors
from agentopd_jax.rollout.demonstrations import demonstration_samples, play_demonstrations
from agentopd_jax.envs import registry
from agentopd_jax.storage.logs import configure_cli_logging
from agentopd_jax.training.assembly import chat_format, checkpoint_policy, demonstration_env, text_env_factory
from agentopd_jax.training.config import from_config_dict, stale_flags
from agentopd_jax.training.warm_start import retry_episodes

_CONFIG = config_flags.DEFINE_config_file("config", "configs/alfworld.py", "Run config.", lock_config=True)
_STEP = flags.DEFINE_string("step", "0", "checkpoint step of config.workdir: an integer, 'best' or 'latest'")
_GAMES = flags.DEFINE_integer("games", 40, "validation-panel games whose expert episodes are probed")
_OPID = flags.DEFINE_bool("opid", False, "probe OPID-format demonstrations with and without their skills")


def _pooled(decisions):
  """Reply accuracy and probability over every decision kind, weighted by their counts."""
  n = sum(d["n"] for d in decisions.values())
  return {"n": n, **{k: sum(d[k] * d["n"] for d in decisions.values()) / n if n else None
                     for k in ("reply_accuracy", "reply_probability")}}


def opid_probe(c, config, params, tokenizer, games):
  """{route/review: {"with_skills": pooled, "plain": pooled}} over the OPID-format demonstrations of `games`."""
  spec, chat = registry.get(c.env.name), chat_format(c, tokenizer)
  episodes = play_demonstrations(demonstration_env(c), text_env_factory(c), games,
                                 spec.expert_policy(c.env, c.sft.skill_expert or c.sft.expert), "step")
  cfg = from_config_dict(c)
  text_env = text_env_factory(c)()
  anchors = Anchors.of(text_env.prompt_anchors)
  samples, _ = opid_demonstration_samples(episodes, spec.hindsight(c.env), chat, text_env.demo_reply, cfg.opid,
                                          cfg.rollout.max_prompt_tokens, targets=cfg.sft.opid_targets,
                                          anchors=anchors)
  plain = {(e.traj_id, t): step.prompt for e in episodes for t, step in enumerate(e.steps)}
  parts = {}
  for route in ("episode", "step"):
    for review in ("whole", "cut"):
      picked = [x for x in samples if (f"**{STEP_SECTION[0]}**" in x.prompt_text) == (route == "step")
                and x.won == (review == "whole")]
      parts[f"{route}/{review}"] = (picked, [plain[(x.traj_id, x.step_index)] for x in picked])
  if spec.skill_follower is not None:  # the hindsight retry's setting (`sft.opid_retries`)
    replays, skills = retry_episodes(c, text_env_factory(c), episodes)
    picked = retry_demonstration_samples(replays, skills, chat, cfg.rollout.max_prompt_tokens, anchors)
    plain_replays = {(e.traj_id, t): step.prompt for e in replays for t, step in enumerate(e.steps)}
    parts["retry/whole"] = (picked, [plain_replays[(x.traj_id, x.step_index)] for x in picked])
    first = [x for x in picked if x.step_index == 0]  # where to go first: what a workflow's "take ... from" names
    parts["retry/first"] = (first, [plain_replays[(x.traj_id, 0)] for x in first])
  out = {}
  for name, (picked, bare_prompts) in parts.items():
    bare = [dataclasses.replace(x, prompt_ids=chat.prompt_ids(p)) for x, p in zip(picked, bare_prompts)]
    out[name] = {"with_skills": _pooled(demo_accuracy(config, params, picked, tokenizer)),
                 "plain": _pooled(demo_accuracy(config, params, bare, tokenizer))}
  return out


def main(argv):
  del argv
  host_memory.tune()  # before JAX starts its backend
  configure_cli_logging()
  c = _CONFIG.value
  mesh = make_mesh(tuple(c.mesh_shape))
  config, params, tokenizer, step = checkpoint_policy(c, _STEP.value, mesh)
  _, valid_games = registry.get(c.env.name).tasks(c.env)
  if _OPID.value:
    print(json.dumps({"workdir": c.workdir, "step": step, "expert": c.sft.skill_expert or c.sft.expert,
                      "opid": opid_probe(c, config, params, tokenizer, valid_games[:_GAMES.value])}, indent=2))
    return
  demos = demonstration_samples(demonstration_env(c), text_env_factory(c),
                                chat_format(c, tokenizer), valid_games[:_GAMES.value],
                                registry.get(c.env.name).expert_policy(c.env, c.sft.expert), layout="step")
  print(json.dumps({"workdir": c.workdir, "step": step, "expert": c.sft.expert,
                    "decisions": demo_accuracy(config, params, demos, tokenizer)}, indent=2))


if __name__ == "__main__":
  stale = stale_flags(sys.argv)  # a flag of the single-section layout: its key in the method groups
  if stale:
    sys.exit("\n".join(stale))
  app.run(main)
