"""The whole job on a few generated games: SFT warm start -> GRPO -> validation checkpoints, and resume.

The kill-anywhere tests SIGKILL a real training process (no clean-up) at fail points in SFT, a rollout, an update,
a validation and a checkpoint write (`agentopd_jax.faults`), rerun the same command after each, and check the
finished run equals an uninterrupted one bit for bit: parameters, checkpoint records and logged metrics.
"""
import functools
import importlib.util
import json
import os
import pathlib
import random
import re
import shutil
import signal
import subprocess
import sys

import jax
import numpy as np
import pytest

pytest.importorskip("alfworld", reason="generating games needs the alfworld wheel's domain files ([envs] extra)")

from agentopd_jax.envs import registry  # noqa: E402
from agentopd_jax.envs.alfworld import generator  # noqa: E402
from agentopd_jax.models import config as model_config, transformer  # noqa: E402
from agentopd_jax.models.loading import pool_params  # noqa: E402
from agentopd_jax.storage import machine  # noqa: E402
from agentopd_jax.storage.checkpoints import CheckpointPool  # noqa: E402
from agentopd_jax.storage.logs import read_metrics, untimed  # noqa: E402
from conftest import TEST_MODEL  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ITERATIONS = 2


@pytest.fixture(scope="module")
def games_root(tmp_path_factory):
  root = str(tmp_path_factory.mktemp("alfworld"))
  generator.generate(root, sizes={"train": 12, "valid_seen": 30})
  return root


def _flags(workdir, games_root, **extra):
  overrides = {
      "workdir": workdir, "model.preset": TEST_MODEL, "env.data_root": games_root, "env.num_workers": 1,
      "mesh_shape": "(8,1,1)",
      "sft.steps": 2, "sft.demos": 4, "sft.batch_size": 8, "sft.micro_batch_size": 8,
      "grpo.iterations": ITERATIONS, "grpo.tasks_per_iteration": 2, "grpo.group_size": 4,
      "grpo.mini_batch_size": 16, "grpo.micro_batch_size": 8, "rollout.max_steps": 3,
      "rollout.max_response_tokens": 8, "sft.max_demo_steps": 50, "validation.num_tasks": 8,
      "validation.attempts": 1, "validation.every": 1,
      "loss.kl_coef": 0.01, "loss.entropy_coef": 0.001, "logging.plot": False,
  }
  overrides.update({k.replace("__", "."): v for k, v in extra.items()})
  return [f"--config.{k}={v}" for k, v in overrides.items()]


def _train(workdir, games_root, variant="", extra=None, **popen):
  cmd = [sys.executable, os.path.join(ROOT, "experiments", "train.py"),
         f"--config={os.path.join(ROOT, 'configs', 'alfworld.py')}{variant}"] + _flags(workdir, games_root,
                                                                                      **(extra or {}))
  return subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **popen)


def _finish(proc):
  out, _ = proc.communicate(timeout=900)
  assert proc.returncode == 0, out[-4000:]
  return out


def _params(workdir, step, merged=False):
  """Checkpoint `step`'s trained weights: the model's, or (`merged`: a LoRA run) its adapters merged onto the base."""
  with CheckpointPool(os.path.join(workdir, "checkpoints"), read_only=True) as pool:
    if merged:
      return pool_params(pool, step, pool.restore_base(pool.saved_base()))
    return pool.restore_params(step, transformer.abstract_params(model_config.preset(TEST_MODEL)))


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory, games_root):
  workdir = str(tmp_path_factory.mktemp("run_a"))
  out = _finish(_train(workdir, games_root))
  with open(os.path.join(workdir, "stdout.txt"), "w") as f:
    f.write(out)
  return workdir


def test_run_records_checkpoints_outcomes_and_logs(uninterrupted):
  with CheckpointPool(os.path.join(uninterrupted, "checkpoints"), read_only=True) as pool:
    assert pool.steps() == list(range(ITERATIONS + 1))
    steps, problems, successes, attempts = pool.outcomes_matrix()
    assert steps == pool.steps() and len(problems) == 8
    assert attempts.shape == successes.shape == (ITERATIONS + 1, 8)
    assert (attempts == 1).all() and ((successes == 0) | (successes == 1)).all()
    meta = pool.metadata(ITERATIONS)
    assert meta["config"]["grpo"]["iterations"] == ITERATIONS and meta["extra"]["iteration"] == ITERATIONS
    assert 0.0 <= meta["metrics"]["val/success_rate"] <= 1.0 and pool.best_step() in steps
  records = read_metrics(os.path.join(uninterrupted, "logs"))
  phases = {r["phase"] for r in records}
  assert phases == {"sft", "train", "val"}
  train = [r for r in records if r["phase"] == "train"]
  assert [r["step"] for r in train] == list(range(1, ITERATIONS + 1))
  for key in ("actor/pg_loss", "actor/kl", "actor/entropy", "actor/pg_clipfrac", "rollout/logprob_drift",
              "rollout/prompt_truncations", "timing_s/gen", "timing_s/update_actor", "episode/success_rate",
              "compile/compile_s", "compile/update_s"):
    assert all(key in r for r in train), key
  # the first iteration builds (or loads from the cache) the GRPO train step: its compilation is logged apart
  assert train[0]["compile/programs"] >= 1 and 0 < train[0]["compile/update_s"] <= train[0]["timing_s/update_actor"]
  assert all(abs(r["rollout/logprob_drift"]) < 1e-4 for r in train)  # sampler and trainer agree
  assert any(name.startswith("events.out.tfevents") for name in os.listdir(os.path.join(uninterrupted, "logs")))
  (start,) = machine.read(uninterrupted)  # one start, on this machine
  assert start["cores"] >= 1 and start["backend"] == "cpu" and start["devices"] == 8 and start["jax"] == jax.__version__


def test_a_record_names_the_machine_of_each_start(uninterrupted, tmp_path):
  """record_run keeps the run's machine.jsonl; a run whose code wrote none is recorded with this machine only when
  --ran_here says it ran here, and --ran_here on a run that names its machine is refused."""
  subprocess.run([sys.executable, os.path.join(ROOT, "experiments", "record_run.py"), uninterrupted,
                  str(tmp_path / "rec")], check=True, cwd=ROOT, capture_output=True)  # the command, once
  assert machine.read(tmp_path / "rec") == machine.read(uninterrupted)
  spec = importlib.util.spec_from_file_location("record_run", os.path.join(ROOT, "experiments", "record_run.py"))
  record_run = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(record_run)  # the rest in-process: each start of the script costs seconds
  with pytest.raises(SystemExit, match="names its machine itself"):
    record_run.record(pathlib.Path(uninterrupted), tmp_path / "x", ran_here=True)
  older = tmp_path / "older"  # a run as code without storage.machine left it
  shutil.copytree(uninterrupted, older)
  os.remove(older / machine.FILE)
  record_run.record(older, tmp_path / "plain", ran_here=False)
  assert not (tmp_path / "plain" / machine.FILE).exists()
  record_run.record(older, tmp_path / "here", ran_here=True)
  (here,) = machine.read(tmp_path / "here")
  assert here["recorded_by_this_machine"] and here["cpu"] == machine.describe()["cpu"]


def test_a_run_without_a_terminal_logs_one_line_per_iteration_and_validation(uninterrupted):
  """Piped output (as under nohup or a cluster scheduler) shows each iteration's and validation's figures."""
  out = open(os.path.join(uninterrupted, "stdout.txt")).read()
  for step in range(1, ITERATIONS + 1):
    assert re.search(rf"train {step}: success [0-9.]+% reward -?[0-9.]+ kl [0-9.e-]+ [0-9]+s/it", out), out[-3000:]
  for step in range(ITERATIONS + 1):
    assert re.search(rf"val {step}: success [0-9.]+% \([a-z_]+ [0-9.]+%, [a-z_]+ [0-9.]+%\)", out), out[-3000:]
  assert re.search(r"sft 1: loss [0-9.]+", out)


def _kill_anywhere(start, kills, before_last=lambda: None):
  """Runs the training command `start(**popen)` once per fail point in `kills` (`agentopd_jax.faults`: SIGKILL of
  the process and its env workers on the n-th pass through that point), each run resuming what the last one left,
  then (after `before_last()`) once more to the end; returns the last run's output. Each killed run must have died
  by that kill."""
  # Each restart loads the jitted steps from the session's compilation cache (conftest.py) instead of compiling them.
  for spec in kills:
    proc = start(env=dict(os.environ, AGENTOPD_KILL_AT=spec), start_new_session=True)
    out, _ = proc.communicate(timeout=900)
    assert proc.returncode == -signal.SIGKILL, f"{spec}: the run ended with {proc.returncode}\n{out[-3000:]}"
  before_last()
  return _finish(start())


def _kills(seed):
  """The kill plan, n's drawn at random (seeded): with rollout.max_steps=3 every rollout takes 3 turns. A fresh run
  does SFT, validation 0 (turns 1-3) and iteration 1's rollout (turns 4-6); a resumed run plays iteration 1's rollout
  (turns 1-3) and then its validation (turns 4-6)."""
  rng = random.Random(seed)
  return ["sft/step:1",                                # killed in the SFT warm start
          f"rollout/turn:{rng.randint(4, 6)}",         # fresh run: step 0 saved, killed in iteration 1's rollout
          f"train/update:{rng.randint(1, 2)}",         # resumed from 0: killed between updates
          f"rollout/turn:{rng.randint(4, 6)}",         # resumed from 0: killed in validation 1
          "checkpoint/write:1"]                        # resumed from 0: killed writing step 1


def _assert_same_run(workdir_a, workdir_b, iterations=ITERATIONS, merged=False):
  """Equal final parameters (bitwise; `merged`: a LoRA run's base + adapters), checkpoint records (metrics, outcomes,
  extra) and logged metrics (timings aside) of two runs."""
  with CheckpointPool(os.path.join(workdir_a, "checkpoints"), read_only=True) as a, \
       CheckpointPool(os.path.join(workdir_b, "checkpoints"), read_only=True) as b:
    assert a.steps() == b.steps() == list(range(iterations + 1))
    for step in a.steps():
      ma, mb = a.metadata(step), b.metadata(step)
      assert (ma["outcomes"], ma["extra"]) == (mb["outcomes"], mb["extra"]), step
      assert untimed(ma["metrics"]) == untimed(mb["metrics"]), step
  for x, y in zip(jax.tree.leaves(_params(workdir_a, iterations, merged)),
                  jax.tree.leaves(_params(workdir_b, iterations, merged))):
    np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
  logs_a, logs_b = (read_metrics(os.path.join(w, "logs")) for w in (workdir_a, workdir_b))
  assert [(r["phase"], r["step"]) for r in logs_a] == [(r["phase"], r["step"]) for r in logs_b]  # none lost or twice
  assert [untimed(r) for r in logs_a] == [untimed(r) for r in logs_b]


def test_run_killed_anywhere_resumes_to_the_uninterrupted_run(tmp_path, games_root, uninterrupted):
  """SIGKILL in SFT, in a rollout, between updates, in validation and in the middle of a checkpoint write, each
  followed by the same command: the final run equals the uninterrupted one, bit for bit."""
  workdir = str(tmp_path / "run_b")
  kills = _kills(0)
  out = _kill_anywhere(lambda **popen: _train(workdir, games_root, **popen), kills)
  assert "resumed from step 0" in out
  assert len(machine.read(workdir)) == len(kills) + 1  # every start of the run names its machine
  assert not [n for n in os.listdir(os.path.join(workdir, "checkpoints")) if "tmp" in n]  # the torn write is gone
  _assert_same_run(workdir, uninterrupted)


def test_sdar_with_opid_killed_anywhere_resumes_to_the_uninterrupted_run(tmp_path, games_root, uninterrupted):
  """SDAR's self-teacher with UCB-retrieved skills plus OPID's skill-shift advantage, warm-started from the GRPO run:
  killed after the update (the teacher and OPID scored, the bandit fed) and while writing step 2's checkpoint (a
  rollout kill is the GRPO test's). The last run resumes from step 1, so the bandit's state and the bad-update count
  come back from that step's record; the run equals an uninterrupted one."""
  extra = {"warm_start_run": uninterrupted, "warm_start_step": 1, "grpo__iterations": 2, "skills__retrieval": "ucb",
           "method": "sdar+opid", "opid__normalize": True, "sft__skill_fraction": 0.0}
  start = functools.partial(_train, variant=":sdar", extra=extra, games_root=games_root)
  _finish(start(str(tmp_path / "a")))
  out = _kill_anywhere(lambda **popen: start(str(tmp_path / "b"), **popen), ["train/update:1", "checkpoint/write:2"])
  assert "resumed from step 1" in out
  _assert_same_run(str(tmp_path / "b"), str(tmp_path / "a"), iterations=2)


def test_hf_folder_and_trajectory_layout_with_lora(tmp_path, games_root):
  """The researcher's path: weights and tokenizer from a local HF folder (here a tiny random Qwen2 saved by
  transformers), LoRA adapters trained on it by GRPO on whole-trajectory samples with observation tokens masked, KL
  to the loaded model (the base), rollout correction on. The pool holds the base once and adapters per step; a run
  resumed from step 1 ends with the uninterrupted run's step 2, weights and records."""
  import torch
  import transformers as tf

  from agentopd_jax.envs.verl_agent.corpus import default_corpus
  from agentopd_jax.models.tokenizer import BUILTIN_VOCAB_SIZE, builtin_tokenizer

  torch.manual_seed(0)
  folder = tmp_path / "hf_qwen2"
  model = tf.Qwen2ForCausalLM(tf.Qwen2Config(vocab_size=BUILTIN_VOCAB_SIZE, hidden_size=64, intermediate_size=128,
                                             num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                                             max_position_embeddings=4096, tie_word_embeddings=True))
  model.save_pretrained(folder)
  builtin_tokenizer(default_corpus()).save_pretrained(folder)
  workdir = str(tmp_path / "run_hf")
  cmd = [sys.executable, os.path.join(ROOT, "experiments", "train.py"),
         f"--config={os.path.join(ROOT, 'configs', 'alfworld.py')}"] + _flags(workdir, games_root) + [
      f"--config.model.path={folder}", "--config.sft.steps=0", "--config.lora.rank=4", "--config.lora.alpha=8",
      "--config.optim.learning_rate=1e-3",
      "--config.rollout.layout=trajectory", "--config.rollout.max_total_tokens=2048",
      # Rollout correction on whole trajectories: π_old recomputed by the trainer, token weights, token rejection.
      "--config.rollout.recompute_old_logprobs=True", "--config.rollout_correction.is_level=token",
      "--config.rollout_correction.rs=token_k1", "--config.rollout_correction.rs_threshold=0.5_2.0"]
  _finish(subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
  resumed = str(tmp_path / "run_hf_resumed")
  shutil.copytree(workdir, resumed)
  shutil.rmtree(os.path.join(resumed, "checkpoints", "2"))
  _finish(subprocess.Popen([x.replace(workdir, resumed) for x in cmd], cwd=ROOT, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True))
  _assert_same_run(workdir, resumed, merged=True)
  with CheckpointPool(os.path.join(workdir, "checkpoints"), read_only=True) as pool:
    assert pool.metadata(1)["config"]["model"]["path"] == str(folder) and pool.has_base()
    assert pool.saved_keys(2) == ["adapters", "opt_state", "step"]
    assert pool.metadata(2)["extra"]["lora"] == {"rank": 4, "alpha": 8.0, "rslora": False,
                                                 "targets": ["q", "k", "v", "o", "gate", "up", "down"]}
  train = [r for r in read_metrics(os.path.join(workdir, "logs")) if r["phase"] == "train"]
  assert train[1]["actor/kl"] > 0.0  # the adapters moved the policy off the base
  # Step 2's adapters exported for PEFT: PEFT on the HF base gives our merged checkpoint's logits.
  peft = pytest.importorskip("peft")
  export = [sys.executable, os.path.join(ROOT, "experiments", "export.py"), cmd[2], "--step=2",
            f"--out={tmp_path / 'adapter'}", "--peft"] + [f for f in cmd[3:] if f.startswith("--config.")]
  _finish(subprocess.Popen(export, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
  config = model_config.ModelConfig.from_hf_dir(str(folder))
  tokens = np.random.RandomState(0).randint(0, config.vocab_size, (2, 16))
  merged = _params(workdir, 2, merged=True)
  hidden, _ = transformer.forward(config, merged, tokens)
  ours = np.asarray(transformer.logits_from_hidden(config, merged, hidden))
  with torch.no_grad():
    theirs = peft.PeftModel.from_pretrained(model, str(tmp_path / "adapter"))(torch.tensor(tokens)).logits.numpy()
  np.testing.assert_allclose(theirs, ours, atol=1e-4)
  # The merged policy of step 2 as a transformers folder.
  as_model = [x for x in export if x != "--peft" and not x.startswith("--out=")] + [f"--out={tmp_path / 'policy'}"]
  _finish(subprocess.Popen(as_model, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
  with torch.no_grad():
    exported = tf.AutoModelForCausalLM.from_pretrained(tmp_path / "policy")(torch.tensor(tokens)).logits.numpy()
  np.testing.assert_allclose(exported, ours, atol=1e-4)
  assert train[0]["batch/samples"] == 8  # one sample per episode: 2 tasks x group 4
  assert abs(train[0]["rollout/logprob_drift"]) < 1e-4 and train[0]["actor/kl"] >= 0.0
  # An f32 sampler against the f32 trainer: no mismatch, weights 1, nothing rejected.
  assert abs(train[0]["rollout_corr/kl"]) < 1e-4 and train[0]["rollout_corr/rollout_is_mean"] == pytest.approx(1, abs=1e-3)
  assert train[0]["rollout_corr/rollout_rs_masked_fraction"] == 0.0


def test_gigpo_runs_with_its_two_level_advantage(tmp_path, games_root):
  """The `gigpo` variant end to end: step samples carry the env's step rewards and raw observations, and the
  advantages come from the anchor groups (every episode of a task group starts in the same state, so no iteration's
  groups are all singletons). The rollouts refill 6 env slots with stale carry-over (`rollout.refill`, corrected
  against the sampler), and the W&B sink is on, offline: the run's W&B files sit beside its logs."""
  workdir = str(tmp_path / "gigpo")
  _finish(_train(workdir, games_root, ":gigpo", {
      "logging.wandb": True, "validation.every": 2, "rollout.refill": True, "rollout.refill_slots": 6,
      "rollout.max_staleness": 1,
      "rollout.recompute_old_logprobs": True, "rollout_correction.is_level": "token"},
      env=dict(os.environ, WANDB_MODE="offline", WANDB_SILENT="true")))
  train = [r for r in read_metrics(os.path.join(workdir, "logs")) if r["phase"] == "train"]
  for row in train:
    assert row["gigpo/step_group_mean_size"] > 1 and row["gigpo/step_group_singleton_ratio"] < 1
    assert np.isfinite(row["actor/pg_loss"]) and row["rollout/refill_starts"] > 0
  # Each batch holds 2 complete groups of 4 (a sample per step); the next draw's episodes ran on past the first one.
  assert len(train) == 2 and all(r["batch/samples"] >= 8 for r in train)
  assert train[0]["rollout/refill_carried_episodes"] > 0 and train[0]["rollout/refill_stale_samples"] == 0
  # The first 4 validation episodes of each validation, turn by turn (`logging.val_generations`).
  generations = [json.loads(x) for x in open(os.path.join(workdir, "logs", "val_generations.jsonl"))]
  assert {(g["step"], g["episode"]) for g in generations} == {(s, e) for s in (0, 2) for e in range(4)}
  assert all(g["prompt"] and g["turn"] < 3 for g in generations)
  run_id = open(os.path.join(workdir, "logs", "wandb_run_id")).read()
  assert [d for d in os.listdir(os.path.join(workdir, "logs", "wandb")) if d.startswith("offline-run-")
          and d.endswith(run_id)]


def test_evaluate_cli_reports_a_checkpoint(uninterrupted, games_root):
  cmd = [sys.executable, os.path.join(ROOT, "experiments", "evaluate.py"),
         f"--config={os.path.join(ROOT, 'configs', 'alfworld.py')}"] + _flags(uninterrupted, games_root) + [
      "--step=best", "--attempts=2", "--ks=1,2", "--opid_hindsight"]
  out = _finish(subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
  report = json.loads(open(os.path.join(uninterrupted, "eval", "eval.json")).read())
  assert report["episodes"] == 16 and report["problems"] == 8 and set(report["pass_at_k"]) == {"pass@1", "pass@2"}
  assert report["env"] == "alfworld"  # what record_run.py names its problems by
  assert "| Task type |" in open(os.path.join(uninterrupted, "eval", "eval.md")).read()
  assert '"success_rate"' in out and '"opid_hindsight"' in out
  # The hindsight retry: the first play is the report's own; the second is recorded per problem.
  retry = report["opid_hindsight"]
  assert retry["episodes"] == 16 and retry["success_without"] == pytest.approx(100 * report["success_rate"])
  assert retry["first_won"]["episodes"] + retry["first_lost"]["episodes"] == 16
  assert set(retry["outcomes"]) == set(report["outcomes"]) and all(a == 2 for _, a in retry["outcomes"].values())
  assert retry["success_with"] == pytest.approx(100 * sum(s for s, _ in retry["outcomes"].values()) / 16)
  recorded = os.path.join(uninterrupted, "eval_record.json")
  subprocess.run([sys.executable, os.path.join(ROOT, "experiments", "record_run.py"), "--eval",
                  os.path.join(uninterrupted, "eval", "eval.json"), recorded], check=True, cwd=ROOT)
  names = json.loads(open(recorded).read())
  assert set(names["opid_hindsight"]["outcomes"]) == set(names["outcomes"])
  assert all(name.startswith("valid_seen/") for name in names["opid_hindsight"]["outcomes"])


def test_evaluate_reproduces_the_training_validation(uninterrupted, games_root):
  """Same panel, sampling and key as the run's own validation: evaluating a checkpoint re-plays its recorded result."""
  out_dir = os.path.join(uninterrupted, "eval_repro")
  cmd = [sys.executable, os.path.join(ROOT, "experiments", "evaluate.py"),
         f"--config={os.path.join(ROOT, 'configs', 'alfworld.py')}"] + _flags(uninterrupted, games_root) + [
      f"--step={ITERATIONS}", "--attempts=1", f"--out={out_dir}"]
  _finish(subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
  report = json.loads(open(os.path.join(out_dir, "eval.json")).read())
  with CheckpointPool(os.path.join(uninterrupted, "checkpoints"), read_only=True) as pool:
    recorded = pool.metadata(ITERATIONS)
  assert report["success_rate"] == recorded["metrics"]["val/success_rate"]
  assert report["valid_action_ratio"] == pytest.approx(recorded["metrics"]["val/valid_action_ratio"])
  assert report["length_mean"] == pytest.approx(recorded["metrics"]["val/length/mean"])
  # --panel_half=report: the second half of each task type's problems in play order, as agentic_opd's held-out
  # split cuts the panel
  subprocess.run(cmd[:-1] + [f"--out={out_dir}_report", "--panel_half=report"], cwd=ROOT, check=True,
                 capture_output=True, timeout=600)
  half = json.loads(open(os.path.join(f"{out_dir}_report", "eval.json")).read())
  import ml_collections

  env_cfg = ml_collections.ConfigDict(json.load(open(os.path.join(uninterrupted, "config.json")))["env"])
  spec = registry.get("alfworld")
  by_type = {}
  for task in spec.tasks(env_cfg)[1][:len(report["outcomes"])]:
    by_type.setdefault(spec.group_of(task), []).append(str(task))
  assert len(by_type) == 2  # both task types on the panel
  assert set(half["outcomes"]) == {p for ids in by_type.values() for p in ids[-(-len(ids) // 2):]}
  assert "report half" in half["evaluated"]


def test_probe_cli_reads_a_checkpoint(uninterrupted, games_root):
  cmd = [sys.executable, os.path.join(ROOT, "experiments", "probe_demos.py"),
         f"--config={os.path.join(ROOT, 'configs', 'alfworld.py')}"] + _flags(uninterrupted, games_root) + [
      "--step=latest", "--games=3"]
  out = _finish(subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True))
  report = json.loads(out[out.index("{"):])
  assert report["step"] == ITERATIONS and report["expert"] == "explorer"
  assert report["decisions"] and all(0.0 <= v["verb_probability"] <= 1.0 for v in report["decisions"].values())
  # --opid: OPID-format demonstrations scored with their routed skills and with the plain prompt, the same replies
  out = _finish(subprocess.Popen(cmd[:-1] + ["--games=4", "--opid"], cwd=ROOT, stdout=subprocess.PIPE,
                                 stderr=subprocess.DEVNULL, text=True))
  probe = json.loads(out[out.index("{"):])["opid"]
  assert set(probe) == {"episode/whole", "episode/cut", "step/whole", "step/cut", "retry/whole", "retry/first"}
  assert probe["episode/whole"]["with_skills"]["n"] > 0 and probe["retry/whole"]["with_skills"]["n"] > 0
  for part in probe.values():
    assert part["with_skills"]["n"] == part["plain"]["n"]
    assert part["with_skills"]["n"] == 0 or 0.0 <= part["plain"]["reply_probability"] <= 1.0


def test_compare_reads_a_real_run_folder(uninterrupted, tmp_path):
  """compare.py on what train.py leaves (not hand-written logs): the start, the final and their change."""
  png, table = tmp_path / "curves.png", tmp_path / "t.json"
  out = subprocess.run([sys.executable, os.path.join(ROOT, "experiments", "compare.py"), f"a={uninterrupted}",
                        f"b={uninterrupted}", "--since=0", "--baseline=a", "--json", str(table), "--plot", str(png)],
                       cwd=ROOT, capture_output=True, text=True, timeout=300)
  assert out.returncode == 0, out.stderr[-2000:]
  assert png.stat().st_size > 0 and "(change since step 0, points)" in out.stdout
  with CheckpointPool(os.path.join(uninterrupted, "checkpoints"), read_only=True) as pool:
    start = pool.metadata(0)["metrics"]["val/success_rate"]
    final = pool.metadata(ITERATIONS)["metrics"]["val/success_rate"]
  (alfworld,) = json.loads(table.read_text())
  assert alfworld["since"] == 0
  assert alfworld["rows"][0]["All"] == [pytest.approx(100 * (final - start)), 0.0]
  assert alfworld["rows"][1]["vs_baseline"][:2] == [1, 0.0]


# ---------------------------------------------------------------- Agentic-OPD on the GRPO run above


def _opd(workdir, games_root, teacher_run, extra=None, **popen):
  """`:agentic_opd` with the finished GRPO run as the teacher pool. LAD is off: the tiny model wins nothing here,
  so group-rate routing would route nothing, and the test needs the distillation to move the student. Selection
  reads the whole panel, so the student is the GRPO run's recorded best (tests/test_teacher_pool.py checks the
  held-out split)."""
  extra = {"agentic_opd__teacher_run": teacher_run, "agentic_opd__lad": "off", "agentic_opd__selection_interval": 1,
           "agentic_opd__selection_panel": "whole", "loss__kl_coef": 0.0, "agentic_opd__top_k": 8,
           "grpo__mini_batch_size": 8, **(extra or {})}
  return _train(workdir, games_root, ":agentic_opd", extra, **popen)


@pytest.fixture(scope="module")
def opd_run(tmp_path_factory, games_root, uninterrupted):
  workdir = str(tmp_path_factory.mktemp("opd_a"))
  _finish(_opd(workdir, games_root, uninterrupted))
  return workdir


def test_agentic_opd_distils_the_pool_into_the_best_checkpoint(opd_run, uninterrupted):
  with CheckpointPool(os.path.join(uninterrupted, "checkpoints"), read_only=True) as teachers:
    best, teacher_steps = teachers.best_step(), teachers.steps()
  summary = json.loads(open(os.path.join(opd_run, "summary.json")).read())
  assert summary["student_step"] == best and summary["teacher_steps"] == [s for s in teacher_steps if s != best]
  with CheckpointPool(os.path.join(opd_run, "checkpoints"), read_only=True) as pool:
    assert pool.steps() == list(range(ITERATIONS + 1))
    extras = [pool.metadata(s)["extra"] for s in pool.steps()]
  assert all(e["teacher_step"] in summary["teacher_steps"] for e in extras)
  assert extras[-1]["scheduler"]["strategy"]  # the scheduler's state travels with every checkpoint
  # Step 0 is the student exactly as the GRPO run saved it; distillation then moves it.
  start, student = _params(opd_run, 0), _params(uninterrupted, best)
  for a, b in zip(jax.tree.leaves(start), jax.tree.leaves(student)):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  assert any(not np.array_equal(np.asarray(a), np.asarray(b))
             for a, b in zip(jax.tree.leaves(_params(opd_run, ITERATIONS)), jax.tree.leaves(student)))
  records = read_metrics(os.path.join(opd_run, "logs"))
  train = [r for r in records if r["phase"] == "train"]
  assert [r["step"] for r in train] == list(range(1, ITERATIONS + 1))
  assert all(r["opd/routed_fraction"] == 1.0 and r["actor/opd_reverse_kl"] > 0 for r in train)
  # The same optimizer steps as every method: one per grpo.mini_batch_size (8) samples.
  assert all(r["batch/samples"] > 8 and r["batch/updates"] == -(-r["batch/samples"] // 8) for r in train)
  assert [r["step"] for r in records if r["phase"] == "opd"] == list(range(ITERATIONS + 1))
  assert os.path.isfile(os.path.join(opd_run, "scheduler_state.json"))


def test_agentic_opd_run_killed_anywhere_resumes_to_the_uninterrupted_run(tmp_path, games_root, uninterrupted,
                                                                          opd_run):
  workdir = str(tmp_path / "opd_b")
  def half_written_mirror():  # the scheduler state is read from the checkpoint record, never from this mirror
    with open(os.path.join(workdir, "scheduler_state.json"), "w") as f:
      f.write('{"strategy": "hcn_v3", "weig')

  # Killed after iteration 1's first update (the teacher scored, the scheduler fed) and while writing step 1 with the
  # scheduler's record; the other phases run GRPO's code, killed in the test above.
  out = _kill_anywhere(lambda **popen: _opd(workdir, games_root, uninterrupted, **popen),
                       ["train/update:1", "checkpoint/write:1"], half_written_mirror)
  assert "resumed from step 0" in out
  _assert_same_run(workdir, opd_run)


def test_agentic_opd_trains_on_whole_trajectories_in_one_step(tmp_path, games_root, uninterrupted):
  """verl-tool's layout (one sequence per episode, observation tokens masked), the spec's setting, selected by
  `rollout.layout`: one sample per episode; with `agentic_opd.whole_batch_update` (the authors' trainer) one optimizer
  step over the whole batch although it holds two mini-batches; the student moves."""
  workdir = str(tmp_path / "opd_traj")
  _finish(_opd(workdir, games_root, uninterrupted, {"rollout__layout": "trajectory", "grpo__iterations": 1,
                                                     "grpo__mini_batch_size": 4,
                                                     "agentic_opd__whole_batch_update": True}))
  (train,) = [r for r in read_metrics(os.path.join(workdir, "logs")) if r["phase"] == "train"]
  assert train["batch/samples"] == 2 * 4  # tasks_per_iteration x group_size episodes, one sequence each
  assert train["batch/updates"] == 1 and train["actor/opd_reverse_kl"] > 0
  assert any(not np.array_equal(np.asarray(a), np.asarray(b))
             for a, b in zip(jax.tree.leaves(_params(workdir, 1)), jax.tree.leaves(_params(workdir, 0))))


def test_agentic_opd_evaluates_a_teacher_saved_without_outcomes(tmp_path, games_root, uninterrupted):
  # A copy of the GRPO run whose first teacher lost its outcome record: the OPD run plays that checkpoint on the
  # validation panel instead, with the validation's own random numbers, so it recovers exactly the recorded outcomes.
  run = tmp_path / "grpo_copy"
  shutil.copytree(uninterrupted, run)
  with CheckpointPool(os.path.join(uninterrupted, "checkpoints"), read_only=True) as pool:
    step = next(s for s in pool.steps() if s != pool.best_step())
    recorded = pool.metadata(step)["outcomes"]
  meta = run / "checkpoints" / str(step) / "meta" / "metadata"
  doc = json.loads(meta.read_text())
  doc["outcomes"] = None
  meta.write_text(json.dumps(doc))
  workdir = tmp_path / "opd"
  _finish(_opd(str(workdir), games_root, str(run), {"grpo__iterations": 0}))
  evaluated = json.loads((workdir / "teacher_outcomes" / f"{step}.json").read_text())
  assert {k: list(v) for k, v in evaluated.items()} == {k: list(v) for k, v in recorded.items()}
