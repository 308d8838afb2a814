"""GRPO on ALFWorld: `python experiments/train.py --config=configs/alfworld.py[:VARIANT]`.

Variants (`get_config(arg)`):
  cpu (default)  tiny model + built-in tokenizer + generated ALFWorld games on the fast engine: SFT warm start on
                 expert demonstrations, then GRPO; 22 minutes on 2 CPU cores (docs/usage.md).
  qwen2p5_3b     the verl-agent / SDAR paper setting (Qwen2.5-3B-Instruct): 16 tasks x 8 group, lr 1e-6, KL 0.01,
  qwen2p5_7b     entropy 0.001, clip 0.2/0.2 c=3, 50 env steps, history 2, invalid penalty 0.1, rollout T=1.0,
  qwen3_1p7b     validation on 128 tasks at T=0.4, prompt/response 2048/512, no SFT. Weights come from
                 `--config.model.path=/path/to/hf_folder`.
  agentic_opd    Agentic-OPD on the CPU default's finished GRPO run (`--config.agentic_opd.teacher_run`, default
                 runs/alfworld_cpu): its best checkpoint is the student, the others the teacher pool (HCN + LAD).
  kl_to_best     GRPO again from that run's warm start, with a KL pull toward its best checkpoint
                 (`--config.kl_to_best.run`, default runs/alfworld_cpu; docs/architecture.md, a new method).
  gigpo          GiGPO (verl-agent): GRPO's loss with the episode advantage plus the anchor-state step advantage
                 (γ 0.95, ω 1, mean_std_norm as verl-agent's ALFWorld script; gigpo_qwen2p5_7b etc. on a paper model).
  sdar, grpo_opsd, grpo_opsd_rkl, opsd, rlsd, skill_sd, skill_grpo
                 SDAR and its baselines (docs/sdar.md), alone on CPU or before a paper model (sdar_qwen2p5_3b).
  opid           OPID (docs/opid.md): GRPO plus the hindsight-skill advantage, the oracle analyzer on CPU, an
                 OpenAI-compatible one on a paper model (opid_qwen2p5_3b). It stacks on another method with
                 `--config.method=sdar+opid`.
  forgetting     the forgetting benchmark's teacher pool (docs/results.md): GRPO whose task mix shifts, 8 iterations
                 of look_at_obj_in_light then 12 of pick_and_place at lr 3e-4, validated (and checkpointed) every 2
                 iterations; Agentic-OPD and continued GRPO then start from its pool (configs/sweeps/forgetting_opd.py).
Each method variant sets `method` (the primary method, optionally with add-ons: "sdar+opid") and its preset
(`Method.preset` in `agentopd_jax/methods/`). Any field can be overridden (`--config.grpo.iterations=5`,
`--config.sdar.coef=0.1`); an unknown field is an error naming it. The fields and their defaults are the typed
sections of `agentopd_jax/training/config.py`, each method's group in its package, the `env` ones `AlfworldConfig`
(`agentopd_jax/envs/alfworld/spec.py`).
"""
from agentopd_jax.training import presets

def _cpu():
  c = presets.cpu_base("alfworld")
  # Half the demo games also get the skill-following explorer's episode behind SDAR's privileged skill prompt: the
  # tiny model learns to act on skills it reads, which SDAR's self-teacher needs (docs/results.md, SDAR).
  c.sft.skill_fraction = 0.5
  c.sft.skill_expert = "skilled_explorer"
  # Validation samples like the rollouts (T=1.0): it measures the policy GRPO optimises. At T=0.4 (the paper
  # setting) the tiny model's sharpened policy does not follow GRPO's changes (docs/results.md, six seeds).
  # 64 problems x 4 attempts = 256 episodes: about 2 points of standard error at 15 % success.
  c.validation.temperature = 1.0
  c.validation.num_tasks = 64
  c.validation.attempts = 4
  return c


def _paper(variant: str):
  c = presets.paper_overrides(_cpu(), variant)
  c.env.data_root = ""                 # set to the real $ALFWORLD_DATA download
  c.env.generate_scenes = ()           # generated games (no data_root): every scene
  c.env.generate_distractors = (6, 12)
  c.env.generate_home_prob = 0.0
  c.env.task_types = ("pick_and_place_simple", "look_at_obj_in_light", "pick_clean_then_place_in_recep",
                      "pick_heat_then_place_in_recep", "pick_cool_then_place_in_recep", "pick_two_obj_and_place")
  c.rollout.max_steps = 50
  return c


def _forgetting():
  c = _cpu()
  c.workdir = "runs/alfworld_forgetting"
  # The order that forgets: Look learnt in phase A fades under Pick; Pick learnt first survives Look (docs/results.md)
  c.grpo.task_phases = "look_at_obj_in_light@1,pick_and_place@9"
  c.grpo.iterations = 20
  c.optim.learning_rate = 3e-4         # at the default 1e-4 the shift does not erase Look (docs/results.md)
  c.validation.every = 2
  return c


def get_config(arg: str = "cpu"):
  return presets.select_variant(arg, "configs/alfworld.py", _cpu, _paper, extra={"forgetting": _forgetting})
