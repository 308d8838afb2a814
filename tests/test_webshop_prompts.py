"""verl-agent's WebShop text layer (research notes §2.1-2.4): templates, reformatting, action lists, the 13,000-char
fallback, projection (property tests) and `WebshopText`, which must offer exactly `AlfworldText`'s interface."""
import inspect

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentopd_jax.envs import verl_agent
from agentopd_jax.envs.verl_agent.memory import SimpleMemory
from agentopd_jax.envs.webshop import prompts
from agentopd_jax.envs.webshop.text import WebshopText
from agentopd_jax.envs.alfworld.text import AlfworldText

TASK = "i need a long clip-in hair extension which is natural looking, and price lower than 40.00 dollars"
RESET = f"WebShop [SEP] Instruction: [SEP] {TASK} [SEP] Search"
RESULTS = (f"Instruction: [SEP] {TASK} [SEP] Back to Search [SEP] Page 1 (Total results: 50) [SEP] Next > [SEP] "
           "B09C337K8S [SEP] Foo Bar Hair Extension 20 inch [SEP] $12.99")
RESET_INFOS = {"available_actions": {"has_search_bar": True, "clickables": ["search"]}, "won": False}
RESULTS_INFOS = {"available_actions": {"has_search_bar": False,
                                       "clickables": ["back to search", "next >", "b09c337k8s"]}, "won": False}
# environments.md §2.2, the rendered WebShop example, byte for byte.
EXAMPLE = (
    "\n"
    "You are an expert autonomous agent operating in the WebShop e\u2011commerce environment.\n"
    f"Your task is to: {TASK}.\n"
    "Prior to this step, you have already taken 1 step(s). Below are the most recent 1 observations and the "
    "corresponding actions you took: [Observation 1: ''Search'', Action 1: 'search[long clip-in hair extension "
    "natural]']\n"
    "You are now at step 2 and your current observation is: 'Back to Search' [SEP] 'Page 1 (Total results: 50)' "
    "[SEP] 'Next >' [SEP] 'B09C337K8S' [SEP] 'Foo Bar Hair Extension 20 inch' [SEP] '$12.99'.\n"
    "Your admissible actions of the current situation are: \n"
    "[\n"
    "'click[back to search]',\n"
    "'click[next >]',\n"
    "'click[b09c337k8s]',\n"
    "].\n"
    "\n"
    "Now it's your turn to take one action for the current step.\n"
    "You should first reason step-by-step about the current situation, then think carefully which admissible action "
    "best advances the shopping goal. This reasoning process MUST be enclosed within <think> </think> tags. \n"
    "Once you've finished your reasoning, you should choose an admissible action for current step and present it "
    "within <action> </action> tags.\n"
)


def test_text_env_renders_the_verl_agent_example():
  view = WebshopText()
  view.begin(RESET, RESET_INFOS)
  assert view.task == TASK and view.observation == "'Search'"
  first = view.step_prompt()
  assert first == prompts.WEBSHOP_TEMPLATE_NO_HIS.format(
      task_description=TASK, current_observation="'Search'",
      available_actions="'search[<your query>]',\n'click[search]',")
  assert "environment. \nYour task is to:" in first and "e\u2011commerce" in first  # the template's odd bytes
  view.observe("search[long clip-in hair extension natural]", RESULTS, RESULTS_INFOS)
  assert view.step_prompt() == EXAMPLE
  assert view.turn_prompt() == prompts.render(view.observation, RESULTS_INFOS["available_actions"], TASK,
                                              SimpleMemory())


def test_templates_are_verl_agents_own():
  assert prompts.WEBSHOP_TEMPLATE is verl_agent.prompts.WEBSHOP_TEMPLATE
  assert prompts.WEBSHOP_TEMPLATE_NO_HIS is verl_agent.prompts.WEBSHOP_TEMPLATE_NO_HIS
  assert prompts.WEBSHOP_TEMPLATE.count("tags. \n") == 1 and prompts.WEBSHOP_TEMPLATE.startswith("\n")
  assert (prompts.MAX_STEPS, prompts.MAX_PROMPT_CHARS, prompts.PROJECTION_TAIL) == (15, 13000, 20)


def test_observation_and_action_formatting():
  assert prompts.webshop_observation(RESULTS, TASK) == (
      "'Back to Search' [SEP] 'Page 1 (Total results: 50)' [SEP] 'Next >' [SEP] 'B09C337K8S' [SEP] "
      "'Foo Bar Hair Extension 20 inch' [SEP] '$12.99'")
  done = "Thank you for shopping with us! [SEP] Your code: [SEP] None"
  assert prompts.webshop_observation(done, TASK) == done  # no instruction on the page: raw text
  available = {"has_search_bar": True, "clickables": ["search", "b0"]}
  assert prompts.format_available_actions(available) == "'search[<your query>]',\n'click[search]',\n'click[b0]',"
  assert prompts.format_compact_actions(available) == "search[<your query>]\nclick[search]\nclick[b0]"


@pytest.mark.parametrize("compact", [False, True])
def test_long_history_prompt_falls_back_to_no_history(compact):
  memory = SimpleMemory()
  # The compact history shows actions only, so a long action is what overflows it.
  memory.store("'x" + "y" * 14000 + "'", "search[" + "a " * 7000 + "]")
  available = RESULTS_INFOS["available_actions"]
  short = prompts.render("'p'", available, TASK, SimpleMemory(), compact=compact)
  assert prompts.render("'p'", available, TASK, memory, compact=compact) == short
  assert prompts.render("'p'", available, TASK, memory, compact=compact, max_chars=30000) != short
  assert prompts.render("'p'", available, TASK, memory, history_length=0, compact=compact) == short


def test_compact_templates():
  view = WebshopText(compact=True)
  view.begin(RESET, RESET_INFOS)
  assert view.step_prompt() == (f"Task: {TASK}\nObservation: 'Search'\nActions:\nsearch[<your query>]\n"
                                "click[search]\nReply with one action inside <action> </action> tags.\n")
  view.observe("search[hair]", RESULTS, RESULTS_INFOS)
  prompt = view.step_prompt()
  assert prompt.startswith(f"Task: {TASK}\nLast 1 of 1 action(s): search[hair]\n"
                           "Step 2 observation: 'Back to Search' [SEP]")
  view.observe("click[b0]", RESULTS, RESULTS_INFOS)
  view.observe("click[next >]", RESULTS, RESULTS_INFOS)
  view.history_length = 2
  assert "\nLast 2 of 3 action(s): click[b0], click[next >]\nStep 4 observation: " in view.step_prompt()
  assert "<think>" not in prompt and view.project("<action>click[next >]</action>") == ("click[next >]", 1)
  assert view.demo_reply("click[x]") == "<action>click[x]</action>"


_TAG_FREE = st.text().filter(lambda s: "<action>" not in s.lower() and "</action>" not in s.lower())


@settings(max_examples=300, deadline=None)
@given(st.text(), st.booleans())
def test_projection_never_raises(response, compact):
  action, valid = prompts.project(response, compact)
  assert isinstance(action, str) and valid in (0, 1)


@settings(max_examples=300, deadline=None)
@given(_TAG_FREE, st.booleans())
def test_projection_without_tags_takes_the_last_20_chars(response, compact):
  assert prompts.project(response, compact) == (response.lower()[-20:], 0)


@settings(max_examples=300, deadline=None)
@given(_TAG_FREE, _TAG_FREE, st.text(), st.sampled_from(["<action>", "<ACTION>", "<Action>"]))
def test_projection_takes_the_first_tagged_action(prefix, body, suffix, open_tag):
  response = f"{prefix}{open_tag}{body}</action>{suffix}"
  thought = "<think>" in response and "</think>" in response
  no_cjk = not any("\u4e00" <= ch <= "\u9fff" for ch in response)
  expected_action = response.lower()[len(prefix.lower()) + 8:].split("</action>")[0].strip()
  assert prompts.project(response) == (expected_action, int(thought and no_cjk))
  assert prompts.project(response, compact=True) == (expected_action, int(no_cjk))
  assert prompts.project(f"<think>t</think>{response}") == (expected_action, int(no_cjk))


def test_projection_examples():
  assert prompts.project("<think>ok</think><action> Click[Buy Now] </action>") == ("click[buy now]", 1)
  assert prompts.project("<action>click[buy now]</action>") == ("click[buy now]", 0)  # no <think>
  assert prompts.project("<think>\u4e2d</think><action>x</action>") == ("x", 0)  # CJK
  assert prompts.project("I would search for a red dress please") == ("search for a red dress please"[-20:], 0)


def test_text_env_has_alfworld_texts_interface():
  """Every method of AlfworldText with the same parameters (as called on an instance); the constructor takes
  AlfworldText's keywords, and WebShop's reward kind besides."""
  alfworld, webshop = AlfworldText(), WebshopText()
  for name, member in inspect.getmembers(AlfworldText):
    if name.startswith("_"):
      continue
    assert hasattr(WebshopText, name), name
    if callable(member):
      assert inspect.signature(getattr(webshop, name)).parameters.keys() == \
          inspect.signature(getattr(alfworld, name)).parameters.keys(), name
  init = inspect.signature(WebshopText).parameters
  assert set(inspect.signature(AlfworldText).parameters) | {"reward"} == set(init)
  assert init["invalid_penalty"].default == 0.1 and init["reward"].default == "success"
  assert WebshopText.name == "webshop"


def test_text_env_reward_and_memory():
  success, score = WebshopText(), WebshopText(reward="score")
  assert success.reward(1.0, True, {}) == (10.0, True) == score.reward(1.0, True, {})
  assert success.reward(1.0, False, {}) == (0.0, False) == score.reward(1.0, False, {})
  assert success.reward(0.75, True, {}) == (0.0, False)
  assert score.reward(0.75, True, {}) == (7.5, False)  # graded, but only a perfect purchase is a win
  with pytest.raises(ValueError, match="env.reward"):
    WebshopText(reward="dense")
  view = WebshopText(history_length=1)
  view.begin(RESET, RESET_INFOS)
  view.observe("search[a]", RESULTS, RESULTS_INFOS)
  view.observe("click[next >]", RESULTS, RESULTS_INFOS)
  assert view.memory.records[0] == ("'Search'", "search[a]")  # the reformatted page the action was taken on
  assert "Below are the most recent 1 observations" in view.step_prompt()
  assert view.demo_reply("click[x]") == "<think>I should click[x] next.</think><action>click[x]</action>"
  assert view.project(view.demo_reply("click[x]")) == ("click[x]", 1)
