"""verl-agent's text layer around ALFWorld, WebShop and Search: prompts, history memory, action projection,
rewards and metrics, reproduced byte for byte so our prompts, validity flags and logs match its runs.

  prompts     templates + render_alfworld / render_webshop / render_search (and task/observation helpers)
  memory      SimpleMemory / SearchMemory: the last k (observation, action) records as prompt text
  projection  alfworld_projection / webshop_projection / search_projection (tagged_projection: the <action> rules
              for an env of our own): response -> (action, valid)
  rewards     env rewards (10·won, WebShop perfect buy, Search EM) and the invalid-action penalty
  metrics     EpisodeRecord + episode_metrics under verl-agent's key names
  corpus      the built-in tokenizer's base corpus: synthetic episodes in these prompts (not imported here)
"""
from agentopd_jax.envs.verl_agent.memory import SearchMemory, SimpleMemory, make_memory
from agentopd_jax.envs.verl_agent.metrics import EpisodeRecord, episode_metrics
from agentopd_jax.envs.verl_agent.projection import (alfworld_projection, search_projection, tagged_projection,
                                                     webshop_projection)
from agentopd_jax.envs.verl_agent.prompts import (
    alfworld_task,
    format_admissible,
    format_available_actions,
    render_alfworld,
    render_search,
    render_webshop,
    webshop_observation,
    webshop_task,
)
from agentopd_jax.envs.verl_agent.rewards import (
    INVALID_ACTION_PENALTY_COEF,
    alfworld_reward,
    apply_invalid_action_penalty,
    exact_match,
    normalize_answer,
    search_reward,
    webshop_reward,
)
