"""The two observation formats of a search step, action parsing, and reading documents back out of observations.

  * Search-R1 (`generation.py`): docs as `Doc {i}(Title: "T") text` lines, wrapped
    `'\\n\\n<information>' + docs.strip() + '</information>\\n\\n'`; an unparsable action gets `INVALID_ACTION_MESSAGE`.
  * verl-agent (SkyRL-gym `SearchEnv` + `SearchToolGroup`): the tool output is the JSON string
    `{"result": "Doc 1: {contents}\\nDoc 2: ...\\n"}` (lists of several queries joined by `\\n---\\n`), wrapped
    `"\\n<information>" + s + "</information>\\n"` and stripped.

`hits` everywhere is one query's list from a `/retrieve` answer: `{"document": {...}, "score": s}` items, or bare
documents when scores were not asked for.
"""
from __future__ import annotations

import json
import re
from typing import Any, List, Mapping, Optional, Sequence, Tuple

from agentopd_jax.envs.tags import Blocks, first_of

INVALID_ACTION_MESSAGE = (
    "\nMy previous action is invalid. If I want to search, I should put the query between <search> and </search>. "
    "If I want to give the final answer, I should put the answer between <answer> and </answer>. Let me try again.\n")

_SEARCH_R1_ACTION = {"search": Blocks("search"), "answer": Blocks("answer")}  # <(search|answer)>(.*?)</\1>
_SEARCH_R1_DOC = re.compile(r"^Doc \d+\(Title: (.*?)\) (.*)$")
_VERL_AGENT_DOC = re.compile(r"(?m)^Doc \d+: ")
_INFORMATION = Blocks("information")


def document(hit: Mapping[str, Any]) -> Mapping[str, Any]:
  return hit["document"] if "document" in hit else hit


def search_r1_parse(text: str) -> Tuple[Optional[str], str]:
  """("search" | "answer" | None, content): Search-R1 cuts a response after its first `</search>` (else first
  `</answer>`), then takes the first `<search>…</search>` or `<answer>…</answer>` block, content stripped."""
  for close in ("</search>", "</answer>"):
    if close in text:
      text = text.split(close, 1)[0] + close
      break
  found = first_of(text, _SEARCH_R1_ACTION)
  return (found[0], found[1].strip()) if found else (None, "")


def search_r1_docs(hits: Sequence[Mapping[str, Any]]) -> str:
  """Search-R1 `_passages2string`: the title line keeps its quotes, the rest is the text."""
  out = ""
  for i, hit in enumerate(hits):
    content = document(hit)["contents"]
    title, text = content.split("\n")[0], "\n".join(content.split("\n")[1:])
    out += f"Doc {i + 1}(Title: {title}) {text}\n"
  return out


def search_r1_information(hits: Sequence[Mapping[str, Any]]) -> str:
  return "\n\n<information>" + search_r1_docs(hits).strip() + "</information>\n\n"


def verl_agent_result(results: Sequence[Sequence[Mapping[str, Any]]]) -> str:
  """The search tool's JSON string for a `/retrieve` result (one list per query)."""
  if not results:
    return json.dumps({"result": "No search results found."})
  lists = ["".join(f"Doc {i + 1}: {document(hit)['contents'].strip()}\n" for i, hit in enumerate(hits))
           for hits in results]
  return json.dumps({"result": "\n---\n".join(lists)})


def verl_agent_message(tool_output: str) -> str:
  """SkyRL's tool message (`SearchEnv._execute_tool`), as its chat history keeps it for scoring."""
  return "\n<information>" + tool_output + "</information>\n"


def verl_agent_information(tool_output: str) -> str:
  """The observation the policy sees: the tool message stripped (verl-agent's `_sync_step`)."""
  return verl_agent_message(tool_output).strip()


def read_documents(observation: str) -> List[Tuple[str, str]]:
  """(title without quotes, text) of every document in an observation of either format; [] if none."""
  body = _INFORMATION.first(observation)
  if body is None:
    return []
  if body.startswith("{"):
    try:
      body = json.loads(body)["result"]
    except (ValueError, KeyError, TypeError):
      return []
    out = []
    for chunk in _VERL_AGENT_DOC.split(body)[1:]:
      title, _, text = chunk.partition("\n")
      out.append((title.strip().strip('"'), text.strip()))
    return out
  out = []
  for line in body.split("\n"):
    doc = _SEARCH_R1_DOC.match(line)
    if doc:
      out.append((doc.group(1).strip('"'), doc.group(2)))
  return out

