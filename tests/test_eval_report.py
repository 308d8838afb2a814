"""Evaluation report helpers: pass@k hand values, the per-group table (ALFWorld's task types), markdown and files."""
import json
import math
from pathlib import Path

import pytest

from agentopd_jax.envs import registry
from agentopd_jax.envs.alfworld.spec import alfworld_task_type
from agentopd_jax.envs.verl_agent.metrics import EpisodeRecord, episode_metrics
from agentopd_jax.eval.report import (
  evaluation_summary,
  group_table,
  pass_at_k,
  pass_at_k_by_problem,
  to_markdown,
  write_report,
)

ROOT = "/data/alfworld/json_2.1.1/valid_seen"
GAMES = {
    "Pick": f"{ROOT}/pick_and_place_simple-Pencil-None-Shelf-308/trial_T20190908_121952_610012/game.tw-pddl",
    "Pick2": f"{ROOT}/pick_two_obj_and_place-Watch-None-Dresser-313/trial_T20190907_161434_329735/game.tw-pddl",
    "Look": f"{ROOT}/look_at_obj_in_light-Book-None-DeskLamp-308/trial_T20190908_144951_587345/game.tw-pddl",
    "Heat": f"{ROOT}/pick_heat_then_place_in_recep-Egg-None-Fridge-13/trial_T20190907_151643_465634/game.tw-pddl",
    "Cool": f"{ROOT}/pick_cool_then_place_in_recep-Pan-None-StoveBurner-2/trial_T20190909_110347_624008/game.tw-pddl",
    "Clean": f"{ROOT}/pick_clean_then_place_in_recep-Cloth-None-BathtubBasin-423/trial_T2019_1/game.tw-pddl",
}


COLUMNS = registry.get("alfworld").report.columns
PAPERS_ORDER = ("Pick", "Look", "Clean", "Heat", "Cool", "Pick2", "All")


def _ep(gamefile, won, length=10, valid=8, group=None):
  group = group or (alfworld_task_type(gamefile) if gamefile else None)
  return EpisodeRecord(problem=gamefile, group=group, won=won, reward=10.0 * won, length=length, valid_actions=valid)


def test_pass_at_k_hand_values():
  assert pass_at_k(5, 2, 1) == pytest.approx(0.4)
  assert pass_at_k(5, 2, 2) == pytest.approx(1 - math.comb(3, 2) / math.comb(5, 2))  # 0.7
  assert pass_at_k(5, 2, 2) == pytest.approx(0.7)
  assert pass_at_k(5, 0, 3) == 0.0
  assert pass_at_k(5, 3, 3) == 1.0  # n - c = 2 < k
  assert pass_at_k(5, 5, 1) == 1.0
  for n, c, k in [(10, 3, 4), (200, 17, 50), (7, 1, 7)]:
    assert pass_at_k(n, c, k) == pytest.approx(1 - math.comb(n - c, k) / math.comb(n, k), rel=1e-12)
  for bad in [(5, 6, 1), (5, 2, 0), (5, 2, 6), (5, -1, 1)]:
    with pytest.raises(ValueError):
      pass_at_k(*bad)


def test_pass_at_k_by_problem():
  outcomes = {"a": (2, 5), "b": (0, 5), "c": (1, 1)}
  assert pass_at_k_by_problem(outcomes, 1) == pytest.approx((0.4 + 0.0 + 1.0) / 3)
  assert pass_at_k_by_problem(outcomes, 2) == pytest.approx((0.7 + 0.0) / 2)  # "c" has too few attempts
  with pytest.raises(ValueError):
    pass_at_k_by_problem(outcomes, 6)


def test_group_table_in_the_papers_order_matches_verl_agent():
  records = [_ep(GAMES["Pick"], True), _ep(GAMES["Pick"], False), _ep(GAMES["Pick2"], True),
             _ep(GAMES["Heat"], False), _ep(GAMES["Look"], True), _ep(None, False)]
  table = group_table(records, COLUMNS)
  assert tuple(table) == PAPERS_ORDER
  assert table["Pick"] == {"success_rate": 0.5, "episodes": 2}
  assert table["Pick2"] == {"success_rate": 1.0, "episodes": 1}
  assert table["Heat"] == {"success_rate": 0.0, "episodes": 1}
  assert table["Clean"] == {"success_rate": None, "episodes": 0}
  assert table["All"] == {"success_rate": 0.5, "episodes": 6}
  # A record's column is its group, not what its problem id spells.
  assert group_table([_ep("runs/x/game", True, group="pick_two_obj_and_place")], COLUMNS)["Pick2"]["episodes"] == 1
  # Same per-type rates as verl-agent's keys on real game paths.
  metrics = episode_metrics(records)
  assert metrics["pick_and_place_success_rate"] == table["Pick"]["success_rate"]
  assert metrics["pick_two_obj_and_place_success_rate"] == table["Pick2"]["success_rate"]


def test_summary_markdown_and_files(tmp_path):
  records = [_ep(GAMES[col], won, length=5 + i, valid=5) for i, col in enumerate(GAMES) for won in (True, False)]
  summary = evaluation_summary(records, COLUMNS, ks=(1, 2, 3))
  assert summary["episodes"] == 12 and summary["problems"] == 6
  assert summary["success_rate"] == 0.5 and summary["reward_mean"] == 5.0
  assert summary["pass_at_k"] == {"pass@1": 0.5, "pass@2": 1.0, "pass@3": None}  # 2 attempts per game
  assert summary["valid_action_ratio"] == pytest.approx(60 / sum(5 + i for i in range(6)) / 2)
  assert summary["length_mean"] == pytest.approx(7.5)
  assert all(summary["per_type"][c]["success_rate"] == 0.5 for c in PAPERS_ORDER)

  md = to_markdown(summary, "ALFWorld valid_seen")
  assert md.startswith("# ALFWorld valid_seen\n")
  assert "| Task type | Pick | Look | Clean | Heat | Cool | Pick2 | All |" in md
  assert "| Success (%) | 50.0 | 50.0 | 50.0 | 50.0 | 50.0 | 50.0 | 50.0 |" in md
  assert "| pass@3 (%) | n/a |" in md and "| pass@2 (%) | 100.0 |" in md

  json_path, md_path = write_report(summary, tmp_path / "reports", name="step_150")
  assert json_path.endswith("step_150.json") and md_path.endswith("step_150.md")
  assert json.loads(Path(json_path).read_text()) == summary
  assert Path(md_path).read_text() == to_markdown(summary, "step_150")


def test_summary_explicit_outcomes_and_non_alfworld():
  records = [EpisodeRecord(None, None, won=i < 3, reward=float(i), length=4, valid_actions=4, task_score=0.25 * i)
             for i in range(4)]
  webshop = registry.get("webshop").report.columns
  summary = evaluation_summary(records, webshop, outcomes={"g0": (1, 4), "g1": (0, 4)}, ks=(1, 4))
  assert summary["problems"] == 2 and summary["pass_at_k"] == {"pass@1": 0.125, "pass@4": 0.5}
  assert summary["outcomes"] == {"g0": [1, 4], "g1": [0, 4]}
  assert summary["task_score_mean"] == pytest.approx(0.375)
  md = to_markdown(summary)
  assert "| Task type |" not in md  # no group columns, no per-group table
  assert "| Task score (x100) | 37.5 |" in md
  no_outcomes = evaluation_summary(records, webshop)  # no problem ids: no problems, pass@k n/a
  assert no_outcomes["problems"] is None and no_outcomes["pass_at_k"] == {"pass@1": None}
  assert no_outcomes["outcomes"] is None


def test_search_groups_are_its_data_source_columns():
  records = [EpisodeRecord(f"q{i}", source, won=won, reward=float(won), length=2, valid_actions=2)
             for i, (source, won) in enumerate((("nq", True), ("nq", False), ("bamboogle", True), (None, False)))]
  table = group_table(records, registry.get("search").report.columns)
  assert tuple(table) == ("NQ", "Triv", "Pop", "Hotp", "2Wk", "MuS", "Bam", "All")
  assert table["NQ"] == {"success_rate": 0.5, "episodes": 2} and table["Bam"]["episodes"] == 1
  assert table["Triv"]["success_rate"] is None and table["All"]["episodes"] == 4
