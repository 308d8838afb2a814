"""Export a checkpoint of a run for Hugging Face: the whole model as a transformers folder, or a LoRA run's adapters
as a PEFT folder.

  python experiments/export.py --config=configs/alfworld.py --step=best --out=/tmp/policy          # model folder
  python experiments/export.py --config=configs/alfworld.py:lora --step=best --out=/tmp/adapter --peft

The model folder (`config.json`, `model.safetensors`, the tokenizer) is the policy's full weights, a LoRA run's
merged onto its base; `transformers.AutoModelForCausalLM.from_pretrained` and `--config.model.path` read it.
`--peft` writes a LoRA run's adapters of that step (`adapter_model.safetensors` + `adapter_config.json`,
`models/lora.py`), which `peft.PeftModel.from_pretrained` loads onto the run's base (its `model.path`, named in
`base_model_name_or_path`), or `--config.model.adapter` merges at load.
"""
import os
import sys

from absl import app, flags
from ml_collections import config_flags

from agentopd_jax.models import hf_io, lora
from agentopd_jax.models.transformer import abstract_params
from agentopd_jax.parallel.sharding import make_mesh
from agentopd_jax.storage.checkpoints import CheckpointPool
from agentopd_jax.storage.logs import configure_cli_logging
from agentopd_jax.training.assembly import checkpoint_policy, model_and_tokenizer

_CONFIG = config_flags.DEFINE_config_file("config", "configs/alfworld.py", "Run config.", lock_config=True)
_STEP = flags.DEFINE_string("step", "best", "checkpoint step of config.workdir: an integer, 'best' or 'latest'")
_OUT = flags.DEFINE_string("out", "", "the folder to write")
_PEFT = flags.DEFINE_bool("peft", False, "write the step's LoRA adapters as a PEFT folder (a LoRA run only)")


def export_adapters(c, step: str, out: str) -> int:
  """Writes checkpoint `step`'s adapters of the LoRA run `c.workdir` as a PEFT folder; returns the step number."""
  config, _, _ = model_and_tokenizer(c, c.seed, make_mesh(tuple(c.mesh_shape)))
  with CheckpointPool(os.path.join(c.workdir, "checkpoints"), read_only=True) as pool:
    number = pool.resolve_step(step, "step")
    if "adapters" not in pool.saved_keys(number):
      sys.exit(f"--peft: step {number} of {c.workdir} holds the whole model, not LoRA adapters (a run with "
               f"lora.rank > 0 has them); export it without --peft")
    record = pool.metadata(number)["extra"]["lora"]
    cfg = lora.LoraConfig(**{**record, "targets": tuple(record["targets"])})
    adapters = pool.restore_params(number, lora.abstract_adapters(abstract_params(config), cfg), key="adapters")
  lora.export_peft(out, config, adapters, cfg, base_model=c.model.path)
  return number


def main(argv):
  del argv
  configure_cli_logging()
  c = _CONFIG.value
  if not _OUT.value:
    sys.exit("--out: the folder to write")
  if _PEFT.value:
    number = export_adapters(c, _STEP.value, _OUT.value)
    print(f"step {number} of {c.workdir}: LoRA adapters -> {_OUT.value}")
    return
  config, params, tokenizer, number = checkpoint_policy(c, _STEP.value, make_mesh(tuple(c.mesh_shape)))
  hf_io.save_hf(_OUT.value, config, params)
  tokenizer.save_pretrained(_OUT.value)
  print(f"step {number} of {c.workdir}: model -> {_OUT.value}")


if __name__ == "__main__":
  app.run(main)
