"""Arbitrary model text through every registered env: its action projection, its `step` and its prompt builders.

A policy early in training writes anything: empty replies, unicode and control characters, thousands of '[' or
'<search>', tags that almost parse. None of it may crash an env worker or stall a rollout, and whatever is not an
action the env knows must get the env's documented invalid-action behaviour, byte for byte (environments.md §1.4,
§3.4, §4.2, §4.3): ALFWorld says "Nothing happens." and changes nothing, Countdown says it too and keeps its
number (the move is spent), WebShop shows the same page and pays nothing, verl-agent's search returns an empty
observation, Search-R1 its invalid-action message. Every example runs under a wall-clock alarm, so a hang fails the
test instead of stalling CI.
"""
import contextlib
import importlib.util
import json
import math
import pkgutil
import re
import signal
from pathlib import Path

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

pytest.importorskip("alfworld")  # ALFWorld games are built from its alfred.pddl/.twl2
pytest.importorskip("bm25s")
pytest.importorskip("rapidfuzz")

from agentopd_jax import envs  # noqa: E402
from agentopd_jax.envs import registry  # noqa: E402
from agentopd_jax.envs.alfworld.env import AlfworldEnv  # noqa: E402
from agentopd_jax.envs.alfworld.text import AlfworldText  # noqa: E402
from agentopd_jax.envs.countdown.env import COMMANDS, CountdownEnv, apply, game, solve  # noqa: E402
from agentopd_jax.envs.countdown.text import CountdownText  # noqa: E402
from agentopd_jax.envs.search import formats  # noqa: E402
from agentopd_jax.envs.search import prompts as search_prompts  # noqa: E402
from agentopd_jax.envs.search.env import SearchEnv  # noqa: E402
from agentopd_jax.envs.search.tasks import SearchTask  # noqa: E402
from agentopd_jax.envs.search.text import SearchText  # noqa: E402
from agentopd_jax.envs.verl_agent import SearchMemory, SimpleMemory, alfworld_task, render_alfworld  # noqa: E402
from agentopd_jax.envs.verl_agent import webshop_observation  # noqa: E402
from agentopd_jax.envs.webshop import expert as webshop_expert  # noqa: E402
from agentopd_jax.envs.webshop import prompts as webshop_prompts  # noqa: E402
from agentopd_jax.envs.webshop.env import WebshopEnv, parse_action  # noqa: E402
from agentopd_jax.envs.webshop.text import WebshopText  # noqa: E402

# The invalid-action texts of environments.md, written out here rather than imported from the code under test.
NOTHING_HAPPENS = "Nothing happens."
SEARCH_R1_INVALID = (
    "\nMy previous action is invalid. If I want to search, I should put the query between <search> and </search>. "
    "If I want to give the final answer, I should put the answer between <answer> and </answer>. Let me try again.\n")
WEBSHOP_ACTION = re.compile(r"(.+)\[(.+)\]")  # WebShop's own parse_action (web_agent_text_env.py)
EXAMPLE_SECONDS = 10.0  # per example: generous on a loaded 2-core runner, yet a hang still fails in seconds

NEAR_MISSES = (
    "<action>go to </action>", "<action></action>", "<action>", "</action>", "<ACTION>look</Action>",
    "<action><action>look</action></action>", "<think></think>", "<think>", "</think>", "<search>", "</search>",
    "<search></search>", "<search><search>q</search></search>", "<answer>", "</answer>", "<answer></answer>",
    "<search>q</answer>", "<answer><search>q</search></answer>", "click[", "click[]", "click[]]", "click[[x]]",
    "click[search]", "Click[Buy Now]", "click[buy now]", "click[next >]", "click[< prev]", "click[back to search]",
    "click[description]", "click[attributes]", "search[]", "search[ ]", "search[<r>]", "search[<a>]",
    "search[<c>]", "search[<q>]", "search[[]]", "look", "inventory", "help", " go to cabinet 1 ",
    "Go to countertop 1", "move  to ", "\x00", "\r\n", "\n", "\t", "\u202e", "\ufeff", "\U0001f600", "我", "İ", "ß",
    "{", "}", "{task_description}", "{0}", "%s", "[SEP]", " [SEP] ", "'", "\\", "\"")
REPEATED = ("[", "]", "a[", "[]", "<search>", "<answer>", "</search>", "<action>", "<think>", "x", " ", "\n", "我")
TEXT_OPTIONS = {
    "alfworld": st.fixed_dictionaries({"history_length": st.integers(-1, 3), "compact": st.booleans(),
                                       "flavor": st.sampled_from(["verl-agent", "opid"])}),
    "webshop": st.fixed_dictionaries({"history_length": st.integers(-1, 3), "compact": st.booleans(),
                                      "flavor": st.sampled_from(["verl-agent", "opid"]),
                                      "reward": st.sampled_from(["success", "score"])}),
    "search": st.fixed_dictionaries({"history_length": st.integers(-1, 5), "compact": st.booleans(),
                                     "flavor": st.sampled_from(search_prompts.FLAVORS)}),
    "countdown": st.fixed_dictionaries({"history_length": st.integers(-1, 3), "compact": st.booleans(),
                                        "flavor": st.sampled_from(["verl-agent", "opid"])}),
}
CORPUS = [{"id": str(i), "contents": f'"{title}"\n{title} {text}'} for i, (title, text) in enumerate([
    ("Foia Haesson", "Foia Haesson (born 1964) is a painter from Varnholm."),
    ("Varnholm", "Varnholm is a city in Elsmark. It was founded in 1211."),
    ("Elsmark", "Elsmark is a country whose currency is the Elsmark crown."),
    ("Tiva Orrun", "Tiva Orrun (born 1971) is a novelist married to Foia Haesson."),
])]
QUESTION = SearchTask("When was Foia Haesson born?", ("1964",), "nq", "t-0")


@contextlib.contextmanager
def time_limit(seconds: float = EXAMPLE_SECONDS):
  """Raises TimeoutError in the test if the block runs longer than `seconds` (SIGALRM: main thread, Unix)."""
  def expire(signum, frame):
    raise TimeoutError(f"an example ran longer than {seconds} s")

  previous = signal.signal(signal.SIGALRM, expire)
  signal.setitimer(signal.ITIMER_REAL, seconds)
  try:
    yield
  finally:
    signal.setitimer(signal.ITIMER_REAL, 0)
    signal.signal(signal.SIGALRM, previous)


class Pick(int):
  """A reply piece that stands for one of the env's current actions (index modulo their number)."""


PIECES = st.one_of(st.text(max_size=30), st.sampled_from(NEAR_MISSES), st.builds(Pick, st.integers(0, 99)))
# Random text mixed with near-miss tags and the env's own actions, thousands of repeated tag characters, or a
# well-formed reply around one piece (so that episodes also get past their first page).
WRAPPED = st.builds(lambda piece, noise: ["<think>", noise, "</think><action>", piece, "</action>"],
                    PIECES | st.builds(Pick, st.integers(0, 99)), st.text(max_size=10))
REPLIES = st.one_of(st.lists(PIECES, max_size=6),
                    st.builds(lambda s, n: [s * n], st.sampled_from(REPEATED), st.integers(200, 1000)), WRAPPED)


def reply(data, actions=(), label: str = "reply") -> str:
  """A drawn reply, its `Pick`s replaced by the actions of the env's current state."""
  actions = list(actions)
  return "".join((actions[p % len(actions)] if actions else "") if isinstance(p, Pick) else p
                 for p in data.draw(REPLIES, label=label))


class Expert:
  """An expert's plan, offered one step at a time in place of the env's actions (for episodes drawn to follow it),
  so that some fuzzed episodes get deep: a reply off the plan is mostly a no-op, after which the plan goes on."""

  def __init__(self, data, plan):
    self.plan = list(plan or []) if data.draw(st.booleans(), label="follow the expert") else []
    self.done = 0

  def offer(self, actions):
    return self.plan[self.done:self.done + 1] or actions

  def saw(self, action: str) -> None:
    if self.plan[self.done:self.done + 1] == [action]:
      self.done += 1


def check_text_env(text, done_steps: int) -> None:
  """The prompts render whatever the episode held, and the memory holds one record per step taken."""
  for prompt in (text.step_prompt(), text.turn_prompt()):
    assert isinstance(prompt, str)
  assert len(text.memory) == done_steps


def check_reward(text, score, done, infos) -> None:
  reward, won = text.reward(score, done, infos)
  assert math.isfinite(reward) and won == bool(infos["won"])


def test_every_shipped_env_is_fuzzed():
  """A new env package registers a spec (other tests register toy envs in-process); this file must then drive it."""
  shipped = {info.name for info in pkgutil.iter_modules(envs.__path__)
             if info.ispkg and importlib.util.find_spec(f"{envs.__name__}.{info.name}.spec") is not None}
  assert shipped == {"alfworld", "countdown", "webshop", "search"} and shipped <= set(registry.names())


def test_invalid_action_penalties_are_verl_agents():
  """environments.md §2.4/§2.6: 0.1 for ALFWorld and WebShop, 0.01 for search."""
  assert [cls().invalid_penalty for cls in (AlfworldText, WebshopText, SearchText)] == [0.1, 0.1, 0.01]


# ---------------------------------------------------------------------------------------------------- ALFWorld
@pytest.fixture(scope="module")
def alfworld_games(alfworld_games_root):
  from agentopd_jax.envs.alfworld import data

  return data.game_files("train", alfworld_games_root)


@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_alfworld_survives_any_reply(alfworld_games, data):
  """Anything but an admissible command (after strip) is "Nothing happens.", scores 0 and leaves the admissible
  commands as they were; the episode is done when won or at `max_steps`, and frozen after."""
  with time_limit():
    max_steps = data.draw(st.integers(1, 50), label="max_steps")  # ALFWorld's horizon is 50
    env, text = AlfworldEnv("fast", max_steps=max_steps), AlfworldText(**data.draw(TEXT_OPTIONS["alfworld"]))
    gamefile = data.draw(st.sampled_from(alfworld_games), label="game")
    expert = Expert(data, json.loads(Path(gamefile).read_text())["walkthrough"])
    obs, infos = env.reset(gamefile)
    text.begin(obs, infos)
    for step in range(1, max_steps + 1):
      check_text_env(text, step - 1)
      before = list(infos["admissible_commands"])
      action, valid = text.project(reply(data, expert.offer(before), f"reply {step}"))
      expert.saw(action)
      result = env.step(action)
      obs, score, done, infos = result
      assert isinstance(obs, str) and score in (0, 1) and infos["won"] == (score == 1) and valid in (0, 1)
      if action.strip() not in before:
        assert (obs, score, infos["admissible_commands"]) == (NOTHING_HAPPENS, 0, before)
      assert done == (infos["won"] or step == max_steps)
      text.observe(action, obs, infos)
      check_reward(text, score, done, infos)
      if done:
        break
    event(f"alfworld: {'won' if infos['won'] else 'not won'}, last command {'un' if obs == NOTHING_HAPPENS else ''}known")
    assert env.step(reply(data, label="after done")) == result


# --------------------------------------------------------------------------------------------------- Countdown
@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_countdown_survives_any_reply(data):
  """Anything but a move ("add 1" or "double" after strip and lower-casing) is "Nothing happens." and leaves the
  number; the score is 1 exactly when the number is the target, and the episode is done when won, past the target or
  out of moves, after which stepping is an error (the vector env never steps a finished episode)."""
  with time_limit():
    max_steps = data.draw(st.integers(1, 10), label="max_steps")
    task = data.draw(st.integers(0, 10**6), label="game")
    env, text = CountdownEnv(max_steps=max_steps), CountdownText(**data.draw(TEXT_OPTIONS["countdown"]))
    expert = Expert(data, solve(task))
    value, target = game(task)
    obs, infos = env.reset(task)
    text.begin(obs, infos)
    for step in range(1, max_steps + 1):
      check_text_env(text, step - 1)
      assert infos["admissible_commands"] == list(COMMANDS)
      action, valid = text.project(reply(data, expert.offer(list(COMMANDS)), f"reply {step}"))
      expert.saw(action)
      obs, score, done, infos = env.step(action)
      if action in COMMANDS:
        value = apply(value, action)
      else:
        assert obs.startswith(NOTHING_HAPPENS)
      assert f"You have {value}." in obs and valid in (0, 1)
      assert score == int(value == target) == int(infos["won"])
      assert done == (value >= target or step == max_steps)
      text.observe(action, obs, infos)
      check_reward(text, score, done, infos)
      if done:
        break
    event(f"countdown: {'won' if infos['won'] else 'not won'}")
    with pytest.raises(RuntimeError, match="no episode running"):
      env.step(reply(data, label="after done"))


# ----------------------------------------------------------------------------------------------------- WebShop
def webshop_noop(action: str, clickables) -> bool:
  """WebShop's no-op rule (§3.4): not `name[arg]`, or neither a non-empty search nor a click on a clickable."""
  m = WEBSHOP_ACTION.match(action)
  if m is None:
    return True
  name, arg = m.group(1), m.group(2).lower()
  return not (name == "search" or (name == "click" and arg in clickables and arg != "search"))


@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_webshop_survives_any_reply(data):
  """An action WebShop cannot parse or perform shows the same page with the same actions and pays 0; a score is in
  [0, 1] and only on the step that buys; the episode ends at the purchase or after `max_steps` steps."""
  with time_limit():
    max_steps = data.draw(st.integers(1, 20), label="max_steps")  # verl-agent's WebShop horizon is 15
    env = WebshopEnv(num_products=40, max_steps=max_steps, nouns="stand-in")
    text = WebshopText(**data.draw(TEXT_OPTIONS["webshop"]))
    goal = data.draw(st.integers(0, len(env.shop.goals) - 1), label="goal")
    expert = Expert(data, webshop_expert.plan(env.shop, goal, max_steps=None))
    obs, infos = env.reset(goal)
    text.begin(obs, infos)
    words = text.task.split()
    for step in range(1, max_steps + 1):
      check_text_env(text, step - 1)
      assert text.observation in text.step_prompt()
      before = (obs, infos["available_actions"])
      clickables = before[1]["clickables"]
      actions = [f"click[{c}]" for c in clickables] + [f"search[{' '.join(words[:3])}]"]
      action, valid = text.project(reply(data, expert.offer(actions), f"reply {step}"))
      expert.saw(action)
      obs, score, done, infos = env.step(action)
      assert isinstance(obs, str) and 0.0 <= score <= 1.0 and valid in (0, 1) and env.steps == step
      assert infos["won"] == (done and score == 1.0)
      bought = env.page.kind == "done"
      if webshop_noop(action, clickables):
        assert (obs, infos["available_actions"], score, bought) == (*before, 0.0, False)
      assert done == (bought or step == max_steps) and (score == 0.0 or bought)
      text.observe(action, obs, infos)
      check_reward(text, score, done, infos)
      if done:
        break
    event(f"webshop: ended on the {env.page.kind} page")


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="ab[]\n ", max_size=40) | st.text(max_size=40))
def test_webshop_parse_action_is_webshops_regex(action):
  """`parse_action` scans instead of backtracking, with exactly the regex's result."""
  m = WEBSHOP_ACTION.match(action)
  assert parse_action(action) == ((action, None) if m is None else (m.group(1), m.group(2)))


def test_webshop_parse_action_is_linear():
  with time_limit(2.0):
    for action in ("[" * 200_000, "a[" * 100_000 + "\n]", "click[" + "]" * 200_000):
      parse_action(action)


# ------------------------------------------------------------------------------------------------------ Search
@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
  path = tmp_path_factory.mktemp("fuzz_corpus") / "corpus.jsonl"
  path.write_text("".join(json.dumps(doc) + "\n" for doc in CORPUS), encoding="utf-8")
  return str(path)


SEARCH_ACTIONS = ("<search>Foia Haesson</search>", "<search>Foia Haesson born</search>", "<answer>1964</answer>",
                  "<answer>1971</answer>", "<search> </search>", "<answer></answer>")


@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_search_survives_any_reply(corpus, data):
  """verl-agent rules: an answer or the last turn ends the episode; without a `<search>` block the observation is
  empty. Search-R1 rules: an answer ends it, an unparsable action gets the invalid-action message, the turn after
  `max_turns` search rounds is the last. Scores are EM in {0, 1}, paid at the end."""
  with time_limit():
    obs_format = data.draw(st.sampled_from(["verl-agent", "search-r1"]), label="obs_format")
    max_turns = data.draw(st.integers(1, 4), label="max_turns")
    env, text = SearchEnv(corpus=corpus, obs_format=obs_format, max_turns=max_turns), SearchText(
        **data.draw(TEXT_OPTIONS["search"]))
    text.begin(*env.reset(QUESTION))
    last_turn = max_turns if obs_format == "verl-agent" else max_turns + 1
    for step in range(1, last_turn + 1):
      check_text_env(text, step - 1)
      action, valid = text.project(reply(data, SEARCH_ACTIONS, f"reply {step}"))
      obs, score, done, infos = env.step(action)
      assert isinstance(obs, str) and score in (0.0, 1.0) and valid in (0, 1) and infos["turns"] == step
      assert infos["won"] == (done and score == 1.0) and (score == 0.0 or done) and not infos.get("env_failed")
      if obs_format == "verl-agent":
        answered = "<answer>" in action and "</answer>" in action
        assert done == (answered or step == max_turns)
        if done or not re.search(r"<search>(.*?)</search>", action, re.DOTALL):
          assert obs == ""
        else:
          assert obs.startswith('<information>{"result": ') and obs.endswith("}</information>")
      else:
        kind, _ = formats.search_r1_parse(action)
        assert done == (kind == "answer" or step == last_turn)
        assert kind is not None or obs == SEARCH_R1_INVALID
      text.observe(action, obs, infos)
      check_reward(text, score, done, infos)
      if done:
        break
    assert done
    event(f"search ({obs_format}): ended by {infos['action'] or 'nothing'}, {'won' if infos['won'] else 'not won'}")


# ----------------------------------------------------------------------------------------------------- Prompts
TEXTS = st.one_of(st.text(max_size=60), st.sampled_from(NEAR_MISSES))
RECORDS = st.lists(st.tuples(TEXTS, TEXTS), max_size=5)


def filled(memory, records):
  for observation, action in records:
    memory.store(observation, action)
  return memory


@settings(max_examples=200, deadline=None)
@given(observation=TEXTS, task=TEXTS, actions=st.lists(TEXTS, max_size=4), records=RECORDS,
       history_length=st.integers(-1, 5), compact=st.booleans(), flavor=st.sampled_from(["verl-agent", "opid"]),
       search_flavor=st.sampled_from(search_prompts.FLAVORS), has_search_bar=st.booleans())
def test_prompt_builders_take_any_text(observation, task, actions, records, history_length, compact, flavor,
                                       search_flavor, has_search_bar):
  """Observations, actions, history and tasks are pasted in verbatim (never re-formatted, so `{...}` in them is
  harmless); the shown history is the last `history_length` records; WebShop's history prompt never exceeds its
  character limit (it falls back to the no-history one)."""
  with time_limit():
    alfworld = render_alfworld(observation, actions, task, filled(SimpleMemory(), records), history_length,
                               compact=compact, flavor=flavor)
    assert observation in alfworld and all(f"'{a}'" in alfworld for a in actions if a != "help")
    shown = min(max(history_length, 0), len(records))
    for n in range(len(records) - shown + 1, len(records) + 1):
      assert f"[Observation {n}: '{records[n - 1][0]}', Action {n}: '{records[n - 1][1]}']" in alfworld

    available = {"has_search_bar": has_search_bar, "clickables": actions}
    webshop = webshop_prompts.render(observation, available, task, filled(SimpleMemory(), records), history_length,
                                     compact=compact, flavor=flavor, max_chars=2000)
    no_history = webshop_prompts.render(observation, available, task, SimpleMemory(), 0, compact=compact)
    assert observation in webshop and task in webshop and (len(webshop) <= 2000 or webshop == no_history)
    assert isinstance(webshop_observation(observation, task), str)

    search = search_prompts.render(task, filled(SearchMemory(), records), history_length, compact, search_flavor)
    assert task.strip() in search

    assert alfworld_task(f"{observation}Your task is to: {task}").endswith(task.strip())
