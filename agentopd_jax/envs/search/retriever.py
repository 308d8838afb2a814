"""BM25 over a wiki-18-format corpus, answering in the `/retrieve` result shape (used by the server and in-process).

Search-R1's sparse option is pyserini BM25 (Lucene, k1=0.9, b=0.4) over the same JSONL; we use `bm25s` with those
parameters and Lucene's idf, English stop words removed, no stemming (pyserini's analyzer also stems, so rankings can
differ). As pyserini does, only documents that share a term with the query are returned, so a query with no known
term gets an empty list. bm25s is imported when an index is built, so importing this module costs nothing.
"""
from __future__ import annotations

import json
import logging
import threading
from typing import Any, Dict, Iterable, List, Mapping, Optional, Sequence

from agentopd_jax.envs import datafiles

K1, B = 0.9, 0.4  # pyserini's LuceneSearcher defaults, which Search-R1's BM25 retriever uses


def read_corpus(path: str) -> List[Dict[str, str]]:
  """wiki-18-format JSONL (`{"id": "0", "contents": "\\"Title\\"\\ntext"}` per line; a row without `id` is numbered
  by its place, as before: Search-R1's server needs only `contents`). A line that is not such a row, or a file
  without any, is a `DataFileError` naming the file and line."""
  docs = []
  for n, row in datafiles.read_jsonl(path):
    where = f"{path}:{n}"
    doc_id = datafiles.field(row, "id", (str, int), where, required=False)
    docs.append({"id": str(len(docs) if doc_id is None else doc_id),
                 "contents": datafiles.field(row, "contents", str, where)})
  if not docs:
    raise datafiles.DataFileError(f"{path}: the corpus holds no documents")
  return docs


def write_corpus(path: str, docs: Iterable[Mapping[str, str]]):
  with open(path, "w", encoding="utf-8") as f:
    for doc in docs:
      f.write(json.dumps({"id": doc["id"], "contents": doc["contents"]}, ensure_ascii=False) + "\n")


class BM25Retriever:
  """An in-memory BM25 index; `retrieve` is thread-safe (one search at a time: bm25s is not reentrant-safe by
  contract, and the GIL would serialise the scoring anyway)."""

  def __init__(self, docs: Sequence[Mapping[str, str]], default_topk: int = 3):
    import bm25s
    from bm25s.tokenization import Tokenizer

    logging.getLogger("bm25s").setLevel(logging.WARNING)  # bm25s sets DEBUG on import and logs every index build

    if not docs:
      raise ValueError("BM25Retriever needs a non-empty corpus")
    self.docs = [{"id": str(d["id"]), "contents": d["contents"]} for d in docs]
    self.default_topk = default_topk
    self._tokenizer = Tokenizer(stopwords="en")
    corpus_ids = self._tokenizer.tokenize([d["contents"] for d in self.docs], return_as="ids", show_progress=False)
    self._index = bm25s.BM25(k1=K1, b=B, method="lucene")
    self._index.index(corpus_ids, show_progress=False)
    self._lock = threading.Lock()

  def __len__(self) -> int:
    return len(self.docs)

  def retrieve(self, queries: Sequence[str], topk: Optional[int] = None,
               return_scores: bool = False) -> List[List[Any]]:
    """One list per query, best first: `{"document": doc, "score": s}` items, or bare docs without scores.

    `topk` None or 0 means the default, as Search-R1's server (`if not request.topk`); it is capped at the corpus
    size, which bm25s requires.
    """
    if not queries:
      return []
    k = min(topk or self.default_topk, len(self.docs))
    with self._lock:
      ids = self._tokenizer.tokenize(list(queries), update_vocab=False, return_as="ids", show_progress=False)
      indices, scores = self._index.retrieve(ids, k=k, show_progress=False, n_threads=0)
    out = []
    for row_idx, row_scores in zip(indices.tolist(), scores.tolist()):
      hits = [(self.docs[i], s) for i, s in zip(row_idx, row_scores) if s > 0.0]
      out.append([{"document": d, "score": s} for d, s in hits] if return_scores else [d for d, _ in hits])
    return out
