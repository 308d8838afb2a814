"""`Server`: OpenAI's /v1/chat/completions and /v1/models over a `ServedModel`, on the stdlib's threading HTTP server.

Each connection gets a thread that parses and tokenizes its request, then blocks on the `Batcher`, whose single
worker runs the batched sampler calls; so 100+ concurrent requests cost a few generate calls, and nothing beyond the
stdlib is needed. Prompts are the messages under the model's chat template (with the served chat template kwargs),
replies stop at the chat EOS, the model's own stop ids or a request's stop strings, and are decoded without special
tokens, as the rollout engine decodes them.

Guards (`http_guard`): it binds 127.0.0.1 unless told otherwise; with `api_key`, every request but /health needs
`Authorization: Bearer <key>` (else 401, OpenAI's `invalid_api_key`); a body over `max_body_bytes` gets 413 unread,
a POST without Content-Length 411, more than `max_messages` messages 400; all in OpenAI's error shape.
"""
from __future__ import annotations

import logging
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import List, Optional, Tuple
from urllib.parse import urlsplit

from agentopd_jax.http_guard import MAX_BODY_BYTES, BodyError, authorized, body_length, send_json
from agentopd_jax.models.tokenizer import apply_chat_template
from agentopd_jax.sampling.sampler import Sampler
from agentopd_jax.serve.batcher import Batcher, Closed, Job
from agentopd_jax.serve.loading import ServedModel
from agentopd_jax.serve.protocol import (MAX_MESSAGES, ChatRequest, RequestError, chat_response, model_object,
                                         models_response, parse_chat_request)

logger = logging.getLogger(__name__)

_CHAT, _MODELS = "/v1/chat/completions", "/v1/models"


class Server:
  """Serves `model` under `served_name` (default: `model.name`) on host:port (0: any free port).

  max_batch: requests per generate call. max_new_tokens: the default and the largest max_tokens a request may ask
  for (it bounds the KV cache and the compiled decode lengths). batch_wait_s: see `Batcher`. seed: the key of
  unseeded sampled requests. api_key, max_body_bytes, max_messages: the guards of the module docstring.
  """

  def __init__(self, model: ServedModel, served_name: str = "", host: str = "127.0.0.1", port: int = 8000,
               max_batch: int = 16, max_new_tokens: int = 1024, batch_wait_s: float = 0.01, seed: int = 0,
               api_key: str = "", max_body_bytes: int = MAX_BODY_BYTES, max_messages: int = MAX_MESSAGES):
    if max_new_tokens < 1:
      raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    if max_body_bytes < 1 or max_messages < 1:
      raise ValueError(f"max_body_bytes and max_messages must be >= 1, got {max_body_bytes} and {max_messages}")
    self.model, self.served_name = model, served_name or model.name
    self.host, self.port, self.max_new_tokens = host, port, max_new_tokens
    self.api_key, self.max_body_bytes, self.max_messages = api_key, max_body_bytes, max_messages
    self.context = model.config.max_position_embeddings
    self.created = int(time.time())
    tokenizer = model.tokenizer
    self.sampler = Sampler(model.config, tokenizer, pad_id=tokenizer.pad_token_id or 0, mesh=model.mesh)
    self.batcher = Batcher(self.sampler, model.params, (model.chat.eos_id,), max_batch, batch_wait_s, seed)
    self._tokenizer_lock = threading.Lock()  # HF fast tokenizers can refuse concurrent use ("Already borrowed")
    self._httpd: Optional[_HTTPServer] = None
    self._thread: Optional[threading.Thread] = None

  @property
  def generate_calls(self) -> int:
    return self.batcher.generate_calls

  def start(self) -> int:
    """Binds, starts the batcher and the HTTP thread; returns the bound port."""
    if self._httpd is not None:
      raise RuntimeError("Server.start: already started")
    try:
      self._httpd = _HTTPServer((self.host, self.port), _Handler)
    except OSError as e:
      raise OSError(e.errno, f"cannot listen on {self.host}:{self.port} (--host/--port): {e.strerror}") from e
    self._httpd.app = self
    self.port = self._httpd.server_address[1]
    self.batcher.start()
    self._thread = threading.Thread(target=self._httpd.serve_forever, name="serve-http", daemon=True)
    self._thread.start()
    logger.info("serving %r (%s) at http://%s:%d/v1", self.served_name, self.model.label, self.host, self.port)
    return self.port

  def stop(self) -> None:
    """Stops accepting requests, fails the queued ones (503) and waits for the running batch."""
    if self._httpd is None:
      return
    self._httpd.shutdown()
    self._httpd.server_close()
    self.batcher.stop()
    self._thread.join()
    self._httpd = self._thread = None

  # --- requests -------------------------------------------------------------------------------------------

  def handle(self, method: str, path: str, body: bytes) -> Tuple[int, dict]:
    """(HTTP status, JSON body) of one request; errors come back in OpenAI's shape."""
    path = urlsplit(path).path.rstrip("/")
    try:
      if path == _CHAT:
        _allow(method, "POST", path)
        return 200, self.complete(parse_chat_request(body, self.served_name, self.max_messages))
      if path == _MODELS:
        _allow(method, "GET", path)
        return 200, models_response(self.served_name, self.created)
      if path.startswith(_MODELS + "/"):
        _allow(method, "GET", path)
        name = path[len(_MODELS) + 1:]
        if name != self.served_name:
          raise RequestError(404, f"The model {name!r} does not exist; this server serves {self.served_name!r}",
                             "model", "model_not_found")
        return 200, model_object(self.served_name, self.created)
      if path == "/health":
        return 200, {"status": "ok"}
      raise RequestError(404, f"Unknown path {method} {path}; this server has POST {_CHAT} and GET {_MODELS}",
                         None, "not_found")
    except RequestError as e:
      return e.status, e.body()
    except Closed as e:
      return 503, RequestError(503, str(e), type="server_error", code="unavailable").body()
    except Exception as e:  # a bug or a failed generate call: the client hears of it, the server goes on
      logger.exception("request %s %s failed", method, path)
      return 500, RequestError(500, f"{type(e).__name__}: {e}", type="server_error", code="internal_error").body()

  def complete(self, request: ChatRequest) -> dict:
    """The chat.completion answering `request` (blocks until its batch has run)."""
    prompt = self._prompt(request)
    job = self.batcher.submit(Job(prompt, self._max_new_tokens(request, len(prompt)), request.temperature,
                                  request.top_p, request.seed, request.stop))
    if job.error is not None:
      raise job.error
    with self._tokenizer_lock:
      text = self.model.tokenizer.decode(job.tokens, skip_special_tokens=True)
    if request.stop and job.finish_reason == "stop":
      # OpenAI leaves the stop string out of the reply; the sampler stops on the token that completes it.
      text = text[:min([text.index(s) for s in request.stop if s in text], default=len(text))]
    return chat_response(self.served_name, text, job.finish_reason, len(prompt), len(job.tokens))

  def _prompt(self, request: ChatRequest) -> List[int]:
    kwargs = {**self.model.chat.template_kwargs, **(request.template_kwargs or {})}
    try:
      with self._tokenizer_lock:
        return apply_chat_template(self.model.tokenizer, request.messages, add_generation_prompt=True, **kwargs)
    except Exception as e:  # jinja's TemplateError and the template's own raise_exception (e.g. role order)
      raise RequestError(400, f"the chat template rejected the messages: {e}", "messages") from e

  def _max_new_tokens(self, request: ChatRequest, prompt_tokens: int) -> int:
    room = self.context - prompt_tokens
    if request.max_tokens is None:
      if room < 1:
        raise RequestError(400, f"the messages take {prompt_tokens} tokens, which leaves no room in the model's "
                           f"context of {self.context}", "messages", "context_length_exceeded")
      return min(self.max_new_tokens, room)
    if request.max_tokens > self.max_new_tokens:
      raise RequestError(400, f"{request.max_tokens_field}={request.max_tokens} exceeds this server's limit of "
                         f"{self.max_new_tokens} (its --max_new_tokens)", request.max_tokens_field, "invalid_value")
    if request.max_tokens > room:
      raise RequestError(400, f"the model's context is {self.context} tokens, but {prompt_tokens} in the messages + "
                         f"{request.max_tokens} in the completion were asked for", "messages",
                         "context_length_exceeded")
    return request.max_tokens


def _allow(method: str, allowed: str, path: str) -> None:
  if method != allowed:
    raise RequestError(405, f"{path} takes {allowed}, not {method}", None, "method_not_allowed")


class _HTTPServer(ThreadingHTTPServer):
  daemon_threads = True
  request_queue_size = 1024  # the listen backlog: the stdlib's 5 would refuse a burst of 100+ connections
  app: Server


class _Handler(BaseHTTPRequestHandler):
  protocol_version = "HTTP/1.1"  # keep-alive: the openai client reuses its connections
  server_version = "agentopd_jax"

  def _dispatch(self) -> None:
    app = self.server.app
    try:
      length = body_length(self.headers, app.max_body_bytes, required=self.command == "POST")
    except BodyError as e:  # the body stays unread, so the connection cannot carry another request
      return send_json(self, e.status, RequestError(e.status, e.detail, None, e.code).body(), close=True)
    # Read the body whatever the route: left unread, it would be taken for the connection's next request.
    body = self.rfile.read(length)
    if urlsplit(self.path).path.rstrip("/") != "/health" and not authorized(self.headers, app.api_key):
      error = RequestError(401, "Incorrect or missing API key: send 'Authorization: Bearer <key>' with the server's "
                           "--api_key", None, "invalid_api_key")
      return send_json(self, 401, error.body(), headers={"WWW-Authenticate": "Bearer"})
    send_json(self, *app.handle(self.command, self.path, body))

  do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _dispatch

  def log_message(self, format, *args):  # noqa: A002 (the stdlib's name)
    logger.debug("%s - %s", self.address_string(), format % args)
