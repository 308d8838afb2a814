"""The built-in tokenizer's base corpus: deterministic texts in the style of our agent environments (verl-agent prompts
for ALFWorld / WebShop / Search, ALFWorld feedback and commands, WebShop pages, search results), so that a tiny BPE
learns the words the envs show and the actions they take (`models.tokenizer.build_tokenizer` trains on it).

The built-in tokenizer's cache folder is named by `models.tokenizer.BUILTIN_VERSION`, not by a hash of this corpus:
any change here changes the tokenizer, so bump BUILTIN_VERSION with it (`tests/test_tokenizer.py` pins the corpus).
"""

from __future__ import annotations

import json
import random
from collections.abc import Sequence

from agentopd_jax.envs.search.prompts import SEARCH_R1_PREFIX

# verl-agent prompt templates (byte for byte; trailing spaces and U+2011 included).
from agentopd_jax.envs.verl_agent.prompts import (
  ALFWORLD_TEMPLATE,
  ALFWORLD_TEMPLATE_NO_HIS,
  SEARCH_TEMPLATE,
  SEARCH_TEMPLATE_NO_HIS,
  WEBSHOP_TEMPLATE,
  WEBSHOP_TEMPLATE_NO_HIS,
)

# ALFWorld names as they appear in text: ALFRED types lower-cased, no spaces (alfworld constants.py).
ALFWORLD_RECEPTACLES = (
    "armchair", "bathtubbasin", "bed", "cabinet", "cart", "coffeemachine", "coffeetable", "countertop", "desk",
    "diningtable", "drawer", "dresser", "fridge", "garbagecan", "handtowelholder", "laundryhamper", "microwave",
    "ottoman", "paintinghanger", "safe", "shelf", "sidetable", "sinkbasin", "sofa", "stoveburner", "tvstand",
    "toaster", "toilet", "toiletpaperhanger", "towelholder",
)  # fmt: skip
ALFWORLD_OBJECTS = (
    "alarmclock", "apple", "baseballbat", "basketball", "book", "bowl", "box", "bread", "butterknife", "candle", "cd",
    "cellphone", "cloth", "creditcard", "cup", "desklamp", "dishsponge", "egg", "floorlamp", "fork", "glassbottle",
    "handtowel", "kettle", "keychain", "knife", "ladle", "laptop", "lettuce", "mug", "newspaper", "pan", "papertowel",
    "pen", "pencil", "peppershaker", "pillow", "plate", "plunger", "pot", "potato", "remotecontrol", "saltshaker",
    "soapbar", "soapbottle", "spatula", "spoon", "spraybottle", "statue", "tennisracket", "tissuebox", "toiletpaper",
    "toiletpaperroll", "tomato", "towel", "vase", "watch", "wateringcan", "winebottle",
)  # fmt: skip
ALFWORLD_COMMAND_WORDS = ("go", "to", "take", "from", "move", "put", "in", "on", "open", "close", "use", "examine",
                          "heat", "cool", "clean", "with", "look", "inventory", "toggle")
NAME_REPEATS = 60
_OPENABLE = ("fridge", "cabinet", "microwave", "drawer", "safe")
_GOALS = (
    "put a {o} in {r}.", "put some {o} on {r}.", "look at {o} under the desklamp.",
    "examine the {o} with the floorlamp.",
    "put a clean {o} in {r}.", "clean some {o} and put it in {r}.", "put a hot {o} in {r}.",
    "heat some {o} and put it in {r}.", "put a cool {o} in {r}.", "cool some {o} and put it in {r}.",
    "put two {o} in {r}.", "find two {o} and put them in {r}.",
)  # fmt: skip
_THOUGHTS = (
  "I need to find the {o} first. It is likely on the {r}.",
  "I am holding the {o}. Now I should go to the {r}.",
  "The {r} is closed, so I should open it to look inside.",
  "To complete the task I must heat the {o} with the microwave before placing it.",
  "Nothing happened, so that action was not admissible. Let me try another one.",
  "I have not checked the {r} yet; the {o} may be there.",
)
_WS_NOUNS = ("hair extension", "running shoes", "phone case", "coffee mug", "yoga mat", "wireless earbuds",
             "t-shirt", "backpack", "desk lamp", "face moisturizer", "dog leash", "water bottle")  # fmt: skip
_WS_ADJS = ("long", "natural looking", "lightweight", "waterproof", "organic", "slim fit", "machine washable",
            "easy to clean", "high quality", "non-slip", "bpa free", "long lasting")  # fmt: skip
_WS_COLORS = ("black", "white", "natural black", "dark brown", "navy blue", "red", "grey", "pink")
_WS_SIZES = ("small", "medium", "large", "x-large", "18 inch", "20 inch", "10 ounce", "pack of 2")
_SR_SUBJECTS = ("the first nobel prize in physics", "the eiffel tower", "the river nile", "the theory of relativity",
                "the battle of hastings", "the python programming language", "mount everest", "the great wall of china",
                "the olympic games", "the printing press", "the moon landing", "penicillin")  # fmt: skip
_SR_QUESTIONS = ("who discovered {s}", "when was {s} built", "where is {s} located", "what is {s} known for",
                 "who won {s}", "how long is {s}", "which country hosted {s}", "who invented {s}")  # fmt: skip
_SR_ANSWERS = ("Wilhelm Röntgen", "Paris", "Egypt", "Albert Einstein", "1066", "Guido van Rossum", "Nepal", "China",
               "Athens", "Johannes Gutenberg", "1969", "Alexander Fleming", "北京", "東京")  # fmt: skip


def _join_a(names: Sequence[str]) -> str:
  """TextWorld list rendering: 'a x', 'a x, and a y', 'a x, a y, and a z'; always article 'a'."""
  items = [f"a {n}" for n in names]
  if not items:
    return "nothing"
  if len(items) == 1:
    return items[0]
  return ", ".join(items[:-1]) + ", and " + items[-1]


def _history(records: Sequence[tuple[str, str]], first: int) -> str:
  """verl-agent SimpleMemory.fetch: one '[Observation n: ..., Action n: ...]' line per record."""
  lines = (f"[Observation {first + i}: '{ob}', Action {first + i}: '{ac}']" for i, (ob, ac) in enumerate(records))
  return "\n".join(lines)


def _alfworld_episode(rng: random.Random) -> list[str]:
  """One synthetic ALFWorld episode: reset text, commands, feedback, and the verl-agent prompts."""
  # Scene: receptacles numbered per type; lists read alphabetical, numbers descending (Demangler order).
  kinds = sorted(rng.sample(ALFWORLD_RECEPTACLES, rng.randint(5, 12)))
  recs = [f"{k} {n}" for k in kinds for n in range(rng.choice((1, 1, 2, 3, 4, 6, 9)), 0, -1)]
  contents: dict[str, list[str]] = {r: [] for r in recs}
  for k in sorted(rng.sample(ALFWORLD_OBJECTS, rng.randint(4, 10))):
    for n in range(rng.randint(1, 3), 0, -1):
      contents[rng.choice(recs)].append(f"{k} {n}")
  obj = rng.choice([o for r in recs for o in contents[r]] or ["apple 1"])
  goal = rng.choice(_GOALS).format(o=obj.split()[0], r=rng.choice(kinds))
  old_grammar = rng.random() < 0.3  # 2.1.1 ("put ... in/on", "loc N") vs 2.1.3 ("move ... to")

  def examine(r: str, opened: bool) -> str:
    if r.split()[0] in _OPENABLE:
      return f"The {r} is open. In it, you see {_join_a(contents[r])}." if opened else f"The {r} is closed."
    return f"On the {r}, you see {_join_a(contents[r])}."

  obs = (
    "-= Welcome to TextWorld, ALFRED! =-\n\n"
    f"You are in the middle of a room. Looking quickly around you, you see {_join_a(recs)}.\n\n"
    f"Your task is to: {goal}"
  )
  texts, memory, here, held = [obs], [], None, None
  for step in range(rng.randint(3, 8)):
    r = rng.choice(recs)
    o = rng.choice(contents[r]) if contents[r] else obj
    admissible = {f"go to {x}" for x in recs if x != here} | {"inventory", "look"}
    if here:
      admissible |= {f"examine {here}"} | {f"take {x} from {here}" for x in contents[here]}
    admissible = sorted(admissible)  # the env sorts lexicographically; sorting also removes set-order randomness
    choice = rng.randrange(10)
    if choice < 3 or here is None:
      action = f"go to {r}"
      loc = f"loc {rng.randint(1, 40)}" if old_grammar else r
      feedback, here = f"You arrive at {loc}. {examine(r, False)}", r
    elif choice == 3:
      action, feedback = f"open {here}", f"You open the {here}. {examine(here, True)}"
    elif choice == 4:
      action, feedback, held = f"take {o} from {here}", f"You pick up the {o} from the {here}.", o
    elif choice == 5:
      verb, tool = rng.choice((("heat", "microwave 1"), ("cool", "fridge 1"), ("clean", "sinkbasin 1")))
      action, feedback = f"{verb} {held or o} with {tool}", f"You {verb} the {held or o} using the {tool}."
    elif choice == 6:
      if old_grammar:
        action, feedback = f"put {held or o} in/on {here}", f"You put the {held or o} in/on the {here}."
      else:
        action, feedback = f"move {held or o} to {here}", f"You move the {held or o} to the {here}."
    elif choice == 7:
      action = "inventory"
      feedback = f"You are carrying: a {held}." if held else "You are not carrying anything."
    elif choice == 8:
      action, feedback = f"examine {held or o}", rng.choice(
                (f"This is a hot {held or o}.", f"This is a cold {held or o}.", f"This is a clean {held or o}.",
                 f"There's nothing special about {held or o}.", f"You turn on the {held or o}.")
            )  # fmt: skip
    else:
      action, feedback = rng.choice((f"Go to {r}", "look around", f"take {o}")), "Nothing happens."
    actions = "\n ".join(f"'{a}'" for a in admissible)
    if step == 0:
      prompt = ALFWORLD_TEMPLATE_NO_HIS.format(current_observation=obs, admissible_actions=actions)
    else:
      recent = memory[-2:]  # verl-agent's default env.history_length
      history = _history(recent, first=len(memory) - len(recent) + 1)
      prompt = ALFWORLD_TEMPLATE.format(
                task_description=goal, step_count=len(memory), history_length=len(recent), action_history=history,
                current_step=len(memory) + 1, current_observation=obs, admissible_actions=actions,
            )  # fmt: skip
    thought = rng.choice(_THOUGHTS).format(o=o, r=r)
    texts += [prompt, f"<think>{thought}</think>\n<action>{action}</action>", action, feedback]
    memory.append((obs, action))
    obs = feedback
  return texts


def _webshop_episode(rng: random.Random) -> list[str]:
  noun, adj = rng.choice(_WS_NOUNS), rng.choice(_WS_ADJS)
  color, size, price = rng.choice(_WS_COLORS), rng.choice(_WS_SIZES), rng.choice((10, 20, 30, 40, 50, 100))
  task = f"i need a {adj} {noun} with color: {color}, and size: {size}, and price lower than {price}.00 dollars"
  asins = [
    "B0" + "".join(rng.choice("ABCDEFGHJKLMNPQRSTUVWXYZ0123456789") for _ in range(8)) for _ in range(rng.randint(2, 5))
  ]
  results = ["Back to Search", f"Page 1 (Total results: {rng.randint(10, 50)})", "Next >"]
  for a in asins:
    title = f"{adj.title()} {noun.title()} {rng.choice(_WS_SIZES)}"
    results += [a, title, f"${rng.randint(3, 99)}.{rng.randint(0, 99):02d}"]
  item = ["Back to Search", "< Prev", "color", color, rng.choice(_WS_COLORS), "size", size,
            f"{adj.title()} {noun.title()}", f"Price: ${rng.randint(3, 99)}.99", "Rating: N.A.", "Description",
            "Features", "Reviews", "Buy Now"]  # fmt: skip
  pages = [
        (["Search"], ["search[<your query>]"]),
        (results, ["click[back to search]", "click[next >]"] + [f"click[{a.lower()}]" for a in asins]),
        (item, ["click[back to search]", "click[< prev]", "click[description]", "click[features]",
                "click[reviews]", "click[buy now]", f"click[{color}]", f"click[{size}]"]),
    ]  # fmt: skip
  texts, memory = ["WebShop [SEP] Instruction: [SEP] " + task + " [SEP] Search"], []
  for step, (parts, clickables) in enumerate(pages):
    obs = " [SEP] ".join(f"'{p}'" for p in parts)
    available = "\n".join(f"'{c}'," for c in clickables)
    if step == 0:
      prompt = WEBSHOP_TEMPLATE_NO_HIS.format(
        task_description=task, current_observation=obs, available_actions=available
      )
    else:
      history = _history(memory, first=1)
      prompt = WEBSHOP_TEMPLATE.format(
                task_description=task, step_count=len(memory), history_length=len(memory), action_history=history,
                current_step=len(memory) + 1, current_observation=obs, available_actions=available,
            )  # fmt: skip
    action = f"search[{adj} {noun}]" if step == 0 else rng.choice(clickables)
    texts += [prompt, f"<think>I should look for a {adj} {noun} in {color}.</think>\n<action>{action}</action>"]
    memory.append((obs, action))
  return texts


def _search_episode(rng: random.Random) -> list[str]:
  subject = rng.choice(_SR_SUBJECTS)
  question = rng.choice(_SR_QUESTIONS).format(s=subject) + "?"
  answer = rng.choice(_SR_ANSWERS)
  docs = "".join(
    f'Doc {i + 1}: "{subject.title()}"\n{subject.capitalize()} is associated with {rng.choice(_SR_ANSWERS)}.\n'
    for i in range(3)
  )
  information = "<information>" + json.dumps({"result": docs}) + "</information>"
  memory = f"Step 1:<search>{subject}</search> {information}\n"
  return [
    SEARCH_R1_PREFIX.format(question=question),
    SEARCH_TEMPLATE_NO_HIS.format(task_description=question),
    SEARCH_TEMPLATE.format(task_description=question, step_count=1, memory_context=memory),
    f"<think>I need to find out {question}</think>\n<search>{subject}</search>",
    information,
    f"<think>The documents say the answer is {answer}.</think>\n<answer>{answer}</answer>",
  ]


def default_corpus(seed: int = 0) -> list[str]:
  """Deterministic training texts (a few thousand) in the style of our agent environments.

  Only ordered containers and a seeded ``random.Random`` are used, so the result is
  byte-identical across calls, processes and PYTHONHASHSEED values.
  """
  rng = random.Random(seed)
  texts: list[str] = []
  # Every name alone and numbered, so each one is seen even if no episode draws it; repeated so that BPE merges each
  # name and command word into one token (" book", "take"): a small model trained from scratch then matches and copies
  # whole names between the task, the observation and the admissible actions, instead of pieces like " b" + "ook".
  names = " ".join(f"a {n} 1, a {n} 2," for n in ALFWORLD_RECEPTACLES + ALFWORLD_OBJECTS)
  commands = " ".join(f"'{v} {v} <action>{v}" for v in ALFWORLD_COMMAND_WORDS)
  texts += [names, commands] * NAME_REPEATS
  # Chat-structure words and tags as they appear around special tokens.
  texts += ["system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.", "user\n", "assistant\n"]
  texts += ["<think> </think>", "<action> </action>", "<search> </search>", "<answer> </answer>",
              "<information> </information>", "Nothing happens."]  # fmt: skip
  for _ in range(150):
    texts += _alfworld_episode(rng)
  for _ in range(80):
    texts += _webshop_episode(rng)
  for _ in range(80):
    texts += _search_episode(rng)
  return texts
