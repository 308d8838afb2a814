"""Generated ALFWorld data: deterministic by seed, disjoint unseen split, the real download's layout and file format
(alfworld's own loader finds the games), the loader's filters, and the two text versions."""
import importlib.util
import json
import os
import re
import subprocess
import sys
from collections import Counter

import pytest

if importlib.util.find_spec("alfworld") is None:
  pytest.skip("alfworld is not installed: games are built from its alfred.pddl/.twl2", allow_module_level=True)

from agentopd_jax.envs.alfworld import data, generator, grammar, pddl, scenes, vocab  # noqa: E402

REAL = generator.REAL_SIZES


@pytest.fixture(scope="module")
def games():
  """Full-size valid splits and the first 700 training games (a prefix of the 3553-game split)."""
  sizes = {"train": 700, "valid_seen": REAL["valid_seen"], "valid_unseen": REAL["valid_unseen"]}
  return {split: [generator.make_game(split, REAL[split], i) for i in range(n)] for split, n in sizes.items()}


def _combo(game):
  return game.task.task_type, game.task.obj, game.task.target


def test_deterministic_by_seed():
  a = [generator.make_game("train", 50, i, seed=1) for i in range(50)]
  b = [generator.make_game("train", 50, i, seed=1) for i in range(50)]
  c = [generator.make_game("train", 50, i, seed=2) for i in range(50)]
  assert [(g.problem, g.goal, g.dirname, g.trial) for g in a] == [(g.problem, g.goal, g.dirname, g.trial) for g in b]
  assert sum(x.problem != y.problem for x, y in zip(a, c)) >= 45


def test_same_games_in_every_process():
  """String hashing differs between processes; the games must not (a GRPO group shares one game by seed)."""
  code = "\n".join([
      "import hashlib",
      "from agentopd_jax.envs.alfworld import engine_fast, expert, generator",
      "for i in range(30):",
      "  game = generator.make_game('valid_unseen', 30, i, seed=4)",
      "  env = engine_fast.FastEngine(generator.game_file(game, '2.1.3', None))",
      "  env.reset()",
      "  print(hashlib.md5(repr((game.problem, game.goal, expert.solve(env))).encode()).hexdigest())"])
  outs = {subprocess.run([sys.executable, "-c", code], env={**os.environ, "PYTHONHASHSEED": str(seed)}, check=True,
                         capture_output=True, text=True).stdout for seed in (1, 2)}
  assert len(outs) == 1 and len(outs.pop().split()) == 30


def test_vocabulary_is_consistent():
  v = generator.vocab
  assert set(v.CAN_CONTAIN) == v.STATIC_RECEPTACLES
  for room, furniture in v.ROOM_RECEPTACLES.items():
    assert set(furniture) <= v.STATIC_RECEPTACLES
    assert room not in v.ROOM_LAMPS or any(furniture.get(r, (0, 0))[0] for r in v.LAMP_SUPPORTS)  # a lamp stand
  for room, objects in v.ROOM_OBJECTS.items():  # every object of a room fits some furniture that room can have
    assert all(any(o in v.CAN_CONTAIN[r] for r in v.ROOM_RECEPTACLES[room]) for o in objects), room
  assert set(v.GOAL_TEMPLATES) == set(v.TASK_ROOMS) == set(v.TASK_TYPES.values())


def test_written_files_are_reproducible(tmp_path):
  sizes = {"train": 6, "valid_seen": 3, "valid_unseen": 3}
  first = generator.generate(str(tmp_path / "a"), sizes, seed=5)
  second = generator.generate(str(tmp_path / "b"), sizes, seed=5)
  for split in sizes:
    for p, q in zip(first[split], second[split]):
      for name in ("game.tw-pddl", "traj_data.json", "initial_state.pddl"):
        with open(os.path.join(os.path.dirname(p), name)) as f, open(os.path.join(os.path.dirname(q), name)) as g:
          assert f.read() == g.read()


def test_split_sizes_follow_the_real_task_mix(games):
  for split, n in REAL.items():
    assert generator.split_counts(split, n) == generator.REAL_COUNTS[split]
  for split in ("valid_seen", "valid_unseen"):
    assert Counter(g.task.task_type for g in games[split]) == generator.REAL_COUNTS[split]


def test_unseen_split_holds_out_layouts_and_combinations(games):
  train_scenes = {g.scene for g in games["train"] + games["valid_seen"]}
  unseen_scenes = {g.scene for g in games["valid_unseen"]}
  assert all(scenes.is_unseen(s) for s in unseen_scenes) and not any(scenes.is_unseen(s) for s in train_scenes)
  assert not train_scenes & unseen_scenes
  train_combos = {_combo(g) for g in games["train"] + games["valid_seen"]}
  unseen_combos = {_combo(g) for g in games["valid_unseen"]}
  assert not train_combos & unseen_combos
  assert all(generator.held_out(g.task) for g in games["valid_unseen"])
  assert len(unseen_combos) >= 30 and len(train_combos) >= 150


def test_games_are_realistic(games):
  phrasings = set()
  for g in games["train"]:
    assert scenes.layout(g.scene).room in generator.vocab.TASK_ROOMS[g.task.task_type]
    names = dict(obj=g.task.obj.lower(), recep=g.task.target.lower(), toggle=g.task.target.lower())
    templates = generator.vocab.GOAL_TEMPLATES[g.task.task_type]
    assert g.goal in [t.format(**names) for t in templates]
    phrasings.add(next(t for t in templates if t.format(**names) == g.goal))
    assert "(opened " not in g.problem  # everything starts closed
  assert len(phrasings) == 12


def test_layout_of_the_real_download(tmp_path):
  paths = generator.generate(str(tmp_path), {"train": 6, "valid_seen": 2, "valid_unseen": 2}, seed=0)
  path = paths["train"][0]
  trial_dir = os.path.dirname(path)
  task_dir = os.path.basename(os.path.dirname(trial_dir))
  assert os.path.dirname(os.path.dirname(trial_dir)) == str(tmp_path / "json_2.1.1" / "train")
  assert os.path.basename(trial_dir).startswith("trial_T2019")
  with open(os.path.join(trial_dir, "traj_data.json")) as f:
    traj = json.load(f)
  params = traj["pddl_params"]
  target = params["toggle_target"] or params["parent_target"]
  assert task_dir == f"{traj['task_type']}-{params['object_target']}-None-{target}-{traj['scene']['scene_num']}"
  with open(path) as f:
    game = json.load(f)
  assert set(game) == {"pddl_domain", "grammar", "pddl_problem", "solvable", "walkthrough"}
  assert game["solvable"] is True and game["walkthrough"]
  assert f"Your task is to: {traj['turk_annotations']['anns'][0]['task_desc']}." in game["grammar"]
  with open(os.path.join(trial_dir, "initial_state.pddl")) as f:
    assert f.read() == game["pddl_problem"]


def test_alfworld_finds_the_games(tmp_path):
  """alfworld's own `AlfredTWEnv` collects exactly the games our loader lists."""
  from alfworld.agents.environment.alfred_tw_env import AlfredTWEnv

  generator.generate(str(tmp_path), {"train": 8, "valid_seen": 2, "valid_unseen": 2}, seed=0)
  base = str(tmp_path / "json_2.1.1")
  config = {"dataset": {"data_path": f"{base}/train", "eval_id_data_path": f"{base}/valid_seen",
                        "eval_ood_data_path": f"{base}/valid_unseen", "num_train_games": -1, "num_eval_games": -1},
            "env": {"task_types": [1, 2, 3, 4, 5, 6], "goal_desc_human_anns_prob": 0}}
  for train_eval, split in (("train", "train"), ("eval_out_of_distribution", "valid_unseen")):
    assert sorted(AlfredTWEnv(config, train_eval=train_eval).game_files) == data.game_files(split, str(tmp_path))


def test_loader_filters(tmp_path, monkeypatch):
  paths = generator.generate(str(tmp_path), {"train": 12}, seed=0)["train"]
  monkeypatch.setenv("ALFWORLD_DATA", str(tmp_path))
  assert data.game_files("train") == sorted(paths)
  with open(paths[0]) as f:
    game = json.load(f)
  game["solvable"] = False
  with open(paths[0], "w") as f:
    json.dump(game, f)
  task_dir = os.path.dirname(os.path.dirname(paths[1]))
  os.rename(task_dir, task_dir + "-movable")
  kept = data.game_files("train")
  assert len(kept) == 10 and paths[0] not in kept
  by_type = data.by_task_type(kept)
  assert sum(map(len, by_type.values())) == 10
  only = data.game_files("train", task_types=[2, "pick_two_obj_and_place"])
  assert sorted(only) == sorted(by_type.get("look_at_obj_in_light", []) + by_type.get("pick_two_obj_and_place", []))


def test_text_versions():
  new_domain, new_grammar = grammar.game_logic("2.1.3")
  old_domain, old_grammar = grammar.game_logic("2.1.1")
  assert "(:action help" in new_domain and "(:action help" not in old_domain
  actions = [[part[1] for part in pddl.parse_sexp(d) if part[0] == ":action"] for d in (new_domain, old_domain)]
  assert actions[0][-1] == "help" and actions[1] == actions[0][:-1]
  assert "action help {" in new_grammar and "action help {" not in old_grammar
  assert "put {o} in/on {r}" in old_grammar and "move {o} to {r}" not in old_grammar
  assert "You arrive at {lend.name}." in old_grammar and "You arrive at {r.name}." not in old_grammar
  assert grammar.version_of(old_grammar) == "2.1.1" and grammar.version_of(new_grammar) == "2.1.3"
  assert grammar.rule_text(grammar.with_goal(new_grammar, "put a mug in desk"), "task") == \
      "Your task is to: put a mug in desk."


def test_task_type_and_scene_filters(tmp_path):
  """A CPU-sized data set: only the requested task types, only the requested scene, in the real proportions."""
  types = ("pick_and_place_simple", "look_at_obj_in_light")
  counts = generator.split_counts("train", 40, types)
  assert set(counts) == set(types) and sum(counts.values()) == 40
  assert counts["pick_and_place_simple"] > counts["look_at_obj_in_light"] > 0  # 790 : 308 in the real split
  paths = generator.generate(str(tmp_path), {"train": 12, "valid_seen": 4}, task_types=types, scene_numbers=(225,))
  games = [p for split in paths.values() for p in split]
  assert len(games) == 16 and all("-225/" in p for p in games)
  assert {data.task_type_of(p) for p in games} == set(types)
  assert data.game_files("train", str(tmp_path)) == sorted(paths["train"])
  with pytest.raises(ValueError, match="among \\[225\\]"):
    generator.make_game("train", 10, 0, task_types=("pick_heat_then_place_in_recep",), scene_numbers=(225,))


def test_distractor_types_size_the_room():
  """distractor_types bounds the other object types in a game; the default keeps the benchmark's games unchanged."""
  def object_types(game):
    return set(re.findall(r"\(objectType \S+ (\w+)Type\)", game.problem))

  for i in range(30):
    args = ("train", 30, i, 0, ("pick_and_place_simple",), (225,))
    sparse = generator.make_game(*args, distractor_types=(0, 0))
    lamps = {"DeskLamp", "FloorLamp"}
    assert object_types(sparse) - lamps == {sparse.task.obj}  # only the target (and maybe a lamp) is in the room
    assert 1 <= len(object_types(generator.make_game(*args, distractor_types=(1, 2))) - lamps - {sparse.task.obj}) <= 2
    assert generator.make_game(*args) == generator.make_game(*args, distractor_types=generator.DISTRACTOR_TYPES)
  with pytest.raises(ValueError, match="distractor_types"):
    generator.generate("/nonexistent", {"train": 1}, distractor_types=(3, 1))


def test_home_prob_puts_the_task_object_at_its_home():
  """home_prob=1 puts every instance of the task's object at its home (the most general receptacle it may start in),
  0.7 puts about that share there, and 0 draws exactly the default games."""
  layout = scenes.layout(225)
  mangled = {pddl.mangle(r.alfred_id): r for r in layout.receptacles}

  def task_object_places(game):
    """(receptacle, receptacles it may start in) of each instance of the task's object."""
    exclude = "" if game.task.is_look else game.task.target
    where = [r for r in layout.receptacles if game.task.obj in vocab.CAN_CONTAIN[r.kind] and r.kind != exclude]
    return [(mangled[recep], where)
            for obj, recep in re.findall(r"^\s*\(inReceptacle (\S+) (\S+)\)$", game.problem, flags=re.M)
            if obj.split("_bar_")[0] == game.task.obj]

  at_home, total = 0, 0
  for i in range(40):
    args = ("train", 40, i, 0, ("pick_and_place_simple", "look_at_obj_in_light"), (225,), (1, 2))
    assert generator.make_game(*args, home_prob=0.0) == generator.make_game(*args)
    places = task_object_places(generator.make_game(*args, home_prob=1.0))
    assert places and all(recep == generator.home(where) for recep, where in places), places
    for recep, where in task_object_places(generator.make_game(*args, home_prob=0.7)):
      at_home += recep == generator.home(where)
      total += 1
  assert 0.6 < at_home / total < 0.9, (at_home, total)  # 0.7 plus the uniform draws that land at home anyway
  with pytest.raises(ValueError, match="home_prob"):
    generator.generate("/nonexistent", {"train": 1}, home_prob=1.5)
