"""Request guards shared by our two HTTP servers (the retrieval server and the OpenAI-compatible one): an optional
bearer key and a bounded request body; and the one way both write a JSON reply.

Why here and stdlib-only: the retrieval server must start without JAX, and both servers must refuse the same things
the same way; each wraps the reason in its own error shape. The body size is judged from Content-Length before a
byte of the body is read, so an oversized or endless body costs the server nothing.
"""
from __future__ import annotations

import hmac
import json
import logging
import re
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler
from typing import Any, Mapping, Optional

logger = logging.getLogger(__name__)

MAX_BODY_BYTES = 8 << 20  # both servers' default --max_body_bytes: far above any legitimate request
SERVE_API_KEY_ENV = "AGENTOPD_API_KEY"  # the OpenAI-compatible server's --api_key default
_DIGITS = re.compile(r"[0-9]+")  # int() would also take "+5", " 5", "5_0" and non-ASCII digits


class BodyError(Exception):
  """A request body refused before it is read: HTTP `status`, a `detail` naming the header or flag, a short `code`."""

  def __init__(self, status: HTTPStatus, detail: str, code: str):
    super().__init__(detail)
    self.status, self.detail, self.code = status, detail, code


def body_length(headers: Mapping[str, str], limit: int, required: bool = True) -> int:
  """The declared body size: 411 when chunked, or missing where `required`; 400 when not a plain non-negative
  integer; 413 when over `limit` (the servers' --max_body_bytes). Missing and not required: 0."""
  if "chunked" in headers.get("Transfer-Encoding", "").lower():
    raise BodyError(HTTPStatus.LENGTH_REQUIRED, "chunked bodies are not supported; send a Content-Length",
                    "length_required")
  raw = headers.get("Content-Length")
  if raw is None:
    if required:
      raise BodyError(HTTPStatus.LENGTH_REQUIRED, "a Content-Length header is required", "length_required")
    return 0
  if not _DIGITS.fullmatch(raw.strip()):
    raise BodyError(HTTPStatus.BAD_REQUEST, f"Content-Length must be a non-negative integer, got {raw!r}",
                    "invalid_content_length")
  length = int(raw)
  if length > limit:
    raise BodyError(HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                    f"the body is {length} bytes, over this server's limit of {limit} (--max_body_bytes)",
                    "body_too_large")
  return length


def authorized(headers: Mapping[str, str], api_key: Optional[str]) -> bool:
  """True when no key is set, or when `Authorization: Bearer <key>` carries it. Compared in constant time, so the
  answer's timing does not tell how much of a guess was right."""
  if not api_key:
    return True
  scheme, _, token = headers.get("Authorization", "").strip().partition(" ")
  # Header values arrive decoded as latin-1: encoding back gives the bytes sent, which a client sends as UTF-8.
  return scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode("latin-1"), api_key.encode("utf-8"))


def send_json(handler: BaseHTTPRequestHandler, status: int, payload: Any, *, close: bool = False,
              headers: Optional[Mapping[str, str]] = None, compact: bool = False) -> None:
  """Answer `payload` as UTF-8 JSON with its Content-Length, then `headers`; `close` ends the connection after it.
  `compact` drops the spaces after `,` and `:` (the retrieval server's bytes). A client that left before its answer
  is logged at INFO, not raised."""
  data = json.dumps(payload, ensure_ascii=False, separators=(",", ":") if compact else None).encode("utf-8")
  try:
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    for name, value in (headers or {}).items():
      handler.send_header(name, value)
    if close:
      handler.send_header("Connection", "close")
      handler.close_connection = True
    handler.end_headers()
    handler.wfile.write(data)
  except (BrokenPipeError, ConnectionResetError):
    logger.info("the client of %s %s left before its answer", handler.command, handler.path)


def add_server_arguments(parser, api_key_env: str, protected: str) -> None:
  """The flags both servers take: where to listen, the bearer key (`protected`: which paths it guards) and the body
  limit. The key's default comes from `api_key_env`, read by the caller, so it never shows in the process list."""
  parser.add_argument("--host", default="127.0.0.1", help="interface to listen on (loopback unless exposed on purpose)")
  parser.add_argument("--port", type=int, default=8000, help="0 picks a free port (printed in the ready line)")
  parser.add_argument("--api_key", default="", help=f"require 'Authorization: Bearer <key>' on {protected}; default "
                      f"${api_key_env} (better: argv is visible to other local users); none: open")
  parser.add_argument("--max_body_bytes", type=int, default=MAX_BODY_BYTES, help="larger request bodies get 413")
