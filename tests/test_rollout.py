"""Rollout engine invariants in both layouts, on generated ALFWorld games with the tests' small random model.

What must hold for training to be correct: completion ids, masks and behaviour log-probs line up token for token;
the loss mask covers exactly the generated tokens (never an observation or prompt token); the behaviour log-probs
equal what the trainer's scorer computes for the same tokens; episode outcomes reach every sample of the episode.
"""
import dataclasses
import functools
import json
import os
import signal

import jax
import jax.numpy as jnp
import numpy as np
import pytest

pytest.importorskip("alfworld", reason="generating games needs the alfworld wheel's domain files ([envs] extra)")

from agentopd_jax.batching.collate import collate  # noqa: E402
from agentopd_jax.batching.prefixes import shared_prefixes  # noqa: E402
from agentopd_jax.envs.alfworld import data, generator  # noqa: E402
from agentopd_jax.envs.alfworld.env import AlfworldEnv  # noqa: E402
from agentopd_jax.envs.vector import VectorEnv, group_tasks  # noqa: E402
from agentopd_jax.envs.verl_agent.corpus import default_corpus  # noqa: E402
from agentopd_jax.models import config as model_config, transformer  # noqa: E402
from agentopd_jax.models.tokenizer import builtin_tokenizer, render_chat  # noqa: E402
from agentopd_jax.rollout.chat import ChatFormat  # noqa: E402
from agentopd_jax.rollout.demonstrations import demonstration_samples  # noqa: E402
from agentopd_jax.rollout.engine import RolloutConfig, RolloutEngine  # noqa: E402
from agentopd_jax.rollout.refill import RefillRollouts  # noqa: E402
from agentopd_jax.envs.alfworld.text import AlfworldText  # noqa: E402
from agentopd_jax.rollout.text_envs import make_text_env  # noqa: E402
from agentopd_jax.sampling.sampler import SHARE_WHEN_SAVED, Sampler, SamplingParams  # noqa: E402
from agentopd_jax.scoring.fused import ScoreConfig, make_score_fn  # noqa: E402
from conftest import TEST_MODEL  # noqa: E402

MAX_STEPS = 4


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
  root = str(tmp_path_factory.mktemp("alfworld"))
  generator.generate(root, sizes={"train": 6})
  games = data.game_files("train", root)[:3]
  tokenizer = builtin_tokenizer(default_corpus())
  config = model_config.preset(TEST_MODEL)
  params = transformer.init_params(config, jax.random.key(0))
  return games, tokenizer, config, params, Sampler(config, tokenizer)


def _walkthrough(game):
  with open(game) as f:
    return json.load(f)["walkthrough"]


class OracleText(AlfworldText):
  """Ignores the model's reply and plays the expert's next action: episodes are won, on a known schedule."""

  def begin(self, observation, infos):
    super().begin(observation, infos)
    self.plan = _walkthrough(infos["gamefile"])

  def project(self, response):
    return self.plan[len(self.memory)], 1


def _run(setup, layout, text_env, max_steps=MAX_STEPS, max_response_tokens=12, max_prompt_tokens=2048):
  games, tokenizer, config, params, sampler = setup
  tasks, groups = group_tasks(games, 2)
  cfg = RolloutConfig(layout=layout, max_steps=max_steps, max_prompt_tokens=max_prompt_tokens,
                      max_response_tokens=max_response_tokens, max_total_tokens=3072)
  with VectorEnv(functools.partial(AlfworldEnv, "fast"), num_workers=2, num_envs=len(tasks)) as venv:
    engine = RolloutEngine(sampler, tokenizer, venv, text_env, cfg)
    return engine.run(params, tasks, tasks, groups, jax.random.key(3), SamplingParams(temperature=1.0)), tasks


def _scored(setup, samples):
  _, _, config, params, _ = setup
  batch = collate(samples, [1.0] * len(samples), pad_to_multiple=32)
  scores = make_score_fn(config, ScoreConfig(reference=False, top_k=0, entropy=False))(
      params, None, None, jax.tree.map(jnp.asarray, batch.score_batch()))
  return batch, np.asarray(scores.policy_logprobs)


def test_over_long_prompts_keep_their_last_tokens_and_are_counted(setup):
  """A step prompt over `max_prompt_tokens` keeps its last tokens, and the rollout counts it (the trainer logs
  `rollout/prompt_truncations`)."""
  _, tokenizer, *_ = setup
  whole = functools.partial(AlfworldText, compact=True)
  limit = 300  # these games' compact prompts: about 240 to 300 tokens at the first turn, up to about 430 later
  rollout, _ = _run(setup, "step", whole, max_steps=3, max_response_tokens=8, max_prompt_tokens=limit)
  full = [ChatFormat(tokenizer).prompt_ids(s.prompt_text) for s in rollout.samples]
  over = sum(len(ids) > limit for ids in full)
  assert 0 < over < len(full)
  assert rollout.stats["prompt_truncations"] == over
  assert all(s.prompt_ids == ids[-limit:] for s, ids in zip(rollout.samples, full))


@pytest.mark.parametrize("layout", ["step", "trajectory"])
def test_masks_ids_and_logprobs_line_up(setup, layout):
  games, tokenizer, *_ = setup
  rollout, tasks = _run(setup, layout, functools.partial(AlfworldText, compact=True))
  samples = rollout.samples
  assert samples and len(rollout.episodes) == len(tasks)
  per_episode = {}
  for s in samples:
    assert len(s.completion_ids) == len(s.completion_mask) == len(s.behaviour_logprobs)
    assert s.completion_mask[0] == 1 and s.completion_mask[-1] == 1  # starts and ends with a generated token
    assert all(lp == 0.0 for lp, m in zip(s.behaviour_logprobs, s.completion_mask) if not m)
    assert s.problem_id == tasks[s.traj_id] and s.group_id == s.traj_id // 2
    per_episode.setdefault(s.traj_id, []).append(s)
  for ep in rollout.episodes:
    mine = per_episode[ep.traj_id]
    if layout == "step":
      assert [s.step_index for s in mine] == list(range(ep.length))
      assert all(s.prompt_ids == ChatFormat(tokenizer).prompt_ids(s.prompt_text) for s in mine)
    else:
      assert len(mine) == 1 and mine[0].step_index == -1
      runs = np.diff(np.concatenate([[0], mine[0].completion_mask, [0]]))
      assert (runs == 1).sum() == ep.length  # one generated block per env step
  # The work counters: every prompt or observation chunk prefilled (less what the shared heads of a group's prompts
  # saved where a call shares them: their tokens are prefilled once per group and turn), every generated token, and
  # per generate call the longest row's tokens (the decode loop's steps).
  def saved(prompts):
    which, heads = shared_prefixes(prompts)
    return sum(len(heads[w]) for w in which if w >= 0) - sum(map(len, heads))

  shared = 0
  for turn in sorted({s.step_index for s in samples}):
    calls = [s for s in samples if s.step_index == turn]
    groups = {}
    for s in calls:
      groups.setdefault(s.group_id, []).append(s.prompt_ids)
    spared = sum(saved(prompts) for prompts in groups.values())
    padding = -len(calls) % RolloutConfig().batch_bucket if layout == "step" else 0  # one-token padding rows
    if spared * SHARE_WHEN_SAVED >= sum(len(s.prompt_ids) for s in calls) + padding:
      shared += spared
  assert shared > 0  # the first turn's prompts of a group are one prompt
  if layout == "step":
    blocks = [(s.step_index, len(s.completion_ids)) for s in samples]
    prefilled = sum(len(s.prompt_ids) for s in samples) - shared
  else:
    blocks = []
    for s in samples:
      mask = np.asarray(s.completion_mask)
      starts, ends = np.flatnonzero(np.diff(np.concatenate([[0], mask])) == 1), \
          np.flatnonzero(np.diff(np.concatenate([mask, [0]])) == -1)
      blocks += [(turn, int(e - b + 1)) for turn, (b, e) in enumerate(zip(starts, ends))]
    prefilled = sum(len(s.prompt_ids) + int((np.asarray(s.completion_mask) == 0).sum()) for s in samples) - shared
  longest = {}
  for turn, n in blocks:
    longest[turn] = max(longest.get(turn, 0), n)
  assert rollout.stats["prefill_tokens"] == prefilled
  assert rollout.stats["generated_tokens"] == sum(n for _, n in blocks)
  assert rollout.stats["decode_steps"] == sum(longest.values())
  rows = {turn: sum(t == turn for t, _ in blocks) for turn in longest}  # the rows each turn decodes: its live ones
  width = (lambda r: -(-r // 8) * 8) if layout == "step" else (lambda r: len(rollout.episodes))  # batch_bucket 8
  assert rollout.stats["decode_row_steps"] == sum(width(rows[t]) * longest[t] for t in longest)
  assert rollout.stats["prompt_truncations"] == 0
  batch, trainer_logprobs = _scored(setup, samples)
  for b, s in enumerate(samples):
    generated = np.zeros(batch.tokens.shape[1], bool)
    generated[len(s.prompt_ids) + np.flatnonzero(s.completion_mask)] = True
    np.testing.assert_array_equal(batch.loss_mask[b] > 0, generated)  # exactly the generated tokens
  np.testing.assert_allclose(trainer_logprobs * batch.loss_mask, batch.old_logprobs, atol=2e-5)


def test_trajectory_sequence_is_the_chat_conversation(setup):
  """Decoded, a whole-trajectory sample reads as the chat template's rendering of the same conversation."""
  games, tokenizer, *_ = setup
  rollout, _ = _run(setup, "trajectory", functools.partial(OracleText, compact=True), max_response_tokens=8)
  sample = rollout.samples[0]
  ids = sample.prompt_ids + sample.completion_ids
  mask = [0] * len(sample.prompt_ids) + sample.completion_mask
  view = OracleText(compact=True)
  env = AlfworldEnv("fast", MAX_STEPS)
  obs, infos = env.reset(sample.problem_id)
  view.begin(obs, infos)
  messages, start = [], 0
  while start < len(ids):
    messages.append({"role": "user", "content": view.turn_prompt()})
    first = mask.index(1, start)
    end = mask.index(0, first) if 0 in mask[first:] else len(ids)
    messages.append({"role": "assistant", "content": tokenizer.decode(ids[first:end], skip_special_tokens=True)})
    action = view.plan[len(view.memory)]
    obs, _, _, infos = env.step(action)
    view.observe(action, obs, infos)
    start = end
  rendered = render_chat(tokenizer, messages, add_generation_prompt=False)
  decoded = tokenizer.decode(ids, skip_special_tokens=False)
  # Replies cut by the token limit lack the eos the template writes; everything else matches byte for byte.
  assert decoded.replace("<|im_end|>", "") == rendered.replace("<|im_end|>", "").rstrip("\n")


@pytest.mark.parametrize("layout", ["step", "trajectory"])
def test_outcomes_reach_every_sample(setup, layout):
  rollout, tasks = _run(setup, layout, functools.partial(OracleText, compact=True), max_steps=20)
  plans = {g: len(_walkthrough(g)) for g in set(tasks)}
  for ep in rollout.episodes:
    assert ep.won and ep.reward == 10.0 and ep.length == plans[ep.problem_id] and not ep.truncated
  assert all(s.won and s.episode_reward == 10.0 and s.action_valid == 1.0 for s in rollout.samples)
  if layout == "step":  # each step keeps the raw observation it answered and the action the env executed
    for s in rollout.samples:
      assert s.action == _walkthrough(s.problem_id)[s.step_index]
      assert s.observation and s.observation.strip() in s.prompt_text
    assert all("Your task is to" in s.observation for s in rollout.samples if s.step_index == 0)


def test_step_limit_truncates(setup):
  rollout, _ = _run(setup, "step", functools.partial(AlfworldText, compact=True), max_steps=2)
  assert all(ep.length == 2 and ep.truncated and not ep.won for ep in rollout.episodes)


@pytest.mark.parametrize("layout", ["step", "trajectory"])
def test_demonstrations_match_rollout_prompts(setup, layout):
  """SFT demonstrations render exactly the prompts the policy later sees, and end each reply with eos."""
  games, tokenizer, *_ = setup
  chat = ChatFormat(tokenizer)
  view = functools.partial(make_text_env, "alfworld", compact=True)
  demos = demonstration_samples(AlfworldEnv("fast"), view, chat, games[:1], _walkthrough, layout)
  rollout, _ = _run(setup, layout, functools.partial(OracleText, compact=True), max_steps=20)
  played = [s for s in rollout.samples if s.problem_id == games[0] and s.traj_id == 0]
  assert all(s.won and s.episode_reward == 10.0 for s in demos)
  if layout == "step":
    assert [d.prompt_ids for d in demos] == [p.prompt_ids for p in played]
    assert all(d.completion_ids[-1] == tokenizer.eos_token_id for d in demos)
  else:
    assert demos[0].prompt_ids == played[0].prompt_ids
    replies = [t for t, m in zip(demos[0].completion_ids, demos[0].completion_mask) if m]
    assert tokenizer.decode(replies).count("<action>") == len(_walkthrough(games[0]))
    assert replies.count(tokenizer.eos_token_id) == len(_walkthrough(games[0]))


class _BrokenEnv:
  def reset(self, task):
    raise OSError(f"game file {task} is unreadable")


def test_a_rollout_whose_every_episode_failed_is_one_clear_error(setup):
  games, tokenizer, config, params, sampler = setup
  with VectorEnv(_BrokenEnv, num_workers=1, num_envs=2) as venv:
    engine = RolloutEngine(sampler, tokenizer, venv, AlfworldText, RolloutConfig(max_steps=2, max_prompt_tokens=2048, max_response_tokens=512))
    with pytest.raises(RuntimeError, match="(?s)all 2 env episodes failed.*unreadable"):
      engine.run(params, games[:2], games[:2], [0, 1], jax.random.key(0), SamplingParams())


def test_a_host_whose_every_episode_failed_stops_every_host(setup, monkeypatch):
  """Two processes of a multi-host run (threads exchanging `distributed.allgather`, test_distributed.py): process 1's
  env cannot reset, process 0 plays. Both stop with a clear error at the same point, instead of process 1 raising
  alone and process 0 waiting for it in the next collective (here the exchange's barrier would time out)."""
  from test_distributed import _as_two_processes

  games, tokenizer, config, params, sampler = setup

  def host(rank):
    with VectorEnv(_BrokenEnv if rank else functools.partial(AlfworldEnv, "fast"), 1, 2) as venv:
      engine = RolloutEngine(sampler, tokenizer, venv, AlfworldText, RolloutConfig(max_steps=2, max_prompt_tokens=2048, max_response_tokens=512))
      try:
        engine.run(params, games[:2], games[:2], [0, 1], jax.random.key(0), SamplingParams(), first_episode=2 * rank)
      except RuntimeError as e:
        return str(e)

  stopped = _as_two_processes(monkeypatch, host)
  assert stopped[0] == "rollout: every env episode of 1 other process(es) failed (their logs name the error); " \
                       "process 0 stops with them"
  assert stopped[1].startswith("rollout: all 2 env episodes failed") and "unreadable" in stopped[1]


def test_unknown_layout_and_env_are_clear_errors():
  with pytest.raises(ValueError, match="rollout.layout"):
    RolloutConfig(layout="episode")
  with pytest.raises(ValueError, match="env.name must be one of"):
    make_text_env("minecraft")


def test_chat_template_kwargs_reach_every_turn():
  """Qwen3's `enable_thinking=False` (verl-agent's setting) shapes the first prompt and every follow-up turn."""
  tokenizer = builtin_tokenizer(default_corpus())
  tokenizer.chat_template = (
      "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
      "{% if add_generation_prompt %}<|im_start|>assistant\n"
      "{% if enable_thinking is defined and not enable_thinking %}<think>\n\n</think>\n\n{% endif %}{% endif %}")
  quiet, default = ChatFormat(tokenizer, {"enable_thinking": False}), ChatFormat(tokenizer)
  assert tokenizer.decode(quiet.prompt_ids("hi")).endswith("assistant\n<think>\n\n</think>\n\n")
  assert tokenizer.decode(default.prompt_ids("hi")).endswith("assistant\n")
  assert tokenizer.decode(quiet.turn_ids("obs", reply_ended_with_eos=True)).endswith("<think>\n\n</think>\n\n")
  assert "<think>" not in tokenizer.decode(default.turn_ids("obs", reply_ended_with_eos=True))



def test_demonstrations_keep_only_the_episodes_the_expert_wins(setup):
  games, tokenizer, *_ = setup
  chat = ChatFormat(tokenizer)
  view = functools.partial(make_text_env, "alfworld", compact=True)
  lose = {games[1]}  # this game's "expert" only looks around, which never wins
  expert = lambda game: ["look"] if game in lose else _walkthrough(game)  # noqa: E731
  demos = demonstration_samples(AlfworldEnv("fast"), view, chat, games[:2], expert)
  assert {s.problem_id for s in demos} == {games[0]} and all(s.won for s in demos)
  with pytest.raises(ValueError, match="won none"):
    demonstration_samples(AlfworldEnv("fast"), view, chat, games[1:2], expert)


@pytest.mark.parametrize("layout", ["step", "trajectory"])
def test_recovery_demonstrations_insert_unimitated_mistakes(setup, layout):
  """With mistake_rate, stale actions answered "Nothing happens." are played but never imitated, the expert's
  actions are all still imitated, and the same seed gives the same demonstrations."""
  games, tokenizer, *_ = setup
  chat = ChatFormat(tokenizer)
  view = functools.partial(make_text_env, "alfworld", compact=True)
  make = functools.partial(demonstration_samples, AlfworldEnv("fast"), view, chat, games[:4], _walkthrough, layout,
                           0.5)
  demos = make(seed=1)
  assert all(s.won for s in demos)
  clean = demonstration_samples(AlfworldEnv("fast"), view, chat, games[:4], _walkthrough, layout)
  if layout == "step":
    # One sample per expert action, in order: the mistakes are not training targets.
    assert [(d.problem_id, d.response_text) for d in demos] == [(d.problem_id, d.response_text) for d in clean]
    recovering = [d for d in demos if "Nothing happens." in d.prompt_text]
    assert recovering and len(recovering) < len(demos)
  else:
    for d, c in zip(demos, clean):
      imitated = [t for t, m in zip(d.completion_ids, d.completion_mask) if m]
      assert imitated == [t for t, m in zip(c.completion_ids, c.completion_mask) if m]
    assert any("Nothing happens." in tokenizer.decode(d.completion_ids) for d in demos)
  tokens = lambda samples: [d.prompt_ids + d.completion_ids for d in samples]  # noqa: E731
  assert tokens(make(seed=1)) == tokens(demos)
  assert tokens(make(seed=2)) != tokens(demos)


def test_recovery_demonstrations_need_admissible_commands(setup):
  games, tokenizer, *_ = setup

  class Blind(AlfworldEnv):
    def reset(self, task):
      obs, infos = super().reset(task)
      return obs, {k: v for k, v in infos.items() if k != "admissible_commands"}

  view = functools.partial(make_text_env, "alfworld", compact=True)
  with pytest.raises(ValueError, match="mistake_rate"):
    demonstration_samples(Blind("fast"), view, ChatFormat(tokenizer), games[:1], _walkthrough, mistake_rate=0.2)
  with pytest.raises(ValueError, match="mistake_rate"):
    demonstration_samples(AlfworldEnv("fast"), view, ChatFormat(tokenizer), games[:1], _walkthrough, mistake_rate=1.0)


@pytest.mark.parametrize("layout", ["step", "trajectory"])
def test_a_rollout_split_in_two_plays_as_one(setup, layout):
  """Episode i samples with its own key (fold_in(key, first_episode + i)): two halves played apart, as two hosts
  play them, give the whole call's samples."""
  games, tokenizer, config, params, sampler = setup
  tasks, groups = group_tasks(games[:2], 2)
  cfg = RolloutConfig(layout=layout, max_steps=3, max_prompt_tokens=2048, max_response_tokens=10,
                      max_total_tokens=3072)

  def play(part, first):
    with VectorEnv(functools.partial(AlfworldEnv, "fast"), num_workers=1, num_envs=len(part)) as venv:
      out = RolloutEngine(sampler, tokenizer, venv, AlfworldText, cfg).run(
          params, part, part, groups[first:first + len(part)], jax.random.key(9), SamplingParams(temperature=1.0),
          first_episode=first)
    return [(s.problem_id, s.prompt_ids, s.completion_ids) for s in out.samples]

  assert play(tasks, 0) == play(tasks[:2], 0) + play(tasks[2:], 2)


def test_overlapped_env_stepping_plays_the_lock_step_episodes_while_the_other_half_decodes(setup):
  """`rollout.overlap_env`: the envs of one half step while the sampler decodes the other half (the call order
  shows it), and every episode's samples, step rewards and outcome equal lock-step's, token for token."""
  games, tokenizer, config, params, sampler = setup
  tasks, groups = group_tasks(games[:3], 2)
  events = []

  def play(overlap):
    cfg = RolloutConfig(layout="step", max_steps=4, max_prompt_tokens=2048, max_response_tokens=10,
                        overlap_env=overlap)
    with VectorEnv(functools.partial(AlfworldEnv, "fast"), num_workers=2, num_envs=len(tasks)) as venv:
      engine = RolloutEngine(sampler, tokenizer, venv, AlfworldText, cfg)
      submit, wait, generate = venv.step_async, venv.step_wait, engine.sampler.generate

      def step_async(actions):
        events.append(("submit", tuple(i for i, a in enumerate(actions) if a is not None)))
        return submit(actions)

      def step_wait(pending):
        events.append(("wait",))
        return wait(pending)

      def traced_generate(params, prompts, *args, **kwargs):
        events.append(("generate", len(prompts)))
        return generate(params, prompts, *args, **kwargs)

      venv.step_async, venv.step_wait, engine.sampler.generate = step_async, step_wait, traced_generate
      out = engine.run(params, tasks, tasks, groups, jax.random.key(5), SamplingParams(temperature=1.0))
      engine.sampler.generate = generate
    return out

  lock = play(False)
  lock_events = list(events)
  events.clear()
  overlapped = play(True)
  key = lambda s: (s.traj_id, s.step_index, s.prompt_ids, s.completion_ids, s.step_reward, s.action)  # noqa: E731
  assert sorted(map(key, overlapped.samples)) == sorted(map(key, lock.samples)) and lock.samples
  assert [(e.won, e.reward, e.length) for e in overlapped.episodes] == [(e.won, e.reward, e.length)
                                                                        for e in lock.episodes]
  # Lock-step: generate, then submit and wait at once. Overlapped: the first half's step is submitted before the
  # second half decodes, and waited for only after it (groups 0-1 are episodes 0-3, group 2 episodes 4-5).
  assert lock_events[:3] == [("generate", 8), ("submit", tuple(range(6))), ("wait",)]
  assert events[:5] == [("generate", 8), ("submit", (0, 1, 2, 3)), ("generate", 8), ("wait",), ("submit", (4, 5))]
  assert events[5][0] == "generate" and events[6] == ("wait",)   # the second half steps while the first decodes


def test_overlap_env_needs_the_step_layout():
  with pytest.raises(ValueError, match="rollout.overlap_env needs layout 'step'"):
    RolloutConfig(layout="trajectory", overlap_env=True)


@pytest.mark.parametrize("fault", [signal.SIGKILL, signal.SIGSTOP], ids=["killed", "hung"])  # hung: step timeout
def test_a_worker_lost_mid_rollout_fails_its_episodes_and_changes_nothing_else(setup, fault):
  """The worker hosting half the episodes is killed (or stopped, and so times out) before the second env step: the
  rollout finishes, those episodes are failed and leave no samples, and every other episode's samples equal the
  unfaulted rollout's token for token."""
  games, tokenizer, config, params, sampler = setup
  tasks, groups = group_tasks(games[:2], 2)
  cfg = RolloutConfig(layout="step", max_steps=3, max_prompt_tokens=2048, max_response_tokens=8,
                      max_total_tokens=3072)

  def play(faulty):
    with VectorEnv(functools.partial(AlfworldEnv, "fast"), num_workers=2, num_envs=len(tasks),
                   step_timeout_s=3.0) as venv:
      lost = [i for i in range(len(tasks)) if venv.worker_pid(i) == venv.worker_pid(0)]
      step_async, steps = venv.step_async, []

      def step_with_fault(actions):  # the engine sends each step with step_async
        steps.append(1)
        if faulty and len(steps) == 2:
          os.kill(venv.worker_pid(0), fault)
        return step_async(actions)

      venv.step_async = step_with_fault
      out = RolloutEngine(sampler, tokenizer, venv, AlfworldText, cfg).run(
          params, tasks, tasks, groups, jax.random.key(5), SamplingParams(temperature=1.0))
    return out, lost

  (clean, _), (faulted, lost) = play(False), play(True)
  assert 0 < len(lost) < len(tasks)
  assert [e.traj_id for e in faulted.episodes if e.env_failed] == lost
  assert all("worker" in e.error for e in faulted.episodes if e.env_failed)
  kept = lambda out: [(s.traj_id, s.prompt_ids, s.completion_ids, s.behaviour_logprobs) for s in out.samples
                      if s.traj_id not in lost]
  assert kept(faulted) == kept(clean) and kept(clean)
  assert {s.traj_id for s in faulted.samples}.isdisjoint(lost)


def test_refill_plays_the_lock_step_episodes_token_for_token(setup):
  """`rollout.refill`: in 3 slots for 6 episodes (strictly on-policy) the batch is lock-step's, in its order; with
  stale carry-over under unchanged weights, every episode a batch holds is a lock-step episode of its draw."""
  games, tokenizer, config, params, sampler = setup
  cfg = RolloutConfig(layout="step", max_steps=3, max_prompt_tokens=2048, max_response_tokens=10)
  draws = lambda d: games[:3] if d == 0 else [games[d % 3]]  # noqa: E731
  key = lambda d: jax.random.fold_in(jax.random.key(11), d)  # noqa: E731
  def sample_key(s):
    return s.problem_id, s.step_index, tuple(s.prompt_ids), tuple(s.completion_ids), s.step_reward, s.action

  def episodes(rollout):
    by_traj = {}
    for s in rollout.samples:
      by_traj.setdefault(s.traj_id, []).append(sample_key(s))
    return sorted(map(tuple, by_traj.values()))

  def lock_step(d):
    tasks, groups = group_tasks(draws(d), 2)
    with VectorEnv(functools.partial(AlfworldEnv, "fast"), num_workers=2, num_envs=len(tasks)) as venv:
      return RolloutEngine(sampler, tokenizer, venv, AlfworldText, cfg).run(
          params, tasks, tasks, groups, key(d), SamplingParams(temperature=1.0))

  def refill(max_staleness, calls, groups):
    rcfg = dataclasses.replace(cfg, refill=True, refill_slots=3, max_staleness=max_staleness)
    with VectorEnv(functools.partial(AlfworldEnv, "fast"), num_workers=2, num_envs=3) as venv:
      engine = RefillRollouts(RolloutEngine(sampler, tokenizer, venv, AlfworldText, rcfg), 2,
                              lambda d: (draws(d), key(d), 0), max_staleness)
      return [engine.run(params, v, groups, SamplingParams(temperature=1.0))[0] for v in range(calls)], engine

  (on_policy,), _ = refill(0, 1, 3)
  lock = lock_step(0)
  ordered = lambda r: [(s.group_id, s.traj_id) + sample_key(s) for s in r.samples]  # noqa: E731
  assert ordered(on_policy) == ordered(lock)  # the lock-step batch, sample for sample and in its order
  assert sorted((e.problem_id, e.won, e.reward, e.length) for e in on_policy.episodes) == sorted(
      (e.problem_id, e.won, e.reward, e.length) for e in lock.episodes)
  stale, engine = refill(1, 3, 1)
  played = {ep for d in range(engine.next_draw) for ep in episodes(lock_step(d))}
  assert all(set(episodes(r)) <= played and len(episodes(r)) == 2 for r in stale)
  assert sum(r.stats["refill_stale_samples"] for r in stale) > 0  # some batch held samples of an older version
