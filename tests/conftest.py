"""Test setup: 8 fake CPU devices so sharding is exercised without accelerators, one persistent compilation cache
for the session, and a module order that keeps both pytest-xdist workers busy to the end.

XLA reads the flag once, when the backend starts, so it must be set before anything imports jax. The cache (JAX's own
`JAX_COMPILATION_CACHE_DIR`, inherited by the training subprocesses the tests start) lets a test, or a restarted run,
load an executable an earlier one compiled for the same computation instead of compiling it again. Under
`pytest -n 2` the controller sets it before starting its workers, so they share one cache too.
"""
import atexit
import os
import shutil
import tempfile

os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=8").strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")
if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
  os.environ["JAX_COMPILATION_CACHE_DIR"] = tempfile.mkdtemp(prefix="agentopd_jax_cache_")
  atexit.register(shutil.rmtree, os.environ["JAX_COMPILATION_CACHE_DIR"], ignore_errors=True)
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")
os.environ.setdefault("AGENTOPD_WARM_STARTS", "")  # no warm start shared between tests (tests/test_reuse.py sets one)
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from agentopd_jax import host_memory  # noqa: E402

host_memory.tune()  # as the CLIs do, before JAX starts its backend

import pytest  # noqa: E402  (after the environment set-up above)

# Tiny random Hugging Face checkpoints, one per supported family, built locally (no downloads). Biases and norm
# scales are perturbed away from their 0/1 initialisation so a mapping mistake cannot hide behind them.
HF_FAMILIES = ("qwen2", "qwen3", "llama")


def _hf_model(family: str):
  import torch
  import transformers as tf

  torch.manual_seed({"qwen2": 0, "qwen3": 1, "llama": 2}[family])
  common = dict(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512)
  if family == "qwen2":
    model = tf.Qwen2ForCausalLM(tf.Qwen2Config(**common, tie_word_embeddings=False, rope_theta=10000.0))
  elif family == "qwen3":
    model = tf.Qwen3ForCausalLM(tf.Qwen3Config(**common, head_dim=32, tie_word_embeddings=True))
  else:
    model = tf.LlamaForCausalLM(tf.LlamaConfig(
        **common, tie_word_embeddings=False, rope_theta=500000.0,
        rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                          original_max_position_embeddings=64)))
  with torch.no_grad():
    for name, p in model.named_parameters():
      if "norm" in name or "bias" in name:
        p.add_(0.1 * torch.randn_like(p))
  return model.eval()


@pytest.fixture(scope="session")
def hf_checkpoints(tmp_path_factory):
  """{family: (torch model, folder written by save_pretrained)}."""
  out = {}
  for family in HF_FAMILIES:
    model = _hf_model(family)
    path = tmp_path_factory.mktemp(f"hf_{family}")
    model.save_pretrained(path)
    out[family] = (model, str(path))
  return out


# The longest modules, longest first (by `--durations` on 2 cores):
# `pytest -n 2 --dist loadfile` hands whole modules to the two workers in collection order, so these go first and
# the short ones fill in around them.
LONGEST_FIRST = ("test_trainer.py", "test_multihost.py", "test_sdar_trainer.py", "test_alfworld_engines.py",
                 "test_env_configs.py", "test_opid_trainer.py", "test_sweep.py")


def pytest_configure(config):
  if hasattr(config.option, "loadscopereorder"):  # pytest-xdist: keep the order below, not "most tests first"
    config.option.loadscopereorder = False


def pytest_collection_modifyitems(config, items):
  rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
  items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: each module keeps its own order


def pytest_sessionstart(session):
  """In CI the real ALFWorld engine is part of the test command (`.[test,envs]`): its tests must run, not skip.

  Locally, the ALFWorld test modules skip with a reason when textworld/alfworld are absent; under CI a missing
  package ends the run as a failure instead, so a skipped differential test can never pass for a green build.
  """
  import importlib.util

  if os.environ.get("CI"):
    missing = [m for m in ("textworld", "alfworld") if importlib.util.find_spec(m) is None]
    if missing:
      pytest.exit(f"CI: {missing} not installed; install the envs extra (pip install -e '.[test,envs]')", returncode=1)


@pytest.fixture
def tiny_scoring_batch():
  """(a one-layer 64-token model config, a 2 x 8 `TrainBatch`: one full row and one padded row, loss on the
  replies) for end-to-end checks of an objective through the real scorer."""
  import jax.numpy as jnp
  import numpy as np

  from agentopd_jax.batching.collate import TrainBatch
  from agentopd_jax.models import config as model_config

  model = model_config.preset("tiny", vocab_size=64, hidden_size=32, intermediate_size=64, num_layers=1,
                              num_heads=2, num_kv_heads=1, head_dim=16)
  tokens = jnp.asarray(np.random.default_rng(0).integers(1, 64, (2, 8)), jnp.int32)
  mask = jnp.asarray([[0, 0, 0, 1, 1, 1, 1, 1], [0, 0, 1, 1, 1, 0, 0, 0]], jnp.float32)
  seg = jnp.asarray([[1] * 8, [1] * 5 + [0] * 3], jnp.int32)
  return model, TrainBatch(tokens=tokens, segment_ids=seg, positions=jnp.tile(jnp.arange(8), (2, 1)) * seg,
                           loss_mask=mask, advantages=jnp.zeros((2, 8)), old_logprobs=jnp.zeros((2, 8)))


def assert_loss_sums_over_rows(objective, scores, batch, cfg, norm):
  """The loss and every metric of `objective` on a batch equal the sums over its rows scored one at a time with the
  batch's normaliser: what lets the train step add micro-batches' losses and metrics instead of averaging them."""
  import jax
  import numpy as np

  whole_loss, whole = objective.loss(scores, batch, cfg, norm)
  rows = [jax.tree.map(lambda x, i=i: x[i:i + 1], (scores, batch)) for i in range(batch.loss_mask.shape[0])]
  parts = [objective.loss(s, b, cfg, norm) for s, b in rows]
  np.testing.assert_allclose(sum(p[0] for p in parts), whole_loss, rtol=1e-6, atol=1e-7)
  for name in whole:
    np.testing.assert_allclose(sum(p[1][name] for p in parts), whole[name], rtol=1e-5, atol=1e-7, err_msg=name)


@pytest.fixture(scope="module")
def alfworld_games_root(tmp_path_factory):
  """12 training and 8 validation games, generated into a module's tmp folder (needs the alfworld wheel)."""
  from agentopd_jax.envs.alfworld import generator

  root = str(tmp_path_factory.mktemp("alfworld"))
  generator.generate(root, sizes={"train": 12, "valid_seen": 8})
  return root


def nested(values):
  """The nested dict of {dotted path: value} (a config fixture entry's values)."""
  out = {}
  for path, value in values.items():
    node = out
    *sections, field = path.split(".")
    for section in sections:
      node = node.setdefault(section, {})
    node[field] = value
  return out


# The model of the end-to-end runs: the `nano` preset, the CPU default's `tiny` at a fifteenth of its compute (same
# built-in tokenizer, families and sharding), since those runs check plumbing, resumption and agreement, not learning.
# Tests that pin the CPU default itself (test_default_warm_start.py, the notebooks) keep its model.
TEST_MODEL = "nano"


def tiny_alfworld_config(variant, workdir, games_root, **overrides):
  """configs/alfworld.py:`variant` shrunk to a seconds-long run on `games_root` (the `TEST_MODEL`, 8 fake devices,
  2 iterations of 2 tasks x 2, 3 env steps); `section__field=value` overrides any field, `field=value` a top-level
  one."""
  import importlib.util

  root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
  spec = importlib.util.spec_from_file_location("alfworld_config", os.path.join(root, "configs", "alfworld.py"))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  c = module.get_config(variant)
  c.workdir = str(workdir)
  c.env.data_root = games_root
  c.env.num_workers = 1
  c.mesh_shape = (8, 1, 1)
  c.model.preset = TEST_MODEL
  c.sft.update(dict(steps=2, demos=4, batch_size=8, micro_batch_size=8, max_demo_steps=50))
  c.grpo.update(dict(iterations=2, tasks_per_iteration=2, group_size=2, mini_batch_size=16, micro_batch_size=8))
  c.rollout.update(dict(max_steps=3, max_response_tokens=8))
  c.validation.update(dict(num_tasks=4, attempts=1, every=1))
  c.logging.update(dict(plot=False, tensorboard=False))
  for key, value in overrides.items():
    if "__" in key:
      section, field = key.split("__")
      c[section][field] = value
    else:
      c[key] = value
  return c


def raw_exchange(port: int, head: bytes) -> bytes:
  """Sends a request head (no body) to 127.0.0.1:`port` on a raw socket; everything the server sends until it closes
  (for the HTTP servers' guards, which must answer before reading a body)."""
  import socket

  with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
    sock.sendall(head)
    reply = b""
    while chunk := sock.recv(65536):
      reply += chunk
  return reply
