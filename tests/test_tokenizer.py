"""Tests for agentopd_jax.models.tokenizer: the built-in BPE tokenizer on its base corpus (envs/verl_agent/corpus.py),
chat template, loading, caching."""

import hashlib
import json
import os
from pathlib import Path

import pytest

from agentopd_jax.envs.verl_agent.corpus import (
  ALFWORLD_COMMAND_WORDS,
  ALFWORLD_OBJECTS,
  ALFWORLD_RECEPTACLES,
  default_corpus,
)
from agentopd_jax.models import tokenizer as tokmod
from agentopd_jax.models.tokenizer import (
  BUILTIN_VERSION,
  BUILTIN_VOCAB_SIZE,
  IM_END,
  IM_START,
  PAD_TOKEN,
  apply_chat_template,
  build_tokenizer,
  builtin_tokenizer,
  builtin_tokenizer_dir,
  load_tokenizer,
  render_chat,
)

TINY_CORPUS = ["go to drawer 1", "You arrive at drawer 1. The drawer 1 is closed.", "Nothing happens."] * 20


@pytest.fixture(scope="module")
def built(tmp_path_factory):
  """One build on the default corpus, shared by the tests (training takes a couple of seconds)."""
  out = tmp_path_factory.mktemp("tok")
  return out, build_tokenizer(out, default_corpus())


def test_default_corpus_is_deterministic_and_verbatim():
  a, b = default_corpus(), default_corpus()
  assert a == b
  assert 1000 < len(a) < 10000
  joined = "\n".join(a)
  # verl-agent templates byte for byte: U+2011 hyphen and the trailing space after "tags. ".
  assert "WebShop e\u2011commerce environment" in joined
  assert "enclosed within <think> </think> tags. \nOnce you've finished" in joined
  assert "You are in the middle of a room. Looking quickly around you, you see a " in joined
  assert "as many times as your want" in joined  # Search-R1 prefix, typo kept
  for piece in ("countertop 1", "alarmclock 2", "Nothing happens.", "<action>", "</answer>", "<information>"):
    assert piece in joined


def test_build_is_deterministic(built, tmp_path):
  out, tok = built
  build_tokenizer(tmp_path / "again", default_corpus())
  assert (tmp_path / "again" / "tokenizer.json").read_bytes() == (out / "tokenizer.json").read_bytes()
  assert len(tok) == BUILTIN_VOCAB_SIZE  # the default corpus is rich enough to fill the requested vocab


def test_saved_folder_round_trips_through_autotokenizer(built):
  from transformers import AutoTokenizer

  out, tok = built
  assert {"tokenizer.json", "tokenizer_config.json"} <= set(os.listdir(out))
  again = AutoTokenizer.from_pretrained(str(out), local_files_only=True)
  text = "You open the fridge 1. The fridge 1 is open. In it, you see a apple 1, and a egg 1."
  assert again.encode(text, add_special_tokens=False) == tok.encode(text, add_special_tokens=False)
  assert again.chat_template == tokmod.QWEN_CHAT_TEMPLATE


@pytest.mark.parametrize(
  "text",
  [
    "You arrive at loc 3. On the countertop 1, you see a apple 1.",
    "take apple 1 from countertop 2",
    "heat egg 1 with microwave 1",
    "<think>I should open the fridge.</think>\n<action>open fridge 1</action>",
    "You are an expert autonomous agent operating in the WebShop e\u2011commerce environment. ",
    "北京是中国的首都。東京タワー 🚀",
    "  leading spaces, a , b . don 't\n\n\ttabs\r\n",
    "",
  ],
)
def test_encode_decode_is_lossless(built, text):
  _, tok = built
  ids = tok.encode(text, add_special_tokens=False)
  assert tok.decode(ids) == text


def test_bpe_learned_environment_words(built):
  _, tok = built
  # Merges came from the corpus: common ALFWorld words are single tokens, not bytes.
  assert len(tok.encode(" countertop", add_special_tokens=False)) == 1
  text = "You arrive at countertop 1. On the countertop 1, you see nothing."
  assert len(tok.encode(text, add_special_tokens=False)) < len(text.encode()) / 2.5
  # Every ALFWorld name and command word is one token wherever it occurs (after a space, a quote or a tag), so a
  # small model copies and compares whole names.
  for word in ALFWORLD_RECEPTACLES + ALFWORLD_OBJECTS + ALFWORLD_COMMAND_WORDS:
    assert len(tok.encode(" " + word, add_special_tokens=False)) == 1, word
  for word in ALFWORLD_COMMAND_WORDS:
    assert tok.encode("<action>" + word, add_special_tokens=False)[-1:] == tok.encode(word, add_special_tokens=False)
    assert len(tok.encode(word, add_special_tokens=False)) == 1, word


def test_special_tokens(built):
  _, tok = built
  assert tok.eos_token == IM_END and tok.pad_token == PAD_TOKEN
  for token, attr_id in ((IM_END, tok.eos_token_id), (PAD_TOKEN, tok.pad_token_id)):
    assert tok.encode(token, add_special_tokens=False) == [attr_id]
  im_start = tok.encode(IM_START, add_special_tokens=False)
  assert len(im_start) == 1 and len({im_start[0], tok.eos_token_id, tok.pad_token_id}) == 3
  # Specials are split out of running text and dropped by skip_special_tokens.
  ids = tok.encode(f"{IM_START}user\nhi{IM_END}", add_special_tokens=False)
  assert ids[0] == im_start[0] and ids[-1] == tok.eos_token_id
  assert tok.decode(ids, skip_special_tokens=True) == "user\nhi"
  # No BOS/EOS is added implicitly (Qwen-like), so encode() == encode(add_special_tokens=False).
  assert tok.encode("hi") == tok.encode("hi", add_special_tokens=False)


def test_chat_template_renders_chatml(built):
  _, tok = built
  msgs = [{"role": "user", "content": "hi"}]
  assert render_chat(tok, msgs) == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
  assert render_chat(tok, msgs, add_generation_prompt=False) == "<|im_start|>user\nhi<|im_end|>\n"
  turns = [{"role": r, "content": r[0].upper()} for r in ("system", "user", "assistant")]
  assert render_chat(tok, turns, add_generation_prompt=False) == (
    "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\nA<|im_end|>\n"
  )


def test_apply_chat_template_returns_plain_ids(built):
  _, tok = built
  msgs = [{"role": "user", "content": "Your task is to: put a hot potato in countertop.\ne\u2011commerce 北京"}]
  ids = apply_chat_template(tok, msgs)
  assert type(ids) is list and all(type(i) is int for i in ids)
  assert ids == tok.encode(render_chat(tok, msgs), add_special_tokens=False)
  assert ids[-3:] == tok.encode("<|im_start|>assistant\n", add_special_tokens=False)[-3:]
  assert apply_chat_template(tok, msgs, add_generation_prompt=False)[-2:] == [
    tok.eos_token_id,
    *tok.encode("\n", add_special_tokens=False),
  ]


def test_apply_chat_template_normalises_return_types():
  """v5 returns a BatchEncoding (dict-like), v4 a list; both become list[int]."""
  from transformers import BatchEncoding

  class Fake:
    def __init__(self, out):
      self.out = out

    def apply_chat_template(self, messages, tokenize, add_generation_prompt):
      assert tokenize is True
      return self.out

  assert apply_chat_template(Fake(BatchEncoding({"input_ids": [5, 6]})), []) == [5, 6]
  assert apply_chat_template(Fake({"input_ids": [7]}), []) == [7]
  assert apply_chat_template(Fake([1, 2, 3]), []) == [1, 2, 3]


def test_load_tokenizer_missing(tmp_path):
  missing = tmp_path / "no_such_tokenizer"
  with pytest.raises(FileNotFoundError, match="no_such_tokenizer"):
    load_tokenizer(missing)
  empty = tmp_path / "empty_dir"
  empty.mkdir()
  with pytest.raises(FileNotFoundError, match="empty_dir"):
    load_tokenizer(empty)


def test_builtin_tokenizer_dir_honours_env(monkeypatch, tmp_path):
  monkeypatch.setenv("AGENTOPD_CACHE", str(tmp_path / "cache"))
  assert builtin_tokenizer_dir(vocab_size=512) == tmp_path / "cache" / "tokenizer-v2-512"
  assert builtin_tokenizer_dir(tmp_path / "x", 64) == tmp_path / "x" / "tokenizer-v2-64"
  monkeypatch.delenv("AGENTOPD_CACHE")
  assert builtin_tokenizer_dir() == Path("~/.cache/agentopd_jax/tokenizer-v2-2048").expanduser()


def test_builtin_tokenizer_builds_once(monkeypatch, tmp_path):
  tok = builtin_tokenizer(TINY_CORPUS, tmp_path, vocab_size=300)
  final = builtin_tokenizer_dir(tmp_path, 300)
  assert os.listdir(tmp_path) == [final.name]  # no temp folder left behind
  mtime = (final / "tokenizer.json").stat().st_mtime_ns

  def no_rebuild(*args, **kwargs):
    raise AssertionError("builtin_tokenizer rebuilt a cached tokenizer")

  monkeypatch.setattr(tokmod, "build_tokenizer", no_rebuild)
  again = builtin_tokenizer(TINY_CORPUS, tmp_path, vocab_size=300)
  assert (final / "tokenizer.json").stat().st_mtime_ns == mtime
  assert again.encode("go to drawer 1") == tok.encode("go to drawer 1")
  assert os.path.samefile(again.name_or_path, final)


def test_builtin_tokenizer_crash_leaves_nothing(monkeypatch, tmp_path):
  def crash(out_dir, **kwargs):
    (out_dir / "tokenizer.json").write_text("{half")  # a partial write, then the crash
    raise RuntimeError("boom")

  monkeypatch.setattr(tokmod, "build_tokenizer", crash)
  with pytest.raises(RuntimeError, match="boom"):
    builtin_tokenizer(TINY_CORPUS, tmp_path, vocab_size=300)
  assert os.listdir(tmp_path) == []  # neither the final folder nor the temp folder survives


ASINS = ["B0A30923H8", "b0a30923h8", "B0YBJ47KCL", "b0ybj47kcl"]


@pytest.fixture(scope="module")
def with_words(tmp_path_factory):
  """(plain, with ASINs as whole words), both on the tiny corpus."""
  return (build_tokenizer(tmp_path_factory.mktemp("tok_plain"), TINY_CORPUS, vocab_size=300),
          build_tokenizer(tmp_path_factory.mktemp("tok_words"), TINY_CORPUS, vocab_size=300, whole_words=ASINS))


def test_whole_words_are_single_tokens_only_as_whole_words(with_words):
  plain, tok = with_words
  assert len(tok) == len(plain) + len(ASINS)
  assert tok.encode("go to drawer 1") == plain.encode("go to drawer 1")
  assert tok.tokenize("click[b0a30923h8]")[-2:] == ["b0a30923h8", "]"]
  assert "B0YBJ47KCL" in tok.tokenize("'B0YBJ47KCL' [SEP] 'x'")
  # Inside a longer word it is not one token (single_word): "xb0a30923h8" stays BPE pieces.
  assert not set(tok.tokenize("xb0a30923h8") + tok.tokenize("b0a30923h8s")) & set(ASINS)
  for text in ("click[b0a30923h8]", " b0a30923h8 and B0A30923H8.", "xb0a30923h8s", "go to drawer 1"):
    assert tok.decode(tok.encode(text)) == text


def test_env_corpus_gets_its_own_cache_folder(tmp_path):
  plain = builtin_tokenizer_dir(tmp_path, 300)
  extra = builtin_tokenizer_dir(tmp_path, 300, env_texts=["Velmora Tashkel"], whole_words=ASINS)
  assert plain.name == "tokenizer-v2-300" and extra.name.startswith("tokenizer-v2-300-") and extra != plain
  assert builtin_tokenizer_dir(tmp_path, 300, env_texts=["Velmora Tashkel"]) not in (plain, extra)
  tok = builtin_tokenizer(TINY_CORPUS, tmp_path, 300, env_texts=["the poet Velmora Tashkel"] * 50, whole_words=ASINS)
  assert os.path.samefile(tok.name_or_path, builtin_tokenizer_dir(tmp_path, 300, ["the poet Velmora Tashkel"] * 50, ASINS))
  assert tok.tokenize(" Velmora") == ["ĠVelmora"] and "b0ybj47kcl" in tok.tokenize("click[b0ybj47kcl]")


def test_builtin_tokenizer_needs_its_base_corpus(tmp_path):
  with pytest.raises(ValueError, match="base corpus"):
    builtin_tokenizer([], tmp_path, vocab_size=300)
  assert os.listdir(tmp_path) == []


# (BUILTIN_VERSION, sha256 of the base corpus as JSON). The cache folder is named by BUILTIN_VERSION, not by a hash of
# the corpus, so a corpus change (a template, an episode generator, Search-R1's prefix) needs a new BUILTIN_VERSION
# and a new digest here; otherwise cached tokenizers trained on the old corpus would be reused.
CORPUS_DIGEST = ("v2", "3aa7762527b571f021c6d9200218913c602421af36d99a337d7667e961878be2")


def test_corpus_changes_come_with_a_new_builtin_version():
  assert (BUILTIN_VERSION, hashlib.sha256(json.dumps(default_corpus()).encode()).hexdigest()) == CORPUS_DIGEST


def test_the_builtin_folder_loads_as_autotokenizer_loads_it_without_importing_torch(built):
  """`load_tokenizer(builtin=True)` takes the class that wrote the folder: the same tokenizer AutoTokenizer resolves
  (class, vocabulary, special tokens, encodings, chat rendering), and a process that loads it imports no torch."""
  import subprocess
  import sys

  from transformers import AutoTokenizer

  out, tok = built
  auto = AutoTokenizer.from_pretrained(str(out), local_files_only=True)
  assert type(tok) is type(auto) and tok.get_vocab() == auto.get_vocab()
  assert (tok.eos_token, tok.pad_token, tok.all_special_tokens) == (auto.eos_token, auto.pad_token,
                                                                    auto.all_special_tokens)
  for text in TINY_CORPUS[:3] + ["<|im_start|>user\nlook<|im_end|>", "click[b0a30923h8] ü 1.5"]:
    assert tok.encode(text) == auto.encode(text)
  chat = [{"role": "system", "content": "s"}, {"role": "user", "content": "go to drawer 1"}]
  assert render_chat(tok, chat) == render_chat(auto, chat)
  probe = ("import sys; from agentopd_jax.models.tokenizer import load_tokenizer; "
           f"load_tokenizer({str(out)!r}, builtin=True); print('torch' in sys.modules)")
  assert subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.strip() \
      == "False"
