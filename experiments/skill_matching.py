"""How often SDAR's keyword matching (`km`: substrings of the chat-templated prompt) and its word-boundary variant
(`km_words`) give the teacher different skills, on the first-step prompts the student sees (docs/skills.md).

  python experiments/skill_matching.py                       # the CPU defaults of all three envs
  python experiments/skill_matching.py --variant=qwen2p5_3b  # the paper setting's full templates
  python experiments/skill_matching.py --envs=webshop --bank_dir=/path/to/SDAR/skills/webshop  # the authors' keywords
  python experiments/skill_matching.py --envs=search --set 'env.valid_sources=()'  # all seven test sources

Per env: every validation task and a seeded sample of training tasks, each reset in the env's registered worker and
rendered by its text env and the built-in tokenizer's chat template, as `training/trainer.py` builds them. Prints one
JSON line per env: how many prompts, how many got different skill sets, the (km -> km_words) task skills, each
retriever's skill counts, and the longest teacher prompt (privileged prefix + prompt) in tokens against the
config's `rollout.max_prompt_tokens` (SDAR left-truncates, so an over-long prompt loses its skills first).
"""
import argparse
import ast
import collections
import functools
import importlib.util
import json
import random
from pathlib import Path

from agentopd_jax.envs import registry
from agentopd_jax.envs.verl_agent.corpus import default_corpus
from agentopd_jax.models.tokenizer import apply_chat_template, builtin_tokenizer
from agentopd_jax.skills import SkillQuery, privileged_prefix, retriever_for
from agentopd_jax.training.assembly import text_env_factory

CONFIGS = {"alfworld": "alfworld", "webshop": "webshop", "search": "searchqa"}
ROOT = Path(__file__).resolve().parents[1]


def load_config(env: str, variant: str, overrides=()):
  """configs/<env>.py's variant with `field=python literal` overrides (e.g. `env.valid_sources=()`)."""
  path = ROOT / "configs" / f"{CONFIGS[env]}.py"
  module_spec = importlib.util.spec_from_file_location(f"{CONFIGS[env]}_config", path)
  module = importlib.util.module_from_spec(module_spec)
  module_spec.loader.exec_module(module)
  c = module.get_config(variant)
  for item in overrides:
    field, value = item.split("=", 1)
    section, name = field.rsplit(".", 1)
    setattr(functools.reduce(getattr, section.split("."), c), name, ast.literal_eval(value))
  return c


def tokenizer_of(c, spec):
  """The built-in tokenizer the run trains (with the env's corpus when the config asks): its chat template makes
  the prompt text, its BPE the token counts."""
  texts, words = spec.tokenizer_corpus(c.env) if c.builtin_tokenizer.env_corpus else ([], [])
  return builtin_tokenizer(default_corpus(), vocab_size=c.builtin_tokenizer.vocab_size, env_texts=texts,
                           whole_words=words)


def report(env: str, variant: str, train_sample: int, bank_dir: str = "", overrides=()) -> dict:
  c = load_config(env, variant, overrides)
  spec = registry.get(env)
  train, valid = spec.tasks(c.env)
  train = random.Random(0).sample(list(train), min(train_sample, len(train)))
  tokenizer = tokenizer_of(c, spec)
  worker, text_env = spec.worker(c.env, None)(), text_env_factory(c)()
  (km, query), (words, _) = (retriever_for(env, bank_dir, retrieval) for retrieval in ("km", "km_words"))
  out = {"env": env, "variant": variant, "overrides": list(overrides), "bank": km.bank.directory,
         "max_prompt_tokens": c.rollout.max_prompt_tokens}
  for split, tasks in (("valid", valid), ("train_sample", train)):
    pairs, longest = collections.Counter(), 0
    for i, task in enumerate(tasks):
      obs, infos = worker.reset(task)
      text_env.begin(obs, infos)
      ids = apply_chat_template(tokenizer, [{"role": "user", "content": text_env.step_prompt()}],
                                **c.model.chat_template_kwargs.to_dict())
      templated = tokenizer.decode(ids, skip_special_tokens=False)  # what the teacher's retrieval reads
      got = [r.retrieve(SkillQuery(prompt=templated, **query(task)), i) for r in (km, words)]
      pairs[" + ".join(got[0].skills[1:]) or "-", " + ".join(got[1].skills[1:]) or "-"] += 1
      teacher = privileged_prefix(got[0].text) + templated
      longest = max(longest, len(tokenizer.encode(teacher, add_special_tokens=False)))
    differ = sum(n for (a, b), n in pairs.items() if a != b)
    out[split] = {"prompts": len(tasks), "differ": differ, "differ_frac": round(differ / max(len(tasks), 1), 4),
                  "km_teacher_prompt_tokens_max": longest,
                  "same": {a: n for (a, b), n in pairs.most_common() if a == b},
                  "different": {f"{a} -> {b}": n for (a, b), n in pairs.most_common() if a != b}}
  out["hits"] = {"km": km.hits, "km_words": words.hits}
  return out


def main():
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--variant", default="cpu", help="config variant (cpu, qwen2p5_3b, ...)")
  parser.add_argument("--envs", default=",".join(CONFIGS), help="comma-separated env names")
  parser.add_argument("--train_sample", type=int, default=500, help="training tasks sampled per env")
  parser.add_argument("--bank_dir", default="", help="a bank folder instead of the shipped one (one env only), "
                      "e.g. the SDAR authors' skills/webshop")
  parser.add_argument("--set", action="append", default=[], metavar="FIELD=VALUE",
                      help="config override with a Python literal, e.g. --set 'env.valid_sources=()' (one env only)")
  args = parser.parse_args()
  envs = args.envs.split(",")
  if (args.bank_dir or args.set) and len(envs) != 1:
    raise ValueError("--bank_dir / --set: name the one env they are for with --envs")
  for env in envs:
    print(json.dumps(report(env, args.variant, args.train_sample, args.bank_dir, args.set)), flush=True)


if __name__ == "__main__":
  main()
