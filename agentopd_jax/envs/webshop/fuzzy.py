"""thefuzz's `fuzz.token_set_ratio`, as WebShop's reward calls it (defaults: force_ascii, full_process), in the two
behaviours thefuzz has had. The reward's > 85 threshold makes the difference a matter of which purchases score 1.0.

  "0.19"  thefuzz 0.19.0, the version WebShop's `requirements.txt` pins, and so verl-agent's vendored WebShop
          (`env_package/webshop/webshop/requirements.txt`) runs. It processes with `re.sub(r"(?ui)\\W", " ")`, which
          keeps `_` inside words, then Python's `str.lower`; its ratio is difflib's `SequenceMatcher` unless
          python-Levenshtein is installed, which neither WebShop nor verl-agent requires (docs/webshop.md).
  "0.20"  thefuzz >= 0.20 (0.22.1 is the same code): rapidfuzz's `default_process` (`_` becomes a space, its own
          lower-casing) and rapidfuzz's Indel ratio, which can score a pair many points above difflib.
Both delete code points 128-255 of `str(value)` first and round the score to an int. The token-set logic is the
same: intersection and the two remainders, sorted, and the best of three ratios.
"""
from __future__ import annotations

import difflib
import functools
import re

from rapidfuzz import fuzz
from rapidfuzz.utils import default_process

VERSIONS = ("0.19", "0.20")
_LATIN1 = {i: None for i in range(128, 256)}  # thefuzz's force_ascii: "ascii dammit!"
_NON_WORD = re.compile(r"(?ui)\W")  # thefuzz 0.19's StringProcessor regex


def check_version(version: str) -> str:
  if version not in VERSIONS:
    raise ValueError(f"env.thefuzz (the thefuzz version WebShop's reward matches as) must be one of {VERSIONS} "
                     f"(0.19: WebShop's pin; 0.20: thefuzz >= 0.20 on rapidfuzz), got {version!r}")
  return version


def _process_019(value) -> str:
  return _NON_WORD.sub(" ", str(value).translate(_LATIN1)).lower().strip()


def _ratio_019(a: str, b: str) -> int:
  """0.19's `fuzz.ratio`: equal strings score 100 before an empty one scores 0."""
  if a == b:
    return 100
  if not a or not b:
    return 0
  return int(round(100 * difflib.SequenceMatcher(None, a, b).ratio()))


def _token_set_019(a, b) -> int:
  pa, pb = _process_019(a), _process_019(b)
  if not pa or not pb:
    return 0
  ta, tb = set(pa.split()), set(pb.split())
  common = " ".join(sorted(ta & tb))
  a_rest = f"{common} {' '.join(sorted(ta - tb))}".strip()
  b_rest = f"{common} {' '.join(sorted(tb - ta))}".strip()
  return max(_ratio_019(common, a_rest), _ratio_019(common, b_rest), _ratio_019(a_rest, b_rest))


def _token_set_020(a, b) -> int:
  pa, pb = (default_process(str(s).translate(_LATIN1)) for s in (a, b))
  return int(round(fuzz.token_set_ratio(pa, pb)))


@functools.lru_cache(maxsize=1 << 16)
def token_set_ratio(a, b, version: str = "0.19") -> int:
  """`fuzz.token_set_ratio(a, b)` of thefuzz `version` (see above), an int in [0, 100]. Strings or the `(name, value)`
  tuples of synthetic goals, which thefuzz stringifies. Cached: the same attribute pairs recur across episodes."""
  return (_token_set_019 if check_version(version) == "0.19" else _token_set_020)(a, b)
