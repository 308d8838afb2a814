"""The demonstration probe: per-verb teacher-forced accuracy, cross-checked against a plain full-softmax forward."""
import functools

import jax
import numpy as np
import pytest

pytest.importorskip("alfworld", reason="generating games needs the alfworld wheel's domain files ([envs] extra)")

from agentopd_jax.batching.collate import collate  # noqa: E402
from agentopd_jax.envs.alfworld import data, generator  # noqa: E402
from agentopd_jax.envs.alfworld.env import AlfworldEnv  # noqa: E402
from agentopd_jax.envs.verl_agent.corpus import default_corpus  # noqa: E402
from agentopd_jax.eval.probe import _verb_offset, decision, demo_accuracy  # noqa: E402
from agentopd_jax.models import config as model_config, transformer  # noqa: E402
from agentopd_jax.models.tokenizer import builtin_tokenizer  # noqa: E402
from agentopd_jax.rollout.chat import ChatFormat  # noqa: E402
from agentopd_jax.rollout.demonstrations import demonstration_samples  # noqa: E402
from agentopd_jax.envs.alfworld.text import AlfworldText  # noqa: E402
from agentopd_jax.envs.alfworld.spec import expert_actions  # noqa: E402


def test_demo_accuracy_matches_a_full_softmax_forward(tmp_path):
  generator.generate(str(tmp_path), sizes={"train": 3}, task_types=("pick_and_place_simple",))
  games = data.game_files("train", str(tmp_path))
  tokenizer = builtin_tokenizer(default_corpus())
  chat = ChatFormat(tokenizer)
  demos = demonstration_samples(AlfworldEnv("fast"), functools.partial(AlfworldText, compact=True), chat, games,
                                functools.partial(expert_actions, expert="planner"))
  config = model_config.preset("tiny", num_layers=1)
  params = transformer.init_params(config, jax.random.key(0))
  report = demo_accuracy(config, params, demos, tokenizer, batch_size=4)

  verbs = [d.response_text.split("<action>")[1].split()[0] for d in demos]
  assert {v: r["n"] for v, r in report.items()} == {v: verbs.count(v) for v in set(verbs)}
  # The verb's probability and argmax, recomputed from one plain forward with the full [B, T, V] softmax.
  batch = collate(demos, [0.0] * len(demos), pad_to_multiple=128)
  hidden, _ = transformer.forward(config, params, batch.tokens, batch.positions, batch.segment_ids)
  logp = np.asarray(jax.nn.log_softmax(transformer.logits_from_hidden(config, params, hidden), axis=-1))
  expected, hits, replies = {}, {}, {}
  for r, d in enumerate(demos):
    offset = _verb_offset(tokenizer, d.completion_ids)
    assert tokenizer.decode(d.completion_ids[offset:offset + 1]).strip() == verbs[r]
    targets = np.nonzero(batch.loss_mask[r])[0]
    t = targets[offset]  # target position; logits at t - 1 predict it
    expected.setdefault(verbs[r], []).append(np.exp(logp[r, t - 1, batch.tokens[r, t]]))
    hits.setdefault(verbs[r], []).append(float(logp[r, t - 1].argmax() == batch.tokens[r, t]))
    replies.setdefault(verbs[r], []).append(np.exp(logp[r, targets - 1, batch.tokens[r, targets]].sum()))
  for verb, values in expected.items():
    np.testing.assert_allclose(report[verb]["verb_probability"], np.mean(values), rtol=1e-4)
    np.testing.assert_allclose(report[verb]["reply_probability"], np.mean(replies[verb]), rtol=1e-3, atol=1e-12)
    assert report[verb]["verb_accuracy"] == pytest.approx(np.mean(hits[verb]))
    assert 0.0 <= report[verb]["reply_accuracy"] <= report[verb]["verb_accuracy"] <= 1.0
  assert _verb_offset(tokenizer, tokenizer.encode("no tag here", add_special_tokens=False)) == -1


def test_decision_kinds_of_each_env():
  assert decision("<action>take apple 1 from countertop 2</action>") == "take"
  assert decision("<think>hm</think><action>go to sofa 1</action>") == "go"
  assert decision("<action>search[red dress]</action>") == "search"
  assert decision("<action>click[b0a30923h8]</action>") == "click[product]"
  assert decision("<action>click[buy now]</action>") == "click[buy now]"
  assert decision("<action>click[next >]</action>") == "click[next >]"
  assert decision("<action>click[navy blue]</action>") == "click[option]"
  assert decision("<search>Foia Haesson born</search>") == "search"
  assert decision("<answer>1964</answer>") == "answer"
  assert decision("<action></action>") == ""
