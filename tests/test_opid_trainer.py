"""OPID through the GRPO trainer on generated ALFWorld games: the oracle analyses every trajectory while the advantages
are computed, each routed step sample is scored once under its skill prompt with the rollout-time params, the token
advantage is GRPO's plus the weighted shift, a dead analyzer endpoint costs only the skill signal, the `local`
analyzer serves a run checkpoint to the OpenAI client, and a resumed run matches an uninterrupted one."""
import dataclasses
import os
import shutil
import types

import jax
import numpy as np
import pytest

pytest.importorskip("alfworld", reason="generating games needs the alfworld wheel's domain files ([envs] extra)")

from conftest import TEST_MODEL, tiny_alfworld_config  # noqa: E402
from agentopd_jax.models import config as model_config, transformer  # noqa: E402
from agentopd_jax.scoring.teacher_signals import score_teacher  # noqa: E402
from agentopd_jax.methods.opid import hindsight  # noqa: E402
from agentopd_jax.methods.opid.config import OpidConfig  # noqa: E402
from agentopd_jax.methods.opid.injection import Anchors, augment_observation  # noqa: E402
from agentopd_jax.methods.opid.method import Opid  # noqa: E402
from agentopd_jax.training import trainer  # noqa: E402
from agentopd_jax.training.assembly import text_env_factory  # noqa: E402
from agentopd_jax.storage.checkpoints import CheckpointPool  # noqa: E402
from agentopd_jax.storage.logs import read_metrics  # noqa: E402
from agentopd_jax.training.config import from_config_dict  # noqa: E402

@pytest.fixture(scope="module")
def games_root(alfworld_games_root):
  return alfworld_games_root


def _config(variant, workdir, games_root, **overrides):
  """The shared tiny run, with OPID's weights at 1 (so the shift visibly moves the advantages), no skill
  demonstrations, a 2-game panel and a rollout temperature that is not 1 (the shift compares log-probs of logits / T)."""
  defaults = dict(sft__skill_fraction=0.0, validation__num_tasks=2, opid__w_episode=1.0, opid__w_step=1.0,
                  rollout__temperature=0.8)
  return tiny_alfworld_config(variant, workdir, games_root, **{**defaults, **overrides})


def _train_lines(workdir):
  return [r for r in read_metrics(os.path.join(workdir, "logs")) if r["phase"] == "train"]


@pytest.fixture(scope="module")
def opid_run(tmp_path_factory, games_root):
  """A 2-iteration OPID run (oracle analyzer) recording the analysis, the teacher scoring and the advantages."""
  seen = dict(events=[], scored=[], advantages=[])
  teacher_cls = hindsight.HindsightTeacher
  submit, advantages, score = teacher_cls.submit, teacher_cls.advantages, hindsight.score_teacher

  def recording_submit(self, samples, tasks, iteration):
    seen["events"].append(("submit", iteration))
    future = submit(self, samples, tasks, iteration)
    seen["last"] = (list(samples), future)
    return future

  def recording_advantages(self, params, samples, episode_advantages, analysis, **kw):
    seen["events"].append(("advantages", len(samples)))
    out, metrics = advantages(self, params, samples, episode_advantages, analysis, **kw)
    seen["advantages"].append((list(samples), list(episode_advantages), out, analysis.result()[0],
                               jax.tree.map(np.asarray, params), self.chat, self.max_prompt_tokens))
    return out, metrics

  def counting(model, params, samples, **kw):
    seen["scored"].append(list(samples))
    return score(model, params, samples, **kw)

  workdir = tmp_path_factory.mktemp("opid")
  c = _config("opid", workdir, games_root)
  teacher_cls.submit, teacher_cls.advantages, hindsight.score_teacher = (recording_submit, recording_advantages,
                                                                         counting)
  try:
    trainer.train(c)
  finally:
    teacher_cls.submit, teacher_cls.advantages, hindsight.score_teacher = submit, advantages, score
  return str(workdir), c, seen


def test_every_trajectory_is_analysed_and_its_steps_routed(opid_run):
  workdir, c, seen = opid_run
  assert [e for e in seen["events"] if e[0] == "submit"] == [("submit", 1), ("submit", 2)]
  lines = _train_lines(workdir)
  assert len(lines) == 2
  for line in lines:
    for key in ("opid/analysed_fraction", "opid/route_episode", "opid/route_step", "opid/delta_episode_mean",
                "opid/delta_step_std", "opid/parse_failures", "opid/api_failures", "opid/analyzer_latency_s",
                "timing_s/opid"):
      assert key in line, key
    # The oracle replays every trajectory; step_priority puts each step on exactly one route.
    assert line["opid/analysed_fraction"] == 1.0 and line["opid/api_failures"] == 0
    assert line["opid/route_episode"] + line["opid/route_step"] == pytest.approx(1.0)


def test_each_routed_sample_is_scored_once_under_its_skill_prompt(opid_run):
  _, c, seen = opid_run
  assert len(seen["scored"]) == 4  # per iteration: the episode route's samples, then the step route's
  anchors = Anchors.of(text_env_factory(c)().prompt_anchors)  # the run's prompt format's splice points
  for (samples, episode_adv, out, results, params, chat, limit), (ep_seqs, step_seqs) in zip(
      seen["advantages"], zip(seen["scored"][::2], seen["scored"][1::2])):
    assert len(ep_seqs) + len(step_seqs) == len(samples)  # one teacher forward per sample, none twice
    by_key = {(s.traj_id, s.step_index): s for s in samples}
    for seqs, route in ((ep_seqs, "episode"), (step_seqs, "step")):
      for t in seqs:
        s = by_key[(t.traj_id, t.step_index)]
        analysis = results[s.traj_id]
        skill = analysis.episode_skill if route == "episode" else analysis.step_skills[s.step_index]
        text = augment_observation(s.prompt_text, **{f"{route}_skill": skill}, anchors=anchors)
        assert f"[{skill}]" in text and t.completion_ids == s.completion_ids
        assert t.prompt_ids == chat.prompt_ids(text)[-limit:] and limit == c.rollout.max_prompt_tokens
    # A^OPID = A^ep + w·(log π_old(y | ĥ) − behaviour log-prob), token by token, w = 1 on both routes, both
    # log-probs at the rollout temperature.
    model = model_config.preset(TEST_MODEL)
    seqs = ep_seqs + step_seqs
    teacher = score_teacher(model, params, seqs, temperature=c.rollout.temperature)
    by_seq = {(t.traj_id, t.step_index): sig.logprobs for t, sig in zip(seqs, teacher)}
    for s, a, got in zip(samples, episode_adv, out):
      want = a + (by_seq[(s.traj_id, s.step_index)] - np.asarray(s.behaviour_logprobs))
      np.testing.assert_allclose(got, want, atol=2e-5)


def _params(workdir, step):
  with CheckpointPool(os.path.join(workdir, "checkpoints"), read_only=True) as pool:
    return pool.restore_params(step, transformer.abstract_params(model_config.preset(TEST_MODEL)))


def test_resumed_run_matches_an_uninterrupted_one(opid_run, tmp_path, games_root):
  """The run killed after checkpoint 1 (its copy without checkpoint 2) and started again ends where it ended."""
  workdir, _, _ = opid_run
  resumed = tmp_path / "resumed"
  shutil.copytree(workdir, resumed)
  shutil.rmtree(resumed / "checkpoints" / "2")
  trainer.train(_config("opid", resumed, games_root))
  for a, b in zip(jax.tree.leaves(_params(workdir, 2)), jax.tree.leaves(_params(str(resumed), 2))):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=0, atol=1e-6)


def test_a_dead_analyzer_endpoint_costs_only_the_skill_signal(opid_run, tmp_path, games_root, monkeypatch):
  workdir, _, _ = opid_run
  monkeypatch.setenv("OPENAI_API_KEY", "unused")
  c = _config("opid", tmp_path / "run", games_root, grpo__iterations=1, opid__analyzer="openai",
              opid__analyzer_model="m", opid__base_url="http://127.0.0.1:9/v1", opid__api_retries=1,
              opid__timeout_s=2.0)
  c.warm_start_run = workdir
  summary = trainer.train(c)
  assert summary["steps"] == [0, 1]
  (line,) = _train_lines(str(tmp_path / "run"))
  assert line["opid/analysed_fraction"] == 0.0 and line["opid/api_failures"] == line["opid/analysis_failures"] > 0
  assert line["opid/route_episode"] == line["opid/route_step"] == 0.0 and np.isfinite(line["actor/loss"])


def test_the_local_analyzer_serves_a_run_checkpoint(opid_run, tmp_path, games_root):
  """`local` starts `agentopd_jax.serve` on the warm start and analyses through the OpenAI client: a tiny random
  model writes no usable JSON, so every trajectory is a counted parse failure and training goes on."""
  workdir, _, _ = opid_run
  c = _config("opid", tmp_path / "run", games_root, grpo__iterations=1, opid__analyzer="local",
              opid__analyzer_model=workdir, opid__max_completion_tokens=8, opid__api_retries=1)
  c.warm_start_run = workdir
  trainer.train(c)
  (line,) = _train_lines(str(tmp_path / "run"))
  assert line["opid/parse_failures"] == line["opid/analysis_failures"] > 0 and line["opid/api_failures"] == 0


def test_opid_needs_the_step_layout(tmp_path, games_root):
  c = _config("opid", tmp_path / "run", games_root)
  c.rollout.layout = "trajectory"
  with pytest.raises(ValueError, match="rollout.layout"):
    Opid(from_config_dict(c).opid).start(types.SimpleNamespace(layout=c.rollout.layout))


def test_bad_opid_fields_are_named():
  with pytest.raises(ValueError, match="opid.analyzer"):
    OpidConfig(analyzer="gpt")
  with pytest.raises(ValueError, match="opid.analyzer_model"):
    OpidConfig(analyzer="openai")
  with pytest.raises(ValueError, match="opid.route"):
    OpidConfig(route="both")
  assert dataclasses.replace(OpidConfig(), start_after=2, stop_after=4).active(3)
  assert [OpidConfig(start_after=2, stop_after=4).active(i) for i in range(1, 6)] == [False, False, True, True, False]
  assert [OpidConfig(failed_only_after=2).failed_only_at(i) for i in (1, 2, 3)] == [False, False, True]


def _step(traj, step, group, observation, reward=0.0, won=False):
  from agentopd_jax.batching.samples import Sample
  return Sample(prompt_ids=[1], completion_ids=[2], completion_mask=[1], behaviour_logprobs=[0.0], group_id=group,
                problem_id="p", traj_id=traj, step_index=step, action_valid=1.0, episode_reward=reward, won=won,
                observation=observation)


def test_the_stats_analyzer_picks_below_mean_steps_of_shared_observations():
  """Trajectories 0 and 1 (one task group) both saw "A" first; 0 then won, 1 did not, so "A"'s group has variance
  and 1's step 0 is below its mean: the one pick. Trajectory 2 (another group) saw "A" alone: no group, no pick."""
  by_traj = hindsight.trajectories([
      _step(0, 0, 0, "A", 10.0, True), _step(0, 1, 0, "B", 10.0, True),
      _step(1, 0, 0, "A"), _step(1, 1, 0, "C"), _step(1, 2, 0, "D"),
      _step(2, 0, 1, "A")])
  assert hindsight.stats_candidates(by_traj, 0.95, k=5) == {0: (), 1: (0,), 2: ()}
  assert hindsight.stats_candidates(by_traj, 0.95, k=0) == {0: (), 1: (), 2: ()}
