"""LoRA against full fine-tuning on the ALFWorld CPU default (docs/results.md, "LoRA against full fine-tuning"),
paired by seed with the GRPO runs of SDAR's table:

  python experiments/sweep.py --sweep=configs/sweeps/lora.py          # runs/lora/lora-s{0,1,2}
  python experiments/record_run.py runs/lora/lora-s0 results/lora/lora-s0   # each finished run
  python experiments/tables.py results/lora --against results/sdar_table:default --doc docs/results.md

One arm, the `lora` variant (GRPO training rank-16 adapters, alpha 16, lr 3e-4: verl-agent's alpha = rank and its
3x ratio to the full-FT rate), from the warm start of SDAR's table (experiments/sdar_table.sh makes it), seeds 0-2 as
that table's GRPO. The same rollouts and optimizer steps per iteration as GRPO; only the trained parameters differ.
"""
import ml_collections


def get_config():
  s = ml_collections.ConfigDict()
  s.base = "configs/alfworld.py:lora"
  s.root = "runs/lora"
  s.seeds = (0, 1, 2)
  s.overrides = {"warm_start_run": "runs/sdar_table/warm_start"}
  s.zip = {"lora": {"rank": [16]}}
  s.zip_labels = ("lora",)
  return s
