"""Writes the bundled corpus and QA splits as files, in the layouts the real ones have.

  python -m agentopd_jax.envs.search.export --out data/search --seed 0            # parquet if pyarrow is installed
  -> corpus.jsonl (wiki-18 rows), train.parquet (nq + hotpotqa), test.parquet (all seven), Search-R1's row schema

The files are what a user swaps for the real ones (`wiki-18.jsonl`, `PeterJinGo/nq_hotpotqa_train` parquets): the
server takes `--corpus`, and `tasks.load_tasks` reads either.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
from typing import Dict, Optional, Sequence

from agentopd_jax.envs.search.questions import SPLITS, bundled_tasks
from agentopd_jax.envs.search.retriever import write_corpus
from agentopd_jax.envs.search.tasks import to_row, write_rows
from agentopd_jax.envs.search.world import generate_world


def export(out_dir: str, seed: int = 0, fmt: Optional[str] = None) -> Dict[str, str]:
  """{name: path} of the written files; `fmt` "parquet" or "jsonl" (default parquet when pyarrow imports)."""
  fmt = fmt or ("parquet" if importlib.util.find_spec("pyarrow") else "jsonl")
  os.makedirs(out_dir, exist_ok=True)
  world = generate_world(seed)
  paths = {"corpus": os.path.join(out_dir, "corpus.jsonl")}
  write_corpus(paths["corpus"], world.passages)
  for split in SPLITS:
    paths[split] = os.path.join(out_dir, f"{split}.{fmt}")
    write_rows(paths[split], [to_row(t, split, i) for i, t in enumerate(bundled_tasks(split, seed, world=world))])
  return paths


def main(argv: Optional[Sequence[str]] = None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
  parser.add_argument("--out", required=True, help="output folder")
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--format", choices=("parquet", "jsonl"), default=None)
  args = parser.parse_args(argv)
  for name, path in export(args.out, args.seed, args.format).items():
    print(f"{name}: {path}")


if __name__ == "__main__":
  main()
