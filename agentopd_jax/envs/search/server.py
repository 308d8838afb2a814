"""The retrieval server: Search-R1's `POST /retrieve` API over HTTP on loopback, with BM25 over a wiki-18 JSONL.

  python -m agentopd_jax.envs.search.server --port 8000                       # the bundled encyclopedia (seed 0)
  python -m agentopd_jax.envs.search.server --corpus wiki-18.jsonl --port 8000 --topk 3

Requests (both upstream shapes, environments.md §4.4):
  {"queries": ["q1", ...], "topk": 3, "return_scores": true}     Search-R1
  {"query": "q", "topk": 3, "return_scores": true}               verl-agent (one query)
Answer: {"result": [[{"document": {"id", "contents"}, "score": s}, ...], ...]}, one list per query; bare documents
when `return_scores` is false (the default, as upstream). `topk` missing, null or 0 falls back to `--topk`.
Malformed bodies get 400 (not JSON) or 422 (wrong fields, over `--max_queries` queries) with `{"detail": "..."}`, as
FastAPI would; a body over `--max_body_bytes` gets 413 unread, one without Content-Length 411. `GET /health` answers
`{"status": "ok", "documents": n}`.

Access: it binds 127.0.0.1 unless `--host` says otherwise. With `--api_key` (or $AGENTOPD_SEARCH_API_KEY), a
`/retrieve` request without `Authorization: Bearer <key>` gets 401; /health stays open for readiness probes.

Why the standard library: the API is one endpoint, `ThreadingHTTPServer` serves it without new dependencies, and
keep-alive (HTTP/1.1) keeps per-request overhead to a fraction of a millisecond on loopback. `serve()` runs it in a
thread or a subprocess for tests, benchmarks and envs, and waits until it answers.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import subprocess
import sys
import tempfile
import threading
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

from agentopd_jax.envs.search.client import API_KEY_ENV, health
from agentopd_jax.envs.search.retriever import BM25Retriever, read_corpus
from agentopd_jax.envs.search.world import generate_world
from agentopd_jax.http_guard import (MAX_BODY_BYTES, BodyError, add_server_arguments, authorized, body_length,
                                    send_json)

logger = logging.getLogger(__name__)
MAX_QUERIES = 4096  # the default of --max_queries
READY_PREFIX = "retrieval server ready at "


class RequestError(Exception):
  def __init__(self, status: HTTPStatus, detail: str):
    super().__init__(detail)
    self.status, self.detail = status, detail


def parse_request(body: bytes, max_queries: int = MAX_QUERIES) -> Tuple[List[str], Optional[int], bool]:
  """(queries, topk or None, return_scores) of a request body, or RequestError (400/422) saying what is wrong."""
  try:
    request = json.loads(body.decode("utf-8"))
  except (UnicodeDecodeError, ValueError, RecursionError) as e:
    raise RequestError(HTTPStatus.BAD_REQUEST, f"body is not valid UTF-8 JSON: {e}") from None
  if not isinstance(request, dict):
    raise RequestError(HTTPStatus.UNPROCESSABLE_ENTITY, "body must be a JSON object")
  has_queries, has_query = "queries" in request, "query" in request
  if has_queries == has_query:
    raise RequestError(HTTPStatus.UNPROCESSABLE_ENTITY, "give exactly one of 'queries' (a list of strings) or 'query'")
  queries = request["queries"] if has_queries else [request["query"]]
  if not isinstance(queries, list) or not all(isinstance(q, str) for q in queries):
    raise RequestError(HTTPStatus.UNPROCESSABLE_ENTITY,
                       "'queries' must be a list of strings" if has_queries else "'query' must be a string")
  if len(queries) > max_queries:
    raise RequestError(HTTPStatus.UNPROCESSABLE_ENTITY, f"'queries' holds {len(queries)} queries; this server takes "
                       f"at most {max_queries} per request (--max_queries)")
  topk = request.get("topk")
  if topk is not None and (isinstance(topk, bool) or not isinstance(topk, int) or topk < 0):
    raise RequestError(HTTPStatus.UNPROCESSABLE_ENTITY, "'topk' must be a non-negative integer or null")
  return_scores = request.get("return_scores", False)
  if not isinstance(return_scores, bool):
    raise RequestError(HTTPStatus.UNPROCESSABLE_ENTITY, "'return_scores' must be true or false")
  return queries, topk, return_scores


class _Handler(BaseHTTPRequestHandler):
  protocol_version = "HTTP/1.1"  # keep-alive: clients reuse one connection for many requests
  server_version = "agentopd-retrieval/1"
  timeout = 60  # an idle keep-alive connection frees its thread after this many seconds
  disable_nagle_algorithm = True  # headers and body leave in two writes: Nagle + delayed ACK would add 40 ms

  def do_POST(self):
    if self.path.split("?", 1)[0] != "/retrieve":
      return self._send(HTTPStatus.NOT_FOUND, {"detail": f"no endpoint {self.path}; POST /retrieve"}, drain=True)
    try:
      length = body_length(self.headers, self.server.max_body_bytes)
    except BodyError as e:  # the body stays unread: the connection cannot be reused
      return self._send(e.status, {"detail": e.detail}, close=True)
    body = self.rfile.read(length)
    if not authorized(self.headers, self.server.api_key):
      return self._send(HTTPStatus.UNAUTHORIZED, {"detail": "missing or wrong API key: send 'Authorization: Bearer "
                        "<key>' (the server's --api_key)"}, headers={"WWW-Authenticate": "Bearer"})
    try:
      queries, topk, return_scores = parse_request(body, self.server.max_queries)
    except RequestError as e:
      return self._send(e.status, {"detail": e.detail})
    try:
      result = self.server.retriever.retrieve(queries, topk, return_scores)
    except Exception as e:  # a retriever bug must answer 500, not kill the connection without a reply
      logger.exception("retrieval failed")
      return self._send(HTTPStatus.INTERNAL_SERVER_ERROR, {"detail": f"retrieval failed: {e}"})
    self._send(HTTPStatus.OK, {"result": result})

  def do_GET(self):
    path = self.path.split("?", 1)[0]
    if path == "/health":
      return self._send(HTTPStatus.OK, {"status": "ok", "documents": len(self.server.retriever)}, drain=True)
    self._send(HTTPStatus.METHOD_NOT_ALLOWED if path == "/retrieve" else HTTPStatus.NOT_FOUND,
               {"detail": "POST /retrieve, or GET /health"}, drain=True)

  def do_PUT(self):
    self._send(HTTPStatus.METHOD_NOT_ALLOWED, {"detail": "POST /retrieve, or GET /health"}, drain=True)

  do_DELETE = do_PATCH = do_PUT

  def send_error(self, code, message=None, explain=None):
    """http.server's own errors (bad request line, oversized headers, unknown method) as JSON too."""
    if code == HTTPStatus.NOT_IMPLEMENTED:  # an unknown method is the client's mistake: answer 4xx
      code = HTTPStatus.METHOD_NOT_ALLOWED
    try:
      phrase = HTTPStatus(code).phrase
    except ValueError:
      phrase = "error"
    self._send(code, {"detail": message or phrase}, close=True)

  def _send(self, status: HTTPStatus, payload: Dict[str, Any], close: bool = False, drain: bool = False,
            headers: Optional[Dict[str, str]] = None):
    if drain:  # a body we did not read would be parsed as the next request on this connection
      try:
        self.rfile.read(body_length(self.headers, self.server.max_body_bytes, required=False))
      except BodyError:
        close = True
    send_json(self, status, payload, close=close, headers=headers, compact=True)

  def log_message(self, fmt, *args):
    logger.debug("%s - %s", self.address_string(), fmt % args)


class RetrievalHTTPServer(ThreadingHTTPServer):
  daemon_threads = True
  request_queue_size = 256  # bursts from a large rollout batch must queue, not be refused

  def __init__(self, retriever: BM25Retriever, host: str = "127.0.0.1", port: int = 0, api_key: Optional[str] = None,
               max_body_bytes: int = MAX_BODY_BYTES, max_queries: int = MAX_QUERIES):
    if max_body_bytes < 1 or max_queries < 1:
      raise ValueError(f"--max_body_bytes and --max_queries must be >= 1, got {max_body_bytes} and {max_queries}")
    self.retriever, self.api_key = retriever, api_key or None
    self.max_body_bytes, self.max_queries = max_body_bytes, max_queries
    super().__init__((host, port), _Handler)

  @property
  def url(self) -> str:
    host, port = self.server_address[:2]
    return f"http://{host}:{port}/retrieve"


def load_retriever(corpus: Optional[str] = None, seed: int = 0, topk: int = 3) -> BM25Retriever:
  """BM25 over a JSONL corpus, or over the bundled encyclopedia of `seed` when no corpus is given."""
  return BM25Retriever(read_corpus(corpus) if corpus else generate_world(seed).passages, topk)


def _wait_healthy(url: str, deadline: float, proc: Optional[subprocess.Popen] = None):
  while True:
    try:
      health(url, timeout_s=2.0)
      return
    except OSError as e:
      if proc is not None and proc.poll() is not None:
        raise RuntimeError(f"the retrieval server exited with code {proc.returncode} before answering") from e
      if time.monotonic() > deadline:
        raise TimeoutError(f"the retrieval server at {url} did not answer /health in time: {e}") from e
      time.sleep(0.05)


@contextlib.contextmanager
def serve(corpus: Optional[str] = None, *, seed: int = 0, topk: int = 3, host: str = "127.0.0.1", port: int = 0,
          mode: str = "thread", startup_timeout_s: float = 120.0, retriever: Optional[BM25Retriever] = None,
          api_key: Optional[str] = None) -> Iterator[str]:
  """Runs a retrieval server until the block exits and yields its `/retrieve` URL once it answers.

  mode "thread": in this process (a prebuilt `retriever` may be passed); "process": `python -m` this module in a
  subprocess, as a user would start it, reading its port from its ready line (port 0 picks a free one); the
  `api_key` reaches it through $AGENTOPD_SEARCH_API_KEY, not argv, which any local user can read.
  """
  if mode == "thread":
    server = RetrievalHTTPServer(retriever or load_retriever(corpus, seed, topk), host, port, api_key)
    thread = threading.Thread(target=server.serve_forever, name="retrieval-server", daemon=True)
    thread.start()
    try:
      _wait_healthy(server.url, time.monotonic() + startup_timeout_s)
      yield server.url
    finally:
      server.shutdown()
      server.server_close()
      thread.join(5.0)
    return
  if mode != "process":
    raise ValueError(f"serve mode must be 'thread' or 'process', got {mode!r}")
  cmd = [sys.executable, "-m", "agentopd_jax.envs.search.server", "--host", host, "--port", str(port),
         "--topk", str(topk), "--seed", str(seed)] + (["--corpus", corpus] if corpus else [])
  env = {k: v for k, v in os.environ.items() if k != API_KEY_ENV}  # exactly `api_key`, not one exported earlier
  if api_key:
    env[API_KEY_ENV] = api_key
  with tempfile.TemporaryFile() as stderr:
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=stderr, text=True, env=env)
    try:
      url = _read_ready_line(proc, time.monotonic() + startup_timeout_s, stderr)
      _wait_healthy(url, time.monotonic() + startup_timeout_s, proc)
      yield url
    finally:
      proc.terminate()
      try:
        proc.wait(10.0)
      except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
      proc.stdout.close()


def _read_ready_line(proc: subprocess.Popen, deadline: float, stderr) -> str:
  """The URL from the server's ready line; the server's stderr tail in the error if it dies first."""
  box: List[str] = []
  reader = threading.Thread(target=lambda: box.append(proc.stdout.readline()), daemon=True)
  reader.start()
  reader.join(max(0.0, deadline - time.monotonic()))
  line = box[0] if box else ""
  if not line.startswith(READY_PREFIX):
    proc.kill()
    proc.wait()
    stderr.seek(0)
    tail = stderr.read().decode("utf-8", "replace")[-2000:]
    raise RuntimeError(f"the retrieval server did not start (exit code {proc.returncode}); stderr:\n{tail}")
  return line[len(READY_PREFIX):].strip()


def _parser() -> argparse.ArgumentParser:
  parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
  parser.add_argument("--corpus", default="", help="wiki-18-format JSONL; default: the bundled encyclopedia")
  parser.add_argument("--seed", type=int, default=0, help="seed of the bundled encyclopedia (without --corpus)")
  parser.add_argument("--topk", type=int, default=3, help="results per query when a request gives no topk")
  add_server_arguments(parser, API_KEY_ENV, "/retrieve")  # Search-R1 binds 0.0.0.0; loopback is safer
  parser.add_argument("--max_queries", type=int, default=MAX_QUERIES, help="more queries per request get 422")
  return parser


def main(argv: Optional[Sequence[str]] = None):
  args = _parser().parse_args(argv)
  retriever = load_retriever(args.corpus or None, args.seed, args.topk)
  level = os.environ.get("LOGLEVEL") or "WARNING"
  logging.basicConfig(level=level)
  logging.getLogger("bm25s").setLevel(level)  # importing bm25s sets its logger to DEBUG
  server = RetrievalHTTPServer(retriever, args.host, args.port, args.api_key or os.environ.get(API_KEY_ENV),
                               args.max_body_bytes, args.max_queries)
  print(READY_PREFIX + server.url, flush=True)
  try:
    server.serve_forever()
  except KeyboardInterrupt:
    pass
  finally:
    server.server_close()


if __name__ == "__main__":
  main()
