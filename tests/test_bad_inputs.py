"""Bad input fails once, where it enters, with one error that names the field, file or tensor.

Run configs (`training.config.from_config_dict`, train.py's flags), Hugging Face model folders (`hf_io.load_hf`, `ModelConfig`)
and tokenizers (`load_model_and_tokenizer`). Cases tested elsewhere are not repeated here: an unknown override field
and an unknown variant (test_configs.py); refused config.json keys, model types and rope types (test_hf_config.py); a
missing folder, a folder without safetensors, a config that disagrees with every layer (test_models.py); a missing
tokenizer folder (test_tokenizer.py); a bad model.dtype (test_mixed_precision.py).
"""
import logging
import os
import re
import subprocess
import sys

import numpy as np
import pytest
from safetensors.numpy import save_file

from agentopd_jax.envs.verl_agent.corpus import default_corpus
from agentopd_jax.models import hf_io
from agentopd_jax.models.config import ModelConfig
from agentopd_jax.models.loading import load_model_and_tokenizer
from agentopd_jax.models.tokenizer import build_tokenizer
from agentopd_jax.parallel.sharding import make_mesh
from agentopd_jax.training.config import from_config_dict
from agentopd_jax.training.sweep import load_run_config

from test_configs import ROOT
from test_hf_config import _folder_copy, _raw
from test_mixed_precision import _model_section

# --- run configs -----------------------------------------------------------------------------------------------

BAD_FIELDS = [
    ({"grpo.group_size": 0}, "grpo.group_size"),
    ({"grpo.mini_batch_size": -16}, "grpo.mini_batch_size"),
    ({"sft.batch_size": -1}, "sft.batch_size"),
    ({"validation.every": 0}, "validation.every"),
    ({"mesh_shape": ("abc",)}, "mesh_shape"),
    ({"env.name": "minecraft"}, "env.name"),
    ({"grpo.advantage": "ppo"}, "grpo.advantage"),  # was looked up only after the SFT warm start
    ({"method": "dpo"}, "method: unknown method 'dpo'"),
    ({"method": "agentic_opd+opid"}, "method: 'agentic_opd' takes no add-on"),
    ({"loss.kl_type": "l2"}, "kl_type"),
    ({"optim.learning_rate": -1e-4}, "optim.learning_rate"),
    ({"rollout.layout": "tree"}, "rollout.layout"),
    ({"env.step_timeout_s": 0.0}, "env.step_timeout_s"),
    ({"rollout.top_p": float("nan")}, "top_p"),
    ({"teacher.source": "oracle"}, "teacher.source"),
    ({"method": "opid", "opid.route": "sideways"}, "opid.route"),
    ({"sdar.divergence": "kl"}, "sdar.divergence"),
    ({"agentic_opd.lad_other": "sft"}, "agentic_opd.lad_other"),
]


def _run_config(env, variant=""):
  return load_run_config(os.path.join(ROOT, "configs", f"{env}.py:{variant}"), "test")


@pytest.mark.parametrize("fields,named", BAD_FIELDS,
                         ids=[",".join(f"{k}={v}" for k, v in fields.items()) for fields, _ in BAD_FIELDS])
def test_bad_run_config_field_is_named_before_anything_loads(fields, named):
  c = _run_config("alfworld")
  for dotted, value in fields.items():
    *sections, field = dotted.split(".")
    node = c
    for section in sections:
      node = node[section]
    node[field] = value
  with pytest.raises(ValueError, match=re.escape(named)):
    from_config_dict(c)


@pytest.mark.parametrize("env", ["alfworld", "webshop", "searchqa"])
def test_shipped_configs_pass_the_check(env):
  from agentopd_jax.training.presets import PAPER_MODELS, method_variants
  own, on_paper = method_variants()
  for variant in ("", *own, *PAPER_MODELS, *(f"{m}_{p}" for m in on_paper for p in PAPER_MODELS)):
    from_config_dict(_run_config(env, variant))


@pytest.mark.parametrize("override,named", [
    ("--config.trainer.lr=abc", "trainer"),  # no such section
    ("--config.optim.learning_rate=abc", "optim.learning_rate"),  # wrong type: ml_collections names the flag
    ("--config.grpo.group_size=0", "grpo.group_size must be an integer >= 1"),  # out of range: GrpoConfig
    ("--config.opd.lad=off", "--config.opd.lad: opd.lad is now agentic_opd.lad"),  # the single-section layout
    ("--config.grpo.advantage=opid", "grpo.advantage=opid is now method=<primary>+opid"),
])
def test_train_py_refuses_a_bad_override_by_name(override, named):
  out = subprocess.run([sys.executable, os.path.join(ROOT, "experiments", "train.py"),
                        f"--config={os.path.join(ROOT, 'configs', 'alfworld.py')}", override],
                       cwd=ROOT, capture_output=True, text=True, timeout=120)
  assert out.returncode != 0 and named in out.stderr, out.stderr[-2000:]


# --- config.json -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("keys,named", [
    ({"num_hidden_layers": "2"}, "num_hidden_layers must be a positive integer, got '2'"),
    ({"hidden_size": 64.0}, "hidden_size must be a positive integer"),
    ({"num_attention_heads": 0}, "num_attention_heads must be a positive integer"),
    ({"rope_parameters": {"rope_type": "linear", "rope_theta": 1e4}}, "needs rope_parameters.factor"),
], ids=["str", "float", "zero", "rope-without-factor"])
def test_bad_config_json_value_names_the_key(keys, named):
  with pytest.raises(ValueError, match=re.escape(named)):
    ModelConfig.from_hf_config(_raw("qwen2", **keys))


@pytest.mark.parametrize("text,error,named", [
    (None, FileNotFoundError, "no config.json"),
    ("{'model_type': qwen2", ValueError, "config.json: not valid JSON"),
    ("[1, 2]", ValueError, "config.json: expected a JSON object, got list"),
], ids=["missing", "garbled", "not-an-object"])
def test_unreadable_config_json_names_the_file(hf_checkpoints, tmp_path, text, error, named):
  folder = _folder_copy(hf_checkpoints["qwen2"][1], tmp_path / "m")
  os.remove(folder / "config.json")
  if text is not None:
    (folder / "config.json").write_text(text)
  with pytest.raises(error, match=re.escape(named)):
    hf_io.load_hf(str(folder))


# --- weights ---------------------------------------------------------------------------------------------------

Q0 = "model.layers.0.self_attn.q_proj.weight"
UP1 = "model.layers.1.mlp.up_proj.weight"
TENSOR_FAULTS = [  # (family, edit of the tensors dict, config.json keys set, error, what the message names)
    ("qwen2", lambda t: t.pop("model.layers.1.self_attn.k_proj.bias"), {}, KeyError,
     "lacks tensor 'model.layers.1.self_attn.k_proj.bias'"),
    # Was a bare KeyError('model.embed_tokens.weight'), raised before config.json was read.
    ("qwen2", lambda t: t.pop("model.embed_tokens.weight"), {}, KeyError, "lacks tensor 'model.embed_tokens.weight'"),
    # Layer 0 is right, the last layer is not (was numpy's "all input arrays must have the same shape").
    ("qwen2", lambda t: t.update({UP1: t[UP1].T.copy()}), {}, ValueError, f"{UP1}' has shape (64, 128)"),
    # The right number of elements in the wrong layout (was loaded silently).
    ("qwen2", lambda t: t.update({Q0: t[Q0].reshape(-1).copy()}), {}, ValueError, f"{Q0}' has shape (4096,)"),
    ("qwen2", lambda t: t.update({"model.layers.0.mlp.extra.weight": np.zeros(3, np.float32)}), {}, ValueError,
     "unexpected tensors not used by the model, e.g. ['model.layers.0.mlp.extra.weight']"),
    # A tied checkpoint (no lm_head.weight) under a config.json that unties it.
    ("qwen3", None, {"tie_word_embeddings": False}, KeyError,
     "lacks tensor 'lm_head.weight' required by config.json (config.json has tie_word_embeddings=false)"),
]


def _edited(src, dst, edit=None, **config_keys):
  """`_folder_copy` of checkpoint `src` whose model.safetensors is rewritten by `edit(tensors)`."""
  folder = _folder_copy(src, dst, **config_keys)
  if edit is not None:
    weights = folder / "model.safetensors"
    tensors = {k: np.array(v) for k, v in hf_io.read_safetensors(str(weights)).items()}
    edit(tensors)
    os.remove(weights)  # a hard link to the shared checkpoint: unlink before writing
    save_file(tensors, str(weights))
  return folder


@pytest.mark.parametrize("family,edit,keys,error,named", TENSOR_FAULTS,
                         ids=["missing", "missing-embedding", "last-layer-shape", "flattened", "extra", "untied"])
def test_bad_tensor_is_named(hf_checkpoints, tmp_path, family, edit, keys, error, named):
  folder = _edited(hf_checkpoints[family][1], tmp_path / "m", edit, **keys)
  with pytest.raises(error, match=re.escape(named)):
    hf_io.load_hf(str(folder))


def test_truncated_safetensors_and_index_name_the_file(hf_checkpoints, tmp_path):
  folder = _folder_copy(hf_checkpoints["qwen2"][1], tmp_path / "m")
  weights = folder / "model.safetensors"
  data = weights.read_bytes()
  os.remove(weights)
  weights.write_bytes(data[:-100])
  with pytest.raises(ValueError, match=r"model\.safetensors: tensor '.*' .*\(truncated or corrupt file\)"):
    hf_io.load_hf(str(folder))
  (folder / "model.safetensors.index.json").write_text("{")
  with pytest.raises(ValueError, match=r"model\.safetensors\.index\.json: not valid JSON"):
    hf_io.load_hf(str(folder))


# --- tokenizers ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tokenizer_600(tmp_path_factory):
  """A tokenizer folder with ~600 tokens: more than the test checkpoints' 512 embedding rows."""
  folder = tmp_path_factory.mktemp("tok600")
  tok = build_tokenizer(folder, texts=["go to drawer 1"], vocab_size=300, whole_words=[f"w{i}" for i in range(600)])
  assert len(tok) > 512
  return folder


def _with_tokenizer(hf_checkpoints, tmp_path, tokenizer_folder):
  folder = _folder_copy(hf_checkpoints["qwen2"][1], tmp_path / "m")
  for name in os.listdir(tokenizer_folder):
    os.link(tokenizer_folder / name, folder / name)
  return folder


def test_tokenizer_larger_than_the_embedding_names_both(hf_checkpoints, tmp_path, tokenizer_600):
  folder = _with_tokenizer(hf_checkpoints, tmp_path, tokenizer_600)
  with pytest.raises(ValueError, match=rf"tokenizer \({re.escape(str(folder))}\) has \d+ tokens but the model's "
                                       rf"vocab_size \({re.escape(str(folder))}\) is 512"):
    load_model_and_tokenizer(_model_section(path=str(folder)), "", 0, make_mesh((-1, 1, 1)))


@pytest.mark.parametrize("text,error,named", [
    (None, FileNotFoundError, "no tokenizer.json in tokenizer folder: {folder}"),
    ('{"version": "1.0"', ValueError, "{folder}/tokenizer.json: cannot load the tokenizer (JSONDecodeError"),
    ('{"version": "1.0"}', ValueError, "{folder}/tokenizer.json: cannot load the tokenizer (KeyError"),
], ids=["deleted", "garbled", "incomplete"])
def test_damaged_tokenizer_in_the_model_folder_is_named(hf_checkpoints, tmp_path, tokenizer_600, text, error, named):
  """Neither the built-in tokenizer (what a model folder without tokenizer.json fell back to) nor transformers'
  vocabulary-less Qwen2Tokenizer (what `load_tokenizer` gave for one with tokenizer_config.json left)."""
  folder = _with_tokenizer(hf_checkpoints, tmp_path, tokenizer_600)
  os.remove(folder / "tokenizer.json")
  if text is not None:
    (folder / "tokenizer.json").write_text(text)
  with pytest.raises(error, match=re.escape(named.format(folder=folder))):
    load_model_and_tokenizer(_model_section(path=str(folder)), "", 0, None)


def test_a_weights_only_folder_falls_back_to_the_built_in_tokenizer_with_a_warning(hf_checkpoints, tmp_path, caplog):
  folder = _folder_copy(hf_checkpoints["qwen2"][1], tmp_path / "m")  # save_pretrained writes no tokenizer files
  with caplog.at_level(logging.WARNING, "agentopd_jax.models.loading"):
    _, _, tokenizer = load_model_and_tokenizer(_model_section(path=str(folder)), "", 0, None, builtin_vocab=300,
                                               builtin_corpus=default_corpus())
  assert f"model.path {folder} has no tokenizer files: using the built-in tokenizer" in caplog.text
  assert len(tokenizer) <= 512
