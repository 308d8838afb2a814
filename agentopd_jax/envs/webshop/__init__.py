"""WebShop offline: a seeded catalogue in WebShop's product schema (or WebShop's own data files), its goals, BM25
search, the text pages and the exact purchase reward, plus verl-agent's prompts and an oracle shopper.

  from agentopd_jax.envs.webshop.env import WebshopEnv        # needs bm25s and rapidfuzz
  from agentopd_jax.envs.webshop.expert import plan
  env = WebshopEnv()                                          # 1000 generated products, ~5.7k goals
  obs, infos = env.reset(0)                                   # goal 0; infos: available_actions, won, task_score
  for action in plan(env.shop, 0):
    obs, score, done, infos = env.step(action)                # score: WebShop's reward in [0, 1] at Buy Now

  from agentopd_jax.envs.webshop.text import WebshopText      # the policy's side (prompts, projection, 0/10 reward)

Modules: vocab (what products are made of), catalog (generation, real-file loading, WebShop's product processing),
goals (goal texts, price limits, splits, verl-agent's goal sampling), search (BM25), pages (page texts and
clickables), fuzzy (thefuzz's token-set ratio in its two versions), reward (WebShop's score), env, expert, prompts
(verl-agent's WebShop templates and projection), text.
Nothing is imported here, so `text` and `prompts` load without the search and fuzzy-matching packages.
"""
