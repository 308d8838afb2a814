"""`python -m agentopd_jax.serve --model PATH|RUN_DIR [...]`: an OpenAI-compatible chat server over a local model.

  python -m agentopd_jax.serve --model /models/Qwen2.5-7B-Instruct --port 8000 --max_batch 32
  python -m agentopd_jax.serve --model runs/alfworld_cpu --step best --served_name alfworld-policy
  python -m agentopd_jax.serve --model /models/Qwen3-1.7B --chat_template_kwargs '{"enable_thinking": false}'

Then any OpenAI client: `OpenAI(base_url="http://127.0.0.1:8000/v1", api_key="x").chat.completions.create(
model=<served name>, messages=[...])`. Prints one line once it listens; stops on SIGINT / SIGTERM.

It listens on 127.0.0.1 unless `--host` says otherwise. Beyond loopback, set a key: `--api_key`, or better
$AGENTOPD_API_KEY (argv is visible to every local user); clients then pass it as their `api_key`.
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading

from agentopd_jax.http_guard import SERVE_API_KEY_ENV, add_server_arguments
from agentopd_jax.serve.protocol import MAX_MESSAGES


def _parser() -> argparse.ArgumentParser:
  p = argparse.ArgumentParser(prog="python -m agentopd_jax.serve", description=__doc__.split("\n")[0],
                              formatter_class=argparse.ArgumentDefaultsHelpFormatter)
  p.add_argument("--model", required=True, help="a HF folder (with its tokenizer) or a training run's folder")
  p.add_argument("--step", default="", help="a run's checkpoint: an integer, 'best' or 'latest' (default latest)")
  p.add_argument("--served_name", default="", help="the model id clients send (default: the folder's name, "
                 "plus -step<N> for a run)")
  p.add_argument("--max_batch", type=int, default=16, help="requests per generate call")
  p.add_argument("--max_new_tokens", type=int, default=1024, help="the default and largest max_tokens")
  p.add_argument("--batch_wait_ms", type=float, default=10.0, help="wait this long for a batch to fill")
  p.add_argument("--param_dtype", default="", help="e.g. bfloat16 ('' keeps the stored dtype)")
  p.add_argument("--mesh_shape", default="-1,1,1", help="(data, fsdp, tensor) device mesh")
  p.add_argument("--chat_template_kwargs", default="", help='JSON, e.g. \'{"enable_thinking": false}\'')
  p.add_argument("--seed", type=int, default=0, help="key of unseeded sampled requests")
  add_server_arguments(p, SERVE_API_KEY_ENV, "every path but /health")
  p.add_argument("--max_messages", type=int, default=MAX_MESSAGES, help="more messages per request get 400")
  return p


def main(argv=None) -> None:
  args = _parser().parse_args(argv)
  try:
    template_kwargs = json.loads(args.chat_template_kwargs) if args.chat_template_kwargs else None
    mesh_shape = tuple(int(x) for x in args.mesh_shape.split(","))
  except ValueError as e:
    sys.exit(f"--chat_template_kwargs must be a JSON object and --mesh_shape three integers: {e}")
  if template_kwargs is not None and not isinstance(template_kwargs, dict):
    sys.exit(f"--chat_template_kwargs must be a JSON object, got {args.chat_template_kwargs}")

  from agentopd_jax.parallel.sharding import make_mesh  # jax and the loaders only after the arguments parse
  from agentopd_jax.serve import Server, load_served_model
  from agentopd_jax.storage.logs import configure_cli_logging

  configure_cli_logging()
  model = load_served_model(args.model, args.step, make_mesh(mesh_shape), args.param_dtype, template_kwargs,
                            args.seed)
  server = Server(model, args.served_name, args.host, args.port, args.max_batch, args.max_new_tokens,
                  args.batch_wait_ms / 1000.0, args.seed, args.api_key or os.environ.get(SERVE_API_KEY_ENV, ""),
                  args.max_body_bytes, args.max_messages)
  port = server.start()
  print(f"serving {server.served_name!r} ({model.label}) at http://{args.host}:{port}/v1", flush=True)
  stopped = threading.Event()
  for sig in (signal.SIGINT, signal.SIGTERM):
    signal.signal(sig, lambda *_: stopped.set())
  while not stopped.wait(1.0):
    pass
  server.stop()


if __name__ == "__main__":
  main()
