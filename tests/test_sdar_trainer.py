"""SDAR and its baselines through the GRPO trainer on generated ALFWorld games: the teacher is scored once per sample
and iteration with the rollout-time params, the batch carries its log-probs, a UCB retriever resumes where it was,
and every teacher the scoring step knows (the privileged self, a pool checkpoint, a pool checkpoint with skills) runs
the same gate and divergences."""
import json
import os

import jax
import numpy as np
import pytest

pytest.importorskip("alfworld", reason="generating games needs the alfworld wheel's domain files ([envs] extra)")

from conftest import TEST_MODEL, tiny_alfworld_config  # noqa: E402
from agentopd_jax.methods.sdar import teacher as sdar_teacher  # noqa: E402
from agentopd_jax.models import config as model_config, transformer  # noqa: E402
from agentopd_jax.objectives.registry import get_objective  # noqa: E402
from agentopd_jax.scoring.fused import ScoreConfig  # noqa: E402
from agentopd_jax.training import trainer  # noqa: E402
from agentopd_jax.training.config import from_config_dict, loss_params  # noqa: E402
from agentopd_jax.storage.checkpoints import CheckpointPool  # noqa: E402
from agentopd_jax.storage.logs import read_metrics  # noqa: E402

@pytest.fixture(scope="module")
def games_root(alfworld_games_root):
  return alfworld_games_root


_config = tiny_alfworld_config


def _train_lines(workdir):
  return [r for r in read_metrics(os.path.join(workdir, "logs")) if r["phase"] == "train"]


@pytest.fixture(scope="module")
def sdar_run(tmp_path_factory, games_root):
  """A 2-iteration SDAR run with a UCB retriever, counting the teacher's scoring calls."""
  calls = []
  score = sdar_teacher.score_teacher

  def counting(model, params, samples, **kw):
    calls.append((len(samples), kw["top_k"]))
    return score(model, params, samples, **kw)

  workdir = tmp_path_factory.mktemp("sdar")
  c = _config("sdar", workdir, games_root, skills__retrieval="ucb")
  sdar_teacher.score_teacher = counting
  try:
    trainer.train(c)
  finally:
    sdar_teacher.score_teacher = score
  return str(workdir), c, calls


def test_teacher_is_scored_once_per_sample_per_iteration(sdar_run):
  workdir, c, calls = sdar_run
  lines = _train_lines(workdir)
  assert [n for n, _ in calls] == [int(r["batch/trained_samples"]) for r in lines] and len(calls) == 2
  assert all(k == 0 for _, k in calls)  # reverse KL needs only the sampled token's teacher log-prob
  # The train step scores no teacher: the loss reads the batch's constants.
  loss = loss_params(from_config_dict(c))
  assert loss.objective == "sdar" and get_objective("sdar").score_config(loss, ScoreConfig()).teacher == "none"
  for r in lines:
    for key in ("actor/sdar/gate_mean", "actor/sdar/gate_active_ratio", "actor/sdar/teacher_gap_mean",
                "teacher/gap_mean", "teacher/gap_std", "teacher/gap_turn0", "teacher/kl_turn0",
                "teacher/gate_turn0", "timing_s/teacher"):
      assert key in r, key
    # Every teacher prompt read the general skills and one task skill (UCB's arm).
    hits = {k: v for k, v in r.items() if k.startswith("skills/hits/")}
    assert hits.pop("skills/hits/general_skills") == r["batch/trained_samples"] == sum(hits.values())
    assert 0.0 <= r["actor/sdar/gate_mean"] <= 1.0


def _params(workdir, step):
  with CheckpointPool(os.path.join(workdir, "checkpoints"), read_only=True) as pool:
    return pool.restore_params(step, transformer.abstract_params(model_config.preset(TEST_MODEL)))


def test_resumed_run_matches_with_its_ucb_state(sdar_run, tmp_path, games_root):
  workdir, _, _ = sdar_run
  resumed = tmp_path / "resumed"
  trainer.train(_config("sdar", resumed, games_root, skills__retrieval="ucb", grpo__iterations=1))
  trainer.train(_config("sdar", resumed, games_root, skills__retrieval="ucb"))
  for a, b in zip(jax.tree.leaves(_params(workdir, 2)), jax.tree.leaves(_params(str(resumed), 2))):
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=0, atol=1e-6)
  with CheckpointPool(os.path.join(workdir, "checkpoints"), read_only=True) as a, \
       CheckpointPool(str(resumed / "checkpoints"), read_only=True) as b:
    state_a, state_b = a.metadata(2)["extra"]["skills"], b.metadata(2)["extra"]["skills"]
    assert state_a == state_b and state_a != a.metadata(1)["extra"]["skills"]  # it learned, and resumed exactly


@pytest.mark.parametrize("source,context", [("pool", "plain"), ("pool", "skills")])
def test_a_pool_checkpoint_teaches_through_the_same_gate(sdar_run, tmp_path, games_root, source, context):
  workdir, _, _ = sdar_run
  c = _config("sdar", tmp_path / "run", games_root, teacher__source=source, teacher__context=context,
              teacher__pool_run=workdir, teacher__pool_step="0", grpo__iterations=1,
              sdar__divergence="topk_jsd")
  c.warm_start_run = workdir
  trainer.train(c)
  (line,) = _train_lines(str(tmp_path / "run"))
  # The student starts from the pool's step 0: on its own prompt that teacher is the student (gap ~ sampler drift).
  if context == "plain":
    assert abs(line["teacher/gap_mean"]) < 1e-4
  else:
    assert abs(line["teacher/gap_mean"]) > 1e-3
  assert "actor/sdar/loss" in line


@pytest.mark.parametrize("variant", ["rlsd", "skill_sd", "skill_grpo"])  # grpo_opsd, opsd: sdar's path
def test_every_baseline_trains_from_one_warm_start(sdar_run, tmp_path, games_root, variant):
  workdir, _, _ = sdar_run
  c = _config(variant, tmp_path / "run", games_root, grpo__iterations=1)
  c.warm_start_run = workdir
  summary = trainer.train(c)
  assert summary["steps"] == [0, 1]
  for a, b in zip(jax.tree.leaves(_params(workdir, 0)), jax.tree.leaves(_params(str(tmp_path / "run"), 0))):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))  # the same warm start, no SFT
  val = [r for r in read_metrics(str(tmp_path / "run" / "logs")) if r["phase"] == "val"]
  assert all(("val_skills/success_rate" in r) == (variant == "skill_grpo") for r in val)
  (line,) = _train_lines(str(tmp_path / "run"))
  assert ("teacher/gap_mean" in line) == (variant != "skill_grpo")
  assert np.isfinite(line["actor/loss"])
  config = json.loads((tmp_path / "run" / "config.json").read_text())
  assert config["method"] == variant and "objective" not in config["loss"]


def test_warm_start_step_continues_from_a_later_checkpoint(sdar_run, tmp_path, games_root):
  """Continued GRPO from where a run ended (the forgetting benchmark's baseline): step 0 is that run's checkpoint."""
  workdir, _, _ = sdar_run
  assert any(not np.array_equal(np.asarray(a), np.asarray(b))  # so step 0 and the latest step are told apart
             for a, b in zip(jax.tree.leaves(_params(workdir, 0)), jax.tree.leaves(_params(workdir, 2))))
  c = _config("", tmp_path / "run", games_root, grpo__iterations=1)
  c.warm_start_run, c.warm_start_step = workdir, "latest"
  trainer.train(c)
  for a, b in zip(jax.tree.leaves(_params(workdir, 2)), jax.tree.leaves(_params(str(tmp_path / "run"), 0))):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  c = _config("", tmp_path / "bad", games_root, grpo__iterations=1)
  c.warm_start_run, c.warm_start_step = workdir, "7"
  with pytest.raises(ValueError, match=r"warm_start_step=7: not a checkpoint"):
    trainer.train(c)
