"""experiments/action_mix.py: verbs and targets of actions by hand, a traces file and its replies file counted alike,
and the records' replies files counted as docs/results.md quotes them."""
import importlib.util
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_spec = importlib.util.spec_from_file_location("action_mix", os.path.join(ROOT, "experiments", "action_mix.py"))
action_mix = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(action_mix)

GAME = ("/cache/alfworld_generated/x/json_2.1.1/valid_seen/look_at_obj_in_light-Book-None-FloorLamp-225/trial_1/"
        "game.tw-pddl")


def test_verb_and_target_by_hand():
  assert action_mix.verb_and_target("go to coffeetable 2") == ("go to", "coffeetable 2")
  assert action_mix.verb_and_target("take book 1 from sidetable 1") == ("take", "book 1 from sidetable 1")
  assert action_mix.verb_and_target("use desklamp 1") == ("use", "desklamp 1")
  assert action_mix.verb_and_target("look") == ("look", "")
  assert action_mix.verb_and_target(" ") == (action_mix.NONE, "")
  assert action_mix.verb_and_target(None) == (action_mix.NONE, "")


def _traces():
  step = lambda reply: {"prompt": "Observation: ...", "reply": reply, "valid": 1.0}
  return [
      {"problem": GAME, "won": True, "reward": 10.0, "length": 3, "info": {}, "error": None,
       "steps": [step("<action>go to sidetable 1</action>"), step("<action>take book 1 from sidetable 1</action>"),
                 step("<action>use floorlamp 1</action>")]},
      {"problem": GAME, "won": False, "reward": 0.0, "length": 3, "info": {}, "error": None,
       "steps": [step("<action>go to sidetable 1</action>"), step("no tag here"),
                 step("<action>go to coffeetable 2</action>")]},
  ]


def test_counts_by_hand_and_the_replies_file_counts_alike(tmp_path):
  traces = tmp_path / "traces.jsonl"
  traces.write_text("".join(json.dumps(t) + "\n" for t in _traces()))
  kept = tmp_path / "replies.jsonl"
  out = subprocess.run([sys.executable, "experiments/action_mix.py", str(traces), f"--replies_out={kept}"],
                       cwd=ROOT, capture_output=True, text=True, check=True).stdout
  mix = json.loads(out)
  assert (mix["episodes"], mix["wins"], mix["actions"]) == (2, 1, 6)
  assert mix["verbs"] == {"go to": 3, "take": 1, "use": 1, action_mix.NONE: 1}
  assert mix["go_to"] == {"sidetable 1": 2, "coffeetable 2": 1}
  assert mix["first_action"] == {"go to sidetable 1": 2}
  rows = [json.loads(line) for line in kept.read_text().splitlines()]
  assert rows[0] == {"problem": "valid_seen/look_at_obj_in_light-Book-None-FloorLamp-225/trial_1", "won": True,
                     "length": 3, "replies": [s["reply"] for s in _traces()[0]["steps"]]}
  again = json.loads(subprocess.run([sys.executable, "experiments/action_mix.py", str(kept)], cwd=ROOT,
                                    capture_output=True, text=True, check=True).stdout)
  assert {k: v for k, v in again.items() if k != "traces"} == {k: v for k, v in mix.items() if k != "traces"}


def test_bad_input_names_the_file(tmp_path):
  bad = tmp_path / "eval.json"
  bad.write_text(json.dumps({"success_rate": 0.5}) + "\n")
  for path in (bad, tmp_path / "missing.jsonl"):
    done = subprocess.run([sys.executable, "experiments/action_mix.py", str(path)], cwd=ROOT, capture_output=True,
                          text=True)
    assert done.returncode != 0 and str(path) in done.stderr


def test_the_recorded_replies_give_the_quoted_counts():
  """docs/results.md's OPID collapse paragraph quotes these counts from the two runs' recorded replies."""
  grpo, scaled = (action_mix.action_mix(json.loads(line) for line in open(
      os.path.join(ROOT, "results", "opid_table", run, "replies_first16.jsonl"))) for run in ("grpo-s0",
                                                                                            "opid_scaled-s0"))
  assert (grpo["actions"], grpo["verbs"]["go to"], grpo["verbs"]["take"]) == (144, 77, 49)
  assert (scaled["actions"], scaled["verbs"]["go to"], scaled["verbs"]["take"]) == (160, 144, 10)
  assert (grpo["go_to"]["coffeetable 1"], grpo["go_to"]["coffeetable 2"]) == (5, 36)
  assert (scaled["go_to"]["coffeetable 1"], scaled["go_to"]["coffeetable 2"]) == (47, 4)
  text = open(os.path.join(ROOT, "docs", "results.md")).read()
  assert "144 of its 160" in text and "77 of 144" in text and "takes an object 10 times" in text
