"""SDAR's ablations on the ALFWorld CPU default (docs/results.md, "SDAR's table"), paired by seed with its main table:

  python experiments/sweep.py --sweep=configs/sweeps/sdar_ablations.py

One arm per column, each SDAR with one setting changed from the main table's (λ = 1, β = 5, gap gate, the released
sampled term, KM retrieval, the teacher reading skills): λ at the paper's 0.01 and at 0.1; β 1 and 10; the entropy
and soft-OR gates; the top-k forward KL, top-k JSD and the sampled reverse-KL gradient; Full, Random and UCB
retrieval; and a teacher with no skill in context (plain), which separates "the gate sees a better teacher" from
"REINFORCE on σ(β·Δ)". Same warm start as the main table (experiments/sdar_table.sh makes it).
"""
import ml_collections

ARMS = {  # label: (λ, β, gate, divergence, retrieval, teacher context)
    "lambda0.01": (0.01, 5.0, "gap", "reverse_kl", "km", "skills"),
    "lambda0.1": (0.1, 5.0, "gap", "reverse_kl", "km", "skills"),
    "beta1": (1.0, 1.0, "gap", "reverse_kl", "km", "skills"),
    "beta10": (1.0, 10.0, "gap", "reverse_kl", "km", "skills"),
    "gate_entropy": (1.0, 5.0, "entropy", "reverse_kl", "km", "skills"),
    "gate_soft_or": (1.0, 5.0, "soft_or", "reverse_kl", "km", "skills"),
    "topk_fkl": (1.0, 5.0, "gap", "topk_forward_kl", "km", "skills"),
    "topk_jsd": (1.0, 5.0, "gap", "topk_jsd", "km", "skills"),
    "rkl_score": (1.0, 5.0, "gap", "reverse_kl_score", "km", "skills"),
    "retrieval_full": (1.0, 5.0, "gap", "reverse_kl", "full", "skills"),
    "retrieval_random": (1.0, 5.0, "gap", "reverse_kl", "random", "skills"),
    "retrieval_ucb": (1.0, 5.0, "gap", "reverse_kl", "ucb", "skills"),
    "plain_teacher": (1.0, 5.0, "gap", "reverse_kl", "km", "plain"),
}


def get_config():
  s = ml_collections.ConfigDict()
  s.base = "configs/alfworld.py:sdar"
  s.root = "runs/sdar_ablations"
  s.seeds = (0, 1, 2)
  s.overrides = {"warm_start_run": "runs/sdar_table/warm_start"}
  columns = list(zip(*ARMS.values()))
  s.zip = {"sdar": {"coef": list(columns[0]), "gate_beta": list(columns[1]), "gate": list(columns[2]),
                    "divergence": list(columns[3])},
           "skills": {"retrieval": list(columns[4])}, "teacher": {"context": list(columns[5])}}
  s.zip_labels = tuple(ARMS)
  return s
