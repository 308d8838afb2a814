"""agentopd_jax: RL post-training (GRPO, Agentic-OPD, OPID, SDAR) for multi-turn LLM agents, in JAX.

Pins are the versions tested together on Python 3.11 (see docs/ and shared research notes).
"""
from setuptools import find_packages, setup

CORE = [
    "jax==0.10.2",
    "jaxlib==0.10.2",
    "flax==0.12.8",
    "optax==0.2.8",
    "orbax-checkpoint==0.12.8",
    "chex==0.1.92",
    "ml-collections==1.1.0",
    "numpy==2.4.6",
    "tqdm==4.70.1",
    # Metrics logging: TensorBoard event files without TensorFlow, and curve plots / eval reports.
    "tensorboardX==2.6.5",
    "matplotlib==3.11.2",
    # Tokenizers, configs and safetensors I/O; transformers v5 has no Flax models, ours are our own code.
    "transformers==5.24.0",
    "tokenizers==0.23.3",
    "safetensors==0.8.0",
]

RETRIEVAL = ["bm25s==0.3.16"]  # BM25 for the WebShop search engine and the search-QA retrieval server
WEBSHOP = RETRIEVAL + ["rapidfuzz==3.14.6"]  # WebShop's fuzzy attribute/option matching (thefuzz's token_set_ratio)
# TFDS without TensorFlow (array_record files); tfds imports importlib_resources, which etils (1.15) does not install.
DATA = ["tensorflow-datasets==4.9.10", "array-record==0.8.6", "grain==0.2.18", "importlib-resources==7.1.0",
        "pyarrow==26.0.1"]

ANALYZER = ["openai==3.57.0"]  # OPID's analyzer LLM through any OpenAI-compatible endpoint (ours: agentopd_jax.serve)
RAY = ["ray==2.52.1"]  # VectorEnv(backend="ray"): env workers as Ray actors, on other nodes too (docs/scale_out.md)
WANDB = ["wandb==0.31.0"]  # logging.wandb: the metrics also to Weights & Biases (storage/logs.py, WandbSink)
PEFT = ["peft==0.21.2"]  # Hugging Face PEFT loads the LoRA adapters models/lora.py exports

EXTRAS = {
    # torch is only for parity tests/benchmarks against transformers. Keep the exact pin: an unpinned torch
    # resolves to a multi-GB CUDA build.
    "torch": ["torch==2.13.0"],
    "peft": ["torch==2.13.0"] + PEFT,  # Hugging Face PEFT, to load our exported LoRA adapters in PyTorch
    # Tests exercise every environment and data path, so they pull the env extras too (nothing is skipped in CI).
    "test": ["torch==2.13.0", "pytest>=8", "pytest-xdist==3.8.0", "hypothesis>=6.100"] + WEBSHOP + DATA + ANALYZER + RAY
            + WANDB + PEFT,
    "data": DATA,
    "envs": ["textworld[pddl]==1.7.0", "alfworld==0.4.2"] + WEBSHOP,
    "retrieval": RETRIEVAL,
    "analyzer": ANALYZER,
    "ray": RAY,
    "wandb": WANDB,
    "webshop": WEBSHOP,
}

setup(
    name="agentopd_jax",
    version="0.1.0",
    description="RL and on-policy distillation for multi-turn LLM agents in JAX",
    packages=find_packages(include=["agentopd_jax", "agentopd_jax.*"]),
    # SDAR's skill banks each env ships (agentopd_jax/skills/banks/<env>/): data files, not modules.
    package_data={"agentopd_jax.skills": ["banks/*/*.json", "banks/*/*.md"]},
    python_requires=">=3.11",
    install_requires=CORE,
    extras_require=EXTRAS,
)
