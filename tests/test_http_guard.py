"""`http_guard.send_json`: the JSON reply both HTTP servers write, byte for byte."""
import io
import json
import logging
from http.server import BaseHTTPRequestHandler

from agentopd_jax.http_guard import send_json


class _Handler(BaseHTTPRequestHandler):
  """A handler with no socket: what it writes lands in `wfile`."""

  def __init__(self, wfile=None):  # pylint: disable=super-init-not-called
    self.wfile = wfile if wfile is not None else io.BytesIO()
    self.request_version, self.command, self.path, self.requestline = "HTTP/1.1", "POST", "/x", "POST /x HTTP/1.1"
    self.close_connection = False

  def log_message(self, format, *args):  # noqa: A002
    pass


def _split(raw: bytes):
  head, body = raw.split(b"\r\n\r\n", 1)
  lines = head.decode("latin-1").split("\r\n")
  return lines[0], [tuple(line.split(": ", 1)) for line in lines[1:]], body


def test_send_json_writes_utf8_json_with_its_length():
  payload = {"detail": "naïve", "n": [1, 2]}
  h = _Handler()
  send_json(h, 404, payload)
  status, headers, body = _split(h.wfile.getvalue())
  assert status.endswith(" 404 Not Found")
  assert body == json.dumps(payload, ensure_ascii=False).encode("utf-8") == '{"detail": "naïve", "n": [1, 2]}'.encode()
  names = [n for n, _ in headers]
  assert names[names.index("Content-Type"):] == ["Content-Type", "Content-Length"]
  assert dict(headers)["Content-Length"] == str(len(body)) and not h.close_connection


def test_compact_extra_headers_and_close():
  h = _Handler()
  send_json(h, 401, {"a": 1, "b": "é"}, close=True, headers={"WWW-Authenticate": "Bearer"}, compact=True)
  _, headers, body = _split(h.wfile.getvalue())
  assert body == '{"a":1,"b":"é"}'.encode("utf-8")
  names = [n for n, _ in headers]
  assert names[names.index("Content-Type"):] == ["Content-Type", "Content-Length", "WWW-Authenticate", "Connection"]
  assert dict(headers)["Connection"] == "close" and h.close_connection


class _Gone(io.BytesIO):
  def write(self, data):
    raise BrokenPipeError(32, "Broken pipe")


def test_a_client_that_left_is_logged_not_raised(caplog):
  with caplog.at_level(logging.INFO, logger="agentopd_jax.http_guard"):
    send_json(_Handler(_Gone()), 200, {"ok": True})
  assert "the client of POST /x left before its answer" in caplog.text
