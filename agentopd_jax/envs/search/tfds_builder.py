"""A TFDS builder that publishes the bundled QA splits in array_record format, without TensorFlow.

  from agentopd_jax.envs.search.tfds_builder import build, task_from_example
  build("/data/tfds")                                                   # once; ~1 s
  src = tfds.data_source("agentopd_search_qa", data_dir="/data/tfds", split="test")   # random access, offline
  task = task_from_example(src[0])

Splits "train" (nq + hotpotqa) and "test" (all seven sources), in the order `questions.bundled_tasks` gives; each
example has id, question, golden_answers, data_source, prompt (the Search-R1 prefix) and plan (JSON). Configs are
seeds ("seed0" is the default); `SearchQaConfig(name=..., seed=...)` builds another. A process that reads by name
needs no import of this module: the prepared directory carries its own metadata.

TFDS is imported here only (`pip install tensorflow-datasets==4.9.10 array-record==0.8.6`), so the rest of the
package never needs it. `DatasetInfo` is built directly: `dataset_info_from_configs` looks for README/CITATIONS
files beside the builder and fails when they are absent (dependencies.md §2).
"""
from __future__ import annotations

import json
from typing import Any, Mapping, Optional

try:
  import tensorflow_datasets as tfds
except ImportError as e:  # only this module needs TFDS
  raise ImportError(f"the search TFDS builder needs tensorflow-datasets ({e}); "
                    "`pip install tensorflow-datasets==4.9.10 array-record==0.8.6` (TensorFlow is not needed)") from e

from agentopd_jax.envs.search.prompts import make_prefix
from agentopd_jax.envs.search.questions import DEFAULT_SIZES, bundled_tasks
from agentopd_jax.envs.search.tasks import Plan, SearchTask
from agentopd_jax.envs.search.world import generate_world

NAME = "agentopd_search_qa"


class SearchQaConfig(tfds.core.BuilderConfig):
  """A seed of the generator (world and questions) and the split sizes ({source: count}; default DEFAULT_SIZES)."""

  def __init__(self, *, seed: int = 0, sizes: Optional[Mapping[str, Mapping[str, int]]] = None, **kwargs):
    super().__init__(**kwargs)
    self.seed = seed
    self.sizes = sizes or DEFAULT_SIZES


class AgentopdSearchQa(tfds.core.GeneratorBasedBuilder):
  """Questions over the seed's fictional encyclopedia, under the seven Search-R1 data-source names."""

  VERSION = tfds.core.Version("1.0.0")
  RELEASE_NOTES = {"1.0.0": "Bundled search-QA: single-hop, bridge and comparison questions, seven sources."}
  BUILDER_CONFIGS = [SearchQaConfig(name="seed0", seed=0, description="seed 0, default sizes")]

  def _info(self) -> tfds.core.DatasetInfo:
    text = tfds.features.Text()
    return tfds.core.DatasetInfo(
        builder=self, description=__doc__.split("\n", 1)[0],
        features=tfds.features.FeaturesDict({
            "id": text, "question": text, "golden_answers": tfds.features.Sequence(text), "data_source": text,
            "prompt": text, "plan": text}),
        disable_shuffling=True)  # keep the generator's order (records would otherwise be hash-shuffled)

  def _split_generators(self, dl_manager):
    del dl_manager  # nothing to download: the data is generated
    world = generate_world(self.builder_config.seed)
    return {split: self._generate_examples(split, world) for split in self.builder_config.sizes}

  def _generate_examples(self, split: str, world):
    sizes = self.builder_config.sizes[split]
    for i, task in enumerate(bundled_tasks(split, self.builder_config.seed, sizes, world)):
      yield i, {"id": task.id, "question": task.question, "golden_answers": list(task.golden_answers),
                "data_source": task.data_source, "prompt": make_prefix(task.question),
                "plan": json.dumps(task.plan.to_dict())}


def build(data_dir: str, config: str | SearchQaConfig = "seed0") -> AgentopdSearchQa:
  """Prepares the dataset under `data_dir` (a no-op when it is already there) and returns the builder."""
  builder = AgentopdSearchQa(data_dir=data_dir, config=config, file_format="array_record")
  builder.download_and_prepare()
  return builder


def _text(value: Any) -> str:
  return value.decode("utf-8") if isinstance(value, bytes) else str(value)


def task_from_example(example: Mapping[str, Any]) -> SearchTask:
  """A `SearchTask` from a data-source record (Text features come back as bytes)."""
  return SearchTask(question=_text(example["question"]),
                    golden_answers=tuple(_text(a) for a in example["golden_answers"]),
                    data_source=_text(example["data_source"]), id=_text(example["id"]),
                    plan=Plan.from_dict(json.loads(_text(example["plan"]))))
