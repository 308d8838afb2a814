"""Countdown: reach a target number from a small start with "add 1" and "double"; the smallest complete env.

  env.py    the game (`CountdownEnv`, the vector-env interface), its seeded games and the shortest solution
  text.py   the policy's side (`CountdownText`: verl-agent's ALFWorld-style prompts, <action> projection, 0/10 reward)
  spec.py   its run spec (`CountdownConfig`, held-out validation games, the expert, groups and report columns)

  from agentopd_jax.envs.countdown import CountdownEnv, solve
  env = CountdownEnv(max_steps=8)
  obs, infos = env.reset(7)                   # "You have 3. Reach exactly 7 in at most 8 moves. ..."
  for move in solve(7):
    obs, score, done, infos = env.step(move)  # won in the fewest moves

`python experiments/train.py --config=configs/countdown.py` trains on it (docs/architecture.md, "Worked example").
"""
from agentopd_jax.envs.countdown.env import COMMANDS, CountdownEnv, game, solve

__all__ = ["COMMANDS", "CountdownEnv", "game", "solve"]
