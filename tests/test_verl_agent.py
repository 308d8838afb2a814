"""Tests for agentopd_jax.envs.verl_agent: verl-agent's prompts, memory, projections, rewards and metrics.

The golden strings are the rendered examples of environments.md §2.2, copied byte for byte (with the leading
newline every template starts with), so any drift from verl-agent's prompts fails here.
"""
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentopd_jax.envs.alfworld.spec import ALFWORLD_TASK_TYPES, alfworld_task_type
from agentopd_jax.envs.verl_agent import prompts
from agentopd_jax.envs.verl_agent.memory import SearchMemory, SimpleMemory, make_memory
from agentopd_jax.envs.verl_agent.metrics import EpisodeRecord, episode_metrics
from agentopd_jax.envs.verl_agent.projection import alfworld_projection, search_projection, webshop_projection
from agentopd_jax.envs.verl_agent.prompts import (
    alfworld_task,
    format_admissible,
    format_available_actions,
    render_alfworld,
    render_search,
    render_webshop,
    webshop_observation,
    webshop_task,
)
from agentopd_jax.envs.verl_agent.rewards import (
    INVALID_ACTION_PENALTY_COEF,
    alfworld_reward,
    apply_invalid_action_penalty,
    exact_match,
    normalize_answer,
    search_reward,
    webshop_reward,
)

# ----------------------------------------------------------------------------------------------------------------
# Golden prompts (environments.md §2.2)
# ----------------------------------------------------------------------------------------------------------------

ALFWORLD_EXAMPLE = (
    "\n"
    "You are an expert agent operating in the ALFRED Embodied Environment. Your task is to: put a hot "
    "potato in countertop.\n"
    "Prior to this step, you have already taken 1 step(s). Below are the most recent 1 observations and "
    "the corresponding actions you took: [Observation 1: '-= Welcome to TextWorld, ALFRED! =-\n"
    "\n"
    "You are in the middle of a room. Looking quickly around you, you see a cabinet 2, a cabinet 1, a "
    "countertop 1, a diningtable 1, a fridge 1, a garbagecan 1, a microwave 1, a sinkbasin 1, and a "
    "stoveburner 1.\n"
    "\n"
    "Your task is to: put a hot potato in countertop.', Action 1: 'go to diningtable 1']\n"
    "You are now at step 2 and your current observation is: You arrive at diningtable 1. On the "
    "diningtable 1, you see a bread 1, a potato 1, and a spatula 1.\n"
    "Your admissible actions of the current situation are: ['examine diningtable 1'\n"
    " 'go to cabinet 1'\n"
    " 'go to cabinet 2'\n"
    " 'go to countertop 1'\n"
    " 'go to fridge 1'\n"
    " 'go to garbagecan 1'\n"
    " 'go to microwave 1'\n"
    " 'go to sinkbasin 1'\n"
    " 'go to stoveburner 1'\n"
    " 'inventory'\n"
    " 'look'\n"
    " 'take bread 1 from diningtable 1'\n"
    " 'take potato 1 from diningtable 1'\n"
    " 'take spatula 1 from diningtable 1'].\n"
    "\n"
    "Now it's your turn to take an action.\n"
    "You should first reason step-by-step about the current situation. This reasoning process MUST be "
    "enclosed within <think> </think> tags. \n"
    "Once you've finished your reasoning, you should choose an admissible action for current step and "
    "present it within <action> </action> tags.\n"
)

WEBSHOP_EXAMPLE = (
    "\n"
    "You are an expert autonomous agent operating in the WebShop e\u2011commerce environment.\n"
    "Your task is to: i need a long clip-in hair extension which is natural looking, and price lower "
    "than 40.00 dollars.\n"
    "Prior to this step, you have already taken 1 step(s). Below are the most recent 1 observations and "
    "the corresponding actions you took: [Observation 1: ''Search'', Action 1: 'search[long clip-in hair "
    "extension natural]']\n"
    "You are now at step 2 and your current observation is: 'Back to Search' [SEP] 'Page 1 (Total "
    "results: 50)' [SEP] 'Next >' [SEP] 'B09C337K8S' [SEP] 'Foo Bar Hair Extension 20 inch' [SEP] "
    "'$12.99'.\n"
    "Your admissible actions of the current situation are: \n"
    "[\n"
    "'click[back to search]',\n"
    "'click[next >]',\n"
    "'click[b09c337k8s]',\n"
    "].\n"
    "\n"
    "Now it's your turn to take one action for the current step.\n"
    "You should first reason step-by-step about the current situation, then think carefully which "
    "admissible action best advances the shopping goal. This reasoning process MUST be enclosed within "
    "<think> </think> tags. \n"
    "Once you've finished your reasoning, you should choose an admissible action for current step and "
    "present it within <action> </action> tags.\n"
)

SEARCH_EXAMPLE = (
    "\n"
    "You are an expert agent tasked with answering the given question step-by-step.\n"
    "Your question: who got the first nobel prize in physics?\n"
    "\n"
    "Prior to this step, you have already taken 1 step(s). Below is the interaction history where "
    "<search> </search> wrapped your past search queries and <information> </information> wrapped the "
    "corresponding search results returned by the external search engine. History:\n"
    "Step 1:<search>first nobel prize in physics</search> <information>{\"result\": \"Doc 1: \\\"Nobel Prize "
    "in Physics\\\"\\nNobel Prize in Physics The Nobel Prize ...\\nDoc 2: ...\\n\"}</information>\n"
    "\n"
    "\n"
    "Now it's your turn to respond for the current step.\n"
    "You should first conduct reasoning process. This process MUST be enclosed within <think> </think> "
    "tags. \n"
    "After completing your reasoning, choose only one of the following actions (do not perform both):\n"
    "(1) If you find you lack some knowledge, you can call a search engine to get more external "
    "information using format: <search> your query </search>.\n"
    "(2) If you have enough knowledge to answer the question confidently, provide your final answer "
    "within <answer> </answer> tags, without detailed illustrations. For example, "
    "<answer>Beijing</answer>.\n"
)

ALFWORLD_RESET = (
    "-= Welcome to TextWorld, ALFRED! =-\n\nYou are in the middle of a room. Looking quickly around you, you see a "
    "cabinet 2, a cabinet 1, a countertop 1, a diningtable 1, a fridge 1, a garbagecan 1, a microwave 1, a sinkbasin "
    "1, and a stoveburner 1.\n\nYour task is to: put a hot potato in countertop."
)
# What the env lists at the dining table: sorted, with 'help', which the prompt must drop.
ALFWORLD_ADMISSIBLE = [
    "examine diningtable 1", "go to cabinet 1", "go to cabinet 2", "go to countertop 1", "go to fridge 1",
    "go to garbagecan 1", "go to microwave 1", "go to sinkbasin 1", "go to stoveburner 1", "help", "inventory", "look",
    "take bread 1 from diningtable 1", "take potato 1 from diningtable 1", "take spatula 1 from diningtable 1",
]  # fmt: skip
ALFWORLD_OBS = "You arrive at diningtable 1. On the diningtable 1, you see a bread 1, a potato 1, and a spatula 1."
WEBSHOP_TASK = "i need a long clip-in hair extension which is natural looking, and price lower than 40.00 dollars"
WEBSHOP_RESET = f"WebShop [SEP] Instruction: [SEP] {WEBSHOP_TASK} [SEP] Search"
WEBSHOP_RESULTS = (f"Instruction: [SEP] {WEBSHOP_TASK} [SEP] Back to Search [SEP] Page 1 (Total results: 50) [SEP] "
                   "Next > [SEP] B09C337K8S [SEP] Foo Bar Hair Extension 20 inch [SEP] $12.99")
WEBSHOP_AVAILABLE = {"has_search_bar": False, "clickables": ["back to search", "next >", "b09c337k8s"]}


def _alfworld_memory(*actions):
  memory = SimpleMemory()
  for i, action in enumerate(actions):
    memory.store(ALFWORLD_RESET if i == 0 else f"obs {i + 1}", action)
  return memory


def test_alfworld_golden():
  task = alfworld_task(ALFWORLD_RESET)
  got = render_alfworld(ALFWORLD_OBS, ALFWORLD_ADMISSIBLE, task, _alfworld_memory("go to diningtable 1"))
  assert got == ALFWORLD_EXAMPLE


def test_webshop_golden():
  task = webshop_task(WEBSHOP_RESET)
  memory = SimpleMemory()
  memory.store(webshop_observation(WEBSHOP_RESET, task), "search[long clip-in hair extension natural]")
  got = render_webshop(webshop_observation(WEBSHOP_RESULTS, task), WEBSHOP_AVAILABLE, task, memory)
  assert got == WEBSHOP_EXAMPLE


def test_search_golden():
  docs = 'Doc 1: "Nobel Prize in Physics"\nNobel Prize in Physics The Nobel Prize ...\nDoc 2: ...\n'
  memory = SearchMemory()
  memory.store("<information>" + json.dumps({"result": docs}) + "</information>",
               "<search>first nobel prize in physics</search>")
  assert render_search("who got the first nobel prize in physics?", memory) == SEARCH_EXAMPLE


def test_first_steps_use_the_no_history_templates():
  empty = SimpleMemory()
  got = render_alfworld(ALFWORLD_RESET, ["go to cabinet 1", "help", "look"], "ignored", empty)
  assert got == (
      "\nYou are an expert agent operating in the ALFRED Embodied Environment.\n"
      f"Your current observation is: {ALFWORLD_RESET}\n"
      "Your admissible actions of the current situation are: ['go to cabinet 1'\n 'look'].\n\n"
      "Now it's your turn to take an action.\n"
      "You should first reason step-by-step about the current situation. This reasoning process MUST be enclosed "
      "within <think> </think> tags. \n"
      "Once you've finished your reasoning, you should choose an admissible action for current step and present it "
      "within <action> </action> tags.\n"
  )
  web = render_webshop("'Search'", {"has_search_bar": True, "clickables": ["search"]}, WEBSHOP_TASK, empty)
  assert web.startswith("\nYou are an expert autonomous agent operating in the WebShop e\u2011commerce environment. \n"
                        f"Your task is to: {WEBSHOP_TASK}.\nYour current observation is: 'Search'.\n"
                        "Your admissible actions of the current situation are: \n[\n'search[<your query>]',\n"
                        "'click[search]',\n].\n\n")
  assert render_search("q?", SearchMemory()) == prompts.SEARCH_TEMPLATE_NO_HIS.format(task_description="q?")


def test_history_length_zero_always_uses_no_history_templates():
  memory = _alfworld_memory("look", "inventory")
  alf = render_alfworld(ALFWORLD_OBS, ALFWORLD_ADMISSIBLE, "t.", memory, history_length=0)
  assert alf == render_alfworld(ALFWORLD_OBS, ALFWORLD_ADMISSIBLE, "t.", SimpleMemory())
  assert render_search("q?", make_memory("search"), history_length=0) == render_search("q?", SearchMemory())


def test_alfworld_history_window_counts():
  memory = _alfworld_memory("go to fridge 1", "open fridge 1", "look")
  got = render_alfworld(ALFWORLD_OBS, ["look"], "put a hot potato in countertop.", memory, history_length=2)
  assert "you have already taken 3 step(s). Below are the most recent 2 observations" in got
  assert ("took: [Observation 2: 'obs 2', Action 2: 'open fridge 1']\n[Observation 3: 'obs 3', Action 3: 'look']\n"
          "You are now at step 4 and") in got
  assert "Observation 1" not in got


def test_compact_alfworld_template():
  memory = _alfworld_memory("go to diningtable 1", "look")
  got = render_alfworld("You see a bread 1.", ["look", "help", "inventory"], "put a hot potato in countertop.",
                        memory, compact=True)
  assert got == ("Task: put a hot potato in countertop.\n"
                 "Last 2 of 2 step(s): [Observation 1: '" + ALFWORLD_RESET + "', Action 1: 'go to diningtable 1']\n"
                 "[Observation 2: 'obs 2', Action 2: 'look']\n"
                 "Step 3 observation: You see a bread 1.\n"
                 "Admissible actions: ['look'\n 'inventory']\n"
                 "Reply with one admissible action inside <action> </action> tags.\n")
  first = render_alfworld(ALFWORLD_RESET, ["look"], "", SimpleMemory(), compact=True)
  assert first == (f"Observation: {ALFWORLD_RESET}\nAdmissible actions: ['look']\n"
                   "Reply with one admissible action inside <action> </action> tags.\n")
  assert "<think>" not in prompts.ALFWORLD_COMPACT_TEMPLATE + prompts.ALFWORLD_COMPACT_TEMPLATE_NO_HIS
  full = render_alfworld("You see a bread 1.", ["look", "help", "inventory"], "put a hot potato in countertop.",
                         memory)
  assert len(full) - len(got) > 400


def test_templates_keep_their_odd_bytes():
  for name in ("ALFWORLD", "WEBSHOP", "SEARCH"):
    for suffix in ("_TEMPLATE", "_TEMPLATE_NO_HIS"):
      template = getattr(prompts, name + suffix)
      assert template.startswith("\n") and template.endswith(".\n")
      assert "MUST be enclosed within <think> </think> tags. \n" in template
  assert prompts.WEBSHOP_TEMPLATE.count("e\u2011commerce") == prompts.WEBSHOP_TEMPLATE_NO_HIS.count("e\u2011commerce")
  assert "e\u2011commerce environment. \n" in prompts.WEBSHOP_TEMPLATE_NO_HIS
  assert "e\u2011commerce environment.\n" in prompts.WEBSHOP_TEMPLATE
  assert prompts.WEBSHOP_TEMPLATE.count("are: \n[") == prompts.WEBSHOP_TEMPLATE_NO_HIS.count("are: \n[") == 1


def test_tokenizer_corpus_uses_these_templates():
  from agentopd_jax.envs.search import prompts as search_prompts
  from agentopd_jax.envs.verl_agent import corpus

  for name in ("ALFWORLD_TEMPLATE", "ALFWORLD_TEMPLATE_NO_HIS", "WEBSHOP_TEMPLATE", "WEBSHOP_TEMPLATE_NO_HIS",
               "SEARCH_TEMPLATE", "SEARCH_TEMPLATE_NO_HIS"):
    assert getattr(corpus, name) is getattr(prompts, name)
  assert corpus.SEARCH_R1_PREFIX is search_prompts.SEARCH_R1_PREFIX


def test_opid_flavor_differs_only_by_trailing_spaces():
  """methods.md §5: OPID/SDAR history templates lack the spaces after "tags." and (WebShop) "are:"."""
  assert prompts.ALFWORLD_TEMPLATE_OPID == prompts.ALFWORLD_TEMPLATE.replace("tags. \n", "tags.\n")
  assert len(prompts.ALFWORLD_TEMPLATE) - len(prompts.ALFWORLD_TEMPLATE_OPID) == 1
  assert len(prompts.WEBSHOP_TEMPLATE) - len(prompts.WEBSHOP_TEMPLATE_OPID) == 2
  memory = _alfworld_memory("go to diningtable 1")
  task = alfworld_task(ALFWORLD_RESET)
  opid = render_alfworld(ALFWORLD_OBS, ALFWORLD_ADMISSIBLE, task, memory, flavor="opid")
  assert opid == ALFWORLD_EXAMPLE.replace("tags. \n", "tags.\n")
  web = render_webshop("'x'", WEBSHOP_AVAILABLE, WEBSHOP_TASK, memory, flavor="opid")
  assert "are:\n[" in web and "tags.\nOnce" in web
  # The first step is the same in both flavours.
  assert render_alfworld("o", ["look"], "t", SimpleMemory(), flavor="opid") == render_alfworld(
      "o", ["look"], "t", SimpleMemory())
  with pytest.raises(ValueError, match="flavor"):
    render_alfworld("o", ["look"], "t", memory, flavor="skillrl")


def test_alfworld_task_extraction():
  assert alfworld_task(ALFWORLD_RESET) == "put a hot potato in countertop."
  assert alfworld_task("Your task is to: look at bowl under the desklamp.  \n") == "look at bowl under the desklamp."
  assert alfworld_task("a\n\nYour task is to: x. Your task is to: y.") == "x. Your task is to: y."
  with pytest.raises(ValueError):
    alfworld_task("You are in the middle of a room.")


def test_format_admissible_drops_help_and_quotes_each():
  assert format_admissible(["go to desk 1", "help", "look"]) == "'go to desk 1'\n 'look'"
  assert format_admissible(["help"]) == ""


def test_webshop_task_observation_and_actions():
  assert webshop_task(WEBSHOP_RESET) == WEBSHOP_TASK
  with pytest.raises(ValueError):
    webshop_task(WEBSHOP_RESULTS)
  assert webshop_observation(WEBSHOP_RESET, WEBSHOP_TASK) == "'Search'"
  assert webshop_observation(f"Instruction: [SEP] {WEBSHOP_TASK} [SEP] Back to Search [SEP] < Prev",
                             WEBSHOP_TASK) == "'Back to Search' [SEP] '< Prev'"
  done_page = "Thank you for shopping with us! [SEP] Your code: [SEP] 0.5"
  assert webshop_observation(done_page, WEBSHOP_TASK) == done_page
  assert format_available_actions({"has_search_bar": True, "clickables": ["search"]}) == (
      "'search[<your query>]',\n'click[search]',")
  assert format_available_actions({"has_search_bar": False, "clickables": []}) == ""
  with pytest.raises(ValueError, match="unknown keys"):
    format_available_actions({"has_search_bar": False, "clickables": [], "extra": 1})


def test_webshop_long_history_prompt_falls_back():
  memory = SimpleMemory()
  memory.store("'" + "x" * 20000 + "'", "click[next >]")
  short = render_webshop("'y'", WEBSHOP_AVAILABLE, WEBSHOP_TASK, SimpleMemory())
  assert render_webshop("'y'", WEBSHOP_AVAILABLE, WEBSHOP_TASK, memory) == short
  assert render_webshop("'y'", WEBSHOP_AVAILABLE, WEBSHOP_TASK, memory, max_chars=30000) != short


# ----------------------------------------------------------------------------------------------------------------
# Memory
# ----------------------------------------------------------------------------------------------------------------


def test_simple_memory_window():
  memory = SimpleMemory()
  assert memory.fetch(2) == ("", 0)
  for i in range(1, 6):
    memory.store(f"o{i}", f"a{i}")
  assert len(memory) == 5
  assert memory.fetch() == ("[Observation 4: 'o4', Action 4: 'a4']\n[Observation 5: 'o5', Action 5: 'a5']", 2)
  text, shown = memory.fetch(10)
  assert shown == 5 and text.count("\n") == 4 and text.startswith("[Observation 1: 'o1'")
  assert memory.fetch(0) == ("", 0) and memory.fetch(-3) == ("", 0)
  memory.reset()
  assert len(memory) == 0 and memory.fetch(2) == ("", 0)


def test_search_memory_format():
  memory = make_memory("search")
  assert isinstance(memory, SearchMemory)
  memory.store("<information>i1</information>", "<search>q1</search>")
  memory.store("", "")
  assert memory.fetch(4) == ("Step 1:<search>q1</search> <information>i1</information>\n\nStep 2: \n", 2)
  assert memory.fetch(1) == ("Step 2: \n", 1)
  assert type(make_memory("alfworld")) is SimpleMemory and type(make_memory("webshop")) is SimpleMemory
  with pytest.raises(ValueError):
    make_memory("sokoban")


# ----------------------------------------------------------------------------------------------------------------
# Projection
# ----------------------------------------------------------------------------------------------------------------

LONG_TAIL = "<think>hmm</think> I will go to the cabinet number one now"
ALFWORLD_CASES = [
    ("<think>go</think><action>Go To Cabinet 1</action>", "go to cabinet 1", 1),
    ("<think>x</think>\n<ACTION>  take apple 1 from desk 1 \n</Action>", "take apple 1 from desk 1", 1),
    ("<action>look</action>", "look", 0),  # no think block
    ("<THINK>x</think><action>look</action>", "look", 0),  # the think check is case-sensitive
    ("<think>x<action>look</action>", "look", 0),  # unclosed think
    ("</think>reversed<think><action>look</action>", "look", 1),  # order is not checked
    ("<think></think><action>open fridge 1</action><action>look</action>", "open fridge 1", 1),  # first tag pair
    ("<think></think><action><action>look</action></action>", "<action>look", 1),  # nested: first to first
    ("<think></think></action>look<action>", "", 1),  # close before open: empty slice, still "valid"
    ("<think></think><action></action>", "", 1),
    ("<think>我想</think><action>look</action>", "look", 0),  # CJK ideograph
    ("<think>ア</think><action>look</action>", "look", 1),  # kana is outside [\u4e00-\u9fff]
    (LONG_TAIL, LONG_TAIL.lower()[-30:], 0),
    ("<think>a</think><action>Look Around", "<think>a</think><action>look around"[-30:], 0),
    ("", "", 0),
    ("   \n\t ", "   \n\t ", 0),
]


@pytest.mark.parametrize("response,action,valid", ALFWORLD_CASES)
def test_alfworld_projection_table(response, action, valid):
  assert alfworld_projection([response]) == ([action], [valid])


def test_projection_without_think_check():
  responses = ["<action>Look</action>", "<action>我</action>", "no tags here"]
  assert alfworld_projection(responses, check_think=False) == (["look", "我", "no tags here"], [1, 0, 0])


def test_webshop_projection():
  responses = ["<think>t</think><action>click[Buy Now]</action>", "I would search for a red dress please"]
  assert webshop_projection(responses) == (["click[buy now]", "search for a red dress please"[-20:]], [1, 0])
  assert webshop_projection([]) == ([], [])


SEARCH_CASES = [
    ("<think>x</think><search> capital of France </search>", "<search>capital of France</search>", 1),
    ("<answer> Paris </answer>", "<answer>Paris</answer>", 1),  # no think needed
    ("<SEARCH>q</SEARCH>", "<search>q</search>", 1),  # tags match case-insensitively
    ("<search>q</search><answer>a</answer>", "<search>q</search>", 0),  # both kinds
    ("<answer>a</answer> then <search>q</search>", "<search>q</search>", 0),
    ("<search>a</search><search>b</search>", "<search>a</search>", 0),  # two searches
    ("<answer>a</answer> <answer>b", "<answer>a</answer>", 0),  # two answer tags
    ("</search><search>q</search>", "", 0),  # cut after the first </search> leaves no block
    ("<answer>\nline1\nline2\n</answer>", "<answer>line1\nline2</answer>", 1),
    ("<answer>北京</answer>", "<answer>北京</answer>", 1),  # no CJK rule for Search
    ("I think it is Paris", "", 0),
    ("<search>q", "", 0),
    ("", "", 0),
]


@pytest.mark.parametrize("response,action,valid", SEARCH_CASES)
def test_search_projection_table(response, action, valid):
  assert search_projection([response]) == ([action], [valid])


FRAGMENTS = ["<action>", "</action>", "<ACTION>", "<think>", "</think>", "<search>", "</search>", "<answer>",
             "</answer>", "<Search>", "</ANSWER>", "我", "İ", "ß", " ", "\n", "look", "<", ">", "/"]
RESPONSES = st.lists(st.one_of(st.text(), st.sampled_from(FRAGMENTS)), max_size=10).map("".join)


@settings(max_examples=300, deadline=None)
@given(st.lists(RESPONSES, max_size=4))
def test_tagged_projections_never_raise(responses):
  before = list(responses)
  for project, tail in ((alfworld_projection, 30), (webshop_projection, 20)):
    actions, valids = project(responses)
    assert responses == before
    assert len(actions) == len(valids) == len(responses)
    for response, action, valid in zip(responses, actions, valids):
      assert isinstance(action, str) and valid in (0, 1)
      lowered = response.lower()
      if "<action>" not in lowered or "</action>" not in lowered:
        assert (action, valid) == (lowered[-tail:], 0)
      if valid:
        assert "<think>" in response and "</think>" in response
        assert not any("\u4e00" <= ch <= "\u9fff" for ch in response)
        assert action == action.strip() and action in lowered


@settings(max_examples=300, deadline=None)
@given(st.lists(RESPONSES, max_size=4))
def test_search_projection_never_raises(responses):
  actions, valids = search_projection(responses)
  assert len(actions) == len(valids) == len(responses)
  for action, valid in zip(actions, valids):
    assert isinstance(action, str) and valid in (0, 1)
    if valid:
      assert action.startswith(("<search>", "<answer>")) and action.endswith(("</search>", "</answer>"))
    if not action:
      assert valid == 0


# ----------------------------------------------------------------------------------------------------------------
# Rewards and penalty
# ----------------------------------------------------------------------------------------------------------------


def test_env_rewards():
  assert alfworld_reward(True) == 10.0 and alfworld_reward(False) == 0.0
  assert webshop_reward(1.0, True) == (10.0, True)
  assert webshop_reward(1.0, False) == (0.0, False)
  assert webshop_reward(0.67, True) == (0.0, False)


def test_exact_match_and_search_reward():
  assert normalize_answer("The  Eiffel-Tower!") == "eiffeltower"
  assert normalize_answer("An apple, a day") == "apple day"
  assert exact_match("the Beatles", ["Beatles", "x"]) == 1.0
  assert exact_match("Paris.", "paris") == 1.0 and exact_match("Paris, France", ["Paris"]) == 0.0
  history = "<search>band</search><information>the beatles</information><answer> The Beatles </answer>"
  assert search_reward(history, ["beatles"], done=True) == (1.0, True)
  assert search_reward(history, ["beatles"], done=False) == (0.0, False)
  assert search_reward("<answer>stones</answer><answer>beatles</answer>", "Beatles", done=True) == (1.0, True)
  assert search_reward("<answer>beatles</answer><answer>stones</answer>", "Beatles", done=True) == (0.0, False)
  assert search_reward("no answer", "Beatles", done=True) == (0.0, False)


def test_invalid_action_penalty():
  got = apply_invalid_action_penalty([10.0, 10.0, 0.0, 0.0], [1, 0, 1, 0], coef=0.1)
  assert got == pytest.approx([10.0, 9.9, 0.0, -0.1])
  assert apply_invalid_action_penalty([1, 1], [True, False], coef=0.01) == pytest.approx([1.0, 0.99])
  assert INVALID_ACTION_PENALTY_COEF == {"alfworld": 0.1, "webshop": 0.1, "search": 0.01}
  with pytest.raises(ValueError):
    apply_invalid_action_penalty([1.0], [1, 0])


# ----------------------------------------------------------------------------------------------------------------
# Metrics
# ----------------------------------------------------------------------------------------------------------------


def _game(task_dir):
  return f"/data/json_2.1.1/valid_seen/{task_dir}/trial_T20190909_000000_000000/game.tw-pddl"


def _alfworld(task_dir, *args):
  """An ALFWorld episode, grouped as the trainer groups it (the spec's task type of the game file)."""
  return EpisodeRecord(_game(task_dir), alfworld_task_type(_game(task_dir)), *args)


ALFWORLD_EPISODES = [
    _alfworld("pick_and_place_simple-Mug-None-Desk-308", True, 10.0, 5, 5),
    _alfworld("pick_two_obj_and_place-CD-None-Safe-308", False, 0.0, 50, 40),
    _alfworld("look_at_obj_in_light-Bowl-None-DeskLamp-301", True, 10.0, 10, 9),
    _alfworld("pick_heat_then_place_in_recep-Potato-None-CounterTop-7", False, 0.0, 50, 45),
    _alfworld("pick_cool_then_place_in_recep-Apple-None-Fridge-1", True, 10.0, 20, 20),
    _alfworld("pick_clean_then_place_in_recep-Lettuce-None-DiningTable-2", True, 10.0, 15, 14),
    _alfworld("pick_and_place_simple-SprayBottle-None-Toilet-411", False, 0.0, 50, 50),
]


def test_alfworld_episode_metrics():
  got = episode_metrics(ALFWORLD_EPISODES, prefix="episode/")
  expected = {
      "success_rate": 4 / 7,
      "pick_and_place_success_rate": 0.5,
      "pick_two_obj_and_place_success_rate": 0.0,
      "look_at_obj_in_light_success_rate": 1.0,
      "pick_heat_then_place_in_recep_success_rate": 0.0,
      "pick_cool_then_place_in_recep_success_rate": 1.0,
      "pick_clean_then_place_in_recep_success_rate": 1.0,
      "valid_action_ratio": 183 / 200,  # over steps, not the mean of per-episode ratios
      "reward/mean": 40 / 7, "reward/max": 10.0, "reward/min": 0.0,
      "length/mean": 200 / 7, "length/max": 50.0, "length/min": 5.0,
  }  # fmt: skip
  assert got == pytest.approx({f"episode/{k}": v for k, v in expected.items()})
  assert set(got) == {f"episode/{k}" for k in expected}


def test_task_type_keys_only_for_present_types():
  got = episode_metrics(ALFWORLD_EPISODES[:1])
  assert set(got) - {"success_rate", "valid_action_ratio"} - {f"{n}/{s}" for n in ("reward", "length")
                                                               for s in ("mean", "max", "min")} == {
      "pick_and_place_success_rate"}
  assert alfworld_task_type(_game("pick_two_obj_and_place-CD-None-Safe-308")) == "pick_two_obj_and_place"
  assert alfworld_task_type("somewhere/else") is None
  assert ALFWORLD_TASK_TYPES[0] == "pick_and_place"


def test_webshop_and_search_metrics():
  web = episode_metrics([EpisodeRecord("0", None, True, 10.0, 4, 4, task_score=1.0),
                         EpisodeRecord("1", None, False, 0.0, 15, 12, task_score=0.5)], prefix="val/")
  assert web["val/webshop_task_score (not success_rate)"] == 0.75 and web["val/success_rate"] == 0.5
  assert not any("tool_call" in k for k in web)
  search = episode_metrics([EpisodeRecord("q1", "nq", True, 1.0, 2, 2, data_source="nq", tool_calls=1, subem=1.0),
                            EpisodeRecord("q2", "hotpotqa", False, 0.0, 4, 3, data_source="hotpotqa", tool_calls=3,
                                          subem=1.0),
                            EpisodeRecord("q3", "nq", True, 1.0, 3, 3, data_source="nq", tool_calls=2, subem=1.0)])
  assert search["nq_success_rate"] == 1.0 and search["hotpotqa_success_rate"] == 0.0
  assert search["tool_call_count/mean"] == 2.0
  assert search["nq/tool_call_count/mean"] == 1.5 and search["hotpotqa/tool_call_count/mean"] == 3.0
  assert search["valid_action_ratio"] == pytest.approx(8 / 9)
  assert search["subem"] == 1.0 and search["hotpotqa_subem"] == 1.0 and search["success_rate"] == pytest.approx(2 / 3)
  assert not any("subem" in k for k in web)


def test_metrics_reject_bad_input():
  with pytest.raises(ValueError):
    episode_metrics([])
  with pytest.raises(ValueError):
    EpisodeRecord(None, None, False, 0.0, 0, 0)
  with pytest.raises(ValueError):
    EpisodeRecord(None, None, False, 0.0, 3, 4)
