"""What a policy does in its episodes, from `evaluate.py --traces`: its actions by verb, and where it goes.

  python experiments/evaluate.py --config=configs/alfworld.py --config.workdir=RUN --step=latest --attempts=1 \
      --config.validation.num_tasks=16 --traces --out=RUN/eval_first16
  python experiments/action_mix.py RUN/eval_first16/traces.jsonl OTHER/eval_first16/traces.jsonl
  python experiments/action_mix.py RUN/eval_first16/traces.jsonl --replies_out=RECORD/replies_first16.jsonl

A reply's action is its first `<action>` block (the ALFWorld and WebShop templates' tag; "(none)" without one), and
an action's verb is its words before the first object, an object being a word followed by its number: "go to" in
`go to coffeetable 2`, "take" in `take book 1 from sidetable 1`, the whole action in `look`. Prints one JSON object
per file: episodes, wins, actions, actions per verb, visits per `go to` target, and the targets of each episode's
first action. A collapsed policy that wanders shows as most of its actions on "go to" and few on "take".
`--replies_out` keeps the small part of one traces file (per episode its problem, outcome, length and replies; no
prompts) for a record in `results/`, and the script reads such files as it reads traces.
"""
import argparse
import collections
import json
import sys
from typing import Iterable, List, Optional

from agentopd_jax.envs import registry
from agentopd_jax.envs.tags import Blocks

_ACTION = Blocks("action")
NONE = "(none)"


def verb_and_target(action: Optional[str]) -> tuple:
  """(verb, what follows it) of an action; (NONE, "") for a reply without one."""
  if action is None or not action.strip():
    return NONE, ""
  words = action.split()
  first_number = next((i for i, w in enumerate(words) if i > 0 and w.isdigit()), None)
  if first_number is None:
    return " ".join(words), ""
  return " ".join(words[:first_number - 1]), " ".join(words[first_number - 1:])


def replies(episode: dict) -> List[str]:
  """An episode's replies in order: a traces file's `steps`, or a replies file's `replies`."""
  if "replies" in episode:
    return list(episode["replies"])
  return [step["reply"] for step in episode["steps"]]


def action_mix(episodes: Iterable[dict]) -> dict:
  """The counts the module docstring names, over episodes as a traces or replies file holds them."""
  verbs, visits, first = collections.Counter(), collections.Counter(), collections.Counter()
  count = wins = actions = 0
  for episode in episodes:
    count += 1
    wins += bool(episode.get("won"))
    for turn, reply in enumerate(replies(episode)):
      verb, target = verb_and_target(_ACTION.first(reply))
      actions += 1
      verbs[verb] += 1
      if verb == "go to":
        visits[target] += 1
      if turn == 0:
        first[f"{verb} {target}".strip()] += 1
  return dict(episodes=count, wins=wins, actions=actions, verbs=dict(verbs.most_common()),
              go_to=dict(visits.most_common()), first_action=dict(first.most_common()))


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument("traces", nargs="+", help="traces.jsonl files (evaluate.py --traces) or replies files")
  parser.add_argument("--replies_out", default="", help="write the one traces file's replies file here")
  parser.add_argument("--env", default="alfworld", help="the env of the traces, whose record names --replies_out uses")
  args = parser.parse_args(argv)
  if args.replies_out and len(args.traces) != 1:
    parser.error("--replies_out takes one traces file")
  for path in args.traces:
    try:
      with open(path) as f:
        episodes = [json.loads(line) for line in f if line.strip()]
    except OSError as e:
      sys.exit(f"action_mix.py: error: {path}: {e.strerror} (evaluate.py --traces writes traces.jsonl)")
    if any("replies" not in e and "steps" not in e for e in episodes):
      sys.exit(f"action_mix.py: error: {path}: an episode without `steps` or `replies` (not an evaluate.py traces "
               "file)")
    print(json.dumps({"traces": path, **action_mix(episodes)}))
    if args.replies_out:
      name = registry.get(args.env).record_name
      with open(args.replies_out, "w") as f:
        f.writelines(json.dumps(dict(problem=name(e["problem"]), won=e["won"], length=e["length"],
                                     replies=replies(e))) + "\n" for e in episodes)


if __name__ == "__main__":
  main()
