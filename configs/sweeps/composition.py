"""Composition on the forgetting benchmark: SDAR's gate over a pool checkpoint as its teacher, against plain
on-policy distillation from the same teacher, and continued GRPO.

  python experiments/sweep.py --sweep=configs/sweeps/composition.py
  python experiments/compare.py --baseline=default runs/sweeps/composition

The pool and the student are the forgetting benchmark's (configs/sweeps/forgetting_opd.py): the student is the last
checkpoint of a GRPO run that learned Look, then trained on Pick alone and lost some of Look. The teacher is that
run's step 8, the end of the Look phase, fixed before any run (no panel picks it). It reaches the methods through
the shared teacher path (`teacher.source="pool"`), so the two distilling arms score the same teacher on the same
prompts and differ only in how its signal enters the update:
  sdar     GRPO plus the gated self-distillation term, g = σ(β·Δ): distil where the teacher beats the student
  opsd     every token distilled, no gate, no task reward (plain OPD from the pool checkpoint)
  default  continued GRPO from the student
Every arm rolls out the same 8 tasks x 4 per iteration and splits its step samples into `grpo.mini_batch_size`
mini-batches (`batch/updates` in the metrics). 3 seeds; validation on the 64 games of the forgetting runs.
"""
import ml_collections

POOL = "runs/forgetting/look_then_pick_lr3e-4_s0"
TEACHER_STEP = "8"   # configs/alfworld.py:forgetting's last Look iteration


def get_config():
  s = ml_collections.ConfigDict()
  s.base = ["configs/alfworld.py:sdar", "configs/alfworld.py:opsd", "configs/alfworld.py"]
  s.root = "runs/sweeps/composition"
  s.seeds = (0, 1, 2)
  s.overrides = {
      "warm_start_run": POOL, "warm_start_step": "latest",
      "teacher": {"source": "pool", "pool_run": POOL, "pool_step": TEACHER_STEP},
      "grpo": {"iterations": 8},
      "validation": {"every": 4, "num_tasks": 64},
  }
  return s
