"""SearchEnv episode rules in both formats, the vector env over HTTP, the oracle through the real server, and a
retrieval server that is unreachable or killed mid-run."""
import contextlib
import functools
import json
import random

import pytest

from agentopd_jax.envs.hindsight import replay
from agentopd_jax.envs.search import formats
from agentopd_jax.envs.search.client import RetrievalError
from agentopd_jax.envs.search.env import SearchEnv
from agentopd_jax.envs.search.hindsight import SearchReplay
from agentopd_jax.envs.search.oracle import Oracle, play
from agentopd_jax.envs.search.questions import bundled_tasks
from agentopd_jax.envs.search.retriever import BM25Retriever
from agentopd_jax.envs.search.server import serve
from agentopd_jax.envs.search.tasks import DATA_SOURCES, SearchTask, to_row
from agentopd_jax.envs.search.world import generate_world
from agentopd_jax.envs.vector import VectorEnv
from agentopd_jax.envs.verl_agent.metrics import EpisodeRecord, episode_metrics

TASK = SearchTask("When was Foia Haesson born?", ("1964",), "nq", "t-0")
DEAD = "http://127.0.0.1:9/retrieve"  # the discard port: nothing listens, connections are refused


@pytest.fixture(scope="module")
def url():
  with serve(retriever=BM25Retriever(generate_world(0).passages)) as u:
    yield u


@pytest.fixture(scope="module")
def test_tasks():
  return bundled_tasks("test")


def test_verl_agent_rules(url):
  env = SearchEnv(search_url=url)
  obs, infos = env.reset(TASK)
  assert obs == TASK.question and infos == {"won": False, "question": TASK.question, "data_source": "nq",
                                            "tool_calls": 0, "turns": 0, "action": "", "subem": 0.0}
  obs, score, done, infos = env.step("<search>Foia Haesson born</search>")
  assert obs.startswith('<information>{"result": "Doc 1: \\"Foia Haesson\\"\\nFoia Haesson Foia Haesson (born 1964)')
  assert obs.endswith('\\n"}</information>') and (score, done, infos["tool_calls"]) == (0.0, False, 1)
  assert len(json.loads(obs[len("<information>"):-len("</information>")])["result"].split("\nDoc ")) == 3
  assert env.step("I think so") == ("", 0.0, False, {**infos, "turns": 2, "action": "invalid"})
  obs, score, done, infos = env.step("<answer>1964</answer>")
  assert (obs, score, done, infos["won"], infos["action"]) == ("", 1.0, True, True, "answer")
  with pytest.raises(RuntimeError, match="reset"):
    env.step("<answer>1964</answer>")


def test_verl_agent_turn_limit_and_wrong_answer(url):
  env = SearchEnv(search_url=url, max_turns=4)
  env.reset(TASK)
  for _ in range(3):
    assert not env.step("<search>Foia Haesson</search>")[2]
  obs, score, done, infos = env.step("<search>Foia Haesson</search>")  # turn 4: done, nothing searched
  assert (obs, score, done, infos["tool_calls"], infos["won"]) == ("", 0.0, True, 3, False)
  env.reset(TASK)
  assert env.step("<think>hm</think><answer>1965</answer>")[1:3] == (0.0, True)


@pytest.mark.parametrize("obs_format", ["verl-agent", "search-r1"])
def test_subem_of_the_scored_answer(obs_format):
  """Search-R1's sub-string EM beside the EM score: a golden answer inside a longer answer counts."""
  env = SearchEnv(obs_format=obs_format)
  env.reset(TASK)
  assert env.step("<search>Foia Haesson born</search>")[3]["subem"] == 0.0
  _, score, done, infos = env.step("<answer>born in 1964, in Sisary</answer>")
  assert (score, done, infos["subem"], infos["won"]) == (0.0, True, 1.0, False)
  env.reset(TASK)
  assert env.step("<answer>1965</answer>")[3]["subem"] == 0.0
  env.reset(TASK)
  assert env.step("<answer>1964</answer>")[3]["subem"] == 1.0


def test_subem_at_the_turn_limit_judges_the_last_answer_in_the_history():
  env = SearchEnv(max_turns=2)
  env.reset(TASK)
  env.step("<search>Foia Haesson</search>")
  assert env.step("<search>x</search>")[3]["subem"] == 0.0  # no answer at all


def test_verl_agent_scores_the_history_joined_without_separators():
  """SkyRL's SearchEnv scores `"".join` of the episode's messages: an `<answer>` tag split over two turns (no search
  between them, so no observation) is read whole at the turn limit."""
  env = SearchEnv(search_url=DEAD, max_turns=2)
  env.reset(TASK)
  assert env.step("<ans")[1:3] == (0.0, False)
  _, score, done, infos = env.step("wer>1964</answer>")
  assert (score, done, infos["won"], infos["subem"], infos["action"]) == (1.0, True, True, 1.0, "invalid")


@pytest.mark.parametrize("obs_format", ["verl-agent", "search-r1"])
def test_unreachable_retriever_fails_the_episode_in_process(obs_format, test_tasks):
  """Retries spent: the step ends the episode as a failed one (what VectorEnv reports for an env that raised), not an
  exception; an episode without a search still plays, the oracle's demonstration ends unwon, OPID's replay raises."""
  env = SearchEnv(search_url=DEAD, retries=0, timeout_s=1.0, obs_format=obs_format)
  env.reset(TASK)
  obs, score, done, infos = env.step("<search>Foia Haesson</search>")
  assert (obs, score, done, infos["won"], infos["env_failed"], infos["tool_calls"]) == ("", 0.0, True, False, True, 1)
  assert f"retrieval request to {DEAD} failed after 1 attempts" in infos["error"]
  env.reset(TASK)
  assert env.step("<answer>1964</answer>")[1:3] == (1.0, True)
  actions, score, infos = play(env, test_tasks[0])
  assert (len(actions), score, infos["env_failed"]) == (1, 0.0, True)
  with pytest.raises(RetrievalError, match=DEAD):
    env.reset(test_tasks[0])
    replay(SearchReplay(env, env.task, []), actions)


def test_search_r1_rules(url):
  env = SearchEnv(search_url=url, obs_format="search-r1", max_turns=4)
  env.reset(to_row(TASK, "test", 0))  # a dataset row works as the task too
  obs, score, done, infos = env.step("<think>x</think>\n<search> Foia Haesson born </search> trailing")
  assert obs.startswith('\n\n<information>Doc 1(Title: "Foia Haesson") Foia Haesson Foia Haesson (born 1964)')
  assert obs.endswith("</information>\n\n") and obs.count("\nDoc ") == 2 and not done
  assert env.step("no tags")[0] == formats.INVALID_ACTION_MESSAGE
  assert env.step("<search>Sisary</search>")[2] is False
  assert env.step("<search>Shaton</search>")[2] is False  # the 4th step: still a search round (one was invalid)
  obs, score, done, infos = env.step("<search>Kouburg</search>")  # the final turn: no search is run
  assert (obs, score, done, infos["tool_calls"]) == ("\n\n<information></information>\n\n", 0.0, True, 3)
  env.reset(TASK)
  assert env.step("<answer> 1964 </answer>")[1:3] == (1.0, True)


def test_in_process_env_equals_http_env(url, test_tasks):
  for fmt in ("verl-agent", "search-r1"):
    local, remote = SearchEnv(obs_format=fmt), SearchEnv(search_url=url, obs_format=fmt)
    for task in test_tasks[::130]:
      assert play(local, task) == play(remote, task)


def test_oracle_answers_95_percent_through_the_server(url, test_tasks):
  tasks = random.Random(0).sample(test_tasks, 250)
  env = SearchEnv(search_url=url)
  records = []
  for task in tasks:
    actions, score, infos = play(env, task)
    assert all(a.startswith(("<search>", "<answer>")) for a in actions) and len(actions) <= env.max_turns
    records.append(EpisodeRecord(problem=str(task), group=task.data_source, won=infos["won"], reward=score,
                                 length=len(actions), valid_actions=len(actions), data_source=task.data_source,
                                 tool_calls=infos["tool_calls"]))
  metrics = episode_metrics(records, prefix="val/")
  assert metrics["val/success_rate"] >= 0.95, metrics
  assert {f"val/{s}_success_rate" for s in DATA_SOURCES} <= set(metrics)
  assert metrics["val/hotpotqa/tool_call_count/mean"] > metrics["val/nq/tool_call_count/mean"] >= 1.0


def test_oracle_queries_copy_from_the_prompt(test_tasks):
  """Every query of the oracle is text a policy can copy from its prompt: the subject as the question writes it (NQ
  is lower-case; BM25 ignores case), then, on a retry, alone; a later hop's subject is copied from a passage."""
  lower = [t for t in test_tasks if t.data_source == "nq" and t.question == t.question.lower()][:20]
  assert lower
  for task in lower:
    oracle = Oracle(task)
    query = oracle.act(task.question)[len("<search>"):-len("</search>")]
    retry = oracle.act("<information>nothing relevant</information>")[len("<search>"):-len("</search>")]
    subject = task.plan.hops[0][0]
    assert subject != subject.lower() and subject.lower() in task.question
    assert query.startswith(subject.lower() + " ") and retry == subject.lower()
  bridge = next(t for t in test_tasks if t.data_source == "hotpotqa" and t.plan.kind == "bridge")
  env, oracle = SearchEnv(), Oracle(bridge)
  obs, _ = env.reset(bridge)
  obs, *_ = env.step(oracle.act(obs))
  second, value = oracle.act(obs), oracle.values[0]
  assert second.startswith(f"<search>{value} ") and value in obs and value.lower() not in bridge.question.lower()


def test_question_searcher_knows_no_skill(test_tasks):
  """The question searcher (`sft.expert=question_searcher`): every search is the question as written, with no retry;
  it wins the single-hop and comparison questions whose words retrieve their facts, and fewer bridge questions than
  the oracle, which hops by the found name as the shipped multi-hop skill says."""
  env = SearchEnv()
  task = next(t for t in test_tasks if t.data_source == "nq")
  oracle = Oracle(task, style="question")
  assert oracle.act(task.question) == f"<search>{task.question.rstrip(' ?')}</search>"
  assert oracle.act("<information>nothing relevant</information>").startswith("<answer>")  # no retry
  wins = {}
  for t in [t for t in test_tasks if t.plan.kind == "single"][:40] + [t for t in test_tasks if t.plan.kind == "bridge"][:60]:
    for style in ("oracle", "question"):
      kind = wins.setdefault((t.plan.kind, style), [0, 0])
      kind[0] += play(env, t, style=style)[1] > 0
      kind[1] += 1
  assert wins[("single", "question")] == wins[("single", "oracle")]
  assert wins[("bridge", "question")][0] < 0.6 * wins[("bridge", "oracle")][0]
  with pytest.raises(ValueError, match="style must be one of"):
    Oracle(task, style="guess")


def test_oracle_in_search_r1_format(url, test_tasks):
  env = SearchEnv(search_url=url, obs_format="search-r1")
  won = [play(env, t)[2]["won"] for t in test_tasks[::13]]
  assert sum(won) >= 0.95 * len(won)
  with pytest.raises(ValueError, match="plan"):
    Oracle(TASK)


def test_vector_env_over_http(url, test_tasks):
  tasks = test_tasks[::300]
  with VectorEnv(functools.partial(SearchEnv, search_url=url), 2, len(tasks)) as venv:
    obs, infos = venv.reset(tasks)
    assert obs == [t.question for t in tasks]
    oracles = [Oracle(t) for t in tasks]
    dones = [False] * len(tasks)
    for _ in range(4):
      obs, scores, dones, infos = venv.step([None if d else o.act(ob) for o, ob, d in zip(oracles, obs, dones)])
    assert all(dones) and scores == [1.0] * len(tasks) and all(i["won"] for i in infos)


def test_retriever_killed_mid_run_fails_only_the_searching_episodes():
  """The server process dies between two steps of a VectorEnv run: the episodes that search then end as failed
  episodes, reported by the env (the workers live on), the one that answers is scored, and the next episodes play."""
  with contextlib.ExitStack() as server:
    url = server.enter_context(serve(mode="process"))
    with VectorEnv(functools.partial(SearchEnv, search_url=url, retries=1, timeout_s=2.0), 2, 3) as venv:
      pids = [venv.worker_pid(i) for i in range(3)]
      venv.reset([TASK] * 3)
      obs, _, dones, _ = venv.step(["<search>Foia Haesson born</search>"] * 3)
      assert not any(dones) and all("(born 1964)" in o for o in obs)
      server.close()  # terminates the server process
      obs, scores, dones, infos = venv.step(["<search>Sisary</search>", "<answer>1964</answer>", "<search>x</search>"])
      assert dones == [True] * 3 and scores == [0.0, 1.0, 0.0] and [i["won"] for i in infos] == [False, True, False]
      assert [i.get("env_failed", False) for i in infos] == [True, False, True]
      assert all(f"{url} failed after 2 attempts" in infos[i]["error"] for i in (0, 2))
      obs, _ = venv.reset([TASK] * 3)
      assert obs == [TASK.question] * 3 and venv.step(["<answer>1964</answer>"] * 3)[1] == [1.0] * 3
      assert [venv.worker_pid(i) for i in range(3)] == pids
