"""Chat-templated multi-turn sampling with cache continuation; prints one JSON line per prompt and turn.

  python experiments/generate.py --config=configs/sample.py
  python experiments/generate.py --config=configs/sample.py --config.model.path=/models/Qwen2.5-0.5B-Instruct
"""
import json
import time

import jax
from absl import app
from ml_collections import config_flags

from agentopd_jax.envs.verl_agent.corpus import default_corpus
from agentopd_jax.models.loading import load_model_and_tokenizer
from agentopd_jax.models.tokenizer import apply_chat_template
from agentopd_jax.parallel import sharding
from agentopd_jax.sampling.sampler import Sampler, SamplingParams

_CONFIG = config_flags.DEFINE_config_file("config", "configs/sample.py", "Sampling config.", lock_config=True)


def main(argv):
  del argv
  c = _CONFIG.value
  mesh = sharding.make_mesh(tuple(c.mesh_shape))
  config, params, tokenizer = load_model_and_tokenizer(c.model, c.tokenizer_path, c.seed, mesh,
                                                       builtin_corpus=default_corpus())
  sampler = Sampler(config, tokenizer=tokenizer, pad_id=tokenizer.pad_token_id or 0)
  sp = SamplingParams(max_new_tokens=c.sampling.max_new_tokens, temperature=c.sampling.temperature,
                      top_k=c.sampling.top_k, top_p=c.sampling.top_p, stop_strings=tuple(c.sampling.stop_strings),
                      stop_token_ids=(tokenizer.eos_token_id,) if tokenizer.eos_token_id is not None else ())
  system = [{"role": "system", "content": c.system}] if c.system else []
  prompts = [apply_chat_template(tokenizer, system + [{"role": "user", "content": p}]) for p in c.prompts]
  key = jax.random.key(c.seed)
  state = None
  for turn in range(c.turns):
    key, sub = jax.random.split(key)
    start = time.perf_counter()
    if state is None:
      out = sampler.generate(params, prompts, sub, sp, cache_size=c.cache_size)
    else:
      # Close each assistant turn (eos + newline, as the chat template renders it), then append the follow-up
      # user message and a new generation prompt.
      followup = apply_chat_template(tokenizer, [{"role": "user", "content": c.followup}])
      newline = tokenizer.encode("\n", add_special_tokens=False)
      eos = [tokenizer.eos_token_id]
      rows = [(newline if out.row(b)[-1:] == eos else eos + newline) + followup for b in range(len(prompts))]
      out = sampler.continue_generation(params, state, rows, sub, sp)
    seconds = time.perf_counter() - start
    state = out.state
    for b, prompt in enumerate(c.prompts):
      print(json.dumps({"turn": turn, "prompt": prompt, "text": tokenizer.decode(out.row(b)),
                        "new_tokens": int(out.lengths[b]), "finish": out.finish_reasons[b],
                        "sum_logprob": float(out.logprobs[b, :out.lengths[b]].sum()),
                        "tokens_per_s": float(out.lengths.sum() / seconds)}, ensure_ascii=False))


if __name__ == "__main__":
  app.run(main)
