#!/usr/bin/env python
"""Rollout throughput of the step layout in one process: lock-step, overlapped env stepping (`rollout.overlap_env`)
and continuous refill (`rollout.refill`), with and without env latency.

The CPU default's shapes: the tiny model (random weights), the built-in tokenizer, generated ALFWorld games on the
fast engine in `--workers` worker processes, `--tasks` tasks x `--group` rollouts, replies of up to 24 tokens. A
random policy never wins, so each task ends after a length of its own (drawn once per task, 1 to `--max_steps`
steps), the stand-in for a trained policy's episodes that end at different turns. Env latency: each env step sleeps
`--delay_ms` in its worker first (the stand-in for a retrieval server or a rendered page; ALFWorld's own step takes
well under a millisecond). Arms:

  * lock_step: every episode in its own slot, one lock-step call (the default); overlap_env: the same with
    overlapped env stepping.
  * waves / refill: half as many slots as episodes (`--slots`), the batch played as two lock-step calls of half the
    groups each, or as one refill call (max_staleness 0): the same episodes either way.
  * refill_stale: the same slots with max_staleness 1, a batch closing at `--tasks` complete groups; consecutive
    calls (unchanged weights), timed after the first.

Per arm, after an untimed call that compiles: the median over `--repeats` of wall seconds, episodes/s, generated
tokens/s, the rollout's own split (`generate_s`; `env_wait_s`: the time it waited on env workers), and the decode
waste (`decode_row_steps` - `generated_tokens`: tokens decoded for padding rows and for rows whose reply had ended,
and `idle_slot_turns`: slot-turns in which a slot played nothing). Arms that must play the same samples carry the
same `digest`.

The same arms on search-QA (`search`): the bundled questions, the oracle searching whatever the reply says (a random
policy never searches), against a retrieval server in this process's threads that answers each request
`--search_delay_ms` late.

Beside it, the shared group prefill (`rollout.share_prefill`, the sampler's `prefix_keys`): one group of `--group`
rows whose prompts are one `--prompt`-token prompt, one new token each, prefilled row by row against the head once
(best of `--repeats` after a compiling call), with the first token's log-probs of both (equal to rounding).

  python benchmarks/bench_rollout.py --out /tmp/rollout.json
"""
from __future__ import annotations

import argparse
import functools
import hashlib
import statistics
import tempfile
import time

from common import emit_json


class PacedAlfworld:
  """ALFWorld's fast engine on tasks (game file, length): every step first sleeps `delay_ms`, and the episode ends
  after `length` steps (picklable: the workers build it)."""

  def __init__(self, delay_ms: float):
    from agentopd_jax.envs.alfworld.env import AlfworldEnv

    self.env, self.delay = AlfworldEnv("fast"), delay_ms / 1e3

  def reset(self, task):
    game, self.length = task
    self.steps = 0
    return self.env.reset(game)

  def step(self, action):
    time.sleep(self.delay)
    obs, score, done, info = self.env.step(action)
    self.steps += 1
    return obs, score, done or self.steps >= self.length, info

  def close(self):
    getattr(self.env, "close", lambda: None)()


class OracleSearch:
  """Search-QA's env against a retrieval server (`search_url`), acting as the oracle searcher whatever the reply
  says: a random policy never searches, and the oracle's searches are what put the server's latency in the episode
  (1 to 3 searches, then the answer). Picklable: the workers build it."""

  def __init__(self, search_url: str):
    from agentopd_jax.envs.search.env import SearchEnv

    self.env = SearchEnv(search_url=search_url)

  def reset(self, task):
    from agentopd_jax.envs.search.oracle import Oracle

    self.observation, info = self.env.reset(task)
    self.oracle = Oracle(task, max_searches=self.env.max_turns - 1)
    return self.observation, info

  def step(self, action):
    self.observation, score, done, info = self.env.step(self.oracle.act(self.observation))
    return self.observation, score, done, info

  def close(self):
    getattr(self.env, "close", lambda: None)()


class SlowRetriever:
  """A retriever that answers each request `delay_ms` late (in the server's request thread)."""

  def __init__(self, retriever, delay_ms: float):
    self.retriever, self.delay = retriever, delay_ms / 1e3

  def retrieve(self, *args, **kwargs):
    time.sleep(self.delay)
    return self.retriever.retrieve(*args, **kwargs)

  def __len__(self):  # the server's /health reports the documents
    return len(self.retriever)


def main():
  p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument("--tasks", type=int, default=4)
  p.add_argument("--group", type=int, default=8)
  p.add_argument("--slots", type=int, default=0, help="refill and waves' env slots (0: half the episodes)")
  p.add_argument("--workers", type=int, default=4)
  p.add_argument("--max_steps", type=int, default=10)
  p.add_argument("--delays_ms", default="0,50")
  p.add_argument("--repeats", type=int, default=2)
  p.add_argument("--prompt", type=int, default=512)
  p.add_argument("--search_delay_ms", type=float, default=50.0, help="search-QA: retrieval server latency (-1: skip)")
  p.add_argument("--out", default=None)
  args = p.parse_args()

  import jax

  from agentopd_jax.envs.verl_agent.corpus import default_corpus
  from agentopd_jax.models import config as model_config, transformer
  from agentopd_jax.models.tokenizer import builtin_tokenizer

  tokenizer = builtin_tokenizer(default_corpus())
  config = model_config.preset("tiny")
  params = transformer.init_params(config, jax.random.key(0))
  out = rollout_benchmark(config, params, tokenizer, args.tasks, args.group, args.slots, args.workers,
                          args.max_steps, [float(d) for d in args.delays_ms.split(",")], args.repeats)
  if args.search_delay_ms >= 0:
    out["search"] = search_benchmark(out["sampler"], params, tokenizer, args.tasks, args.group, args.slots,
                                     args.workers, args.search_delay_ms, args.repeats)
  out["group_prefill"] = group_prefill(out.pop("sampler"), config, params, args.group, args.prompt, args.repeats)
  emit_json(out, args.out)


def rollout_benchmark(config, params, tokenizer, tasks: int, group: int, slots: int, workers: int, max_steps: int,
                      delays_ms, repeats: int) -> dict:
  """Every arm at every env delay (the module docstring); also returns the sampler it built, under "sampler"."""
  import numpy as np

  from agentopd_jax.envs.alfworld import data, generator
  from agentopd_jax.sampling.sampler import Sampler

  root = tempfile.mkdtemp()
  generator.generate(root, sizes={"train": tasks})
  lengths = np.random.default_rng(0).integers(1, max_steps + 1, tasks).tolist()
  games = [(g, n) for g, n in zip(data.game_files("train", root)[:tasks], lengths)]
  sampler = Sampler(config, tokenizer)
  episodes = tasks * group
  slots = slots or episodes // 2
  out = {"what": __doc__.split("\n\n")[0], "episodes": episodes, "slots": slots, "workers": workers,
         "max_steps": max_steps, "task_lengths": lengths, "delays": {}, "sampler": sampler}
  from agentopd_jax.envs.alfworld.text import AlfworldText

  for delay in delays_ms:
    out["delays"][f"{delay:g}ms"] = all_arms(sampler, tokenizer, params, games, group, workers, max_steps,
                                             functools.partial(PacedAlfworld, delay), AlfworldText, slots, repeats)
  return out


def search_benchmark(sampler, params, tokenizer, tasks: int, group: int, slots: int, workers: int, delay_ms: float,
                     repeats: int) -> dict:
  """The arms on search-QA's bundled questions against a retrieval server (in this process, its threads) answering
  `delay_ms` late, the oracle searching (`OracleSearch`); episodes of up to SearchEnv's 4 turns."""
  from agentopd_jax.envs.search import bundled_tasks
  from agentopd_jax.envs.search.server import load_retriever, serve
  from agentopd_jax.envs.search.text import SearchText

  questions = bundled_tasks("train", seed=0)[:tasks]
  slots = slots or tasks * group // 2
  with serve(mode="thread", retriever=SlowRetriever(load_retriever(None, 0, 3), delay_ms)) as url:
    arms = all_arms(sampler, tokenizer, params, questions, group, workers, 4, functools.partial(OracleSearch, url),
                    SearchText, slots, repeats)
  return {"what": search_benchmark.__doc__.split(";")[0], "server_delay_ms": delay_ms, "episodes": tasks * group,
          "slots": slots, **arms}


def all_arms(sampler, tokenizer, params, tasks, group: int, workers: int, max_steps: int, env_factory, text_env,
             slots: int, repeats: int) -> dict:
  """Every arm on `tasks` x `group` episodes, timed; whether the on-policy arms played the same samples."""
  episodes = len(tasks) * group
  if slots % group or not 0 < slots <= episodes:
    raise ValueError(f"slots: {slots} must be a multiple of the group size {group}, at most the {episodes} episodes")
  plays, envs = arms_of(sampler, tokenizer, params, tasks, group, workers, max_steps, env_factory, text_env, slots)
  try:
    arms = {name: measure(play, repeats, rows, episodes) for name, (play, rows) in plays.items()}
  finally:
    for env in envs:
      env.close()
  for arm in arms.values():
    arm["speedup_vs_lock_step"] = round(arms["lock_step"]["wall_s"] / arm["wall_s"], 3)
  on_policy = {arms[a]["digest"] for a in ("lock_step", "overlap_env", "waves", "refill")}
  return {**arms, "same_samples": len(on_policy) == 1}


def arms_of(sampler, tokenizer, params, games, group: int, workers: int, max_steps: int, env_factory, text_env,
            slots: int) -> dict:
  """({arm: (play() -> [rollouts of one batch], the rows a turn can play)}, the env workers to close)."""
  import dataclasses

  import jax

  from agentopd_jax.envs.vector import VectorEnv, group_tasks
  from agentopd_jax.rollout.engine import RolloutConfig, RolloutEngine
  from agentopd_jax.rollout.refill import RefillRollouts
  from agentopd_jax.sampling.sampler import SamplingParams

  cfg = RolloutConfig(layout="step", max_steps=max_steps, max_prompt_tokens=1024, max_response_tokens=24)
  sampling, key = SamplingParams(temperature=1.0), jax.random.key(1)
  tasks, groups = group_tasks(games, group)
  env = lambda n: VectorEnv(env_factory, num_workers=min(workers, n), num_envs=n)  # noqa: E731
  full, part = env(len(tasks)), env(slots)
  lock = RolloutEngine(sampler, tokenizer, full, text_env, cfg)
  overlap = RolloutEngine(sampler, tokenizer, full, text_env, dataclasses.replace(cfg, overlap_env=True))
  waves = RolloutEngine(sampler, tokenizer, part, text_env, cfg)
  refill_cfg = dataclasses.replace(cfg, refill=True, refill_slots=slots)
  refill = RolloutEngine(sampler, tokenizer, part, text_env, refill_cfg)
  stale_env = env(slots)
  stale = RolloutEngine(sampler, tokenizer, stale_env, text_env, dataclasses.replace(refill_cfg, max_staleness=1))
  per_wave = slots // group

  def play_waves():
    return [waves.run(params, tasks[i:i + slots], tasks[i:i + slots], groups[i:i + slots], key, sampling,
                      first_episode=i) for i in range(0, len(tasks), per_wave * group)]

  def refiller(engine, max_staleness):
    # On-policy: the same draw every call (the lock-step batch); stale: a new draw per call, as a run's iterations.
    draw = (lambda d: (games, jax.random.fold_in(key, d), 0)) if max_staleness else (lambda d: (games, key, 0))
    draws = RefillRollouts(engine, group, draw, max_staleness)
    version = iter(range(10 ** 6))
    return lambda: [draws.run(params, next(version), len(games), sampling)[0]]

  return {"lock_step": (lambda: [lock.run(params, tasks, tasks, groups, key, sampling)], len(tasks)),
          "overlap_env": (lambda: [overlap.run(params, tasks, tasks, groups, key, sampling)], len(tasks) // 2),
          "waves": (play_waves, slots), "refill": (refiller(refill, 0), slots),
          "refill_stale": (refiller(stale, 1), slots)}, (full, part, stale_env)


def measure(play, repeats: int, slots: int, episodes: int) -> dict:
  """One arm: an untimed call that compiles, then the median of `repeats` timed ones."""
  play()
  runs = []
  for _ in range(repeats):
    t0 = time.perf_counter()
    rollouts = play()
    runs.append((time.perf_counter() - t0, rollouts))
  wall = statistics.median(w for w, _ in runs)
  rollouts = runs[0][1]
  stats = lambda k: sum(r.stats[k] for r in rollouts)  # noqa: E731
  samples = [s for r in rollouts for s in r.samples]
  digest = hashlib.sha256(repr(sorted((s.problem_id, s.step_index, s.prompt_ids, s.completion_ids)
                                      for s in samples)).encode()).hexdigest()[:16]
  return {"wall_s": round(wall, 3), "episodes_per_s": round(episodes / wall, 2),
          "generated_tokens_per_s": round(stats("generated_tokens") / wall, 1),
          "generate_s": round(statistics.median(sum(r.stats["generate_s"] for r in rs) for _, rs in runs), 3),
          "env_wait_s": round(statistics.median(sum(r.stats["env_s"] for r in rs) for _, rs in runs), 3),
          "turns": int(sum(r.stats["generate_calls"] for r in rollouts)),
          "idle_slot_turns": int(sum(r.stats["generate_calls"] for r in rollouts) * slots - len(samples)),
          "wasted_decode_tokens": int(stats("decode_row_steps") - stats("generated_tokens")),
          "generated_tokens": int(stats("generated_tokens")), "samples": len(samples), "digest": digest,
          **({"stale_samples": int(stats("refill_stale_samples")),
              "dropped_episodes": int(stats("refill_dropped_episodes"))} if "refill_starts" in rollouts[0].stats
             else {})}


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
