"""`<tag>…</tag>` blocks of a model reply in linear time: what `re.compile(r"<tag>(.*?)</tag>", re.DOTALL)` (with
`re.IGNORECASE` if asked) returns from `.search` and `.findall`, for the parsers that read whole replies.

The lazy regex rescans to the end from every opening tag that has no closing one, so a reply that opens many tags and
closes none costs time growing with the square of its length (2 s at 32 KB, 78 s at 128 KB). Here each tag is looked
for once, left to right: an opening tag with no closing tag after it ends the search, since no later one can have one either.
"""
from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Optional


class Blocks:
  """The `<tag>…</tag>` blocks of a text, as the lazy DOTALL regex matches them."""

  def __init__(self, tag: str, ignore_case: bool = False):
    flags = re.IGNORECASE if ignore_case else 0
    self._open, self._close = (re.compile(re.escape(t), flags) for t in (f"<{tag}>", f"</{tag}>"))

  def spans(self, text: str) -> Iterator[tuple[int, str]]:
    """(start of the opening tag, content) of each block, in order, not overlapping (the regex's `finditer`)."""
    pos = 0
    while (opened := self._open.search(text, pos)) and (closed := self._close.search(text, opened.end())):
      yield opened.start(), text[opened.end():closed.start()]
      pos = closed.end()

  def first(self, text: str) -> Optional[str]:
    """The first block's content (the regex's `.search(text).group(1)`), or None."""
    return next((content for _, content in self.spans(text)), None)

  def findall(self, text: str) -> list[str]:
    return [content for _, content in self.spans(text)]


def first_of(text: str, blocks: Mapping[str, Blocks]) -> Optional[tuple[str, str]]:
  """(name, content) of the block that starts first among `blocks` (name -> Blocks), or None: what
  `<(a|b)>(.*?)</\\1>` finds, tag and content."""
  found = [(span[0], name, span[1]) for name, b in blocks.items() if (span := next(b.spans(text), None))]
  return min(found)[1:] if found else None
