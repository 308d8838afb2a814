"""Search-QA (Search-R1 / verl-agent "search") offline: a retrieval server, a generated corpus with questions, the env,
its text side and an oracle.

  world        a fictional encyclopedia from a seed: entities, facts, wiki-18-style passages
  questions    single-hop, bridge and comparison questions under the seven Search-R1 data-source names
  tasks        SearchTask, Search-R1's row schema, loaders for real parquet/JSONL files
  retriever    BM25 (bm25s) over a wiki-18 JSONL, answering in the /retrieve result shape
  server       `python -m agentopd_jax.envs.search.server`: POST /retrieve (both request shapes); `serve()`
               starts one in a thread or subprocess (not imported here, so `python -m` runs it cleanly)
  client       RetrievalClient for our server or a real Search-R1 one (retries, back-off, timeouts)
  formats      the two observation formats, action parsing, reading documents back
  prompts      Search-R1's prefix, verl-agent's search templates, our compact one
  env          SearchEnv: reset(task) / step(action) (vector-env interface)
  text         SearchText: prompts, projection and rewards for the rollout (TextEnv interface)
  scoring      Search-R1's EM scoring (normalize_answer, extract_solution, compute_score_em) and sub-string EM
               (subem_check, compute_score_subem)
  oracle       a policy that answers bundled questions through retrieval
  export       writes corpus.jsonl + train/test files;  tfds_builder: a TFDS (array_record) builder, TFDS imported
               only there
"""
from agentopd_jax.envs.search.client import RetrievalClient, RetrievalError
from agentopd_jax.envs.search.env import SearchEnv
from agentopd_jax.envs.search.oracle import Oracle, play
from agentopd_jax.envs.search.questions import bundled_tasks, generate_questions
from agentopd_jax.envs.search.tasks import DATA_SOURCES, Plan, SearchTask, load_tasks, task_from_row
from agentopd_jax.envs.search.text import SearchText
from agentopd_jax.envs.search.world import generate_world

__all__ = ["DATA_SOURCES", "Oracle", "Plan", "RetrievalClient", "RetrievalError", "SearchEnv", "SearchTask",
           "SearchText", "bundled_tasks", "generate_questions", "generate_world", "load_tasks", "play", "task_from_row"]
