#!/usr/bin/env python
"""Rollout throughput of the step layout, lock-step against overlapped env stepping (`rollout.overlap_env`), with
and without env latency, in one process.

The CPU default's shapes: the tiny model (random weights, so episodes run to `--max_steps`), the built-in tokenizer,
generated ALFWorld games on the fast engine in `--workers` worker processes, `--tasks` tasks x `--group` rollouts,
replies of up to 24 tokens. Env latency: each env step sleeps `--delay_ms` in its worker first (the stand-in for a
retrieval server or a rendered page; ALFWorld's own step takes well under a millisecond). Per arm, after an untimed
rollout that compiles: the median over `--repeats` rollouts of wall seconds, episodes/s, generated tokens/s, and the
rollout's own split (`generate_s`, and `env_s`: the time it waited on env workers). Arms of one delay must play the
same samples (`same_samples`): overlapping changes when envs step, not what is played.

Beside it, the shared group prefill (`rollout.share_prefill`, the sampler's `prefix_keys`): one group of `--group`
rows whose prompts are one `--prompt`-token prompt, one new token each, prefilled row by row against the head once
(best of `--repeats` after a compiling call), with the first token's log-probs of both (equal to rounding).

  python benchmarks/bench_rollout.py --out /tmp/rollout.json
"""
from __future__ import annotations

import argparse
import hashlib
import statistics
import tempfile
import time

from common import emit_json


class SlowAlfworld:
  """ALFWorld's fast engine whose every step first sleeps `delay_ms` (picklable: the workers build it)."""

  def __init__(self, delay_ms: float):
    from agentopd_jax.envs.alfworld.env import AlfworldEnv

    self.env, self.delay = AlfworldEnv("fast"), delay_ms / 1e3

  def reset(self, task):
    return self.env.reset(task)

  def step(self, action):
    time.sleep(self.delay)
    return self.env.step(action)

  def close(self):
    getattr(self.env, "close", lambda: None)()


def main():
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--tasks", type=int, default=4)
  p.add_argument("--group", type=int, default=8)
  p.add_argument("--workers", type=int, default=4)
  p.add_argument("--max_steps", type=int, default=10)
  p.add_argument("--delays_ms", default="0,50")
  p.add_argument("--repeats", type=int, default=2)
  p.add_argument("--prompt", type=int, default=512)
  p.add_argument("--out", default=None)
  args = p.parse_args()

  import functools

  import jax

  from agentopd_jax.envs.alfworld import data, generator
  from agentopd_jax.envs.alfworld.text import AlfworldText
  from agentopd_jax.envs.vector import VectorEnv, group_tasks
  from agentopd_jax.envs.verl_agent.corpus import default_corpus
  from agentopd_jax.models import config as model_config, transformer
  from agentopd_jax.models.tokenizer import builtin_tokenizer
  from agentopd_jax.rollout.engine import RolloutConfig, RolloutEngine
  from agentopd_jax.sampling.sampler import Sampler, SamplingParams

  root = tempfile.mkdtemp()
  generator.generate(root, sizes={"train": args.tasks})
  games = data.game_files("train", root)[:args.tasks]
  tasks, groups = group_tasks(games, args.group)
  tokenizer = builtin_tokenizer(default_corpus())
  config = model_config.preset("tiny")
  params = transformer.init_params(config, jax.random.key(0))
  sampler = Sampler(config, tokenizer)
  out = {"what": __doc__.split("\n\n")[0], "episodes": len(tasks), "workers": args.workers,
         "max_steps": args.max_steps, "delays": {}}
  for delay in (float(d) for d in args.delays_ms.split(",")):
    arms = {}
    with VectorEnv(functools.partial(SlowAlfworld, delay), num_workers=args.workers, num_envs=len(tasks)) as venv:
      for name, overlap in (("lock_step", False), ("overlap_env", True)):
        cfg = RolloutConfig(layout="step", max_steps=args.max_steps, max_prompt_tokens=1024, max_response_tokens=24,
                            overlap_env=overlap)
        engine = RolloutEngine(sampler, tokenizer, venv, AlfworldText, cfg)
        play = lambda: engine.run(params, tasks, tasks, groups, jax.random.key(1),  # noqa: E731
                                  SamplingParams(temperature=1.0))
        play()  # compiles
        runs = []
        for _ in range(args.repeats):
          t0 = time.perf_counter()
          rollout = play()
          runs.append((time.perf_counter() - t0, rollout))
        wall = statistics.median(w for w, _ in runs)
        rollout = runs[0][1]
        digest = hashlib.sha256(repr([(s.traj_id, s.step_index, s.prompt_ids, s.completion_ids)
                                      for s in sorted(rollout.samples, key=lambda s: (s.traj_id, s.step_index))])
                                .encode()).hexdigest()[:16]
        arms[name] = {"wall_s": round(wall, 3), "episodes_per_s": round(len(tasks) / wall, 2),
                      "generated_tokens_per_s": round(rollout.stats["generated_tokens"] / wall, 1),
                      "generate_s": round(statistics.median(r.stats["generate_s"] for _, r in runs), 3),
                      "env_wait_s": round(statistics.median(r.stats["env_s"] for _, r in runs), 3),
                      "samples": len(rollout.samples), "digest": digest}
    arms["same_samples"] = arms["lock_step"]["digest"] == arms["overlap_env"]["digest"]
    arms["speedup"] = round(arms["lock_step"]["wall_s"] / arms["overlap_env"]["wall_s"], 3)
    out["delays"][f"{delay:g}ms"] = arms
  out["group_prefill"] = group_prefill(sampler, config, params, args.group, args.prompt, args.repeats)
  emit_json(out, args.out)


def group_prefill(sampler, config, params, group: int, prompt: int, repeats: int) -> dict:
  import jax
  import numpy as np
  from common import best_time

  from agentopd_jax.sampling.sampler import SamplingParams

  prompts = [np.random.default_rng(0).integers(5, config.vocab_size, prompt).tolist()] * group
  greedy = SamplingParams(max_new_tokens=1, temperature=0.0)
  calls = {"whole_rows": None, "shared_head": [0] * group}
  out, logprobs = {}, {}
  for name, keys in calls.items():
    run = lambda keys=keys: sampler.generate(params, prompts, jax.random.key(0), greedy, prefix_keys=keys)  # noqa: E731
    out[f"{name}_s"] = round(best_time(run, repeats), 4)
    result = run()
    logprobs[name] = np.asarray(result.policy_logprobs)[:, 0]
    out[f"{name}_prefilled_tokens"] = group * prompt - int(result.prefill_saved)
  out["speedup"] = round(out["whole_rows_s"] / out["shared_head_s"], 2)
  out["max_logprob_diff"] = float(np.abs(logprobs["whole_rows"] - logprobs["shared_head"]).max())
  return {"group": group, "prompt_tokens": prompt, **out}


if __name__ == "__main__":
  main()
