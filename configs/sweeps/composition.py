"""Composition on the forgetting benchmark: SDAR's gate over a pool checkpoint as its teacher, against plain
on-policy distillation from the same teacher.

  python experiments/sweep.py --sweep=configs/sweeps/composition.py
  python experiments/tables.py results/composition --endpoint report16 \
      --against results/forgetting_opd:continued_grpo,static_best

The pool and the student are the forgetting benchmark's (configs/sweeps/forgetting_opd.py): the student is the last
checkpoint of a GRPO run that learned Look, then trained on Pick alone and lost some of Look. The teacher is that
run's step 8, the end of the Look phase, fixed before any run (no panel picks it), in its plain context (the
checkpoint as it is, no skills: what it adds is its weights, as in Agentic-OPD). It reaches the methods through
SDAR's teacher path (`teacher.source="pool"`), so both arms score the same teacher on the same prompts and differ in
how its signal enters the update:
  sdar_pool  SDAR as published: GRPO plus λ·σ(β·Δ)·(the released per-token term), distilling where the teacher
             beats the student (β = 5, and λ = 1, the scaled value of SDAR's table)
  opd_pool   plain on-policy distillation: no task reward (`opsd`), no gate (β = 0, g ≡ ½, so the term weighs
             ½·λ) and the top-k reverse KL to the teacher on every token (`sdar.divergence=topk_reverse_kl`), since the
             released term's ungated gradient has zero mean (docs/sdar.md) and would not pull toward the teacher
Both take the forgetting benchmark's budget (8 iterations of 8 tasks x 4 student rollouts, mini-batches of
`grpo.mini_batch_size`), so their baseline is that sweep's continued GRPO, same seeds and same student: its runs are
not made again. 3 seeds; validation on the 64 games of the forgetting runs; the tables evaluate every last checkpoint
on the panel's report half (experiments/forgetting_alfworld.sh).
"""
import ml_collections

POOL = "runs/forgetting/look_then_pick_lr3e-4_s0"
TEACHER_STEP = "8"   # configs/alfworld.py:forgetting's last Look iteration


def get_config():
  s = ml_collections.ConfigDict()
  s.base = "configs/alfworld.py:sdar"
  s.root = "runs/sweeps/composition"
  s.seeds = (0, 1, 2)
  s.overrides = {
      "warm_start_run": POOL, "warm_start_step": "latest",
      "teacher": {"source": "pool", "pool_run": POOL, "pool_step": TEACHER_STEP, "context": "plain"},
      "sdar": {"coef": 1.0},   # SDAR's table's scaled λ (docs/results.md); the CPU preset keeps the paper's 0.01
      "grpo": {"iterations": 8, "tasks_per_iteration": 8, "group_size": 4},
      "validation": {"every": 4, "num_tasks": 64},
  }
  s.zip = {"method": ["sdar", "opsd"],
           "sdar": {"gate_beta": [5.0, 0.0], "divergence": ["reverse_kl", "topk_reverse_kl"]}}
  s.zip_labels = ("sdar_pool", "opd_pool")
  return s
