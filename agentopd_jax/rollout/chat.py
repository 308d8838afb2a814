"""Chat-template token layout for multi-turn rollouts, derived once from the tokenizer's own template.

The step-wise layout needs only `prompt_ids(text)`. The whole-trajectory layout appends each new observation as a
user turn after the model's reply, so it needs the exact text the template puts between an assistant reply and the
next user message and after it. We render a three-message probe conversation and cut it at the message contents, so
any template (Qwen2.5, Qwen3, Llama 3, the built-in one) is handled without hand-written markers.
"""
from __future__ import annotations

from typing import List, Optional, Sequence

from agentopd_jax.models.tokenizer import apply_chat_template, render_chat

_PROBE = ("\x00user-probe\x00", "\x00assistant-probe\x00", "\x00next-probe\x00")


class ChatFormat:
  """Token ids of a first prompt and of follow-up user turns, under `tokenizer`'s chat template."""

  def __init__(self, tokenizer, template_kwargs=None):
    """template_kwargs: passed to the chat template on every render (e.g. {"enable_thinking": False} for Qwen3)."""
    self.tokenizer = tokenizer
    self.template_kwargs = dict(template_kwargs or {})
    self.eos_id = tokenizer.eos_token_id
    if self.eos_id is None:
      raise ValueError("the tokenizer has no eos token; multi-turn rollouts stop each reply on it")
    text = render_chat(tokenizer, [{"role": "user", "content": _PROBE[0]},
                                   {"role": "assistant", "content": _PROBE[1]},
                                   {"role": "user", "content": _PROBE[2]}], add_generation_prompt=True,
                       **self.template_kwargs)
    after_reply = text[text.index(_PROBE[1]) + len(_PROBE[1]):]
    self._between = after_reply[:after_reply.index(_PROBE[2])]  # e.g. "<|im_end|>\n<|im_start|>user\n"
    self._after = after_reply[after_reply.index(_PROBE[2]) + len(_PROBE[2]):]  # "<|im_end|>\n<|im_start|>assistant\n"
    self._eos_text = tokenizer.eos_token
    # Tokens of the assistant header that closes every turn chunk; a too-long observation is cut before them.
    self.tail_len = len(tokenizer.encode(self._after, add_special_tokens=False))

  def prompt_ids(self, user_text: str) -> List[int]:
    """A fresh conversation with one user message and the generation prompt."""
    return apply_chat_template(self.tokenizer, [{"role": "user", "content": user_text}], **self.template_kwargs)

  def turn_ids(self, user_text: str, reply_ended_with_eos: bool) -> List[int]:
    """Tokens that follow a model reply to open the next user turn and the next assistant reply.

    The reply's own eos token (the sampler stops on it and keeps it) already closes the assistant message, so its
    text is dropped from the separator; a reply cut by the length limit gets it here instead.
    """
    between = self._between
    if reply_ended_with_eos and between.startswith(self._eos_text):
      between = between[len(self._eos_text):]
    return self.tokenizer.encode(between + user_text + self._after, add_special_tokens=False)

  def reply_ids(self, reply_text: str) -> List[int]:
    """A demonstration reply as the policy would emit it: its tokens and the closing eos."""
    return self.tokenizer.encode(reply_text, add_special_tokens=False) + [self.eos_id]


def templated_text(tokenizer, prompt_ids: Sequence[int]) -> str:
  """A prompt's chat-templated text, special tokens included (what SDAR's skill retrieval and prefixing read)."""
  return tokenizer.decode(list(prompt_ids), skip_special_tokens=False)


def raw_prefixed_ids(tokenizer, prefix: str, templated: str, max_prompt_tokens: Optional[int] = None) -> List[int]:
  """SDAR's `build_teacher_batch` prompt: `prefix` as raw text before the template's first token, re-encoded without
  adding special tokens, then left-truncated to `max_prompt_tokens` (an over-long prompt loses the prefix first)."""
  ids = tokenizer.encode(prefix + templated, add_special_tokens=False)
  return ids if max_prompt_tokens is None else ids[-max_prompt_tokens:]
