"""A warm start that reads OPID's skills: demonstrations in OPID's injection format (`methods.opid.demos`,
`sft.opid_fraction`) and the hindsight retry that checks a checkpoint reads them (`methods.opid.retry`,
`evaluate.py --opid_hindsight`)."""
import dataclasses

import jax
import pytest

from agentopd_jax.envs.hindsight import Review, StepReview
from agentopd_jax.methods.opid.config import OpidConfig
from agentopd_jax.methods.opid.demos import opid_demonstration_samples, retry_demonstration_samples, workflows
from agentopd_jax.methods.opid.injection import augment_observation
from agentopd_jax.methods.opid.retry import retry_context, retry_summary
from agentopd_jax.models.tokenizer import builtin_tokenizer
from agentopd_jax.rollout.chat import ChatFormat
from agentopd_jax.rollout.demonstrations import DemoEpisode, DemoStep
from agentopd_jax.envs.verl_agent.corpus import default_corpus


def _chat():
  return ChatFormat(builtin_tokenizer(default_corpus()))


def _reply(action):
  return f"<action>{action}</action>"


def _episode():
  """Expert a, a mistake m (not imitated), expert b from the same state, expert c (the winning action)."""
  prompts = [f"Your task is to: put a mug in the sink.\nStep {t}." for t in range(4)]
  steps = (DemoStep(prompts[0], _reply("go to desk 1"), "go to desk 1", True),
           DemoStep(prompts[1], _reply("look"), "look", False),
           DemoStep(prompts[2], _reply("take mug 1 from desk 1"), "take mug 1 from desk 1", True),
           DemoStep(prompts[3], _reply("put mug 1 in/on sink 1"), "put mug 1 in/on sink 1", True))
  return DemoEpisode("game-7", 7, steps, reward=10.0)


def _review(task, actions):
  """The explorer's first move and the mistake left the plan; the reviewer would have gone to the shelf first."""
  plan = {0: ("go to shelf 1", False, ""), 1: ("take mug 1 from desk 1", False, ""),
          2: ("take mug 1 from desk 1", True, "take mug 1 from desk 1"), 3: ("put mug 1 in/on sink 1", True, "put")}
  steps = tuple(StepReview(a, True, plan[t][0], plan[t][1], plan[t][0][:1].upper() + plan[t][0][1:], plan[t][2])
                for t, a in enumerate(actions))
  return Review("put a mug in the sink", steps, won=len(actions) == 4, done=len(actions) == 4)


def test_each_step_carries_its_routed_skills_and_imitates_what_they_point_to():
  """Whole episode: steps 0 and 1 left the plan, so they get step skills and imitate the reviewer's action; steps 2
  and 3 get the workflow. Cut episode (seeded cut): an avoidance rule; its mistake step gets a step skill."""
  chat, cfg = _chat(), OpidConfig(max_step_skills=5)
  samples, failed = opid_demonstration_samples([_episode()], _review, chat, _reply, cfg, 1024, seed=0)
  assert failed == 0
  whole = [s for s in samples if s.won]
  assert [(s.step_index, s.response_text) for s in whole] == [
      (0, _reply("go to shelf 1")), (1, _reply("take mug 1 from desk 1")), (2, _reply("take mug 1 from desk 1")),
      (3, _reply("put mug 1 in/on sink 1"))]
  step0 = 'Go to shelf 1 next: "go to desk 1" does not move toward the goal.'
  assert whole[0].prompt_text == augment_observation(_episode().steps[0].prompt, None, step0)
  workflow = "Workflow that completed the task: take mug 1 from desk 1 -> put. 2 of 4 steps were detours; skip them."
  assert whole[3].prompt_text == augment_observation(_episode().steps[3].prompt, workflow, None)
  for s in samples:
    assert s.prompt_ids == chat.prompt_ids(s.prompt_text)[-1024:]
    assert s.completion_ids == chat.reply_ids(s.response_text) and s.traj_id == 7 and s.problem_id == "game-7"
  cut = [s for s in samples if not s.won]
  assert cut and max(s.step_index for s in cut) < 3 and all(s.episode_reward == 0.0 for s in cut)
  assert all("**Critical-Step Skill**" in s.prompt_text or "Avoid" in s.prompt_text for s in cut)
  # Additive routing: a step skill's step also reads the episode skill; the seeded cut is reproducible.
  additive, _ = opid_demonstration_samples([_episode()], _review, chat, _reply, dataclasses.replace(cfg, route="additive"),
                                           1024, seed=0)
  assert "**Episode-Level Skill**" in additive[0].prompt_text and "**Critical-Step Skill**" in additive[0].prompt_text
  again, _ = opid_demonstration_samples([_episode()], _review, chat, _reply, cfg, 1024, seed=0)
  assert again == samples


def test_a_mistake_without_a_step_skill_is_not_imitated_and_a_failed_review_is_counted():
  chat = _chat()
  one = OpidConfig(max_step_skills=1)  # K = 1: only step 0 gets a step skill
  samples, _ = opid_demonstration_samples([_episode()], _review, chat, _reply, one, 1024, targets="expert")
  assert [s.step_index for s in samples if s.won] == [0, 2, 3]  # the mistake at 1 has no action of the expert's
  # "skills": the mistake left the plan, so under the workflow it imitates the reviewer's action from its state
  samples, _ = opid_demonstration_samples([_episode()], _review, chat, _reply, one, 1024)
  assert [(s.step_index, s.response_text) for s in samples if s.won][:2] == [
      (0, _reply("go to shelf 1")), (1, _reply("take mug 1 from desk 1"))]
  assert "**Critical-Step Skill**" not in samples[1].prompt_text
  with pytest.raises(ValueError, match="sft.opid_targets"):
    opid_demonstration_samples([_episode()], _review, chat, _reply, one, 1024, targets="teacher")

  def broken(task, actions):
    raise RuntimeError("replay")
  samples, failed = opid_demonstration_samples([_episode()], broken, chat, _reply, OpidConfig(), 1024)
  assert (samples, failed) == ([], 2)


def test_retry_demonstrations_read_the_workflow_of_the_won_episode_in_every_prompt():
  """`workflows` keeps the won, reviewable episodes with the oracle's workflow; a follower's replay of one gets that
  workflow in every prompt, as the retry splices it, and imitates every step but an inserted mistake."""
  chat = _chat()
  lost = DemoEpisode("game-8", 8, _episode().steps[:2], reward=0.0)

  def broken_for_9(task, actions):
    if task == "game-9":
      raise RuntimeError("replay")
    return _review(task, actions)
  reviewed = workflows([_episode(), lost, DemoEpisode("game-9", 9, _episode().steps, 10.0)], broken_for_9, 5)
  workflow = "Workflow that completed the task: take mug 1 from desk 1 -> put. 2 of 4 steps were detours; skip them."
  assert [(ep.task, skill) for ep, skill in reviewed] == [("game-7", workflow)]
  replay = DemoEpisode("game-7", 0, (_episode().steps[1], _episode().steps[2]), reward=10.0)  # a mistake, then take
  samples = retry_demonstration_samples([replay], [workflow], chat, 16)
  assert [(s.step_index, s.response_text, s.won) for s in samples] == [(1, _reply("take mug 1 from desk 1"), True)]
  assert samples[0].prompt_text == retry_context([workflow]).rewrite(0, _episode().steps[2].prompt)
  assert samples[0].prompt_ids == chat.prompt_ids(samples[0].prompt_text)[-16:]
  from types import SimpleNamespace

  from agentopd_jax.training.config import SftConfig
  from agentopd_jax.training.warm_start import retry_episodes
  with pytest.raises(ValueError, match="sft.opid_retries .* needs sft.opid_fraction"):
    SftConfig(opid_retries=1)
  with pytest.raises(ValueError, match="sft.opid_retries needs .* env 'search' has not"):
    retry_episodes(SimpleNamespace(env=SimpleNamespace(name="search")), None, [])


def test_the_retry_puts_each_episodes_skill_after_its_task_line():
  context = retry_context(["Workflow that completed the task: take -> put.", None])
  text = "You are in a room.\nYour task is to: put a mug in the sink.\nAdmissible actions: [...]"
  assert context.rewrite(0, text) == augment_observation(text, "Workflow that completed the task: take -> put.")
  assert context.rewrite(0, text).index("**Episode-Level Skill**") > text.index("Your task is to:")
  assert context.rewrite(1, text) == text and context.prefix is None


def test_retry_summary_by_hand():
  first = [dict(problem="a", won=True), dict(problem="a", won=False), dict(problem="b", won=False),
           dict(problem="b", won=False)]
  second = [dict(problem="a", won=True), dict(problem="a", won=True), dict(problem="b", won=False),
            dict(problem="b", won=True)]
  out = retry_summary(first, second, ["w", "x", None, "y"])
  assert (out["success_without"], out["success_with"], out["without_skill"]) == (25.0, 75.0, 1)
  assert out["first_won"] == {"episodes": 1, "success_without": 100.0, "success_with": 100.0}
  assert out["first_lost"] == {"episodes": 3, "success_without": 0.0, "success_with": 200 / 3}
  # per problem: a 50 -> 100, b 0 -> 50: differences 50 and 50, no spread, so no interval (`compare.paired_ci`)
  assert out["paired_difference"]["problems"] == 2 and out["paired_difference"]["mean"] == 50.0
  assert out["paired_difference"]["ci95"] == [None, None] and out["outcomes"] == {"a": [2, 2], "b": [1, 2]}
  one = retry_summary(first[:2], second[:2], ["w", "x"])
  assert one["paired_difference"] == {"problems": 1, "mean": 50.0, "ci95": [None, None]}


# --------------------------------------------------------------------------------------- on generated ALFWorld games
alfworld = pytest.importorskip("alfworld", reason="generating games needs the alfworld wheel's domain files")

from conftest import tiny_alfworld_config  # noqa: E402


@pytest.fixture(scope="module")
def games_root(alfworld_games_root):
  return alfworld_games_root


def test_the_warm_start_adds_opid_demonstrations_that_the_oracle_review_makes(tmp_path, games_root):
  """`sft.opid_fraction` adds the skilled expert's episodes of that share of the demo games in OPID's format (step
  skills on the explorer's searching, workflows and cut-short avoidance rules); the warm start's cache key follows
  `opid.*` only when they are on; a trajectory layout is one error naming the field."""
  from agentopd_jax.training import reuse, warm_start
  from agentopd_jax.training.assembly import build_run

  c = tiny_alfworld_config("cpu", tmp_path, games_root, sft__demos=8, sft__skill_fraction=0.0)
  plain = warm_start.demonstrations(build_run(c))
  c.sft.opid_fraction = 0.5
  parts = build_run(c)
  demos = warm_start.demonstrations(parts)
  assert demos[:len(plain)] == plain
  added = demos[len(plain):]
  assert added == warm_start.opid_demonstrations(parts, parts.train_tasks[:8][1::2], "skilled_explorer")
  assert {s.problem_id for s in added} <= {str(g) for g in parts.train_tasks[:8][1::2]}
  assert any("**Critical-Step Skill**" in s.prompt_text for s in added)
  assert any("Workflow that completed the task" in s.prompt_text for s in added if s.won)
  assert any("Avoid" in s.prompt_text for s in added if not s.won)
  for s in added:
    if "**Critical-Step Skill**" in s.prompt_text:  # the reply is the action the step skill names
      advice = s.prompt_text.split("for this decision only:\n[")[1].split(" next:")[0]
      # the section sits before the reply instruction, as the compact template's anchors place it
      assert s.prompt_text.rstrip().endswith("Reply with one admissible action inside <action> </action> tags.")
      assert s.response_text == f"<action>{advice[:1].lower() + advice[1:]}</action>"
  from agentopd_jax.training.config import from_config_dict
  key = reuse.warm_start_key(from_config_dict(c), 0)
  c.opid.max_step_skills = 2
  assert reuse.warm_start_key(from_config_dict(c), 0) != key
  c.sft.opid_fraction = 0.0
  key = reuse.warm_start_key(from_config_dict(c), 0)
  c.opid.max_step_skills = 3
  assert reuse.warm_start_key(from_config_dict(c), 0) == key
  # `sft.opid_retries`: each won OPID episode again, by the explorer that searches first where its workflow took the
  # object, the workflow in every prompt
  c.sft.opid_fraction, c.opid.max_step_skills, c.sft.opid_retries = 0.5, 5, 1
  with_retries = warm_start.demonstrations(build_run(c))
  assert with_retries[:len(demos)] == demos
  retries = with_retries[len(demos):]
  assert retries and all(s.won and "**Critical-Step Skill**" not in s.prompt_text for s in retries)
  for s in retries:
    workflow = s.prompt_text.split("**Episode-Level Skill**")[1]
    assert "Workflow that completed the task: " in workflow
    if s.step_index == 0:  # the first move goes where the workflow took the object (unless the room shows it)
      source = workflow.split(" from ")[1].split(" ->")[0].split(".")[0]
      assert s.response_text in (f"<action>go to {source}</action>", f"<action>open {source}</action>") or \
          s.response_text.startswith("<action>take ")
  c.sft.opid_retries = 2  # two copies of each replay: the retry setting weighs twice as much in the mix
  assert warm_start.demonstrations(build_run(c)) == demos + retries + retries
  c.sft.opid_retries = 0
  c.sft.opid_fraction, c.rollout.layout = 0.5, "trajectory"
  with pytest.raises(ValueError, match="sft.opid_fraction needs rollout.layout='step'"):
    warm_start.demonstrations(build_run(c))


def test_the_retry_replays_the_first_play_and_splices_the_oracles_skill(tmp_path, games_root):
  """Without a skill the second play is the first token for token (the same random numbers); with the oracle's
  skills every prompt of an episode reads its episode skill after the task line."""
  from agentopd_jax.envs import registry
  from agentopd_jax.eval.validate import episode_traces
  from agentopd_jax.methods.opid.oracle import OracleAnalyzer
  from agentopd_jax.methods.opid.retry import hindsight_skills
  from agentopd_jax.parallel.sharding import make_mesh
  from agentopd_jax.training.assembly import model_and_tokenizer, rollout_engine, sampling, validation_key
  from agentopd_jax.training.config import from_config_dict

  c = tiny_alfworld_config("cpu", tmp_path, games_root, rollout__max_response_tokens=12)
  mesh = make_mesh(tuple(c.mesh_shape))
  model, params, tokenizer = model_and_tokenizer(c, 0, mesh)
  _, panel = registry.get("alfworld").tasks(c.env)
  tasks = list(panel[:4])
  engine = rollout_engine(c, model, tokenizer, mesh, len(tasks))
  params_sampling = sampling(from_config_dict(c)).validation
  try:
    def play(context=None):
      return engine.run(params, tasks, tasks, list(range(len(tasks))), validation_key(c), params_sampling,
                        context=context)
    first = play()
    same = play(retry_context([None] * len(tasks)))
    traces = episode_traces(first)
    skills = hindsight_skills(traces, tasks, OracleAnalyzer("alfworld", c.env, 5), engine.text_env_factory().project)
    skilled = play(retry_context(skills))
  finally:
    engine.env.close()
  assert [s.response_text for s in same.samples] == [s.response_text for s in first.samples]
  assert all(skills) and all(s.startswith(("Workflow", "Avoid")) for s in skills)
  for s in skilled.samples:
    assert f"[{skills[s.traj_id]}]" in s.prompt_text
    assert s.prompt_text.index("**Episode-Level Skill**") > s.prompt_text.index("Your task is to:")
  jax.clear_caches()
