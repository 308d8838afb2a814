"""OPID's table on the ALFWorld CPU default (docs/results.md, "OPID's table"): GRPO and OPID, paired by seed.

  bash experiments/opid_table.sh            # the warm start, its skill-reading check, this sweep, the records
  python experiments/sweep.py --sweep=configs/sweeps/opid_table.py --sweep.seeds='(0,)'   # the training runs alone

Every arm starts from one warm start that reads OPID's skills (`sft.opid_fraction=0.5` with `sft.opid_retries`,
runs/opid_table/warm_start_retries; experiments/opid_table.sh makes it and checks it first) and uses the oracle analyzer. OPID changes only the
advantages, so every arm takes GRPO's rollouts and optimizer steps per iteration.
  grpo              the baseline
  opid_paper        OPID's w_ep = w_step = 0.001
  opid_scaled       w = 0.3, fixed before any run: a turn's reply here is ~8 tokens against the paper's hundreds,
                    and the earlier OPID runs' mean Δ was −0.8 to −1.4 nats/token (docs/results.md), so w·Δ is a
                    fraction of GRPO's unit-std advantage; this table's warm start's Δ is not measured yet
  opid_normalize    w = 0.3 on Δ z-scored over its routed tokens (`opid.normalize`)
"""
import ml_collections

ARMS = {  # label: (method, w_ep = w_step, normalize)
    "grpo": ("grpo", 0.001, False),
    "opid_paper": ("opid", 0.001, False),
    "opid_scaled": ("opid", 0.3, False),
    "opid_normalize": ("opid", 0.3, True),
}


def get_config():
  s = ml_collections.ConfigDict()
  s.base = "configs/alfworld.py"
  s.root = "runs/opid_table"
  s.seeds = (0, 1, 2, 3, 4)
  s.overrides = {"warm_start_run": "runs/opid_table/warm_start_retries"}
  method, weight, normalize = (list(c) for c in zip(*ARMS.values()))
  s.zip = {"method": method, "opid": {"w_episode": weight, "w_step": weight, "normalize": normalize}}
  s.zip_labels = tuple(ARMS)
  return s
