"""load_model_and_tokenizer: the built-in tokenizer with an env corpus, and a random-init vocabulary that fits it."""
import pytest

from agentopd_jax.models.loading import load_model_and_tokenizer
from agentopd_jax.parallel.sharding import make_mesh


class _ModelCfg:
  path, preset, param_dtype = "", "tiny", ""


@pytest.fixture
def small_corpus(monkeypatch, tmp_path):
  """A tiny base corpus for the built-in tokenizer, cached in a tmp folder."""
  monkeypatch.setenv("AGENTOPD_CACHE", str(tmp_path))
  return ["go to drawer 1", "Nothing happens."] * 20


def test_random_init_vocab_grows_to_fit_the_tokenizer(small_corpus):
  mesh = make_mesh((-1, 1, 1))
  config, params, tok = load_model_and_tokenizer(_ModelCfg, "", 0, mesh, builtin_vocab=300, builtin_corpus=small_corpus)
  assert len(tok) <= 300 and config.vocab_size == 2048  # the preset's vocabulary already fits
  words = [f"B0{i:08d}" for i in range(2100)]
  config, params, tok = load_model_and_tokenizer(_ModelCfg, "", 0, mesh, builtin_vocab=300, builtin_corpus=small_corpus,
                                                 env_corpus=(["the poet Velmora Tashkel"] * 30, words))
  assert 2100 < len(tok) <= 2400 and config.vocab_size == 2432  # rounded up to a multiple of 128
  assert params["embedding"].shape[0] == config.vocab_size
  assert "B000002099" in tok.tokenize("click[B000002099]")
