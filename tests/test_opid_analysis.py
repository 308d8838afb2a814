"""OPID's analyzer and skill injection (`methods.opid.analysis`, `.injection`): the prompts as golden strings
(checked against the authors' `opid/analysis.py` and `opid/prompting.py`), the tolerant parser against a table of the
authors' outcomes and on malformed answers (hypothesis), critical-first routing, the stats selector, and an analyzer
that never stops training: fault-injecting backends and the `openai` client against a local fake server (500s,
garbage bodies, timeouts)."""
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentopd_jax.methods.opid.analysis import (BAD_OBJECT, EPISODE_SKILL_INSTRUCTIONS, NO_EPISODE_SKILL, NO_OBJECT, Analysis,
                                          AnalysisFailure, Analyzer, EpisodeRecord, OpenAIBackend, ParseAbort,
                                          StepRecord, analysis_prompt, discounted_returns, failure_text,
                                          parse_analysis, repair_prompt, select_critical_steps_by_stats)
from agentopd_jax.methods.opid.injection import augment_observation, route, task_description

STEPS = (StepRecord(0, "You are in the middle of a room.", "<think>look</think><action>go to desk 1</action>", 0.9025),
         StepRecord(1, "On the desk 1, you see a mug.", "<action>take mug from desk 1</action>", 0.95))
GOLDEN_FAILURE = "\n".join([
    "Analyze the following agent episode and return ONLY valid JSON.",
    "",
    "You need to complete all three fields:",
    "1. Write a concise episode_summary.",
    "2. Write one episode_skill that extracts the failed trajectory into avoidance rules: the core mistake and warning "
    "signs that agent should avoid. ",
    "3. Provide concise, action-oriented decision skills for at most 2 critical step(s) from the candidate set as "
    "entries in step_skills; use the full episode to infer the skill, but phrase each skill as advice the policy can "
    "act on at that step.",
    "",
    "Important constraints:",
    "- Step indexing is 0-based: step 0 is the first step of the trajectory.",
    "- Use the task description together with the episode context to judge progress and mistakes.",
    "- Use the full episode context to identify what each critical step should have done better.",
    "- Each step_skills value should be one short imperative sentence for the policy at that step.",
    "- Write step_skills as policy-facing skills, not as retrospective explanation of the trajectory.",
    "- Return only these top-level fields: episode_summary, episode_skill, step_skills.",
    "- The chosen steps are exactly the keys present in step_skills.",
    "",
    "Return format:",
    "{",
    '  "episode_summary": "string",',
    '  "episode_skill": "string",',
    '  "step_skills": {',
    '    "0": "skill for step 0",',
    '    "2": "skill for step 2"',
    "  }",
    "}",
    "",
    "Episode context:",
    "- Task description: put a clean mug on desk 1.",
    "- episode_success: failure",
    "- Candidate step indices: [0, 1]",
    "- Interaction trajectory: Step 0",
    "Observation: You are in the middle of a room.",
    "Response: <think>look</think><action>go to desk 1</action>",
    "Return: 0.902500",
    "Step 1",
    "Observation: On the desk 1, you see a mug.",
    "Response: <action>take mug from desk 1</action>",
    "Return: 0.950000",
    "",  # each step ends in "\n" and so does the template: the prompt ends in a blank line
    ""])
INSTRUCTION_LINE = GOLDEN_FAILURE.splitlines()[4]


def episode(success=False, task="put a clean mug on desk 1.", steps=STEPS):
  return EpisodeRecord(steps, success=success, task=task)


def answer(skill="Check every receptacle once.", steps=None, summary="Went to desk 1."):
  return json.dumps({"episode_summary": summary, "episode_skill": skill,
                     "step_skills": {"1": "Take the mug." } if steps is None else steps})


# ------------------------------------------------------------------------------------------------ prompts
def test_failure_prompt_is_opid_byte_for_byte():
  assert analysis_prompt(episode(), 5) == GOLDEN_FAILURE


@pytest.mark.parametrize("success, label", [(True, "success"), (False, "failure"), (None, "unknown"),
                                            (1.0, "success"), (0.5, "failure")])
def test_outcome_picks_the_instruction_and_label(success, label):
  """OPID labels success when episode_success >= 1.0; None is unknown. Each instruction ends in a space."""
  want = GOLDEN_FAILURE.replace(INSTRUCTION_LINE, "2. " + EPISODE_SKILL_INSTRUCTIONS[label]).replace(
      "episode_success: failure", f"episode_success: {label}")
  assert analysis_prompt(episode(success), 5) == want
  assert EPISODE_SKILL_INSTRUCTIONS[label].endswith(". ")


def test_instruction_texts_verbatim():
  assert EPISODE_SKILL_INSTRUCTIONS == {
      "success": "Write one episode_skill that extracts the successful trajectory into workflow: the core decision "
                 "rule and action ordering that made this trajectory work. ",
      "failure": "Write one episode_skill that extracts the failed trajectory into avoidance rules: the core mistake "
                 "and warning signs that agent should avoid. ",
      "unknown": "Write one episode_skill distilled from the trajectory. If it succeeded, extract the successful "
                 "workflow; if it failed, extract the avoidance rules. "}


@pytest.mark.parametrize("k, shown", [(0, 0), (1, 1), (2, 2), (5, 2)])
def test_at_most_min_k_and_candidates(k, shown):
  assert analysis_prompt(episode(), k) == GOLDEN_FAILURE.replace("at most 2 critical", f"at most {shown} critical")


def test_task_fallbacks_and_missing_returns():
  steps = (StepRecord(3, "obs\nYour task is to:   put  a mug\nin it", "r"), StepRecord(4, "o", "r2"))
  prompt = analysis_prompt(episode(None, task="", steps=steps), 1)
  assert "- Task description: put a mug\n" in prompt  # found in an observation, whitespace collapsed
  assert "- Candidate step indices: [3, 4]\n" in prompt and "at most 1 critical" in prompt
  assert prompt.endswith("- Interaction trajectory: Step 3\nObservation: obs\nYour task is to:   put  a mug\nin it\n"
                         "Response: r\nStep 4\nObservation: o\nResponse: r2\n\n")  # no "Return:" line without returns
  bare = (StepRecord(0, "nothing here", "r", -0.1),)
  assert "- Task description: (not available)\n" in analysis_prompt(episode(task="  ", steps=bare), 2)
  assert "Return: -0.100000\n" in analysis_prompt(episode(task="", steps=bare), 2)
  assert "- Task description: a b\n" in analysis_prompt(episode(task=" a \n b "), 2)


def test_repair_prompt_golden_and_tail():
  bad = "x" * 1990 + "TAIL567890" + "y"
  got = repair_prompt("PROMPT", ValueError(NO_OBJECT), bad)
  assert got == ("PROMPT\n\nThe previous answer could not be parsed as the required JSON object.\n"
                 f"Parse error: {NO_OBJECT}\n\nPrevious answer:\n{bad[-2000:]}\n\n"
                 "Return ONLY one valid JSON object with this exact shape:\n"
                 '{\n  "episode_summary": "string",\n  "episode_skill": "string",\n  "step_skills": {}\n}\n')
  assert "x" * 1989 + "TAIL" in got and "x" * 1990 not in got


def test_records_reject_an_empty_episode():
  with pytest.raises(ValueError, match="EpisodeRecord.steps"):
    EpisodeRecord((), success=True)


def test_discounted_returns_are_verl_agents():
  assert discounted_returns([0.0, 0.0, 1.0]) == [float(np.float32(0.9025)), float(np.float32(0.95)), 1.0]
  assert discounted_returns([0.5, -0.1], gamma=0.5) == [float(np.float32(0.45)), float(np.float32(-0.1))]
  assert discounted_returns([]) == []
  assert ["%.6f" % g for g in discounted_returns([0, 0, 0, 1])] == ["0.857375", "0.902500", "0.950000", "1.000000"]


# ------------------------------------------------------------------------------------------------ parser
def parse(text, candidates=(0, 1, 2), k=5):
  return parse_analysis(text, list(candidates), k)


def test_parser_opid_cases():
  got = parse('{"episode_summary": "s", "episode_skill": "skill", "selected_steps": [99],'
              ' "step_skills": {"1": "click the matching item"}}')
  assert got == Analysis("s", "skill", {1: "click the matching item"}, raw=got.raw)
  fenced = parse('Here is the result:\n```json\n{"episode_skill": "e", "step_skills": {"0": "v"}}\n```\n')
  assert (fenced.episode_skill, fenced.step_skills, fenced.episode_summary) == ("e", {0: "v"}, "")
  helper = parse('Ignore this helper object: {"note": "x"}\nFinal answer:\n{"episode_skill": "u", "step_skills": {}}')
  assert helper.episode_skill == "u"
  noisy = parse("{\n 'episode_skill': 'compare first',\n 'step_skills': {'1': 'check',},\n}")
  assert (noisy.episode_skill, noisy.step_skills) == ("compare first", {1: "check"})


def test_parser_keys_candidates_first_k_and_blanks():
  got = parse(answer(steps={"x": "a", "7": "b", "2": "c", " 0 ": "d", "1": "e", "-1": "f"}), k=2)
  assert got.step_skills == {2: "c", 0: "d"}  # non-integer and non-candidate keys go before the first-K cut
  blank = parse(answer(steps={"0": " ", "1": "e", "2": None}), k=1)
  assert blank.step_skills == {}  # OPID keeps the first K, then a blank one is never used
  assert parse(answer(steps={"0": "a", "2": "c"}), k=0).step_skills == {}
  assert parse(answer(steps=["not", "a", "dict"])).step_skills == {}
  assert parse('{"episode_skill": "e", "step_skills": {"1": 3}}').step_skills == {1: "3"}


def test_parser_prefers_fences_and_control_characters():
  text = '```json\n{"episode_skill": "fenced"}\n```\n{"episode_skill": "raw"}'
  assert parse(text).episode_skill == "fenced"
  assert parse('{"episode_skill": "line\nbreak\ttab"}').episode_skill == "line\nbreak\ttab"  # strict=False


@pytest.mark.parametrize("text, message, cause", [
    ("", NO_OBJECT, None), ("no json at all", NO_OBJECT, None), ("```json\n```", NO_OBJECT, None),
    ('{"episode_skill": "unterminated', BAD_OBJECT.format(""), json.JSONDecodeError),
    ("{'episode_skill': x}", BAD_OBJECT.format("malformed node"), ValueError),  # literal_eval's error came last
    ('{"episode_summary": "s", "step_skills": {"0": "a"}}', NO_EPISODE_SKILL, None),
    ('{"episode_skill": "   "}', NO_EPISODE_SKILL, None), ('{"episode_skill": null}', NO_EPISODE_SKILL, None),
    ('{"note": 1}', NO_EPISODE_SKILL, None),
    ("{{'a': 1}}", "unhashable type: 'dict'", TypeError),  # a set of dicts
])
def test_parser_errors_chain_their_cause(text, message, cause):
  with pytest.raises(ValueError) as err:
    parse(text)
  assert str(err.value).startswith(message)
  assert type(err.value.__cause__) is cause if cause else err.value.__cause__ is None
  assert isinstance(err.value, ParseAbort) == (cause is TypeError)
  assert failure_text(err.value) == (f"{err.value} [{cause.__name__}]" if cause else str(err.value))


SKILL = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="`{}[],"), min_size=1).filter(
    lambda s: s.strip())
PROSE = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="`{}"), max_size=40)


@settings(max_examples=150, deadline=None)
@given(summary=SKILL, skill=SKILL, steps=st.dictionaries(st.integers(-3, 12), SKILL | st.just(" "), max_size=6),
       k=st.integers(0, 6), wrap=st.sampled_from(["plain", "fence", "prose", "trailing", "indent", "repr"]),
       before=PROSE, after=PROSE, ascii_only=st.booleans())
def test_any_valid_answer_parses_back(summary, skill, steps, k, wrap, before, after, ascii_only):
  obj = {"episode_summary": summary, "episode_skill": skill, "step_skills": {str(i): v for i, v in steps.items()}}
  text = json.dumps(obj, indent=2 if wrap == "indent" else None, ensure_ascii=ascii_only)
  if wrap == "repr":  # a Python literal: read by the literal_eval fallback only when no "{" JSON-decodes, and
    text = repr(obj)  # an empty step_skills {} does, so OPID returns that {} and finds no episode_skill
    if not steps:
      with pytest.raises(ValueError, match=NO_EPISODE_SKILL):
        parse(text, candidates=range(10), k=k)
      return
  elif wrap == "fence":
    text = f"{before}```json\n{text}\n```{after}"
  elif wrap == "prose":
    text = f"{before}\n{text}\n{after}"
  elif wrap == "trailing":
    text = text[:-1] + ",}" if steps else text.replace("{}", "{,}")
  got = parse(text, candidates=range(10), k=k)
  kept = [(i, v) for i, v in steps.items() if 0 <= i < 10][:k]
  assert got == Analysis(summary, skill, {i: v for i, v in kept if v.strip()}, raw=text)


JSONISH = st.lists(st.sampled_from(list("{}[]\"':,`\\ \n0123ae") + [
    "```json", '"episode_skill"', "step_skills", "null", "True", "{{", "1e999", "'x'"]), max_size=40).map("".join)


@settings(max_examples=300, deadline=None)
@given(text=st.one_of(st.text(max_size=80), JSONISH, st.lists(JSONISH, max_size=5).map("".join)))
def test_arbitrary_text_raises_only_value_error(text):
  try:
    got = parse(text)
  except ValueError:
    return
  assert got.episode_skill.strip() and all(v.strip() and k in (0, 1, 2) for k, v in got.step_skills.items())


def test_deep_nesting_is_a_value_error():
  with pytest.raises(ValueError):
    parse("{" * 5000 + "}" * 5000)



# The differential table: each answer with the outcome the authors' `opid/analysis.py` gives it, worked out by reading
# (and running) their chain: `_candidate_json_texts` (fenced blocks, then the whole text) → `_json_text_variants`
# (each text, then it with trailing commas removed) → `_decode_json_objects` (raw_decode from every "{"; only when
# none decodes, ast.literal_eval of each balanced span) → the first object holding "episode_skill", else the first →
# `_parse_analysis_response` (int(key), str(value)) → the analyze loop (blank episode skill: repair; candidates,
# first K). Outcomes: ok (summary, episode skill, step skills), repair (the parse error the repair prompt quotes),
# abort (OPID's parser raises something that is not a ValueError: that trajectory's analysis ends, no repair).
def ok(skill, steps=None, summary=""):
  return ("ok", summary, skill, steps or {})


OPID_TABLE = [
    # where the object is found
    ("fenced", 'Result:\n```json\n{"episode_skill": "e", "step_skills": {"0": "a"}}\n```', 2, ok("e", {0: "a"})),
    ("fence-before-text", '{"episode_skill": "raw"}\n```json\n{"episode_skill": "fenced"}\n```', 2, ok("fenced")),
    ("prose-around", 'Sure. {"episode_skill": "e"} Hope it helps.', 2, ok("e")),  # raw_decode from a "{"
    ("helper-object-first", '{"note": 1} {"episode_skill": "f"}', 2, ok("f")),  # the first holding episode_skill
    ("two-answers", '{"episode_skill": "e"} {"episode_skill": "f"}', 2, ok("e")),  # ... the first of them
    ("truncated-inner-answer", 'Here: {"answer": {"episode_skill": "in", "step_skills": {"1": "b"}}, "more": ', 2,
     ok("in", {1: "b"})),  # the outer object is cut; a complete inner one decodes from its own "{"
    ("truncated-steps-only", '{"episode_skill": "e", "step_skills": {"0": "a"}', 2,
     ("repair", NO_EPISODE_SKILL)),  # only the inner step_skills object decodes, and it has no episode_skill
    ("no-object", "Sorry, I cannot.", 2, ("repair", NO_OBJECT)),
    ("unterminated", '{"episode_skill": "cut', 2,
     ("repair", BAD_OBJECT.format("Unterminated string starting at: line 1 column 19 (char 18)"))),
    # Python literals: only when no "{" of the text JSON-decodes
    ("python-literals", "{'episode_skill': 'e', 'step_skills': {0: 'a', 1: True}}", 2, ok("e", {0: "a", 1: "True"})),
    ("python-key-types", "{'episode_skill': 'e', 'step_skills': {True: 'a', 2.9: 'b'}}", 2, ok("e", {1: "a", 2: "b"})),
    ("python-empty-inner", "{'episode_skill': 'e', 'step_skills': {}}", 2,
     ("repair", NO_EPISODE_SKILL)),  # the inner {} is JSON, so the literal fallback never runs
    ("python-malformed", "{'episode_skill': x}", 2, ("repair", BAD_OBJECT.format("malformed node or string"))),
    # trailing commas: the repaired variant comes after the text itself
    ("trailing-json", '{"episode_skill": "e", "ok": true,}', 2, ok("e")),  # literal_eval refuses `true`
    ("trailing-inside-string", '{"episode_skill": "x, }", "ok": true,}', 2, ok("x}")),  # the repair edits strings
    ("trailing-fenced", '```json\n{"episode_skill": "e",}\n```', 2, ok("e")),
    # values: str() of each; keys int(), then candidates, then the first K
    ("non-string-values", '{"episode_skill": 0, "step_skills": {"0": 0, "1": [], "2": {}}}', 3,
     ok("0", {0: "0", 1: "[]", 2: "{}"})),
    ("false-skill", '{"episode_skill": false}', 2, ok("False")),
    ("nan-skill", '{"episode_skill": NaN}', 2, ok("nan")),
    ("keys", '{"episode_skill": "e", "step_skills": {"x": "a", "7": "b", " 2 ": "c", "1.0": "d", "+0": "e", '
     '"00": "f"}}', 2, ok("e", {2: "c", 0: "f"})),  # "00" overwrites "+0" in its place
    ("blank-counts-for-k", '{"episode_skill": "e", "step_skills": {"0": " ", "1": "b"}}', 1,
     ok("e")),  # OPID keeps {0: " "} and never uses it
    ("steps-not-a-dict", '{"episode_skill": "e", "step_skills": ["a"]}', 2, ok("e")),
    # null is no skill: the project's choice (OPID routes str(None) == "None": summary "None", step skill {0: "None"})
    ("null-step-skill", '{"episode_summary": null, "episode_skill": "e", "step_skills": {"0": null, "1": "b"}}', 1,
     ok("e") + (1,)),  # 1 null step skill counted
    ("null-episode-skill", '{"episode_skill": null}', 2, ("repair", NO_EPISODE_SKILL)),  # OPID: episode skill "None"
    # OPID's parser raises something other than ValueError: its analyze loop does not catch it
    ("unhashable-key", "{[1]: 2} {'episode_skill': 'x'}", 2, ("abort", "TypeError")),
    ("set-of-dicts", "{{'a': 1}}", 2, ("abort", "TypeError")),
    ("infinite-key", "{'episode_skill': 'e', 'step_skills': {1e999: 'a'}}", 2, ("abort", "OverflowError")),
    ("deep-json", '{"a":' * 3000, 2, ("abort", "RecursionError")),
    # a decode error that is not a JSONDecodeError ends the parse at once
    ("huge-integer", '{"n": ' + "1" * 5000 + '} {"episode_skill": "x"}', 2,
     ("repair", "Exceeds the limit (4300 digits) for integer string conversion")),
]
STEPS3 = STEPS + (StepRecord(2, "On the desk 1, you see nothing.", "<action>look</action>"),)


@pytest.mark.parametrize("text, k, want", [pytest.param(*row[1:], id=row[0]) for row in OPID_TABLE])
def test_parser_follows_opid_chain(text, k, want):
  a, _ = analyzer(Scripted(text, answer()), k=k)
  [got] = a.analyze([episode(steps=STEPS3)])
  calls = [c[0]["content"] for c in a.backend.calls]
  if want[0] == "ok":
    assert (got.episode_summary, got.episode_skill, got.step_skills) == want[1:4] and len(calls) == 1
    assert a.stats["null_step_skills"] == (want[4] if len(want) > 4 else 0)
  elif want[0] == "repair":
    assert isinstance(got, Analysis) and got.raw == answer() and len(calls) == 2
    assert calls[1].startswith(calls[0]) and f"Parse error: {want[1]}" in calls[1]
  else:
    assert isinstance(got, AnalysisFailure) and got.kind == "parse" and want[1] in got.error and len(calls) == 1
    assert (a.stats["parse_failures"], a.stats["repairs"]) == (1, 0)


def test_unusable_answers_are_logged_with_their_cause(caplog):
  a, _ = analyzer(Scripted('{"episode_skill": "cut', "{[1]: 2}"))
  with caplog.at_level("WARNING", logger="agentopd_jax.methods.opid.analysis"):
    [got] = a.analyze([episode()])
  assert got == AnalysisFailure("parse", "unhashable type: 'list' [TypeError]", raw="{[1]: 2}")
  assert [r.getMessage() for r in caplog.records] == [
      "OPID analyzer JSON parse failed on attempt 1/2: " + BAD_OBJECT.format(
          "Unterminated string starting at: line 1 column 19 (char 18)") + " [JSONDecodeError]",
      "OPID analyzer JSON parse failed on attempt 2/2: unhashable type: 'list' [TypeError]",
      "OPID analyzer gave no usable answer; skipping teacher skill for this trajectory: unhashable type: 'list' "
      "[TypeError]"]

# ------------------------------------------------------------------------------------------------ injection
PROMPT = ("You are an expert autonomous agent.\nYour task is to: find a red mug.\nYour history: none.\n"
          "Now it's your turn to take an action.\n")
EP_BLOCK = ("**Episode-Level Skill**\nRefer to this episode-level skill when deciding what action to take in the "
            "current episode:\n[Check price first.]")
STEP_BLOCK = "**Critical-Step Skill**\nUse this current-step skill for this decision only:\n[Search red mug.]"


def test_injection_both_sections():
  assert augment_observation(PROMPT, " Check price first. ", "Search red mug.") == (
      "You are an expert autonomous agent.\nYour task is to: find a red mug.\n\n" + EP_BLOCK +
      "\n\nYour history: none.\n\n" + STEP_BLOCK + "\n\nNow it's your turn to take an action.")


def test_injection_fallbacks():
  no_task = "  Intro.\n\nNow it's your turn: act.  "
  assert augment_observation(no_task, "Check price first.") == f"Intro.\n\n{EP_BLOCK}\n\nNow it's your turn: act."
  assert augment_observation("Intro only.", "Check price first.", "Search red mug.") == (
      f"Intro only.\n\n{EP_BLOCK}\n\n{STEP_BLOCK}")
  assert augment_observation("", "Check price first.") == EP_BLOCK
  assert augment_observation("Now it's your turn to act.", None, "Search red mug.") == (
      f"{STEP_BLOCK}\n\nNow it's your turn to act.")
  assert augment_observation("Your question: who?", "Check price first.") == f"Your question: who?\n\n{EP_BLOCK}"
  assert augment_observation(PROMPT, "", "  ") == PROMPT.strip()


def test_injection_task_line_variants():
  text = "Goal.\nYour current task is: buy shoes\nNow it's your turn"
  assert augment_observation(text, "Check price first.") == (
      f"Goal.\nYour current task is: buy shoes\n\n{EP_BLOCK}\n\nNow it's your turn")
  # OPID's pattern lets `\s*` cross a line break, so an empty task line takes the next line with it
  assert augment_observation("Your task is to:\nnext line\nrest", "Check price first.") == (
      f"Your task is to:\nnext line\n\n{EP_BLOCK}\n\nrest")
  # case-sensitive for injection, case-insensitive for the analyzer's task description
  assert augment_observation("your task is to: x\nNow it's your turn", "Check price first.") == (
      f"your task is to: x\n\n{EP_BLOCK}\n\nNow it's your turn")


@pytest.mark.parametrize("text, task", [
    ("Your task is to: put a mug in the sink.\nmore", "put a mug in the sink."),
    ("YOUR TASK IS:   find\tshoes  ", "find shoes"), ("Your current task is: buy\nNo", "buy"),
    ("Your question: who wrote it?", "who wrote it?"), ("Your task is to:   \n\n  later line", "later line"),
    ("Your task is: \nYour question: q", "Your question: q"), ("nothing", ""), ("", "")])
def test_task_description(text, task):
  assert task_description(text) == task


# ------------------------------------------------------------------------------------------------ routing
OK = Analysis("s", "episode skill", {1: "step skill", 2: "  "})


@pytest.mark.parametrize("mode, step, w_ep, w_step, want", [
    ("step_priority", 1, 1.0, 1.0, (None, "step skill")),
    ("step_priority", 0, 1.0, 1.0, ("episode skill", None)),
    ("step_priority", 2, 1.0, 1.0, ("episode skill", None)),  # a blank step skill is no step skill
    ("step_priority", 1, 1.0, 0.0, ("episode skill", None)),
    ("step_priority", 1, 0.0, 1.0, (None, "step skill")),
    ("step_priority", 0, 0.0, 1.0, (None, None)),
    ("additive", 1, 1.0, 1.0, ("episode skill", "step skill")),
    ("additive", 0, 1.0, 1.0, ("episode skill", None)),
    ("additive", 1, 0.0, 1.0, (None, "step skill")),
    ("additive", 1, 1.0, 0.0, ("episode skill", None)),
    ("additive", 1, 0.0, 0.0, (None, None)),
])
def test_routing_table(mode, step, w_ep, w_step, want):
  assert route(step, OK, w_ep, w_step, mode) == want


def test_failed_analysis_routes_nothing_and_unknown_mode_is_named():
  for result in (AnalysisFailure("api", "down"), AnalysisFailure("parse", "bad"), None):
    assert route(1, result, 1.0, 1.0) == (None, None)
  with pytest.raises(ValueError, match="opid.route"):
    route(0, OK, 1.0, 1.0, "both")


# ------------------------------------------------------------------------------------------------ analyzer
class Scripted:
  """A backend that replays a script per episode (keyed by a marker in the prompt); items that are exceptions are
  raised. Records every message list it was sent."""

  def __init__(self, *script, by_marker=None):
    self.scripts = by_marker or {"": list(script)}
    self.calls, self.lock = [], threading.Lock()

  def __call__(self, messages):
    with self.lock:
      self.calls.append(messages)
      content = messages[0]["content"]
      marker = next(m for m in self.scripts if m in content)
      item = self.scripts[marker].pop(0) if len(self.scripts[marker]) > 1 else self.scripts[marker][0]
    if isinstance(item, BaseException):
      raise item
    return item


def analyzer(backend, **kw):
  sleeps = []
  out = Analyzer(backend, max_step_skills=kw.pop("k", 5), sleep=sleeps.append, **kw)
  return out, sleeps


def test_first_answer_used():
  a, sleeps = analyzer(Scripted(answer()))
  [got] = a.analyze([episode()])
  assert got == Analysis("Went to desk 1.", "Check every receptacle once.", {1: "Take the mug."}, raw=answer())
  assert a.backend.calls == [[{"role": "user", "content": GOLDEN_FAILURE}]] and sleeps == []
  assert a.stats["analysed"] == 1 and a.stats["api_calls"] == 1 and a.stats["latency_s"] >= 0


@pytest.mark.parametrize("bad, error", [("Sorry, I cannot.", NO_OBJECT), ('{"episode_skill": ""}', NO_EPISODE_SKILL)])
def test_repair_prompt_recovers(bad, error):
  a, _ = analyzer(Scripted(bad, answer()))
  [got] = a.analyze([episode()])
  assert isinstance(got, Analysis)
  assert a.backend.calls[1] == [{"role": "user", "content": repair_prompt(GOLDEN_FAILURE, error, bad)}]
  assert (a.stats["repairs"], a.stats["parse_failures"]) == (1, 0)


def test_always_garbage_is_a_counted_parse_failure():
  a, _ = analyzer(Scripted("not json {"), parse_attempts=3)
  [got] = a.analyze([episode()])
  assert got.kind == "parse" and got.error.startswith(BAD_OBJECT.format("")) and got.raw == "not json {"
  assert len(a.backend.calls) == 3 and a.stats["parse_failures"] == 1 and a.stats["analysed"] == 0


def test_backend_errors_retry_with_backoff_then_fail():
  a, sleeps = analyzer(Scripted(ConnectionError("refused")), retry_delay=1.0)
  [got] = a.analyze([episode()])
  assert got == AnalysisFailure("api", "ConnectionError: refused")
  assert len(a.backend.calls) == 5 and sleeps == [1.0, 2.0, 4.0, 8.0]  # OPID: 5 tries, no repair after an API failure
  assert (a.stats["api_failures"], a.stats["api_errors"], a.stats["repairs"]) == (1, 5, 0)
  capped, sleeps = analyzer(Scripted(RuntimeError("x")), retry_delay=10.0, max_delay=15.0, api_retries=4)
  capped.analyze([episode()])
  assert sleeps == [10.0, 15.0, 15.0]


def test_errors_then_success_and_blank_answers_are_api_errors():
  a, sleeps = analyzer(Scripted(TimeoutError("slow"), "", "   ", answer()), retry_delay=0.5)
  [got] = a.analyze([episode()])
  assert isinstance(got, Analysis) and sleeps == [0.5, 1.0, 2.0]
  assert (a.stats["api_errors"], a.stats["api_failures"], a.stats["analysed"]) == (3, 0, 1)


def test_concurrent_batch_keeps_order_and_counts():
  markers = {"task A": [answer("skill A")], "task B": [ValueError("boom")], "task C": ["garbage"],
             "task D": ["{bad", answer("skill D", steps={"0": "first"})]}
  a, _ = analyzer(Scripted(by_marker=markers), workers=4, api_retries=2, k=1)
  episodes = [episode(task=m) for m in markers] * 3
  results = a.analyze(episodes)
  for i, got in enumerate(results):
    kind = "ABCD"[i % 4]
    if kind == "A":
      assert got.episode_skill == "skill A" and got.step_skills == {1: "Take the mug."}
    elif kind == "D":
      assert got.episode_skill == "skill D" and got.step_skills == {0: "first"}
    else:
      assert isinstance(got, AnalysisFailure) and got.kind == {"B": "api", "C": "parse"}[kind]
  assert {k: a.stats[k] for k in ("episodes", "analysed", "api_failures", "parse_failures")} == dict(
      episodes=12, analysed=6, api_failures=3, parse_failures=3)
  assert a.analyze([]) == [] and a.stats["episodes"] == 0  # stats are per call


@pytest.mark.parametrize("kw, field", [(dict(max_step_skills=-1), "opid.max_step_skills"),
                                       (dict(parse_attempts=0), "opid.parse_attempts"),
                                       (dict(api_retries=0), "opid.api_retries"), (dict(workers=0), "opid.workers"),
                                       (dict(backoff=0.5), "opid.retry_delay/backoff/max_delay")])
def test_analyzer_arguments_are_checked(kw, field):
  with pytest.raises(ValueError, match=field):
    Analyzer(Scripted(answer()), **{"max_step_skills": 1, **kw})


# ------------------------------------------------------------------------------------------------ stats selector
def test_stats_selector():
  """Two tasks; in task 0, obs "a" is shared by 3 steps with returns (1, 0, 0.5) and obs "b" by 2 with (1, 1)."""
  returns = [1.0, 0.0, 0.5, 1.0, 1.0, 0.2, 0.0]
  obs = ["a", "a", "a", "b", "b", "a", "a"]
  groups = [0, 0, 0, 0, 0, 1, 1]
  trajs = [0, 1, 2, 0, 1, 3, 4]
  mask, metrics = select_critical_steps_by_stats(returns, obs, groups, trajs, var_quantile=0.0)
  # group (0,"a"): var 1/6, below-mean step is traj 1 (0.0 < 0.5); (0,"b") has var 0; (1,"a"): traj 4 below 0.1
  assert mask.tolist() == [False, True, False, False, False, False, True]
  assert metrics == {"num_groups": 3.0, "eligible_groups": 2.0, "selected_steps": 2.0, "variance_cutoff": 0.0}
  high, metrics = select_critical_steps_by_stats(returns, obs, groups, trajs)  # cutoff = 0.75-quantile of variances
  assert high.tolist() == [False, True, False, False, False, False, False] and metrics["eligible_groups"] == 1.0
  assert metrics["variance_cutoff"] == pytest.approx(float(np.quantile(np.float32([1 / 6, 0, 0.01]), 0.75)))


def test_stats_selector_topk_and_ties():
  """One trajectory with two equally bad steps in two groups: the tie goes to the later step."""
  returns = [0.0, 1.0, 0.0, 1.0]
  obs = ["a", "a", "b", "b"]
  trajs = [7, 8, 7, 8]
  mask, _ = select_critical_steps_by_stats(returns, obs, [0] * 4, trajs)
  assert mask.tolist() == [False, False, True, False]
  both, _ = select_critical_steps_by_stats(returns, obs, [0] * 4, trajs, topk_per_traj=2)
  assert both.tolist() == [True, False, True, False]
  none, metrics = select_critical_steps_by_stats(returns, obs, [0] * 4, trajs, topk_per_traj=0)
  assert not none.any() and metrics == {"num_groups": 0.0, "eligible_groups": 0.0, "selected_steps": 0.0}
  with pytest.raises(ValueError, match="equal lengths"):
    select_critical_steps_by_stats(returns, obs, [0], trajs)


# ------------------------------------------------------------------------------------------------ openai backend
def completion(text, reasoning=None):
  message = {"role": "assistant", "content": text}
  if reasoning:
    message["reasoning_content"] = reasoning
  return {"id": "c1", "object": "chat.completion", "created": 0, "model": "fake",
          "choices": [{"index": 0, "message": message, "finish_reason": "stop"}]}


class FakeServer:
  """An OpenAI-compatible /chat/completions on 127.0.0.1 replaying a script: ("ok", body), ("500",), ("garbage",),
  ("slow", seconds, body). The last item repeats. Records (lower-cased headers, request json)."""

  def __init__(self, *script):
    self.script, self.requests = list(script), []
    outer = self

    class Handler(BaseHTTPRequestHandler):
      def log_message(self, *args):
        pass

      def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        outer.requests.append(({k.lower(): v for k, v in self.headers.items()}, body))
        item = outer.script.pop(0) if len(outer.script) > 1 else outer.script[0]
        status, body = 200, b""
        if item[0] == "ok":
          body = json.dumps(item[1]).encode()
        elif item[0] == "500":
          status, body = 500, b'{"error": {"message": "internal"}}'
        elif item[0] == "garbage":
          body = b"<html>definitely not json"
        else:
          time.sleep(item[1])
          body = json.dumps(item[2]).encode()
        try:
          self.send_response(status)
          self.send_header("Content-Type", "application/json")
          self.send_header("Content-Length", str(len(body)))
          self.end_headers()
          self.wfile.write(body)
        except OSError:  # the client timed out and went away
          pass

    self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    self.server.daemon_threads = True
    self.url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"
    threading.Thread(target=self.server.serve_forever, args=(0.02,), daemon=True).start()

  def close(self):
    self.server.shutdown()
    self.server.server_close()


@pytest.fixture
def fake_server(monkeypatch):
  for var in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy",
              "https_proxy", "all_proxy"):
    monkeypatch.delenv(var, raising=False)
  servers = []

  def make(*script):
    servers.append(FakeServer(*script))
    return servers[-1]

  yield make
  for server in servers:
    server.close()


def test_openai_backend_request_and_env(fake_server, monkeypatch):
  server = fake_server(("ok", completion(answer(), reasoning="thinking...")))
  monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
  monkeypatch.setenv("OPENAI_BASE_URL", server.url)
  backend = OpenAIBackend("analyzer-model", timeout=2.0, temperature=0.0)
  assert backend([{"role": "user", "content": "hi"}]) == "thinking...\n" + answer()
  headers, body = server.requests[0]
  assert headers["authorization"] == "Bearer sk-env"
  assert body == {"model": "analyzer-model", "messages": [{"role": "user", "content": "hi"}],
                  "max_completion_tokens": 4096, "temperature": 0.0}


def test_openai_backend_faults_never_stop_analysis(fake_server):
  server = fake_server(("500",), ("garbage",), ("ok", completion("prose, no json")), ("ok", completion(answer())))
  backend = OpenAIBackend("m", base_url=server.url, api_key="EMPTY", timeout=2.0, max_completion_tokens=None)
  a, sleeps = analyzer(backend, retry_delay=0.0, api_retries=3)
  [got] = a.analyze([episode()])
  assert isinstance(got, Analysis) and got.step_skills == {1: "Take the mug."}
  assert len(server.requests) == 4 and "max_completion_tokens" not in server.requests[0][1]
  assert server.requests[3][1]["messages"][0]["content"].startswith(GOLDEN_FAILURE + "\n\nThe previous answer")
  assert (a.stats["api_errors"], a.stats["repairs"], a.stats["analysed"]) == (2, 1, 1) and sleeps == [0.0, 0.0]

  down = fake_server(("500",))
  a, _ = analyzer(OpenAIBackend("m", base_url=down.url, api_key="k", timeout=2.0), retry_delay=0.0, api_retries=2)
  [got] = a.analyze([episode()])
  assert got.kind == "api" and "InternalServerError" in got.error and len(down.requests) == 2


def test_openai_backend_garbage_and_timeout_are_api_failures(fake_server):
  garbage = fake_server(("garbage",))
  a, _ = analyzer(OpenAIBackend("m", base_url=garbage.url, api_key="k", timeout=2.0), retry_delay=0.0,
                  api_retries=2)
  [got] = a.analyze([episode()])
  assert got.kind == "api" and len(garbage.requests) == 2

  slow = fake_server(("slow", 1.5, completion(answer())))
  a, _ = analyzer(OpenAIBackend("m", base_url=slow.url, api_key="k", timeout=0.3), retry_delay=0.0, api_retries=2)
  [got] = a.analyze([episode()])
  assert got.kind == "api" and "Timeout" in got.error


def test_openai_backend_needs_a_key_and_model(monkeypatch):
  monkeypatch.delenv("OPENAI_API_KEY", raising=False)
  with pytest.raises(ValueError, match="OPENAI_API_KEY"):
    OpenAIBackend("m", base_url="http://127.0.0.1:9/v1")
  with pytest.raises(ValueError, match="opid.analyzer_model"):
    OpenAIBackend("", api_key="k")


# ---------------------------------------------------------------------------------- the env's splice points
def _blocks(text, *markers):
  return [text.index(m) for m in markers]


def test_compact_alfworld_prompts_take_the_sections_at_the_same_places_every_step():
  """Our compact templates have neither of OPID's anchors past the first step ("Your task is to:" then lives only in
  an observation of the history, and there is no "Now it's your turn"). With the env's own anchors the episode skill
  follows the task line and the step skill precedes the reply instruction at every step; OPID's would splice the
  skill into the history, or after the reply instruction once the reset observation leaves the window."""
  from agentopd_jax.envs.alfworld.text import AlfworldText
  from agentopd_jax.methods.opid.injection import Anchors

  env = AlfworldText(history_length=2, compact=True)
  env.begin("-= Welcome =-\nYou see a desk 1.\n\nYour task is to: put a mug on the desk.",
            {"admissible_commands": ["go to desk 1", "look"]})
  anchors = Anchors.of(env.prompt_anchors)
  for step in range(4):
    prompt = env.step_prompt()
    both = augment_observation(prompt, "Check price first.", "Search red mug.", anchors)
    ep, st, reply = _blocks(both, EP_BLOCK, STEP_BLOCK, "Reply with one admissible action")
    assert ep < st < reply and both[st + len(STEP_BLOCK):].startswith("\n\nReply with one admissible action")
    task_line = "Your task is to: put a mug on the desk." if step == 0 else "Task: put a mug on the desk."
    assert both[:ep] == prompt[:prompt.index(task_line) + len(task_line)] + "\n\n"
    assert task_description(prompt, anchors) == "put a mug on the desk."
    authors = augment_observation(prompt, "Check price first.")
    if step in (1, 2):  # the reset observation is in the history window: OPID's rule splices inside it
      assert authors.index(EP_BLOCK) > authors.index("Observation 1")
    if step == 3:       # it has left the window: appended after the reply instruction
      assert authors.endswith(EP_BLOCK)
    env.observe("go to desk 1", f"You arrive at desk 1 ({step}).", {"admissible_commands": ["look"]})
  assert AlfworldText(compact=False).prompt_anchors is None  # verl-agent's template: OPID's anchors, as written


def test_compact_webshop_and_search_prompts_name_their_anchors():
  from agentopd_jax.envs.search.text import SearchText
  from agentopd_jax.envs.verl_agent.memory import SimpleMemory
  from agentopd_jax.envs.webshop import prompts as webshop
  from agentopd_jax.methods.opid.injection import Anchors

  anchors = Anchors.of(webshop.WEBSHOP_COMPACT_ANCHORS)
  memory = SimpleMemory()
  for step in range(2):
    prompt = webshop.render("Results page.", {"clickables": ["b01"], "has_search_bar": False}, "a red mug", memory,
                            2, compact=True)
    both = augment_observation(prompt, "Check price first.", "Search red mug.", anchors)
    assert both.startswith(f"Task: a red mug\n\n{EP_BLOCK}\n\n") and f"{STEP_BLOCK}\n\nReply with one action" in both
    assert task_description(prompt, anchors) == "a red mug"
    memory.store("Results page.", "click[b01]")
  search = SearchText(compact=True)
  search.begin("who wrote it?", {"question": "who wrote it?"})
  anchors = Anchors.of(search.prompt_anchors)
  both = augment_observation(search.step_prompt(), "Check price first.", "Search red mug.", anchors)
  assert both.startswith(f"Question: who wrote it?\n\n{EP_BLOCK}\n\n") and f"{STEP_BLOCK}\n\nReply <search>" in both
  assert task_description(search.step_prompt(), anchors) == "who wrote it?"
  assert SearchText(compact=False).prompt_anchors is None
