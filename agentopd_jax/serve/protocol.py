"""OpenAI chat-completions JSON in and out: request validation whose errors name the field, and response bodies.

Errors have OpenAI's shape, `{"error": {"message", "type", "param", "code"}}`, so the official client raises its
usual exceptions (`BadRequestError`, `NotFoundError`) with our message. A request field we cannot honour and that
would change what the client gets back (streaming, n > 1, log-probs, tools, a JSON response format, penalties,
logit bias) is refused with a 400 naming it rather than silently ignored; fields that change nothing we produce
(`user`, `metadata`, `store`, ...) are ignored.
"""
from __future__ import annotations

import dataclasses
import json
import time
import uuid
from typing import Optional, Tuple

ROLES = ("system", "developer", "user", "assistant", "tool")
MAX_STOP_STRINGS = 4  # OpenAI's limit
MAX_MESSAGES = 2048   # OpenAI's limit too; the default of the server's --max_messages
# Fields refused unless they hold their no-op value.
_UNSUPPORTED = {"stream": (None, False), "logprobs": (None, False), "top_logprobs": (None, 0), "tools": (None, []),
                "functions": (None, []), "presence_penalty": (None, 0), "frequency_penalty": (None, 0),
                "logit_bias": (None, {})}


class RequestError(Exception):
  """An error answered to the client: HTTP `status` and OpenAI's error body."""

  def __init__(self, status: int, message: str, param: Optional[str] = None, code: Optional[str] = None,
               type: str = "invalid_request_error"):
    super().__init__(message)
    self.status, self.message, self.param, self.code, self.type = status, message, param, code, type

  def body(self) -> dict:
    return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


@dataclasses.dataclass(frozen=True)
class ChatRequest:
  messages: Tuple[dict, ...]     # {"role", "content": str}, content parts already joined
  max_tokens: Optional[int]      # None: the server's default
  max_tokens_field: str          # "max_completion_tokens" or "max_tokens": whichever the client set (for errors)
  temperature: float = 1.0       # OpenAI's default; 0 is greedy
  top_p: float = 1.0
  seed: Optional[int] = None
  stop: Tuple[str, ...] = ()
  template_kwargs: Optional[dict] = None  # vLLM's `chat_template_kwargs` extension, over the server's


def _bad(message: str, param: Optional[str], code: str = "invalid_value") -> RequestError:
  return RequestError(400, message, param, code)


def _int(body: dict, name: str, minimum: int) -> Optional[int]:
  value = body.get(name)
  if value is None:
    return None
  if type(value) is not int or value < minimum:  # bool is an int subclass: refused too
    raise _bad(f"{name} must be an integer >= {minimum}, got {value!r}", name)
  return value


def _number(body: dict, name: str, default: float, low: float, high: float, low_open: bool = False) -> float:
  value = body.get(name)
  if value is None:
    return default
  ok = isinstance(value, (int, float)) and not isinstance(value, bool)
  if not ok or not (low < value if low_open else low <= value) or value > high:
    interval = f"{'(' if low_open else '['}{low}, {high}]"
    raise _bad(f"{name} must be a number in {interval}, got {value!r}", name)
  return float(value)


def _content(message: dict, i: int) -> str:
  content = message.get("content")
  if content is None:
    if message["role"] == "assistant":
      return ""  # an assistant turn that only called tools
    raise _bad(f"messages[{i}].content is required", f"messages[{i}].content")
  if isinstance(content, str):
    return content
  if isinstance(content, list):
    texts = []
    for j, part in enumerate(content):
      if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
        raise _bad(f"messages[{i}].content[{j}] must be a text part {{\"type\": \"text\", \"text\": ...}} (this "
                   "server serves text-only models)", f"messages[{i}].content")
      texts.append(part["text"])
    return "\n".join(texts)
  raise _bad(f"messages[{i}].content must be a string or a list of text parts", f"messages[{i}].content")


def _messages(body: dict, max_messages: int) -> Tuple[dict, ...]:
  messages = body.get("messages")
  if messages is None:
    raise _bad("messages is required", "messages", "missing_required_parameter")
  if not isinstance(messages, list) or not messages:
    raise _bad("messages must be a non-empty list", "messages")
  if len(messages) > max_messages:
    raise _bad(f"messages holds {len(messages)} messages; this server takes at most {max_messages} (its "
               "--max_messages)", "messages", "array_above_max_length")
  out = []
  for i, m in enumerate(messages):
    if not isinstance(m, dict) or m.get("role") not in ROLES:
      role = m.get("role") if isinstance(m, dict) else None
      raise _bad(f"messages[{i}].role must be one of {ROLES}, got {role!r}", f"messages[{i}].role")
    # "developer" is OpenAI's newer name for the system role; open-model templates know only "system".
    out.append({"role": "system" if m["role"] == "developer" else m["role"], "content": _content(m, i)})
  return tuple(out)


def _stop(body: dict) -> Tuple[str, ...]:
  stop = body.get("stop")
  if stop is None:
    return ()
  stops = [stop] if isinstance(stop, str) else stop
  if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops):
    raise _bad("stop must be a non-empty string or a list of them", "stop")
  if len(stops) > MAX_STOP_STRINGS:
    raise _bad(f"stop takes at most {MAX_STOP_STRINGS} strings, got {len(stops)}", "stop")
  return tuple(dict.fromkeys(stops))


def parse_chat_request(raw: bytes, served_name: str, max_messages: int = MAX_MESSAGES) -> ChatRequest:
  """A validated `ChatRequest` from a /v1/chat/completions body; a `RequestError` names the first bad field."""
  try:
    body = json.loads(raw or b"")
  except (json.JSONDecodeError, UnicodeDecodeError) as e:
    raise _bad(f"the request body is not valid JSON: {e}", None, "invalid_json") from e
  if not isinstance(body, dict):
    raise _bad("the request body must be a JSON object", None, "invalid_json")
  model = body.get("model")
  if not isinstance(model, str) or not model:
    raise _bad("model is required (a string)", "model", "missing_required_parameter")
  if model != served_name:
    raise RequestError(404, f"The model {model!r} does not exist; this server serves {served_name!r}", "model",
                       "model_not_found")
  messages = _messages(body, max_messages)
  n = body.get("n")
  if n is not None and n != 1:
    raise _bad(f"n must be 1 (one choice per request), got {n!r}; send n requests instead", "n")
  for name, allowed in _UNSUPPORTED.items():
    if name in body and body[name] not in allowed:
      raise _bad(f"{name}={body[name]!r} is not supported by this server", name, "unsupported_parameter")
  response_format = body.get("response_format")
  if response_format not in (None, {"type": "text"}):
    raise _bad(f"response_format={response_format!r} is not supported (plain text only)", "response_format",
               "unsupported_parameter")
  field = "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
  template_kwargs = body.get("chat_template_kwargs")
  if template_kwargs is not None and not isinstance(template_kwargs, dict):
    raise _bad("chat_template_kwargs must be an object", "chat_template_kwargs")
  seed = body.get("seed")
  if seed is not None and type(seed) is not int:
    raise _bad(f"seed must be an integer, got {seed!r}", "seed")
  return ChatRequest(messages=messages, max_tokens=_int(body, field, 1), max_tokens_field=field,
                     temperature=_number(body, "temperature", 1.0, 0.0, 2.0),
                     top_p=_number(body, "top_p", 1.0, 0.0, 1.0, low_open=True), seed=seed, stop=_stop(body),
                     template_kwargs=template_kwargs)


def chat_response(served_name: str, text: str, finish_reason: str, prompt_tokens: int,
                  completion_tokens: int) -> dict:
  """A `chat.completion` object with one choice. completion_tokens counts every sampled token, the stop token too."""
  return {
      "id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
      "model": served_name, "system_fingerprint": None,
      "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": None,
                   "finish_reason": finish_reason}],
      "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens},
  }


def model_object(served_name: str, created: int) -> dict:
  return {"id": served_name, "object": "model", "created": created, "owned_by": "agentopd_jax"}


def models_response(served_name: str, created: int) -> dict:
  return {"object": "list", "data": [model_object(served_name, created)]}
