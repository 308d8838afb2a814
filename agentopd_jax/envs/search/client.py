"""Client of a `/retrieve` server: ours, or a user's real Search-R1 (e5 + FAISS) or verl-agent retrieval server.

Upstream clients retry up to 10 times with linear back-off on 500/502/503/504, connection errors and timeouts;
this one retries the same failures with exponential back-off (capped), keeps one keep-alive connection per thread,
and raises `RetrievalError` naming the URL once the retries are spent, or at once for a 4xx answer, which a retry
cannot fix. `request_style="query"` sends verl-agent's one-query shape for servers that only accept that. `api_key`
goes out as `Authorization: Bearer <key>` (our server's --api_key, or a proxy's in front of a real one).
"""
from __future__ import annotations

import http.client
import json
import threading
import time
import urllib.parse
import urllib.request
from typing import Any, List, Optional, Sequence

RETRY_STATUSES = (500, 502, 503, 504)
REQUEST_STYLES = ("queries", "query")
API_KEY_ENV = "AGENTOPD_SEARCH_API_KEY"  # our server's --api_key default, and the key a training run's envs send


class RetrievalError(RuntimeError):
  """A retrieval request that failed for good; the message names the URL and the last failure."""


def health(url: str, timeout_s: float = 2.0) -> dict:
  """GET /health of our server (`url` may be its /retrieve URL); raises OSError when it does not answer 200."""
  parts = urllib.parse.urlsplit(url)
  with urllib.request.urlopen(f"{parts.scheme}://{parts.netloc}/health", timeout=timeout_s) as response:
    return json.loads(response.read())


class RetrievalClient:
  """`retrieve(queries)` -> one hit list per query, as the server's `result`; thread-safe."""

  def __init__(self, url: str = "http://127.0.0.1:8000/retrieve", topk: int = 3, timeout_s: float = 60.0,
               retries: int = 6, backoff_s: float = 0.5, max_backoff_s: float = 8.0, request_style: str = "queries",
               api_key: Optional[str] = None):
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
      raise ValueError(f"retrieval URL must be http(s)://host[:port]/path, got {url!r}")
    if request_style not in REQUEST_STYLES:
      raise ValueError(f"request_style must be one of {REQUEST_STYLES}, got {request_style!r}")
    self.url, self.topk, self.timeout_s = url, topk, timeout_s
    self.retries, self.backoff_s, self.max_backoff_s = retries, backoff_s, max_backoff_s
    self.request_style = request_style
    self._headers = {"Content-Type": "application/json", "Accept": "application/json"}
    if api_key:
      self._headers["Authorization"] = f"Bearer {api_key}"
    self._parts = parts
    self._local = threading.local()

  def retrieve(self, queries: Sequence[str], topk: Optional[int] = None,
               return_scores: bool = True) -> List[List[Any]]:
    topk = topk or self.topk
    if self.request_style == "query":
      return [self._post({"query": q, "topk": topk, "return_scores": return_scores}, 1)[0] for q in queries]
    return self._post({"queries": list(queries), "topk": topk, "return_scores": return_scores}, len(queries))

  def close(self):
    """Closes the calling thread's connection (the next request reopens one)."""
    conn = getattr(self._local, "conn", None)
    if conn is not None:
      conn.close()
      self._local.conn = None

  # ------------------------------------------------------------------------------------------ transport
  def _connection(self) -> http.client.HTTPConnection:
    conn = getattr(self._local, "conn", None)
    if conn is None:
      cls = http.client.HTTPSConnection if self._parts.scheme == "https" else http.client.HTTPConnection
      conn = self._local.conn = cls(self._parts.hostname, self._parts.port, timeout=self.timeout_s)
    return conn

  def _post(self, payload: dict, expected: int) -> List[List[Any]]:
    body = json.dumps(payload).encode("utf-8")
    path = self._parts.path or "/"
    last = "no attempt made"
    for attempt in range(self.retries + 1):
      if attempt:
        time.sleep(min(self.backoff_s * 2 ** (attempt - 1), self.max_backoff_s))
      try:
        status, data = self._exchange(path, body)
      except (OSError, http.client.HTTPException) as e:
        last = f"{type(e).__name__}: {e}"
        continue
      if status in RETRY_STATUSES:
        last = f"HTTP {status}: {data[:200]!r}"
        continue
      if status != 200:
        raise RetrievalError(f"retrieval server {self.url} rejected the request (HTTP {status}): "
                             f"{data[:500].decode('utf-8', 'replace')}")
      try:
        result = json.loads(data)["result"]
      except (ValueError, KeyError, TypeError) as e:
        raise RetrievalError(f"retrieval server {self.url} answered without a JSON 'result': {data[:200]!r}") from e
      if not isinstance(result, list) or len(result) != expected:
        raise RetrievalError(f"retrieval server {self.url} answered {type(result).__name__} of "
                             f"{len(result) if isinstance(result, list) else '?'} lists for {expected} queries")
      return result
    raise RetrievalError(f"retrieval request to {self.url} failed after {self.retries + 1} attempts "
                         f"(timeout {self.timeout_s:g} s); last error: {last}")

  def _exchange(self, path: str, body: bytes):
    """One request; a kept-alive connection the server has since closed is reopened once, without back-off."""
    conn = self._connection()
    if conn.sock is None:
      return self._once(conn, path, body)
    try:
      return self._once(conn, path, body)
    except (OSError, http.client.HTTPException):
      return self._once(self._connection(), path, body)

  def _once(self, conn: http.client.HTTPConnection, path: str, body: bytes):
    try:
      conn.request("POST", path, body=body, headers=self._headers)
      response = conn.getresponse()
      data = response.read()
    except (OSError, http.client.HTTPException):
      self.close()
      raise
    if response.getheader("Connection", "").lower() == "close":
      self.close()
    return response.status, data
