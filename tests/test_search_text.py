"""Search text layer: EM normalisation, prompts byte for byte, observation formats, parsing, and `SearchText`.

Expected strings are written out here independently of the code (environments.md §2.1, §4.1-4.3, §4.7).
"""
import inspect
import json

import pytest

from agentopd_jax.envs.search import formats, prompts, scoring
from agentopd_jax.envs.search.text import SearchText
from agentopd_jax.envs.verl_agent import SearchMemory
from agentopd_jax.envs.alfworld.text import AlfworldText

HIT = {"document": {"id": "0", "contents": "\"Evan Morris\"\nEvan Morris Evan L. Morris (January 26, 1977 – ...)"},
       "score": 0.83}
HIT2 = {"id": "9", "contents": "\"Paris\"\nParis Paris is the capital of France."}


# ------------------------------------------------------------------------------------------ EM (§4.7)
@pytest.mark.parametrize("text, normalised", [
    ("The Eiffel Tower!", "eiffel tower"),
    ("  An apple,  a day ", "apple day"),
    ("theater Anne anthem", "theater anne anthem"),  # articles only as whole words
    ("U.S.A.", "usa"),
    ("a-team", "ateam"),  # punctuation goes first, so "a-" is no longer an article
    ("Rock 'n' Roll", "rock n roll"),
    ("café—bar", "café—bar"),  # only ASCII punctuation is removed
    ("", ""),
])
def test_normalize_answer_worked_examples(text, normalised):
  assert scoring.normalize_answer(text) == normalised


def test_exact_match_and_substring():
  assert scoring.exact_match("Paris", ["London", "paris"]) == 1.0
  assert scoring.exact_match("Paris France", ["Paris, France"]) == 1.0
  assert scoring.exact_match("the 1851", "1851") == 1.0
  assert scoring.exact_match("Paris", ["Paris, France"]) == 0.0
  assert scoring.subem_check("It is Paris, France.", ["paris"]) == 1.0
  assert scoring.subem_check("Lyon", ["paris"]) == 0.0


def test_search_r1_whole_sequence_scoring():
  prefix = prompts.make_prefix("capital of france")
  assert scoring.extract_solution("<think>x</think><answer>Paris</answer>") is None  # one match is not enough
  # The prefix itself already holds two matches ("<answer> and </answer>" and the Beijing example), so with the
  # prompt included an answer-less response still extracts "Beijing", as upstream.
  assert scoring.extract_solution(prefix + "<think>x</think>") == "Beijing"
  sequence = prefix + "<answer> Lyon </answer> then <answer> Paris </answer>"
  assert scoring.extract_solution(sequence) == "Paris"
  assert scoring.compute_score_em(sequence, {"target": ["paris"]}) == 1.0
  assert scoring.compute_score_em(sequence, {"target": ["rome"]}, format_score=0.1) == 0.1
  assert scoring.compute_score_em("<answer>beijing</answer>", {"target": ["beijing"]}) == 0.0


def test_search_r1_substring_em_scoring():
  """qa_em.py's compute_score_subem: the same extraction, `subem_check` instead of `em_check`."""
  sequence = prompts.make_prefix("capital of france") + "<answer> It is Paris, France. </answer>"
  assert scoring.compute_score_em(sequence, {"target": ["paris"]}) == 0.0
  assert scoring.compute_score_subem(sequence, {"target": ["paris"]}) == 1.0
  assert scoring.compute_score_subem(sequence, {"target": "rome"}, format_score=0.1) == 0.1
  assert scoring.compute_score_subem("<answer>Paris</answer>", {"target": ["paris"]}) == 0.0  # one match: None
  assert scoring.last_answer("<answer> a </answer> x <answer> b </answer>") == "b"
  assert scoring.last_answer("none") is None


# ------------------------------------------------------------------------------------------ prompts
SEARCH_R1_PREFIX_EXPECTED = (
    "Answer the given question. You must conduct reasoning inside <think> and </think> first every time you get new "
    "information. After reasoning, if you find you lack some knowledge, you can call a search engine by <search> "
    "query </search> and it will return the top searched results between <information> and </information>. You can "
    "search as many times as your want. If you find no further external knowledge needed, you can directly provide "
    "the answer inside <answer> and </answer>, without detailed illustrations. For example, <answer> Beijing "
    "</answer>. Question: who got the first nobel prize in physics?\n")

SEARCH_NO_HIS_EXPECTED = (
    "\nYou are an expert agent tasked with answering the given question step-by-step.\n"
    "Your question: Q?\n\n"
    "Now it's your turn to respond for the current step.\n"
    "You should first conduct reasoning process. This process MUST be enclosed within <think> </think> tags. \n"
    "After completing your reasoning, choose only one of the following actions (do not perform both):\n"
    "(1) If you find you lack some knowledge, you can call a search engine to get more external information using "
    "format: <search> your query </search>.\n"
    "(2) If you have enough knowledge to answer the question confidently, provide your final answer within <answer> "
    "</answer> tags, without detailed illustrations. For example, <answer>Beijing</answer>.\n")


def test_search_r1_prefix_bytes():
  assert prompts.make_prefix("  who got the first nobel prize in physics ") == SEARCH_R1_PREFIX_EXPECTED
  assert prompts.make_prefix("who got the first nobel prize in physics?") == SEARCH_R1_PREFIX_EXPECTED
  assert prompts.SEARCH_R1_PREFIX.count("\n") == 1


def test_verl_agent_search_templates_bytes():
  assert prompts.SEARCH_TEMPLATE_NO_HIS.format(task_description="Q?") == SEARCH_NO_HIS_EXPECTED
  history_part = ("\nPrior to this step, you have already taken 2 step(s). Below is the interaction history where "
                  "<search> </search> wrapped your past search queries and <information> </information> wrapped the "
                  "corresponding search results returned by the external search engine. History:\nH\n")
  rendered = prompts.SEARCH_TEMPLATE.format(task_description="Q?", step_count=2, memory_context="H")
  head = "\nYou are an expert agent tasked with answering the given question step-by-step.\nYour question: Q?\n"
  assert rendered == head + history_part + SEARCH_NO_HIS_EXPECTED[len(head):]


def test_compact_template_has_no_think():
  text = prompts.render("Q?", SearchMemory(), compact=True)
  assert "<think>" not in text and text.startswith("Question: Q?\n")


# ------------------------------------------------------------------------------------------ observations and parsing
def test_search_r1_observation_bytes():
  assert formats.search_r1_information([HIT, HIT2]) == (
      '\n\n<information>Doc 1(Title: "Evan Morris") Evan Morris Evan L. Morris (January 26, 1977 – ...)\n'
      'Doc 2(Title: "Paris") Paris Paris is the capital of France.</information>\n\n')
  assert formats.search_r1_information([]) == "\n\n<information></information>\n\n"
  assert formats.INVALID_ACTION_MESSAGE == (
      "\nMy previous action is invalid. If I want to search, I should put the query between <search> and </search>. "
      "If I want to give the final answer, I should put the answer between <answer> and </answer>. Let me try "
      "again.\n")


def test_verl_agent_observation_bytes():
  obs = formats.verl_agent_information(formats.verl_agent_result([[HIT, HIT2]]))
  assert obs == ('<information>{"result": "Doc 1: \\"Evan Morris\\"\\nEvan Morris Evan L. Morris (January 26, 1977 '
                 '\\u2013 ...)\\nDoc 2: \\"Paris\\"\\nParis Paris is the capital of France.\\n"}</information>')
  assert json.loads(formats.verl_agent_result([[HIT], [HIT2]]))["result"].count("\n---\n") == 1
  assert formats.verl_agent_result([]) == '{"result": "No search results found."}'


def test_read_documents_both_formats():
  expected = [("Evan Morris", "Evan Morris Evan L. Morris (January 26, 1977 – ...)"),
              ("Paris", "Paris Paris is the capital of France.")]
  assert formats.read_documents(formats.search_r1_information([HIT, HIT2])) == expected
  assert formats.read_documents(formats.verl_agent_information(formats.verl_agent_result([[HIT, HIT2]]))) == expected
  assert formats.read_documents(formats.INVALID_ACTION_MESSAGE) == []


@pytest.mark.parametrize("text, parsed", [
    ("<think>a</think><search> q </search>", ("search", "q")),
    ("<answer> Paris </answer><search>x</search>", ("answer", "Paris")),  # the cut keeps both; first block wins
    ("<search>a</search><answer>b</answer>", ("search", "a")),
    ("<search>a</search> <search>b</search>", ("search", "a")),
    ("<answer>\nmulti\nline </answer>", ("answer", "multi\nline")),
    ("<search>unclosed", (None, "")),
    ("<search>x</answer>", (None, "")),
])
def test_search_r1_parse(text, parsed):
  assert formats.search_r1_parse(text) == parsed


# ------------------------------------------------------------------------------------------ SearchText
def test_same_interface_as_alfworld_text():
  def public(cls):
    return {n for n in dir(cls) if not n.startswith("_")}

  def params(cls):
    return list(inspect.signature(cls.__init__).parameters)

  assert public(AlfworldText) <= public(SearchText)
  assert params(SearchText) == params(AlfworldText)
  assert SearchText.name == "search" and SearchText().invalid_penalty == 0.01 and SearchText().history_length == 4


def test_verl_agent_flavor_steps():
  view = SearchText()
  view.begin("Q?", {"question": "Q?"})
  assert view.step_prompt() == SEARCH_NO_HIS_EXPECTED == view.turn_prompt()
  action, valid = view.project("<think>need</think>\n<search> first nobel </search>")
  assert (action, valid) == ("<search>first nobel</search>", 1)
  info = formats.verl_agent_information(formats.verl_agent_result([[HIT]]))
  view.observe(action, info, {})
  expected_history = f"Step 1:<search>first nobel</search> {info}\n"
  assert view.step_prompt() == prompts.SEARCH_TEMPLATE.format(task_description="Q?", step_count=1,
                                                                memory_context=expected_history)
  assert view.turn_prompt() == info
  assert view.project("<search>a</search><answer>b</answer>") == ("<search>a</search>", 0)
  assert view.project("no tags") == ("", 0)
  assert view.reward(1.0, True, {"won": True}) == (1.0, True)
  assert view.reward(0.0, False, {"won": False}) == (0.0, False)


def test_search_r1_flavor_steps():
  view = SearchText(flavor="search-r1")
  view.begin("who got the first nobel prize in physics", {"question": "who got the first nobel prize in physics"})
  assert view.step_prompt() == SEARCH_R1_PREFIX_EXPECTED == view.turn_prompt()
  assert view.project("<think>t</think><search> a </search><answer>b</answer>") == ("<search>a</search>", 1)
  assert view.project("I do not know") == ("", 0)
  info = formats.search_r1_information([HIT])
  view.observe("<search>a</search>", info, {})
  assert view.step_prompt() == SEARCH_R1_PREFIX_EXPECTED + "<search>a</search>" + info
  with pytest.raises(ValueError, match="flavor"):
    SearchText(flavor="nope")


@pytest.mark.parametrize("flavor, compact", [("verl-agent", False), ("opid", False), ("search-r1", False),
                                             ("verl-agent", True)])
def test_demo_replies_project_back(flavor, compact):
  view = SearchText(flavor=flavor, compact=compact)
  for action in ("<search>Evan Morris born</search>", "<answer>1977</answer>"):
    reply = view.demo_reply(action)
    assert view.project(reply) == (action, 1)
    assert ("<think>" in reply) != compact
    assert reply.endswith((" Evan Morris born </search>", " 1977 </answer>"))  # the prompts' spacing
