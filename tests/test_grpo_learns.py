"""GRPO as a whole learns: sampler -> group advantages -> packed mini-batches -> jitted PPO step raises the reward.

The unit tests check each piece against hand-computed values; this one checks that they compose with the right signs
and alignments (behaviour log-probs of the sampled tokens, advantages on the completion tokens, the update moving
probability toward what earned reward). A two-token-reply bandit: the reward is 1 when the reply's first token is in
a fixed half of the vocabulary, so a random-init policy starts near 0.5 and a correct pipeline must climb.
"""
import jax
import jax.numpy as jnp
import numpy as np

from agentopd_jax.batching.samples import Sample
from agentopd_jax.models import config as model_config, transformer
from agentopd_jax.objectives.advantages import get_advantage_estimator
from agentopd_jax.objectives.registry import LossParams
from agentopd_jax.sampling.sampler import Sampler, SamplingParams
from agentopd_jax.training.train_step import OptimConfig, init_state, make_minibatches, make_optimizer, make_train_step

CONFIG = model_config.preset("tiny", vocab_size=64, hidden_size=32, intermediate_size=64, num_layers=1,
                             num_heads=2, num_kv_heads=1, head_dim=16)
PROMPTS = [[5, 9, 11], [7, 3], [12, 40, 2, 8]]  # three "tasks"
GROUP = 16


def _rewarded(token: int) -> bool:
  return token % 2 == 0


def _rollout(sampler, params, key, temperature=1.0):
  prompts = [p for p in PROMPTS for _ in range(GROUP)]
  out = sampler.generate(params, prompts, key, SamplingParams(max_new_tokens=2, temperature=temperature))
  samples = []
  for b, prompt in enumerate(prompts):
    reply = out.row(b)
    won = _rewarded(reply[0])
    samples.append(Sample(prompt_ids=prompt, completion_ids=reply, completion_mask=[1] * len(reply),
                          behaviour_logprobs=out.policy_logprobs[b, :len(reply)].tolist(), group_id=b // GROUP,
                          problem_id=str(b // GROUP), traj_id=b, step_index=0, action_valid=1.0,
                          episode_reward=float(won), won=won))
  return samples


def test_grpo_pipeline_raises_the_reward_of_a_bandit():
  params = transformer.init_params(CONFIG, jax.random.key(0))
  sampler = Sampler(CONFIG, pad_id=0)
  # A high rate for a 1-layer model: raising a whole half of the vocabulary is a slow direction at 3e-3 (measured:
  # 0.52 -> 0.58 in 12 iterations) and takes 7 iterations at 3e-2.
  optimizer = make_optimizer(OptimConfig(learning_rate=3e-2))
  state = init_state(params, optimizer, model=CONFIG)
  step = make_train_step(CONFIG, LossParams(), optimizer)
  estimator = get_advantage_estimator("grpo")
  rates = []
  for it in range(12):
    samples = _rollout(sampler, state.params, jax.random.key(100 + it))
    rewards = jnp.asarray([s.episode_reward for s in samples])
    rates.append(float(rewards.mean()))
    advantages = estimator(rewards, jnp.asarray([s.group_id for s in samples]), jnp.ones(len(samples)),
                           num_groups=len(PROMPTS))
    for batch in make_minibatches(samples, np.asarray(advantages).tolist(), 24, 4, pack_width=32):
      state, _ = step(state, batch)
  assert 0.3 < np.mean(rates[:2]) < 0.7, rates  # a random policy: about half its first tokens are rewarded
  assert np.mean(rates[-3:]) > 0.85, rates


def test_first_update_is_on_policy_at_the_rollout_temperature():
  # Rollouts at T = 0.5: the step scores logits / T, so before any update its log-probs are the sampler's and
  # PPO's ratio is 1 (drift ~ 0). Scoring at T = 1 instead would start every iteration off-policy.
  params = jax.tree.map(lambda x: x * 4.0 if x.ndim >= 2 else x, transformer.init_params(CONFIG, jax.random.key(1)))
  samples = _rollout(Sampler(CONFIG, pad_id=0), params, jax.random.key(3), temperature=0.5)
  optimizer = make_optimizer(OptimConfig(learning_rate=1e-3))
  (batch,) = make_minibatches(samples, [1.0] * len(samples), len(samples), 8, pack_width=32)
  drift = {}
  for t in (0.5, 1.0):
    state = init_state(jax.tree.map(jnp.copy, params), optimizer, model=CONFIG)
    _, metrics = make_train_step(CONFIG, LossParams(), optimizer, temperature=t)(state, batch)
    drift[t] = float(metrics["logprob_drift"])
  assert drift[0.5] < 1e-4, drift
  assert drift[1.0] > 1e-2, drift
