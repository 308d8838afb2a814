"""WebShop's product search (research notes §3.6): BM25 over the documents WebShop indexes, top 50 hits.

WebShop runs pyserini's Lucene BM25 (k1=0.9, b=0.4, English analyzer) over, per product,
`' '.join([Title, Description, BulletPoints[0], option_text]).lower()` with `option_text` =
`', and '.join(f'{name}: {", ".join(values)}')`. Here `bm25s` scores the same documents with Lucene's BM25 variant
and parameters. The analyzer is approximated: Unicode word tokens (an apostrophe or dot inside a word keeps it
whole), the possessive 's dropped, Lucene's 33 English stop words removed, and a light plural stemmer instead of
Porter's (so "extensions" meets "extension", but "looking" does not meet "look"). Ties keep index order, as Lucene's
doc ids do. Keyword lists starting with `<r>`, `<a>`, `<c>` or `<q>` are WebShop's debugging searches: 50 random
products, or every product with that attribute, category or query.
"""
from __future__ import annotations

import logging
import random
import re
from typing import List, Sequence

import bm25s
import numpy as np

logging.getLogger("bm25s").setLevel(logging.WARNING)  # bm25s sets DEBUG on import and logs every index build

SEARCH_RETURN_N = 50
BM25_K1, BM25_B = 0.9, 0.4  # pyserini's LuceneSearcher defaults

LUCENE_STOP_WORDS = frozenset(
    "a an and are as at be but by for if in into is it no not of on or such that the their then there these they "
    "this to was will with".split())
_WORD = re.compile(r"[^\W_]+(?:['.][^\W_]+)*")


def document_text(product: dict) -> str:
  """The text WebShop indexes for a product (`search_engine/convert_product_file_format.py`)."""
  option_text = ", and ".join(f"{name}: {', '.join(values)}" for name, values in product["options"].items())
  first_bullet = product["BulletPoints"][0] if product["BulletPoints"] else ""
  return " ".join([product["Title"], product["Description"], first_bullet, option_text]).lower()


def stem(word: str) -> str:
  """Harman's S-stemmer: ies -> y, es -> e, s -> '' (with its exceptions)."""
  if word.endswith("ies") and not word.endswith(("eies", "aies")):
    return word[:-3] + "y"
  if word.endswith("es") and not word.endswith(("aes", "ees", "oes")):
    return word[:-1]
  if word.endswith("s") and not word.endswith(("us", "ss")):
    return word[:-1]
  return word


def analyze(text: str) -> List[str]:
  """Index/query terms of a text (stand-in for Lucene's EnglishAnalyzer, see the module docstring)."""
  terms = []
  for token in _WORD.findall(text.lower()):
    if token.endswith("'s"):
      token = token[:-2]
    if token and token not in LUCENE_STOP_WORDS:
      terms.append(stem(token))
  return terms


class SearchEngine:
  """BM25 index over a product list; `search(keywords)` returns products like WebShop's
  `get_top_n_product_from_keywords`."""

  def __init__(self, products: Sequence[dict]):
    self.products = list(products)
    self._bm25 = bm25s.BM25(k1=BM25_K1, b=BM25_B, method="lucene")
    self._bm25.index([analyze(document_text(p)) for p in self.products], show_progress=False)

  def scores(self, query: str) -> np.ndarray:
    """BM25 score of every product for a query string (0 where no query term occurs)."""
    ids = self._bm25.get_tokens_ids(analyze(query))
    if not ids:
      return np.zeros(len(self.products), np.float32)
    return self._bm25.get_scores(ids)

  def search(self, keywords: Sequence[str], rng: random.Random) -> List[dict]:
    """Products for a search, best first: up to 50 BM25 hits (only products matching some term), or a debugging
    search (`rng` draws the `<r>` sample)."""
    head, rest = keywords[0], " ".join(keywords[1:]).strip()
    if head == "<r>":
      return rng.sample(self.products, k=min(SEARCH_RETURN_N, len(self.products)))
    if head == "<a>":
      return [p for p in self.products if rest in p["Attributes"]]
    if head == "<c>":
      category = keywords[1].strip() if len(keywords) > 1 else ""
      return [p for p in self.products if p["category"] == category]
    if head == "<q>":
      return [p for p in self.products if p["query"] == rest]
    scores = self.scores(" ".join(keywords))
    hits = np.flatnonzero(scores > 0)
    order = hits[np.argsort(-scores[hits], kind="stable")][:SEARCH_RETURN_N]
    return [self.products[i] for i in order]
