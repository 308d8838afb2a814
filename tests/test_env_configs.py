"""configs/webshop.py and configs/searchqa.py through the same entry points as ALFWorld: SFT on the env's oracle, GRPO,
validation checkpoints with the env's own metrics, and evaluate.py on the result."""
import importlib.util
import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("bm25s")
pytest.importorskip("rapidfuzz")

from agentopd_jax.envs import registry  # noqa: E402
from agentopd_jax.envs.webshop.env import build_shop  # noqa: E402
from agentopd_jax.envs.webshop.expert import plan, top_result_plan  # noqa: E402
from agentopd_jax.storage.checkpoints import CheckpointPool  # noqa: E402
from agentopd_jax.storage.logs import read_metrics  # noqa: E402
from agentopd_jax.training.config import from_config_dict  # noqa: E402
from conftest import TEST_MODEL  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# config file -> (env name, validation metrics only that env reports)
ENVS = {"webshop": ("webshop", {"val/webshop_task_score (not success_rate)"}),
        "searchqa": ("search", {"val/tool_call_count/mean", "val/subem", "val/nq_subem"})}


def _config(name, variant=""):
  spec = importlib.util.spec_from_file_location(f"{name}_config", os.path.join(ROOT, "configs", f"{name}.py"))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module.get_config(variant)


@pytest.mark.parametrize("name", sorted(ENVS))
@pytest.mark.parametrize("variant", ["", "qwen2p5_3b", "qwen3_1p7b"])
def test_variants_build_their_dataclasses(name, variant):
  c = _config(name, variant)
  assert c.env.name == ENVS[name][0]
  assert from_config_dict(c).env.name == ENVS[name][0]


def test_the_env_timeouts_and_retries_reach_the_workers_and_the_client(monkeypatch):
  """`env.step_timeout_s` (every env) bounds a worker's step; search's `env.search_timeout_s` and `env.search_retries`
  bound a request to the retrieval server (a dead one costs a search their back-off, 23.5 s by default)."""
  from agentopd_jax.training import assembly

  c = _config("searchqa")
  c.env.update(step_timeout_s=7.5, search_url="http://127.0.0.1:9/r", search_timeout_s=3.0, search_retries=2)
  seen = {}

  class Stop(Exception):
    pass

  def vector_env(factory, *args, **kwargs):
    seen.update(kwargs, env=factory())
    raise Stop

  monkeypatch.setattr(assembly, "VectorEnv", vector_env)
  with pytest.raises(Stop):
    assembly.rollout_engine(c, None, None, None, num_envs=2)
  client = seen["env"]._client
  assert seen["step_timeout_s"] == 7.5 and (client.timeout_s, client.retries) == (3.0, 2)
  spec = registry.get("search")
  for field, value in (("search_retries", -1), ("search_timeout_s", 0.0)):
    bad = _config("searchqa")
    bad.env[field] = value
    with pytest.raises(ValueError, match=f"env.{field}"):
      spec.worker(bad.env)


def test_paper_settings():
  webshop, search = _config("webshop", "qwen2p5_3b"), _config("searchqa", "qwen2p5_3b")
  assert (webshop.rollout.max_steps, webshop.env.history_length, webshop.env.invalid_penalty) == (15, 2, 0.1)
  assert (search.rollout.max_steps, search.env.max_turns, search.env.history_length) == (4, 4, 4)
  assert (search.env.invalid_penalty, search.env.topk) == (0.01, 3)
  for c in (webshop, search):
    assert (c.grpo.group_size, c.optim.learning_rate) == (8, 1e-6)
    assert c.sft.steps == 0 and not c.env.compact_prompt
  # SDAR's scripts (methods.md §4.3): tasks x group, mini / micro, KL, warmup, validation.
  assert (webshop.grpo.tasks_per_iteration, webshop.grpo.mini_batch_size, webshop.grpo.micro_batch_size) == (16, 64, 8)
  assert webshop.loss.kl_coef == 0.01 and (webshop.validation.num_tasks, webshop.validation.temperature) == (128, 0.4)
  assert (search.grpo.tasks_per_iteration, search.grpo.mini_batch_size, search.grpo.micro_batch_size) == (128, 256, 16)
  assert (search.loss.kl_coef, search.optim.warmup_steps, search.validation.temperature) == (0.001, 15, 0.0)
  assert search.validation.every == search.grpo.iterations == 150


def test_skill_method_variants():
  """Every SDAR baseline is a variant of every env config, on the CPU default and on each paper model."""
  from agentopd_jax.methods import METHODS
  from agentopd_jax.objectives.registry import OBJECTIVES
  from agentopd_jax.training.presets import PAPER_MODELS
  for env in ("alfworld", "webshop", "searchqa"):
    for method in ("sdar", "grpo_opsd", "grpo_opsd_rkl", "opsd", "rlsd", "skill_sd", "skill_grpo"):
      assert METHODS[method].objective in OBJECTIVES
      cpu = _config(env, method)
      assert cpu.method == method and cpu.workdir.endswith(f"_cpu_{method}") and cpu.sft.steps > 0
      assert (cpu.sdar.coef, cpu.sdar.gate_beta, cpu.skills.retrieval) == (0.01, 5.0, "km")
      for model in PAPER_MODELS:
        paper = _config(env, f"{method}_{model}")
        assert paper.method == method and paper.model.preset == PAPER_MODELS[model] and paper.sft.steps == 0
  with pytest.raises(ValueError, match="sdar_qwen2p5_3b"):
    _config("alfworld", "sdar_gpt5")


def test_opid_variants():
  """`:opid` on every env config: the oracle analyzer on CPU, OPID's script settings on each paper model."""
  from agentopd_jax.training.presets import PAPER_MODELS
  for env in ("alfworld", "webshop", "searchqa"):
    cpu = _config(env, "opid")
    cfg = from_config_dict(cpu).opid
    assert (cpu.method, cpu.grpo.advantage) == ("opid", "grpo") and cpu.workdir.endswith("_cpu_opid")
    assert cfg.analyzer == "oracle"
    assert (cfg.w_episode, cfg.w_step, cfg.route) == (0.001, 0.001, "step_priority")
    assert cfg.max_step_skills == (2 if env == "searchqa" else 5)
    for model in PAPER_MODELS:
      paper = from_config_dict(_config(env, f"opid_{model}")).opid
      assert paper.analyzer == "openai" and paper.analyzer_model
      mean_norm = env == "webshop" or model.startswith("qwen3")
      assert _config(env, f"opid_{model}").grpo.advantage == ("grpo_mean_norm" if mean_norm else "grpo")


def _tasks(c):
  return registry.get(c.env.name).tasks(c.env)


def test_task_pools_follow_the_benchmarks_splits():
  train, valid = _tasks(_config("webshop"))
  assert valid == list(range(500)) and train[0] == 500  # verl-agent: test goals [0, 500), training the rest
  train, valid = _tasks(_config("searchqa", "qwen2p5_3b"))
  assert not {str(t) for t in train} & {str(t) for t in valid}
  assert len({t.data_source for t in valid[:48]}) >= 5  # the shuffled panel mixes the test sources
  _, in_domain = _tasks(_config("searchqa"))  # the CPU default: the two sources it trains on
  assert {t.data_source for t in in_domain} == {"nq", "hotpotqa"} and len(in_domain) == 400
  bad = _config("searchqa")
  bad.env.valid_sources = ("nq", "webquestions")
  with pytest.raises(ValueError, match=r"env.valid_sources.*webquestions"):
    registry.get(bad.env.name).tasks(bad.env)
  with pytest.raises(ValueError, match="env.name"):
    registry.get("minecraft")


def test_builtin_tokenizer_learns_each_envs_own_text():
  """WebShop's and search-QA's CPU defaults train the built-in tokenizer on the catalogue / encyclopedia (every ASIN a
  whole word, in both cases); the search corpus holds the training questions but no validation question."""
  webshop, search = _config("webshop"), _config("searchqa")
  assert webshop.builtin_tokenizer.env_corpus and search.builtin_tokenizer.env_corpus
  assert not _config("webshop", "qwen2p5_3b").builtin_tokenizer.env_corpus
  texts, words = registry.get("webshop").tokenizer_corpus(webshop.env)
  shop_asins = set(build_shop().products)
  assert set(words) == shop_asins | {a.lower() for a in shop_asins}
  assert next(iter(build_shop().products.values()))["Title"] in texts
  texts, words = registry.get("search").tokenizer_corpus(search.env)
  train, valid = registry.get(search.env.name).tasks(search.env)
  assert words == [] and train[0].question in texts and not {t.question for t in valid} & set(texts)
  assert registry.get("alfworld").tokenizer_corpus(_config("alfworld").env) == ([], [])


def test_webshop_warm_start_imitates_the_top_result_shopper():
  c = _config("webshop")
  assert c.sft.expert == "top_result" and _config("webshop", "qwen2p5_3b").sft.expert == "oracle"
  train, _ = registry.get(c.env.name).tasks(c.env)
  assert registry.get("webshop").expert_policy(c.env, "top_result")(train[0]) == top_result_plan(build_shop(), train[0])
  assert registry.get("webshop").expert_policy(c.env, "oracle")(train[0]) == plan(build_shop(), train[0])
  with pytest.raises(ValueError, match="sft.expert"):
    registry.get("webshop").expert_policy(c.env, "explorer")


def test_webshop_reward_settings_reach_the_env_workers():
  """`env.thefuzz` / `env.nouns` pick the reward's matcher and noun tagger of every worker; a bad value is one error
  naming the field, raised before any worker starts."""
  c = _config("webshop")
  assert (c.env.thefuzz, c.env.nouns) == ("0.19", "auto")
  c.env.thefuzz, c.env.nouns = "0.20", "stand-in"
  env = registry.get("webshop").worker(c.env, 3)()
  assert (env.thefuzz, env.nouns, env.max_steps) == ("0.20", "stand-in", 3)
  for field, bad in (("thefuzz", "0.18"), ("nouns", "nltk")):
    c = _config("webshop")
    c.env[field] = bad
    with pytest.raises(ValueError, match=f"env.{field}"):
      registry.get("webshop").worker(c.env)


def _cli(script, name, workdir, *extra, variant=""):
  overrides = {
      "workdir": workdir, "model.preset": TEST_MODEL, "env.num_workers": 1, "sft.steps": 2, "sft.demos": 6, "sft.batch_size": 8,
      "sft.micro_batch_size": 8, "grpo.iterations": 1, "grpo.tasks_per_iteration": 2, "grpo.group_size": 2,
      "grpo.mini_batch_size": 16, "grpo.micro_batch_size": 8, "rollout.max_steps": 4,
      "rollout.max_response_tokens": 8, "validation.num_tasks": 4, "validation.attempts": 1,
      "validation.every": 1, "logging.plot": False,
  }
  cmd = [sys.executable, os.path.join(ROOT, "experiments", script),
         f"--config={os.path.join(ROOT, 'configs', name)}.py{variant}"]
  cmd += [f"--config.{k}={v}" for k, v in overrides.items()] + list(extra)
  out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900)
  assert out.returncode == 0, (out.stdout + out.stderr)[-4000:]
  return out.stdout


@pytest.mark.parametrize("name", sorted(ENVS))
def test_train_and_evaluate_entry_points_run_the_env(tmp_path, name):
  """SDAR (the `:sdar` variant: GRPO plus the gated self-distillation of a teacher reading the env's skills) on
  OPID's advantage (the env's oracle analyses every trajectory; the two methods compose), then the checkpoint
  evaluated with skills in context (Skill-Prompt)."""
  workdir = str(tmp_path / name)
  _cli("train.py", name, workdir, "--config.method=sdar+opid", variant=":sdar")
  with CheckpointPool(os.path.join(workdir, "checkpoints"), read_only=True) as pool:
    assert pool.steps() == [0, 1]
    _, problems, _, attempts = pool.outcomes_matrix()
    assert len(problems) == 4 and (attempts == 1).all()
    assert ENVS[name][1] <= set(pool.metadata(1)["metrics"])
  records = read_metrics(os.path.join(workdir, "logs"))
  assert {r["phase"] for r in records} == {"sft", "train", "val"}
  train = [r for r in records if r["phase"] == "train"]
  assert all({"actor/sdar/gate_mean", "teacher/gap_mean"} <= set(r) for r in train)
  assert all(any(k.startswith("skills/hits/") for k in r) for r in train)
  assert all(r["opid/analysed_fraction"] == 1.0 and r["opid/api_failures"] == 0 for r in train)
  out = _cli("evaluate.py", name, workdir, "--step=latest", "--traces", "--skill_prompt=raw", variant=":sdar")
  assert "with skills (raw, km)" in open(os.path.join(workdir, "eval", "eval.md")).read()
  report = json.loads(open(os.path.join(workdir, "eval", "eval.json")).read())
  assert report["episodes"] == 4 and '"success_rate"' in out
  traces = [json.loads(line) for line in open(os.path.join(workdir, "eval", "traces.jsonl"))]
  assert len(traces) == 4 and all(len(t["steps"]) == t["length"] >= 1 for t in traces)
  assert {t["problem"] for t in traces} == set(problems)
  if name == "searchqa":  # the skills in the user message, as Skill-GRPO's student reads them: its prompts whole
    _cli("evaluate.py", name, workdir, "--step=latest", "--skill_prompt=user", variant=":sdar")
    label = open(os.path.join(workdir, "eval", "eval.md")).read()
    assert "with skills (user, " in label and "prompts up to 2048 tokens" in label
