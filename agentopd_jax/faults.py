"""Fail points: named places in a training run where a test can SIGKILL the process, as a crashed node would.

`AGENTOPD_KILL_AT=<name>:<n>` in the environment kills the process the n-th time it reaches `point(<name>)`:

  sft/step          after an SFT update, before the next batch
  rollout/turn      after a batch of env steps, inside any rollout (training, LAD teacher or validation): with
                    `rollout.max_steps` turns per rollout, the count tells which rollout it is
  train/update      after a GRPO/OPD optimizer step, before the next mini-batch or the iteration's logging
  checkpoint/write  inside a checkpoint save: the step's temporary folder holds part of the train state, no record

A process that leads its own process group (started with `start_new_session`, as a launcher or a test starts
training) takes the whole group with it, env workers included, so nothing is left to clean up: the next run must
cope with what is on disk. Unset (every real run), `point` is one dictionary lookup.

Why named points and not a timer: a kill lands in the phase it names on every machine, however fast, so a test
can cover each phase once instead of hoping a random delay hits it (tests/test_kill_anywhere.py draws the n's).
"""
from __future__ import annotations

import collections
import os
import signal

ENV = "AGENTOPD_KILL_AT"
POINTS = ("sft/step", "rollout/turn", "train/update", "checkpoint/write")
_reached: collections.Counter = collections.Counter()


def point(name: str) -> None:
  """Counts a pass through fail point `name`, and SIGKILLs the process (group) on the configured pass."""
  spec = os.environ.get(ENV)
  if not spec:
    return
  _reached[name] += 1
  target, _, count = spec.rpartition(":")
  if target not in POINTS or not count.isdigit():
    raise ValueError(f"{ENV}={spec!r}: expected <point>:<n> with point one of {POINTS}")
  if target == name and _reached[name] == int(count):
    pid = os.getpid()
    os.killpg(pid, signal.SIGKILL) if os.getpgid(0) == pid else os.kill(pid, signal.SIGKILL)
