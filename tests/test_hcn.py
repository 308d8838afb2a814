"""HCN teacher scheduling: hand-computed rounds, every tie-break, the anti-starvation bound, a set-based reference
implementation, the baselines, state persistence and dominance pruning."""
import json
import os
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from agentopd_jax.methods.agentic_opd.hcn import (SCHEDULERS, STRATEGY_V3, GlobalWeightHCNScheduler, HCNScheduler,
                                                 RandomScheduler, RoundRobinScheduler, StaticBestScheduler, Teacher,
                                                 dataset_of, load_state, make_scheduler, prune_dominated, save_state)


def T(name, step, *solved):
  return Teacher(name, step, frozenset(solved))


def weights(scheduler):
  return [scheduler.weights(i) for i in range(len(scheduler.teachers))]


# ---------------------------------------------------------------- v3 worked examples


def test_v3_worked_example_five_rounds():
  # U = q1..q8 (one dataset). t0 (step 5) Q = {q1..q4}, t1 (step 10) Q = {q3, q4, q5}, t2 (step 15) Q = {q6}.
  s = HCNScheduler([T("t0", 5, "q1", "q2", "q3", "q4"), T("t1", 10, "q3", "q4", "q5"), T("t2", 15, "q6")],
                   [f"q{i}" for i in range(1, 9)])
  # Round 1, P = {}: all weights 1. M0 = {q1..q4} → 4, M1 = {q3, q4, q5} → 3, M2 = {q6} → 1  ⇒ t0.
  sel = s.select(set())
  assert (sel.round, sel.index, sel.name, sel.priority, sel.marginal) == (1, 0, "t0", (4, 3, 1), (4, 3, 1))
  np.testing.assert_allclose(sel.gain, [4 / 8, 3 / 8, 1 / 8])
  # t0 reset to 1 on Q0; t1 ages on M1, t2 on M2.
  assert weights(s) == [{"q1": 1, "q2": 1, "q3": 1, "q4": 1}, {"q3": 2, "q4": 2, "q5": 2}, {"q6": 2}]
  # Round 2, P = {q1, q2}: M0 = {q3, q4} → 1 + 1 = 2, M1 = {q3, q4, q5} → 2 + 2 + 2 = 6, M2 → 2  ⇒ t1.
  sel = s.select({"q1", "q2"})
  assert (sel.index, sel.priority, sel.marginal) == (1, (2, 6, 2), (2, 3, 1))
  # t1 reset; t0 ages on M0 = {q3, q4} only (q1, q2 are solved by the student); t2 ages to 3.
  assert weights(s) == [{"q1": 1, "q2": 1, "q3": 2, "q4": 2}, {"q3": 1, "q4": 1, "q5": 1}, {"q6": 3}]
  # Round 3, P = {q1, q2, q3}: M0 = {q4} → 2, M1 = {q4, q5} → 2, M2 = {q6} → 3  ⇒ t2: the one-problem teacher
  # that lost twice now wins (anti-starvation).
  sel = s.select({"q1", "q2", "q3"})
  assert (sel.index, sel.priority) == (2, (2, 2, 3))
  assert weights(s) == [{"q1": 1, "q2": 1, "q3": 2, "q4": 3}, {"q3": 1, "q4": 2, "q5": 2}, {"q6": 1}]
  # Round 4, same P: M0 → w(q4) = 3, M1 → 2 + 2 = 4, M2 → 1  ⇒ t1.
  sel = s.select({"q1", "q2", "q3"})
  assert (sel.index, sel.priority) == (1, (3, 4, 1))
  assert weights(s) == [{"q1": 1, "q2": 1, "q3": 2, "q4": 4}, {"q3": 1, "q4": 1, "q5": 1}, {"q6": 2}]
  # Round 5, same P: M0 → 4, M1 → 1 + 1 = 2, M2 → 2  ⇒ t0; its aged q3 (2) and q4 (4) go back to 1.
  sel = s.select({"q1", "q2", "q3"})
  assert (sel.round, sel.index, sel.priority) == (5, 0, (4, 2, 2))
  assert weights(s) == [{"q1": 1, "q2": 1, "q3": 1, "q4": 1}, {"q3": 1, "q4": 2, "q5": 2}, {"q6": 3}]
  assert s.selected == 0 and s.round == 5


def test_v3_reset_covers_problems_the_student_solved():
  s = HCNScheduler([T("t0", 5, "a", "b", "c"), T("t1", 10, "d", "e")], "abcdef")
  assert s.select(set()).index == 0  # 3 vs 2; t1 → {d: 2, e: 2}
  assert s.select({"d"}).index == 0  # M0 = {a, b, c} → 3, M1 = {e} → 2; t1 → {d: 2 (solved: no aging), e: 3}
  assert weights(s)[1] == {"d": 2, "e": 3}
  sel = s.select({"d", "a"})  # M0 = {b, c} → 2, M1 = {e} → 3 ⇒ t1
  assert (sel.index, sel.priority) == (1, (2, 3))
  # The reset covers all of Q1, including d ∈ P whose weight was 2; t0 ages on M0 = {b, c}, not on a ∈ P.
  assert weights(s) == [{"a": 1, "b": 2, "c": 2}, {"d": 1, "e": 1}]


def test_v3_cap_and_starvation_when_the_ratio_condition_fails():
  # t0 covers 6 unsolved problems and wins every round at priority 6 (its weights reset to 1 each time); t1's one
  # problem ages 2, 3, 4, 5 and stays at the cap, so t1 never exceeds 5 < 6: cap·m1 = 5 ≤ min(5, 1 + 0)·m0 = 6 breaks
  # the anti-starvation condition (see HCNScheduler), and t1 starves.
  s = HCNScheduler([T("t0", 5, *"abcdef"), T("t1", 10, "x")], [*"abcdef", "x"])
  seen = []
  for _ in range(8):
    sel = s.select(set())
    assert sel.index == 0
    seen.append((sel.priority, s.weights(1)["x"]))
  assert seen == [((6, 1), 2), ((6, 2), 3), ((6, 3), 4), ((6, 4), 5)] + [((6, 5), 5)] * 4


def test_v3_configurable_init_and_cap():
  s = HCNScheduler([T("t0", 5, "a", "b"), T("t1", 10, "c")], "abc", weight_init=2, weight_cap=3)
  assert s.select(set()).priority == (4, 2)  # 2 + 2 vs 2 ⇒ t0; t1 → 3
  assert s.select(set()).priority == (4, 3)  # t0 again; t1 at the cap 3 stays 3
  assert weights(s) == [{"a": 2, "b": 2}, {"c": 3}]
  for init, cap in ((0, 5), (3, 2), (1, 128)):
    with pytest.raises(ValueError, match="weight_init"):
      HCNScheduler([T("t0", 5, "a")], "a", weight_init=init, weight_cap=cap)


# ---------------------------------------------------------------- tie-breaks, one level each


def test_tie_break_marginal_size():
  # t_small (index 0, earlier step) and t_big (index 1): step and index would both pick t_small.
  s = HCNScheduler([T("small", 5, "e"), T("big", 10, "a", "b", "c", "d")], "abcde")
  assert s.select(set()).index == 1  # 1 vs 4; small → {e: 2}
  sel = s.select({"a", "b"})  # small: w(e) = 2; big: {c, d} at 1 + 1 = 2 → tie on priority; |M| 1 < 2 ⇒ big
  assert (sel.index, sel.priority, sel.marginal) == (1, (2, 2), (1, 2))


def test_tie_break_coverage_ratio():
  # Datasets nq (|U| = 2) and hp (|U| = 4). Equal priority 1 and |M| 1; ratios mean(0/2, 1/4) = 0.125 for t0 and
  # mean(1/2, 0/4) = 0.25 for t1 ⇒ t1, despite its later step and higher index.
  problems = ["nq:1", "nq:2", "hp:1", "hp:2", "hp:3", "hp:4"]
  s = HCNScheduler([T("t0", 5, "hp:1"), T("t1", 10, "nq:1")], problems)
  sel = s.select(set())
  assert (sel.index, sel.priority, sel.marginal) == (1, (1, 1), (1, 1))
  np.testing.assert_allclose(sel.gain, [0.125, 0.25])
  assert s.datasets == ("hp", "nq")


def test_tie_break_step_with_exactly_equal_ratios():
  # Datasets a (|U| = 2), b (3), c (6). y solves a:0, a:1, c:0 (ratio 2/2 + 0/3 + 1/6 = 7/6); x solves a:0, b:0, b:1
  # (1/2 + 2/3 + 0/6 = 7/6). Equal priority 3, |M| 3 and ratio, so the earlier step (x) wins — although in floats
  # x's mean comes out one ulp *below* y's, so a float comparison would have picked y.
  problems = ["a:0", "a:1", "b:0", "b:1", "b:2"] + [f"c:{k}" for k in range(6)]
  s = HCNScheduler([T("y", 10, "a:0", "a:1", "c:0"), T("x", 5, "a:0", "b:0", "b:1")], problems)
  sel = s.select(set())
  assert (sel.priority, sel.marginal) == ((3, 3), (3, 3))
  assert sel.gain[1] < sel.gain[0]
  assert sel.index == 1


def test_tie_break_step_then_index():
  same = ("a", "b")
  s = HCNScheduler([T("late", 10, *same), T("early", 5, *same)], "abc")
  assert s.select(set()).index == 1  # everything equal but the step
  s = HCNScheduler([T("first", 5, *same), T("second", 5, *same)], "abc")
  assert s.select(set()).index == 0  # everything equal: lower index


# ---------------------------------------------------------------- anti-starvation bound


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_anti_starvation_bound(data):
  """With P fixed (every m_i = |M_i| fixed), c = weight_init, C = weight_cap and K teachers: a teacher j with
  C·m_j > min(C, c + K − 2)·m_i for all i ≠ j is selected within C − c + K rounds, from any reachable state.

  Proof (also in HCNScheduler's docstring): while j loses, its weights on M_j age by one per round, so from round
  C − c + 1 on its priority is C·m_j. In rounds C − c + 1 … C − c + K only the other K − 1 teachers win, so some i
  wins at s < t with no win in between; i was reset to c at s and aged at most t − s − 1 ≤ K − 2 times, so
  priority_i(t) ≤ m_i·min(C, c + K − 2) < C·m_j ≤ priority_j(t): i cannot win at t. Contradiction.
  The starting state is random: a few rounds with random student solved sets run first.
  """
  k = data.draw(st.integers(2, 7), "K")
  init = data.draw(st.integers(1, 2), "init")
  cap = data.draw(st.integers(init, init + 5), "cap")
  problems = [f"q{n}" for n in range(10)]
  subsets = st.frozensets(st.sampled_from(problems))
  teachers = [Teacher(f"t{i}", data.draw(st.sampled_from([5, 10])), data.draw(subsets)) for i in range(k)]
  s = HCNScheduler(teachers, problems, init, cap)
  for p in data.draw(st.lists(subsets, max_size=6), "warm-up P"):
    s.select(p)
  p = data.draw(subsets, "fixed P")
  m = [len(t.solved - p) for t in teachers]
  eligible = [j for j in range(k) if m[j] and all(cap * m[j] > min(cap, init + k - 2) * m[i]
                                                   for i in range(k) if i != j)]
  assume(eligible)
  j = data.draw(st.sampled_from(eligible), "j")
  picks = [s.select(p).index for _ in range(cap - init + k)]
  assert j in picks


# ---------------------------------------------------------------- reference implementation and invariants


def _reference(teachers, problems, rounds, strategy, init, cap):
  """The paper's rules on Python sets and dicts, problem by problem: [(index, priorities)] and the final weights."""
  sizes = {}
  for q in problems:
    sizes[dataset_of(q)] = sizes.get(dataset_of(q), 0) + 1
  per_teacher = [{q: init for q in t.solved} for t in teachers]
  glob = {q: init for q in problems}
  out = []
  for p in rounds:
    margins = [t.solved - p for t in teachers]
    if strategy == "hcn_global":
      for q in set().union(*margins):
        glob[q] = min(cap, glob[q] + 1)
      prio = [sum(glob[q] for q in m) for m in margins]
    else:
      prio = [sum(w[q] for q in m) for w, m in zip(per_teacher, margins)]
    ratio = [sum(Fraction(sum(dataset_of(q) == d for q in m), n) for d, n in sizes.items()) for m in margins]
    best = max(range(len(teachers)), key=lambda i: (prio[i], len(margins[i]), ratio[i], -teachers[i].step, -i))
    if strategy == "hcn":
      for i, (w, m) in enumerate(zip(per_teacher, margins)):
        for q in (w if i == best else m):
          w[q] = init if i == best else min(cap, w[q] + 1)
    out.append((best, tuple(prio)))
  final = per_teacher if strategy == "hcn" else [{q: glob[q] for q in t.solved} for t in teachers]
  return out, final


@st.composite
def pools(draw):
  """A pool over up to three datasets (nq:, hp: and un-namespaced ids) plus a sequence of student solved sets (which
  may name problems outside U)."""
  n_nq, n_hp, n_plain = draw(st.integers(1, 5)), draw(st.integers(0, 5)), draw(st.integers(0, 2))
  problems = [f"nq:{n}" for n in range(n_nq)] + [f"hp:{n}" for n in range(n_hp)] + [f"p{n}" for n in range(n_plain)]
  subsets = st.frozensets(st.sampled_from(problems))
  teachers = [Teacher(f"t{i}", draw(st.sampled_from([5, 10, 15])), draw(subsets))
              for i in range(draw(st.integers(1, 6)))]
  rounds = draw(st.lists(st.frozensets(st.sampled_from(problems + ["other:0"])), min_size=1, max_size=10))
  init = draw(st.integers(1, 3))
  return teachers, problems, rounds, init, draw(st.integers(init, 6))


@pytest.mark.parametrize("strategy", ["hcn", "hcn_global"])
@settings(max_examples=150, deadline=None)
@given(pool=pools())
def test_matches_set_based_reference(strategy, pool):
  teachers, problems, rounds, init, cap = pool
  s = make_scheduler(strategy, teachers, problems, weight_init=init, weight_cap=cap)
  expected, final = _reference(teachers, problems, rounds, strategy, init, cap)
  assert [(sel.index, sel.priority) for sel in (s.select(p) for p in rounds)] == expected
  assert weights(s) == final


@pytest.mark.parametrize("strategy", ["hcn", "hcn_global"])
@settings(max_examples=150, deadline=None)
@given(pool=pools())
def test_hcn_invariants(strategy, pool):
  """Every round: the chosen teacher has the largest priority; a teacher with an empty marginal set never beats one
  with a non-empty set (weights ≥ init ≥ 1, so priority > 0 ⇔ M_i ≠ ∅); every weight stays in [init, cap]."""
  teachers, problems, rounds, init, cap = pool
  s = make_scheduler(strategy, teachers, problems, weight_init=init, weight_cap=cap)
  for p in rounds:
    sel = s.select(p)
    assert sel.priority[sel.index] == max(sel.priority)
    assert sel.marginal[sel.index] > 0 or max(sel.marginal) == 0
    assert all((pr > 0) == (m > 0) for pr, m in zip(sel.priority, sel.marginal))
    assert all(init <= w <= cap for ws in weights(s) for w in ws.values())


# ---------------------------------------------------------------- global-weight variant


def test_global_variant_worked_example():
  s = GlobalWeightHCNScheduler([T("t0", 5, "a", "b", "c"), T("t1", 10, "c", "d", "e"), T("t2", 15, "f")], "abcdef")
  # Round 1, P = {a}: ∪ M_i = {b, c, d, e, f} age first → a1 b2 c2 d2 e2 f2 (c once, though t0 and t1 cover it);
  # then M0 = {b, c} → 4, M1 = {c, d, e} → 6, M2 = {f} → 2  ⇒ t1.
  sel = s.select({"a"})
  assert (sel.index, sel.priority) == (1, (4, 6, 2))
  # Round 2, P = {a, d, e}: ∪ M_i = {b, c, f} → b3 c3 f3 (d, e stay 2). M0 → 6, M1 = {c} → 3, M2 → 3  ⇒ t0.
  # Nothing is reset: t1 keeps the weights it had.
  sel = s.select({"a", "d", "e"})
  assert (sel.index, sel.priority) == (0, (6, 3, 3))
  # Round 3, P = {a, b, c, d}: ∪ M_i = {e, f} → e3 f4. M0 = ∅ → 0, M1 = {e} → 3, M2 = {f} → 4  ⇒ t2.
  sel = s.select({"a", "b", "c", "d"})
  assert (sel.index, sel.priority, sel.marginal) == (2, (0, 3, 4), (0, 1, 1))
  assert weights(s) == [{"a": 1, "b": 3, "c": 3}, {"c": 3, "d": 2, "e": 3}, {"f": 4}]


def test_global_variant_cap():
  s = GlobalWeightHCNScheduler([T("t0", 5, "a")], "ab")
  assert [s.select(set()).priority[0] for _ in range(6)] == [2, 3, 4, 5, 5, 5]  # increment first, cap 5


# ---------------------------------------------------------------- baselines


POOL = [T("t0", 0, "a"), T("t1", 10, "a", "b"), T("t2", 5, "b", "c"), T("t3", 15, "d")]
PROBLEMS = "abcde"


def test_static_best():
  s = StaticBestScheduler(POOL, PROBLEMS)  # |Q| = 1, 2, 2, 1: t1 and t2 tie, t2 has the earlier step
  sel = [s.select(p) for p in (set(), {"b", "c"}, {"a", "b", "c", "d"})]
  assert [x.index for x in sel] == [2, 2, 2]
  assert sel[1].priority == sel[1].marginal == (1, 1, 0, 1)  # unit weights
  assert StaticBestScheduler(POOL, PROBLEMS, index=3).select(set()).name == "t3"
  with pytest.raises(ValueError, match="outside 0..3"):
    StaticBestScheduler(POOL, PROBLEMS, index=4)


def test_random_is_reproducible_from_its_seed():
  s = RandomScheduler(POOL, PROBLEMS, seed=7)
  picks = [s.select(set()).index for _ in range(30)]
  rng = np.random.default_rng(7)
  assert picks == [int(rng.integers(4)) for _ in range(30)]
  other = RandomScheduler(POOL, PROBLEMS, seed=8)
  assert [other.select(set()).index for _ in range(30)] != picks
  assert set(picks) == {0, 1, 2, 3}


def test_round_robin_order():
  s = RoundRobinScheduler(POOL, PROBLEMS)
  assert [s.select({"a"}).index for _ in range(6)] == [0, 1, 2, 3, 0, 1]


# ---------------------------------------------------------------- registry, construction, datasets, pruning


def test_registry_and_kwargs():
  assert set(SCHEDULERS) == {"hcn", "hcn_global", "static_best", "random", "round_robin"}
  assert isinstance(make_scheduler("hcn", POOL, PROBLEMS), HCNScheduler)
  assert make_scheduler("hcn_global", POOL, PROBLEMS, weight_cap=3).weight_cap == 3
  assert make_scheduler("static_best", POOL, PROBLEMS, index=0).index == 0
  with pytest.raises(ValueError, match=r"unknown teacher scheduler 'hcrn'.*'hcn_global'.*'round_robin'"):
    make_scheduler("hcrn", POOL, PROBLEMS)


def test_construction_errors():
  with pytest.raises(ValueError, match="at least one teacher"):
    HCNScheduler([], PROBLEMS)
  with pytest.raises(ValueError, match="unique"):
    HCNScheduler([T("t", 5, "a"), T("t", 10, "b")], PROBLEMS)
  with pytest.raises(ValueError, match=r"'t1' solved 1 problems outside .*\['z'\]"):
    HCNScheduler([T("t0", 5, "a"), T("t1", 10, "z")], PROBLEMS)
  with pytest.raises(ValueError, match="non-empty problem set"):
    HCNScheduler([T("t0", 5)], [])


def test_dataset_of_and_teacher_coercion():
  assert [dataset_of(q) for q in ("nq:12", "hotpotqa:a:b", "plain", ":x")] == ["nq", "hotpotqa", "", ""]
  assert Teacher("t", 5, {"a"}).solved == frozenset({"a"})  # any iterable becomes a frozenset


def test_prune_dominated():
  a, b, c, d = T("a", 5, "x", "y"), T("b", 10, "x"), T("c", 0, "x", "y"), T("d", 20, "z")
  # b ⊂ a: dropped. a = c: c has the lower step, a is dropped. d is nobody's subset. Survivors keep their order.
  assert prune_dominated([a, b, c, d]) == [c, d]
  # Equal sets and equal steps: the lower name stays; overlapping sets that are not subsets both stay.
  e, f, g = T("f", 5, "x"), T("e", 5, "x"), T("g", 5, "y", "z")
  assert prune_dominated([e, f, g]) == [f, g]
  assert prune_dominated([T("p", 5, "x", "y"), T("q", 5, "y", "z")]) == [T("p", 5, "x", "y"), T("q", 5, "y", "z")]
  assert prune_dominated([T("empty", 5), T("one", 10, "x")]) == [T("one", 10, "x")]


# ---------------------------------------------------------------- persistence


def _student_sets(n, seed=0):
  rng = np.random.default_rng(seed)
  return [{q for q in PROBLEMS if rng.random() < 0.4} for _ in range(n)]


@pytest.mark.parametrize("name", sorted(SCHEDULERS))
def test_save_load_continues_identically(tmp_path, name):
  rounds = _student_sets(8)
  kw = {"seed": 3} if name == "random" else {}
  never_saved, saved = make_scheduler(name, POOL, PROBLEMS, **kw), make_scheduler(name, POOL, PROBLEMS, **kw)
  for p in rounds[:3]:
    assert never_saved.select(p) == saved.select(p)
  path = tmp_path / "teacher_state.json"
  save_state(path, saved)
  assert os.listdir(tmp_path) == ["teacher_state.json"]  # no temp file left behind
  state = json.loads(path.read_text())
  assert (state["version"], state["strategy"], state["round"]) == (saved.version, saved.strategy, 3)
  restored = make_scheduler(name, POOL, PROBLEMS, **kw)  # a fresh one: seed, weights, round from the file
  load_state(path, restored)
  assert restored.selected == never_saved.selected and restored.state_dict() == never_saved.state_dict()
  for p in rounds[3:]:
    assert restored.select(p) == never_saved.select(p)
  assert restored.state_dict() == never_saved.state_dict()


def test_v3_state_format():
  s = HCNScheduler(POOL, PROBLEMS)
  s.select({"a"})  # priorities (0, 1, 2, 1) ⇒ t2; t1 ages on b, t3 on d
  state = s.state_dict()
  assert (state["version"], state["strategy"], state["selected"]) == (3, STRATEGY_V3, "t2")
  assert state["config"] == {"weight_init": 1, "weight_cap": 5}
  assert state["weights"] == [[1], [1, 2], [1, 1], [2]]  # per teacher, over Q_i in the order of `problems`


def test_failed_save_keeps_the_old_file(tmp_path, monkeypatch):
  s = HCNScheduler(POOL, PROBLEMS)
  path = tmp_path / "state.json"
  save_state(path, s)
  before = path.read_text()
  s.select(set())

  def crash(src, dst):
    raise OSError("disk gone")

  monkeypatch.setattr(os, "replace", crash)
  with pytest.raises(OSError, match="disk gone"):
    save_state(path, s)
  assert path.read_text() == before and os.listdir(tmp_path) == ["state.json"]


def test_bad_state_files_raise_one_value_error_naming_the_file(tmp_path):
  s = HCNScheduler(POOL, PROBLEMS)
  s.select({"a"})
  good = s.state_dict()
  other_pool = HCNScheduler(POOL[:3], PROBLEMS)
  other_pool.select(set())
  cases = {
      "corrupt": "{not json",
      "not an object": "[1, 2]",
      "other pool": json.dumps(other_pool.state_dict()),
      "other strategy": json.dumps(GlobalWeightHCNScheduler(POOL, PROBLEMS).state_dict()),
      "other cap": json.dumps(HCNScheduler(POOL, PROBLEMS, weight_cap=4).state_dict()),
      "weight above cap": json.dumps({**good, "weights": [[1], [1, 9], [1, 1], [2]]}),
      "ragged weights": json.dumps({**good, "weights": [[1], [1], [1, 1], [2]]}),
      "no round": json.dumps({k: v for k, v in good.items() if k != "round"}),
      "unknown selected": json.dumps({**good, "selected": "t9"}),
  }
  fresh = HCNScheduler(POOL, PROBLEMS)
  untouched = fresh.state_dict()
  for what, text in cases.items():
    path = tmp_path / f"{what.replace(' ', '_')}.json"
    path.write_text(text)
    with pytest.raises(ValueError, match=str(path)):
      load_state(path, fresh)
    assert fresh.state_dict() == untouched, what  # a refused file changes nothing
  with pytest.raises(ValueError, match="random scheduler state does not fit"):
    RandomScheduler(POOL, PROBLEMS).load_state_dict({**RandomScheduler(POOL, PROBLEMS).state_dict(), "rng": {}})
  with pytest.raises(FileNotFoundError):
    load_state(tmp_path / "missing.json", fresh)
