"""r_type's product-type nouns: spaCy's NOUN/PROPN tokens as WebShop's goal.py takes them, when spaCy and its
`en_core_web_sm` pipeline are installed, else the stand-in.

`en_core_web_sm` is a GitHub release, not a PyPI package, so these tests build a real spaCy pipeline offline instead:
a blank English tokenizer plus an attribute_ruler that assigns the part-of-speech tags spaCy's pipeline gives a
title-cased product name (a capitalised adjective such as "Classic" tagged PROPN), saved as an installed package
named `en_core_web_sm` so that the code path runs `spacy.load("en_core_web_sm")` itself.
"""
import json
import sys

import pytest

spacy = pytest.importorskip("spacy")

from agentopd_jax.envs.webshop import reward  # noqa: E402
from agentopd_jax.envs.webshop.env import WebshopEnv  # noqa: E402

TAGS = {"classic": "PROPN", "leather": "NOUN", "wallet": "NOUN", "for": "ADP", "men": "NOUN", "canvas": "NOUN",
        "tote": "NOUN", "bag": "NOUN", "black": "ADJ", "2": "NUM"}


def _tagger():
  nlp = spacy.blank("en")
  ruler = nlp.add_pipe("attribute_ruler")
  for word, pos in TAGS.items():
    ruler.add(patterns=[[{"LOWER": word}]], attrs={"POS": pos})
  return nlp


@pytest.fixture()
def installed_pipeline(tmp_path, monkeypatch):
  """`_tagger()` packaged as spaCy pipeline packages are (module with `load()`, meta.json, data folder, dist-info)."""
  meta = {"lang": "en", "name": "core_web_sm", "version": "0.0.0"}
  package = tmp_path / reward.SPACY_PIPELINE
  package.mkdir()
  _tagger().to_disk(package / "en_core_web_sm-0.0.0")
  (package / "meta.json").write_text(json.dumps(meta))
  (package / "__init__.py").write_text(
      "from spacy.util import load_model_from_init_py\n\n\n"
      "def load(**overrides):\n  return load_model_from_init_py(__file__, **overrides)\n")
  dist = tmp_path / "en_core_web_sm-0.0.0.dist-info"
  dist.mkdir()
  (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: en_core_web_sm\nVersion: 0.0.0\n")
  monkeypatch.syspath_prepend(str(tmp_path))
  reward.english_pipeline.cache_clear()
  yield
  reward.english_pipeline.cache_clear()
  sys.modules.pop(reward.SPACY_PIPELINE, None)


@pytest.fixture()
def no_pipeline(monkeypatch):
  monkeypatch.setattr(reward, "english_pipeline", lambda: None)


GOAL = {"name": "Classic Leather Wallet for Men", "query": "wallets", "product_category": "Men › Wallets"}
BOUGHT = {"name": "Classic Canvas Tote Bag", "query": "tote bags", "product_category": "Women › Handbags"}


def test_spacy_nouns_are_the_noun_and_proper_noun_tokens_lower_cased():
  assert reward.spacy_nouns(_tagger(), "Classic Leather Wallet for Men 2") == ["classic", "leather", "wallet", "men"]
  assert reward.standin_nouns("Classic Leather Wallet for Men 2") == ["leather", "wallet", "men"]


def test_auto_uses_the_installed_pipeline(installed_pipeline):
  """spaCy keeps "Classic" (PROPN): 1 of 4 goal nouns shared, > 0.2, so r_type 1.0; the stand-in shares none: 0.0."""
  assert reward.title_nouns(GOAL["name"]) == reward.title_nouns(GOAL["name"], "spacy") == [
      "classic", "leather", "wallet", "men"]
  assert (reward.type_reward(BOUGHT, GOAL).r_type, reward.type_reward(BOUGHT, GOAL).title_score) == (1.0, 0.25)
  assert reward.type_reward(BOUGHT, GOAL, "stand-in").r_type == 0.0


def test_without_the_pipeline_auto_is_the_stand_in_and_spacy_is_an_error(no_pipeline):
  assert reward.title_nouns(GOAL["name"]) == reward.standin_nouns(GOAL["name"])
  assert reward.type_reward(BOUGHT, GOAL).r_type == 0.0
  with pytest.raises(ValueError, match="nouns='spacy' needs spaCy and its en_core_web_sm"):
    reward.title_nouns(GOAL["name"], "spacy")


def test_goal_product_scores_alike_either_way(installed_pipeline):
  """The goal's own product has the goal's name, so every noun is shared whichever tagger counts them."""
  goal_product = dict(GOAL, query="other", product_category="A › B")
  assert reward.type_reward(goal_product, GOAL).r_type == reward.type_reward(goal_product, GOAL, "stand-in").r_type


def test_unknown_noun_tagger_is_one_clear_error():
  with pytest.raises(ValueError, match="nouns must be one of"):
    WebshopEnv(nouns="spaCy")
