"""kl_to_best (`agentopd_jax/methods/kl_to_best.py`), the worked example of a new method in docs/architecture.md: its
loss against numbers worked out by hand, its config errors, the anchor it picks from a run's checkpoints, and a tiny
Countdown GRPO run followed by kl_to_best runs from it through `training.trainer.train`."""
import importlib.util
import math
import os
import types

import jax
import jax.numpy as jnp
import ml_collections
import numpy as np
import pytest

from agentopd_jax.batching.collate import TrainBatch
from agentopd_jax.methods.kl_to_best import KlToBest, KlToBestConfig, kl_to_best_branches, kl_to_best_loss
from agentopd_jax.objectives.losses import normalizer_for
from agentopd_jax.objectives.registry import LossCore, LossParams, grpo_loss
from agentopd_jax.scoring.fused import Scores
from agentopd_jax.storage.checkpoints import CheckpointPool
from agentopd_jax.training.config import from_config_dict

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_spec = importlib.util.spec_from_file_location("same_run", os.path.join(ROOT, "experiments", "same_run.py"))
same_run = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(same_run)

# A 2 x 3 micro-batch: row 0 holds two response tokens, row 1 three. The policy equals the behaviour policy (ρ = 1,
# nothing clipped), so GRPO's per-token loss is −A; δ = log π_best − log π_θ per token.
POLICY = [[-1.0, -2.0, -0.5], [-0.3, -1.5, -0.7]]
BEST = [[-1.5, -1.0, -0.5], [-0.3, -2.0, -0.2]]
MASK = [[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]]
ADVANTAGE = [1.0, -0.5]  # per row


def _batch_and_scores():
  mask = jnp.asarray(MASK)
  batch = TrainBatch(tokens=jnp.ones((2, 3), jnp.int32), segment_ids=jnp.ones((2, 3), jnp.int32),
                     positions=jnp.tile(jnp.arange(3), (2, 1)), loss_mask=mask,
                     advantages=jnp.asarray(ADVANTAGE)[:, None] * mask, old_logprobs=jnp.asarray(POLICY) * mask)
  scores = Scores(policy_logprobs=jnp.asarray(POLICY) * mask, policy_entropy=jnp.zeros((2, 3)),
                  teacher_logprobs=jnp.asarray(BEST) * mask)
  return batch, scores


def _params(coef, kl_type="low_var_kl", agg="token-mean"):
  return LossParams("kl_to_best", LossCore(loss_agg_mode=agg), KlToBestConfig(coef=coef, kl_type=kl_type))


@pytest.mark.parametrize("kl_type, agg, expected_kl, expected_pg", [
    # k3 = e^δ − δ − 1 per token, δ = −0.5, 1.0 | 0.0, −0.5, 0.5; token-mean over the 5 tokens.
    pytest.param("low_var_kl", "token-mean", sum(math.exp(d) - d - 1 for d in (-0.5, 1.0, 0.0, -0.5, 0.5)) / 5,
                 (-1 - 1 + 0.5 + 0.5 + 0.5) / 5, id="k3-token-mean"),
    # k1 = log π_θ − log π_best = 0.5, −1.0 | 0.0, 0.5, −0.5; each row's token mean, then the mean over the 2 rows.
    pytest.param("k1", "seq-mean-token-mean", ((0.5 - 1.0) / 2 + (0.0 + 0.5 - 0.5) / 3) / 2, (-1 + 0.5) / 2,
                 id="k1-seq-mean-token-mean"),
])
def test_the_loss_is_grpo_plus_coef_times_the_kl_to_the_anchor(kl_type, agg, expected_kl, expected_pg):
  batch, scores = _batch_and_scores()
  loss, metrics = kl_to_best_loss(scores, batch, _params(0.5, kl_type, agg), normalizer_for(batch.loss_mask))
  assert float(metrics["kl_to_best/kl"]) == pytest.approx(expected_kl, abs=1e-6)
  assert float(metrics["pg_loss"]) == pytest.approx(expected_pg, abs=1e-6)
  assert float(loss) == pytest.approx(expected_pg + 0.5 * expected_kl, abs=1e-6)


def test_coef_zero_is_grpo_exactly_and_scores_no_anchor():
  batch, scores = _batch_and_scores()
  norm = normalizer_for(batch.loss_mask)
  loss, metrics = kl_to_best_loss(scores, batch, _params(0.0), norm)
  grpo, grpo_metrics = grpo_loss(scores, batch, LossParams("grpo", LossCore()), norm)
  assert float(loss) == float(grpo) and metrics.keys() == grpo_metrics.keys()
  assert all(float(metrics[k]) == float(grpo_metrics[k]) for k in metrics)
  assert kl_to_best_branches(_params(0.0))["teacher"] == "none"
  assert kl_to_best_branches(_params(0.05))["teacher"] == "params"


@pytest.mark.parametrize("field, value", [
    ("coef", -0.1), ("coef", float("nan")), ("coef", float("inf")), ("kl_type", "kl3"), ("step", -2), ("step", 1.5),
])
def test_a_bad_field_is_one_error_naming_it(field, value):
  with pytest.raises(ValueError, match=rf"^kl_to_best\.{field}: "):
    KlToBestConfig(**{field: value})
  c = _countdown("kl_to_best", "runs/x").to_dict()  # a plain dict: no ConfigDict type check stands in the way
  c["kl_to_best"][field] = value
  with pytest.raises(ValueError, match=rf"^kl_to_best\.{field}: "):
    from_config_dict(ml_collections.ConfigDict(c))


# --- the anchor: which checkpoint of the run ----------------------------------------------------------------------

SUCCESS = {0: 0.1, 1: 0.5, 2: 0.25, 3: 0.5}  # steps 1 and 3 tie for the best


@pytest.fixture(scope="module")
def recorded_run(tmp_path_factory):
  """A run folder whose pool holds steps 0-3, each with params w = step and its validation success."""
  run = tmp_path_factory.mktemp("recorded")
  with CheckpointPool(run / "checkpoints") as pool:
    for step, success in SUCCESS.items():
      pool.save(step, {"params": {"w": np.full((2,), step, np.float32)}}, metrics={"val/success_rate": success},
                outcomes={"p0": (int(success > 0.3), 1)}, config={})
  return str(run)


def _anchor(run, **cfg):
  method = KlToBest(KlToBestConfig(run=run, **cfg))
  method.start(types.SimpleNamespace(env_name="countdown",
                                     abstract_params={"w": jax.ShapeDtypeStruct((2,), jnp.float32)}))
  return method


def test_the_anchor_is_the_pools_best_step_and_a_tie_goes_to_the_newer(recorded_run):
  """The one best-step rule of the checkpoint pool (`CheckpointPool.best_step`, also Agentic-OPD's student and
  `--step=best`): the highest `val/success_rate`, a tie to the newer step."""
  method = _anchor(recorded_run)
  assert method.step == 3 and method.summary() == {"kl_to_best_step": 3}
  np.testing.assert_array_equal(np.asarray(method.teacher_params()["w"]), [3.0, 3.0])
  with CheckpointPool(os.path.join(recorded_run, "checkpoints"), read_only=True) as pool:
    assert pool.best_step() == 3


def test_an_explicit_step_is_that_checkpoint(recorded_run):
  method = _anchor(recorded_run, step=1)
  assert method.step == 1 and float(method.teacher_params()["w"][0]) == 1.0
  with pytest.raises(ValueError, match=r"^kl_to_best\.step=7: not a checkpoint of .*; it holds \[0, 1, 2, 3\]"):
    _anchor(recorded_run, step=7)


@pytest.mark.parametrize("run", ["", "no/such/run"])
def test_a_missing_run_is_an_error_naming_kl_to_best_run(tmp_path, run):
  with pytest.raises(ValueError, match=r"^kl_to_best\.run: no run at .*configs/countdown\.py"):
    _anchor(str(tmp_path / run) if run else run)


# --- the variant, and end to end on Countdown ---------------------------------------------------------------------


def _get_config(path):
  """`get_config` of the env config file `configs/<path>`."""
  spec = importlib.util.spec_from_file_location("kl_to_best_config", os.path.join(ROOT, "configs", path))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config


def test_the_variant_anchors_to_the_cpu_default_run_and_starts_from_its_warm_start():
  c = _get_config("alfworld.py")("kl_to_best")
  assert (c.method, c.kl_to_best.run, c.warm_start_run, c.warm_start_step, c.workdir) == (
      "kl_to_best", "runs/alfworld_cpu", "runs/alfworld_cpu", "0", "runs/alfworld_kl_to_best")
  assert from_config_dict(c).kl_to_best == KlToBestConfig(run="runs/alfworld_cpu")


def _countdown(variant, workdir, **overrides):
  """configs/countdown.py:`variant` shrunk to a seconds-long run: no SFT, one iteration of 4 tasks x 4 one-step
  episodes in 2 optimizer steps, one sample per row, a validation (and checkpoint) at 0 and 1 on 16 held-out games
  (the rollout's batch size, so both share the sampler's compiled steps)."""
  c = _get_config("countdown.py")(variant)
  c.workdir = str(workdir)
  c.mesh_shape = (8, 1, 1)
  c.pack_width = 0
  c.env.num_workers = 1
  c.sft.steps = 0
  c.grpo.update(dict(iterations=1, tasks_per_iteration=4, group_size=4, mini_batch_size=8, micro_batch_size=8))
  c.rollout.update(dict(max_steps=1, max_response_tokens=8))
  c.validation.update(dict(num_tasks=16, attempts=1, every=1))
  c.logging.update(dict(plot=False, tensorboard=False))
  for key, value in overrides.items():
    section, field = key.split("__") if "__" in key else (None, key)
    (c[section] if section else c)[field] = value
  return c


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
  """A one-iteration GRPO run (checkpoints 0 and 1), then two kl_to_best runs from its step 0 (its warm start, the
  same params it started from) toward its best checkpoint: coef 0.05 and coef 0. Returns their folders, the
  kl_to_best run's summary and the (step, params digest) of each anchor loaded."""
  from agentopd_jax.training.trainer import train

  root = tmp_path_factory.mktemp("kl_to_best")
  grpo = str(root / "grpo")
  train(_countdown("cpu", grpo))
  anchors = []
  start = KlToBest.start

  def recording(self, ctx):
    start(self, ctx)
    anchors.append((self.step, same_run.params_digest(self.teacher_params())))

  KlToBest.start = recording
  try:
    summary = train(_countdown("kl_to_best", root / "kl", kl_to_best__run=grpo, warm_start_run=grpo))
    train(_countdown("kl_to_best", root / "kl0", kl_to_best__run=grpo, warm_start_run=grpo, kl_to_best__coef=0.0))
  finally:
    KlToBest.start = start
  return dict(grpo=grpo, kl=str(root / "kl"), kl0=str(root / "kl0"), summary=summary, anchors=anchors)


def test_the_anchor_is_the_grpo_runs_best_checkpoint(runs):
  with CheckpointPool(os.path.join(runs["grpo"], "checkpoints"), read_only=True) as pool:
    best = pool.best_step()
    assert pool.steps() == [0, 1]
  checkpoints = same_run.run_checkpoints(runs["grpo"])
  assert [step for step, _ in runs["anchors"]] == [best, best] and runs["summary"]["kl_to_best_step"] == best
  assert all(digest == checkpoints[best][0] for _, digest in runs["anchors"])


def test_the_kl_to_the_anchor_is_logged_and_pulls(runs):
  from agentopd_jax.storage.logs import read_metrics

  (train,) = [r for r in read_metrics(os.path.join(runs["kl"], "logs")) if r["phase"] == "train"]
  assert train["batch/updates"] >= 2  # the policy differs from the anchor after the first update at the latest
  assert math.isfinite(train["actor/kl_to_best/kl"]) and train["actor/kl_to_best/kl"] > 0


def test_coef_zero_trains_exactly_as_grpo_from_the_same_start(runs):
  """The GRPO run is a plain GRPO run from the same params and seed: its step 0 is the kl_to_best runs' start."""
  kl0, grpo = same_run.run_checkpoints(runs["kl0"]), same_run.run_checkpoints(runs["grpo"])
  assert sorted(kl0) == sorted(grpo) == [0, 1]
  assert kl0 == grpo  # params digests and validation outcomes, step for step
  assert same_run.run_checkpoints(runs["kl"])[1][0] != grpo[1][0]  # the KL term changes the update
