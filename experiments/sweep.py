"""Runs a sweep: every point of an ml_collections sweep file as its own `experiments/train.py` process.

  python experiments/sweep.py --sweep=configs/sweeps/sdar_table.py                 # one point at a time
  python experiments/sweep.py --sweep=configs/sweeps/sdar_table.py --parallel=2
  python experiments/sweep.py --sweep=configs/sweeps/sdar_table.py --print_commands  # for a cluster scheduler
  python experiments/sweep.py --sweep=configs/sweeps/sdar_table.py --sweep.seeds='(0,)' --sweep.root=/tmp/t

The sweep file's fields are in agentopd_jax/training/sweep.py. Finished points (summary.json) are skipped and
started ones resume, so the same command continues an interrupted sweep. Each point logs to <workdir>/train.log;
<root>/sweep.json lists the points. Exits non-zero when a point failed.
"""
import os
import shlex
import sys

from absl import app, flags
from ml_collections import config_flags

from agentopd_jax.training import sweep as sweeps

_SWEEP = config_flags.DEFINE_config_file("sweep", None, "Sweep file (configs/sweeps/NAME.py).", lock_config=False)
_PARALLEL = flags.DEFINE_integer("parallel", 1, "Points run at once.")
_PRINT = flags.DEFINE_bool("print_commands", False, "Print each unfinished point's command instead of running it.")
TRAIN = os.path.join(os.path.dirname(os.path.abspath(__file__)), "train.py")


def main(argv):
  del argv
  if _SWEEP.value is None:
    raise app.UsageError("--sweep=configs/sweeps/NAME.py is required")
  source = flags.FLAGS["sweep"].config_filename
  points = sweeps.expand(_SWEEP.value, where=source)
  if _PRINT.value:
    for p in points:
      if not p.finished:
        print(shlex.join(p.command(python="python", train_script=TRAIN)))
    return
  print(f"[sweep] {len(points)} points; manifest: {sweeps.write_manifest(_SWEEP.value, points, source)}", flush=True)
  status = sweeps.run(points, parallel=_PARALLEL.value, train_script=TRAIN, log=lambda line: print(line, flush=True))
  failed = sorted(name for name, s in status.items() if s.startswith("failed"))
  print(f"[sweep] done {sum(s == 'done' for s in status.values())}, skipped "
        f"{sum(s == 'skipped' for s in status.values())}, failed {len(failed)}{': ' + ', '.join(failed) if failed else ''}")
  sys.exit(1 if failed else 0)


if __name__ == "__main__":
  app.run(main)
