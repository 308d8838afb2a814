"""Retrieval server and client: both request shapes, topk and scores, 4xx errors, fuzzing, load, launch, retries,
loopback binding, the API key, body and batch limits, and a server restarted under a client."""
import concurrent.futures
import http.client
import inspect
import json
import socket
import threading
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import raw_exchange
from agentopd_jax.envs.search.client import RetrievalClient, RetrievalError, health
from agentopd_jax.envs.search.retriever import BM25Retriever
from agentopd_jax.envs.search.server import RetrievalHTTPServer, _parser, serve
from agentopd_jax.envs.search.world import generate_world, passage_title

SUBJECT = "Foia Haesson"  # a film director of world seed 0
KEY = "s3cret-key"


@pytest.fixture(scope="module")
def retriever():
  return BM25Retriever(generate_world(0).passages)


@pytest.fixture(scope="module")
def url(retriever):
  with serve(retriever=retriever) as u:
    yield u


def post(url, payload, raw: bytes = None, path: str = None, method: str = "POST", headers=None, key: str = None):
  """(status, parsed JSON body) over a fresh connection."""
  parts = urllib.parse.urlsplit(url)
  conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
  body = raw if raw is not None else json.dumps(payload).encode()
  headers = headers or {"Content-Type": "application/json"}
  if key is not None:
    headers = {**headers, "Authorization": f"Bearer {key}"}
  conn.request(method, path or parts.path, body=body, headers=headers)
  response = conn.getresponse()
  data = response.read()
  conn.close()
  return response.status, json.loads(data)


def test_search_r1_shape_with_scores(url):
  status, body = post(url, {"queries": [f"{SUBJECT} born", "Sisary capital"], "topk": 2, "return_scores": True})
  assert status == 200 and list(body) == ["result"] and len(body["result"]) == 2
  for hits in body["result"]:
    assert len(hits) == 2
    for hit in hits:
      assert list(hit) == ["document", "score"] and list(hit["document"]) == ["id", "contents"]
      assert isinstance(hit["score"], float) and hit["document"]["contents"].startswith('"')
    assert hits[0]["score"] >= hits[1]["score"]
  top = body["result"][0][0]["document"]["contents"]
  assert passage_title(top) == SUBJECT and top.startswith(f'"{SUBJECT}"\n{SUBJECT} ')


def test_verl_agent_shape_and_defaults(url):
  status, body = post(url, {"query": f"{SUBJECT} born"})
  assert status == 200 and len(body["result"]) == 1
  hits = body["result"][0]
  assert len(hits) == 3 and all(list(h) == ["id", "contents"] for h in hits)  # default topk 3, bare documents
  for topk in (None, 0):
    assert len(post(url, {"queries": ["Sisary"], "topk": topk})[1]["result"][0]) == 3
  assert len(post(url, {"queries": ["Sisary"], "topk": 7})[1]["result"][0]) == 7
  assert post(url, {"queries": []}) == (200, {"result": []})
  assert post(url, {"queries": ["zzzzqx", "the of a"]}) == (200, {"result": [[], []]})  # no shared term, no hit
  with_scores = post(url, {"query": f"{SUBJECT} born", "return_scores": True})[1]["result"][0]
  assert [h["document"] for h in with_scores] == hits


def test_same_answer_as_in_process(url, retriever):
  queries = [f"{SUBJECT} born", "film directed by", "Sisary currency"]
  assert post(url, {"queries": queries, "topk": 5, "return_scores": True})[1]["result"] == retriever.retrieve(
      queries, 5, True)


@pytest.mark.parametrize("payload, raw, status", [
    (None, b"{not json", 400),
    (None, b"\xff\xfe", 400),
    ([1, 2], None, 422),
    ({}, None, 422),
    ({"queries": ["a"], "query": "b"}, None, 422),
    ({"queries": "a"}, None, 422),
    ({"queries": ["a", 3]}, None, 422),
    ({"query": ["a"]}, None, 422),
    ({"queries": ["a"], "topk": -1}, None, 422),
    ({"queries": ["a"], "topk": "3"}, None, 422),
    ({"queries": ["a"], "topk": True}, None, 422),
    ({"queries": ["a"], "return_scores": "yes"}, None, 422),
])
def test_malformed_requests_get_4xx_json(url, payload, raw, status):
  got, body = post(url, payload, raw)
  assert got == status and isinstance(body["detail"], str)


def test_wrong_path_and_method(url):
  assert post(url, {"queries": ["a"]}, path="/search")[0] == 404
  assert post(url, None, raw=b"", method="GET")[0] == 405
  assert post(url, {"queries": ["a"]}, method="PUT")[0] == 405
  assert post(url, None, raw=b"", method="BREW")[0] == 405
  assert health(url)["documents"] > 1000


def test_keep_alive_connection_survives_errors(url):
  parts = urllib.parse.urlsplit(url)
  conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
  for method, path, body, status in [("POST", "/retrieve", b"{bad", 400), ("GET", "/health", b"a body", 200),
                                     ("POST", "/nope", b'{"queries": []}', 404), ("PUT", "/retrieve", b"x", 405),
                                     ("POST", "/retrieve", b'{"queries": ["Sisary"]}', 200)]:
    conn.request(method, path, body=body)
    response = conn.getresponse()
    response.read()
    assert response.status == status, (method, path, body)
  conn.close()
  assert post(url, None, raw=b"[" * 100000 + b"]" * 100000)[0] == 400  # nested too deep for the JSON parser
  with socket.create_connection((parts.hostname, parts.port), timeout=5) as sock:
    sock.sendall(b"POST /retrieve HTTP/1.1\r\nHost: x\r\nContent-Length: -5\r\n\r\n")
    assert sock.recv(100).startswith(b"HTTP/1.1 400 ")


def test_binds_loopback_by_default(url):
  assert urllib.parse.urlsplit(url).hostname == "127.0.0.1"
  assert _parser().parse_args([]).host == "127.0.0.1"
  for fn in (serve, RetrievalHTTPServer):
    assert inspect.signature(fn).parameters["host"].default == "127.0.0.1"


@pytest.fixture(scope="module")
def guarded(retriever):
  """A server with an API key, a 4 KiB body limit and at most 3 queries per request."""
  server = RetrievalHTTPServer(retriever, api_key=KEY, max_body_bytes=4096, max_queries=3)
  thread = threading.Thread(target=server.serve_forever, daemon=True)
  thread.start()
  yield server.url
  server.shutdown()
  server.server_close()
  thread.join(5.0)


def test_api_key_is_required_when_set(guarded, retriever):
  query = {"queries": [f"{SUBJECT} born"], "topk": 3, "return_scores": True}
  for headers in (None, {"Authorization": "Bearer wrong"}, {"Authorization": f"Basic {KEY}"},
                  {"Authorization": KEY}):
    status, body = post(guarded, query, headers=headers)
    assert status == 401 and "API key" in body["detail"], headers
  assert post(guarded, query, key=KEY) == (200, {"result": retriever.retrieve(query["queries"], 3, True)})
  assert post(guarded, query, headers={"Authorization": f"bearer  {KEY} "})[0] == 200  # the scheme in any case
  assert health(guarded)["status"] == "ok"  # readiness probes need no key
  assert RetrievalClient(guarded, api_key=KEY).retrieve(query["queries"]) == retriever.retrieve(query["queries"], 3,
                                                                                                True)
  with pytest.raises(RetrievalError, match="HTTP 401.*API key"):
    RetrievalClient(guarded, retries=3, backoff_s=10.0).retrieve(["q"])  # a 4xx is not retried: no 30 s wait
  parts = urllib.parse.urlsplit(guarded)
  conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)  # a 401 keeps the connection usable
  for key, status in ((None, 401), (KEY, 200)):
    conn.request("POST", parts.path, body=json.dumps(query), headers={"Authorization": f"Bearer {key}"} if key else {})
    response = conn.getresponse()
    assert (response.status, response.getheader("WWW-Authenticate")) == (status, "Bearer" if key is None else None)
    response.read()
  conn.close()


def test_body_and_batch_limits(guarded):
  status, body = post(guarded, {"queries": ["a", "b", "c", "d"]}, key=KEY)
  assert status == 422 and "'queries' holds 4" in body["detail"] and "--max_queries" in body["detail"]
  assert post(guarded, {"queries": ["a", "b", "c"]}, key=KEY)[0] == 200
  head = "POST /retrieve HTTP/1.1\r\nHost: x\r\n{}\r\n\r\n"
  for header, status, needle in [("Content-Length: 100000000", 413, "--max_body_bytes"),  # refused unread
                                 ("X-No-Length: 1", 411, "Content-Length"),
                                 ("Content-Length: 5_0", 400, "Content-Length"),
                                 ("Transfer-Encoding: chunked", 411, "chunked")]:
    reply = raw_exchange(urllib.parse.urlsplit(guarded).port, head.format(header).encode())  # returns: the server closed the connection
    assert reply.startswith(f"HTTP/1.1 {status} ".encode()), reply
    assert needle in json.loads(reply.split(b"\r\n\r\n", 1)[1])["detail"]
  assert post(guarded, None, raw=b"{not json", key=KEY)[0] == 400


JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                    max_leaves=12)
REQUESTS = st.fixed_dictionaries({}, optional={"queries": JSON | st.lists(st.text(max_size=40), max_size=5),
                                               "query": JSON | st.text(max_size=40), "topk": JSON | st.integers(-2, 60),
                                               "return_scores": JSON})


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(request=REQUESTS | JSON, raw=st.none() | st.binary(max_size=64))
def test_fuzzed_requests_never_crash(url, request, raw):
  status, body = post(url, request, raw)
  assert status in (200, 400, 422)
  if status == 200:
    queries = request.get("queries", [request.get("query")])
    assert len(body["result"]) == len(queries)
  else:
    assert "detail" in body


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(garbage=st.binary(min_size=1, max_size=200))
def test_garbage_on_the_socket_is_survived(url, garbage):
  parts = urllib.parse.urlsplit(url)
  with socket.create_connection((parts.hostname, parts.port), timeout=5) as sock:
    sock.sendall(garbage + b"\r\n\r\n")
    sock.shutdown(socket.SHUT_WR)
    reply = b""
    while chunk := sock.recv(65536):
      reply += chunk
  # It answers with a status line, or for a one-word request line (HTTP/0.9 style) with the bare JSON error.
  assert not reply or reply.startswith(b"HTTP/") or "detail" in json.loads(reply)
  assert health(url)["status"] == "ok"


def test_load_1000_requests_from_a_thread_pool(url, retriever):
  client = RetrievalClient(url, retries=0)
  queries = [f"{e} born" for e in ("Foia Haesson", "Sisary", "Shaton", "Kouburg")]
  expected = {q: retriever.retrieve([q], 3, True)[0] for q in queries}

  def one(i):
    q = queries[i % len(queries)]
    return q, client.retrieve([q])[0]

  start = time.perf_counter()
  with concurrent.futures.ThreadPoolExecutor(16) as pool:
    results = list(pool.map(one, range(1000)))
  elapsed = time.perf_counter() - start
  assert all(hits == expected[q] for q, hits in results)
  assert elapsed < 30, f"1000 requests took {elapsed:.1f} s"


def test_client_survives_a_server_restart_on_the_same_port():
  """The server process is killed and restarted between calls: a kept-alive connection is reopened at once (even
  with no retries), and a call made while it is down retries with back-off until it is back. Both servers take their
  key from the environment, as a user would start them."""
  query = [f"{SUBJECT} born"]
  with concurrent.futures.ThreadPoolExecutor(1) as pool:  # `patient` keeps its connection in this one thread
    with serve(mode="process", api_key=KEY) as u:
      steady = RetrievalClient(u, retries=0, api_key=KEY)
      patient = RetrievalClient(u, retries=40, backoff_s=0.05, max_backoff_s=0.5, api_key=KEY)
      first = steady.retrieve(query)
      assert pool.submit(patient.retrieve, query).result() == first
      assert post(u, {"queries": query})[0] == 401
    pending = pool.submit(patient.retrieve, query)  # the server is gone: refused, backing off
    time.sleep(0.3)
    assert not pending.done()
    with serve(mode="process", port=urllib.parse.urlsplit(u).port, api_key=KEY) as again:
      assert again == u
      assert steady.retrieve(query) == first
      assert pending.result(timeout=60) == first


def test_subprocess_server_started_by_one_command():
  with serve(mode="process", topk=2) as u:
    assert RetrievalClient(u).retrieve([f"{SUBJECT} born"])[0][0]["document"]["contents"].startswith(f'"{SUBJECT}"')
    hits = RetrievalClient(u, request_style="query").retrieve(["Sisary", "Shaton"], return_scores=False)
    assert [passage_title(h[0]["contents"]) for h in hits] == ["Sisary", "Shaton"]
    assert len(post(u, {"queries": ["Sisary"]})[1]["result"][0]) == 2  # the server's --topk
  with pytest.raises(OSError):
    health(u, timeout_s=1.0)


class _Flaky(BaseHTTPRequestHandler):
  """Answers 503 to the first `failures` requests, then a valid result; counts requests."""
  failures, count, status = 2, 0, 503

  def do_POST(self):
    type(self).count += 1
    self.rfile.read(int(self.headers["Content-Length"]))
    ok = type(self).count > type(self).failures
    data = json.dumps({"result": [[]]} if ok else {"detail": "busy"}).encode()
    self.send_response(200 if ok else type(self).status)
    self.send_header("Content-Length", str(len(data)))
    self.end_headers()
    self.wfile.write(data)

  def log_message(self, *args):
    pass


@pytest.fixture
def flaky():
  server = ThreadingHTTPServer(("127.0.0.1", 0), _Flaky)
  threading.Thread(target=server.serve_forever, daemon=True).start()
  _Flaky.count = 0
  yield server, f"http://127.0.0.1:{server.server_address[1]}/retrieve"
  server.shutdown()
  server.server_close()


def test_client_retries_5xx_with_backoff(flaky):
  _, u = flaky
  _Flaky.failures, _Flaky.status = 2, 503
  assert RetrievalClient(u, retries=3, backoff_s=0.01).retrieve(["q"]) == [[]]
  assert _Flaky.count == 3
  _Flaky.count, _Flaky.failures = 0, 3
  with pytest.raises(RetrievalError, match=f"{u}.*3 attempts.*HTTP 503"):
    RetrievalClient(u, retries=2, backoff_s=0.01).retrieve(["q"])


def test_client_does_not_retry_4xx(flaky):
  _, u = flaky
  _Flaky.failures, _Flaky.status = 5, 422
  with pytest.raises(RetrievalError, match=f"{u} rejected the request \\(HTTP 422\\)"):
    RetrievalClient(u, retries=3, backoff_s=0.01).retrieve(["q"])
  assert _Flaky.count == 1


def test_client_names_the_url_when_unreachable_or_slow():
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]  # bound, never listening: connections are refused
    dead = f"http://127.0.0.1:{port}/retrieve"
    with pytest.raises(RetrievalError, match=f"{dead} failed after 2 attempts.*ConnectionRefused"):
      RetrievalClient(dead, retries=1, backoff_s=0.01).retrieve(["q"])
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    s.listen(1)  # accepts, never answers
    slow = f"http://127.0.0.1:{s.getsockname()[1]}/retrieve"
    with pytest.raises(RetrievalError, match=f"{slow} failed.*timeout 0.2 s"):
      RetrievalClient(slow, timeout_s=0.2, retries=0).retrieve(["q"])
  with pytest.raises(ValueError, match="http"):
    RetrievalClient("localhost:8000")
