"""Tokenizers: load a local Hugging Face tokenizer, or build a small built-in one offline.

There is no network here, so real Qwen tokenizers are only usable when someone put the files on
disk. For tests and toy runs we train a tiny byte-level BPE tokenizer on the texts the caller
gives (the env layer's corpus, `envs/verl_agent/corpus.py`: verl-agent prompts for ALFWorld /
WebShop / Search, ALFWorld feedback and commands), with Qwen's ChatML special tokens and chat
template. Byte-level BPE means *every* string (CJK, U+2011, emoji) encodes losslessly, only
less compactly.

Public API:
    load_tokenizer(path)                      local folder's tokenizer.json -> tokenizer (FileNotFoundError if absent)
    has_tokenizer(path)                       whether a folder holds any tokenizer file
    apply_chat_template(tok, messages)        -> list[int]   (hides v5's BatchEncoding return)
    render_chat(tok, messages)                -> str
    build_tokenizer(out_dir, texts, vocab, whole_words)
                                              train + save (HF format) + reload
    builtin_tokenizer(corpus, cache_dir, vocab, env_texts, whole_words)
                                              build once into a cache folder, then reuse

An env's own text (WebShop's catalogue, the search encyclopedia) can join the base corpus, so that its words
become single tokens too, and ids that must be copied character-exact (WebShop's ASINs) can be made whole tokens;
such a tokenizer is cached under a folder named by a hash of those extras. The base corpus is not hashed: it is
versioned by `BUILTIN_VERSION`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from agentopd_jax import cache

PAD_TOKEN = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"  # Qwen instruct models stop generation on <|im_end|>, so it is our eos.
SPECIAL_TOKENS = (PAD_TOKEN, IM_START, IM_END)  # order fixes their ids: 0, 1, 2

# Qwen-style ChatML without Qwen's default system prompt: prompts here are byte-exact
# environment renders, and an implicit system message would make them depend on the template.
QWEN_CHAT_TEMPLATE = (
  "{% for message in messages %}"
  "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
  "{% endfor %}"
  "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

# Names the built-in tokenizer's cache folder in place of a hash of the base corpus: bump it when that corpus
# (envs/verl_agent/corpus.py) or the training recipe changes, so stale cached tokenizers are not reused.
BUILTIN_VERSION = "v2"
# Room for every environment name and command word as one token next to the chat, WebShop and search vocabulary.
BUILTIN_VOCAB_SIZE = 2048

# Files whose presence marks a folder as meant to hold a Hugging Face tokenizer (`load_tokenizer` needs tokenizer.json).
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt", "tokenizer.model",
                    "special_tokens_map.json")


@dataclasses.dataclass(frozen=True)
class BuiltinTokenizerConfig:
  """The run config's `builtin_tokenizer` section: the tokenizer a run trains when it has no model tokenizer."""
  vocab_size: int = BUILTIN_VOCAB_SIZE  # its BPE vocabulary (a random-init model's vocab grows to fit the tokenizer)
  env_corpus: bool = False             # also train it on the env's own text (catalogue, encyclopedia) so the env's
                                       # words are single tokens, and make ids copied verbatim (ASINs) whole tokens

  def __post_init__(self):
    if type(self.vocab_size) is not int or self.vocab_size < 1:
      raise ValueError(f"builtin_tokenizer.vocab_size must be an integer >= 1, got {self.vocab_size!r}")


# --------------------------------------------------------------------------------------------
# Loading and chat templates
# --------------------------------------------------------------------------------------------


def load_tokenizer(path: str | os.PathLike, builtin: bool = False):
  """Load a tokenizer from a local folder's tokenizer.json only (never the Hub). `builtin`: a folder
  `builtin_tokenizer` wrote, loaded by the class that wrote it; AutoTokenizer's class lookup would import torch
  where it is installed, about 2 s of every run's start.

  Checked up front because AutoTokenizer, given a missing folder, treats the string as a Hub
  repo id and fails with a confusing network/offline error instead of naming the path; and,
  given a model folder without tokenizer.json, builds the config's tokenizer class with no
  vocabulary (a 3-token Qwen2Tokenizer) instead of failing. Every supported family (Qwen2,
  Qwen2.5, Qwen3, Llama 3) ships tokenizer.json.
  """
  if builtin:
    from transformers import PreTrainedTokenizerFast as loader  # heavy import (~1 s); only pay it when used
  else:
    from transformers import AutoTokenizer as loader  # also imports torch where it is installed

  folder = Path(path).expanduser()
  if not folder.is_dir():
    raise FileNotFoundError(f"tokenizer folder not found: {folder}")
  if not (folder / "tokenizer.json").is_file():
    raise FileNotFoundError(f"no tokenizer.json in tokenizer folder: {folder}")
  try:
    return loader.from_pretrained(str(folder), local_files_only=True)
  except Exception as e:  # JSONDecodeError, KeyError, TypeError, tokenizers' own: none names the file
    raise ValueError(f"{folder / 'tokenizer.json'}: cannot load the tokenizer ({type(e).__name__}: {e})") from e


def has_tokenizer(path: str | os.PathLike) -> bool:
  """Whether folder `path` holds any Hugging Face tokenizer file: a model folder that does is meant to be loaded with
  its own tokenizer, whole or not (`load_tokenizer` then names what is missing)."""
  return any((Path(path) / name).is_file() for name in _TOKENIZER_FILES)


def render_chat(tokenizer, messages: Sequence[Mapping[str, str]], add_generation_prompt: bool = True,
                **template_kwargs) -> str:
  """The chat template applied to ``messages``, as text. ``template_kwargs`` reach the template (e.g. Qwen3's
  ``enable_thinking=False``, which the verl-agent runs use)."""
  return tokenizer.apply_chat_template(list(messages), tokenize=False, add_generation_prompt=add_generation_prompt,
                                       **template_kwargs)


def apply_chat_template(
  tokenizer, messages: Sequence[Mapping[str, str]], add_generation_prompt: bool = True, **template_kwargs
) -> list[int]:
  """The chat template applied to ``messages``, as a plain list of token ids.

  transformers v5 returns a BatchEncoding (dict-like) for ``tokenize=True`` where v4 returned
  a list; normalise so callers never see the difference.
  """
  out = tokenizer.apply_chat_template(list(messages), tokenize=True, add_generation_prompt=add_generation_prompt,
                                      **template_kwargs)
  if isinstance(out, Mapping) or hasattr(out, "input_ids"):
    out = out["input_ids"]
  return [int(i) for i in out]


# --------------------------------------------------------------------------------------------
# Building
# --------------------------------------------------------------------------------------------


def build_tokenizer(out_dir: str | os.PathLike, texts: Sequence[str], vocab_size: int = BUILTIN_VOCAB_SIZE,
                    whole_words: Sequence[str] = ()):
  """Train a byte-level BPE tokenizer on ``texts``, save it in HF format to ``out_dir``, reload it.

  Returns the tokenizer as ``load_tokenizer(out_dir, builtin=True)`` gives it, so callers test exactly what
  later runs will load. ``vocab_size`` is an upper bound on the BPE vocabulary: training stops
  early when the corpus has no more pairs to merge. ``whole_words`` are added after it, one token
  each, matched only as whole words (not inside a longer word).
  """
  from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
  from transformers import PreTrainedTokenizerFast

  texts = list(texts)
  bpe = Tokenizer(models.BPE())
  # No prefix space: a leading "Ġ" would make encode(a) + encode(b) != encode(a + b) at turn starts.
  bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
  bpe.decoder = decoders.ByteLevel()
  trainer = trainers.BpeTrainer(
    vocab_size=vocab_size,
    special_tokens=list(SPECIAL_TOKENS),
    # All 256 byte symbols are in the vocab, so any UTF-8 input encodes without <unk>.
    initial_alphabet=sorted(pre_tokenizers.ByteLevel.alphabet()),
    show_progress=False,
  )
  bpe.train_from_iterator(texts, trainer=trainer)
  # Random ids such as ASINs are several BPE pieces each, and a tiny model trained from scratch copies a multi-piece
  # string from its context far less reliably than one token (docs/results.md, WebShop); as added tokens they are
  # split off before BPE, so every other string still encodes exactly as before.
  bpe.add_tokens([AddedToken(w, single_word=True, normalized=False) for w in dict.fromkeys(whole_words)])

  tok = PreTrainedTokenizerFast(
    tokenizer_object=bpe,
    eos_token=IM_END,
    pad_token=PAD_TOKEN,
    extra_special_tokens=[IM_START],
    # Cleanup rewrites " ." -> "." on decode and breaks lossless round trips; v5 already skips it
    # for BPE, but saying so in tokenizer_config.json keeps older transformers from applying it.
    clean_up_tokenization_spaces=False,
  )
  tok.chat_template = QWEN_CHAT_TEMPLATE
  out = Path(out_dir)
  out.mkdir(parents=True, exist_ok=True)
  tok.save_pretrained(str(out))
  return load_tokenizer(out, builtin=True)


def builtin_tokenizer_dir(cache_dir: str | os.PathLike | None = None, vocab_size: int = BUILTIN_VOCAB_SIZE,
                          env_texts: Sequence[str] = (), whole_words: Sequence[str] = ()) -> Path:
  """Folder the built-in tokenizer lives in: ``<cache root>/tokenizer-<version>-<vocab_size>``, with
  ``-<hash of env_texts and whole_words>`` appended when either is given.

  The cache root is ``cache_dir``, else ``$AGENTOPD_CACHE``, else ``~/.cache/agentopd_jax``.
  """
  root = cache_dir if cache_dir is not None else cache.root()
  name = f"tokenizer-{BUILTIN_VERSION}-{vocab_size}"
  if env_texts or whole_words:
    name += "-" + hashlib.sha1(json.dumps([list(env_texts), list(whole_words)]).encode()).hexdigest()[:12]
  return Path(root).expanduser() / name


def builtin_tokenizer(corpus: Sequence[str], cache_dir: str | os.PathLike | None = None,
                      vocab_size: int = BUILTIN_VOCAB_SIZE, env_texts: Sequence[str] = (),
                      whole_words: Sequence[str] = ()):
  """The built-in tokenizer, trained on the base ``corpus`` (plus ``env_texts``, with ``whole_words`` as single
  tokens) once and then loaded from the cache.

  The cache folder (`builtin_tokenizer_dir`) is named by ``BUILTIN_VERSION`` and a hash of the env extras, not by
  ``corpus``, so callers sharing a cache root must pass the same one (runs pass
  `envs.verl_agent.corpus.default_corpus()`; tests pass tiny ones under their own cache root).
  """
  if not len(corpus):
    raise ValueError("the built-in tokenizer needs its base corpus (envs.verl_agent.corpus.default_corpus())")
  final = builtin_tokenizer_dir(cache_dir, vocab_size, env_texts, whole_words)
  if not final.is_dir():
    final.parent.mkdir(parents=True, exist_ok=True)
    # Build next to the target and rename into place: the rename is atomic, so a crash
    # never leaves a half-written folder that a later call would mistake for a cache hit.
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
    try:
      build_tokenizer(tmp, texts=list(corpus) + list(env_texts), vocab_size=vocab_size,
                      whole_words=whole_words)
      try:
        os.replace(tmp, final)
      except OSError:
        if not final.is_dir():  # a concurrent builder winning the race is fine; anything else is not
          raise
    finally:
      shutil.rmtree(tmp, ignore_errors=True)
  return load_tokenizer(final, builtin=True)
