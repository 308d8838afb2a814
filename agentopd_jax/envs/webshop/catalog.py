"""Products: a seeded synthetic catalogue written in WebShop's own file schemas, the loader for real WebShop data
files, and the one processing step both go through (`web_agent_site/engine/engine.py::load_products`).

Why the raw schemas: generated and real data then take the same path, so the page texts, search documents, goals
and rewards of a generated product are produced by exactly the code that handles a real one.
  items  (items_shuffle*.json)  [{asin, name, full_description, small_description, pricing, customization_options
                                  {Name: [{value, image}]}, category, query, product_category, images}]
  attrs  (items_ins_v2*.json)   {asin: {attributes, instruction, instruction_attributes}}
  human  (items_human_ins.json) {asin: [{instruction, instruction_attributes, instruction_options, ...}]}
"""
from __future__ import annotations

import json
import os
import random
import re
import string
from decimal import Decimal
from typing import Dict, List, Optional, Tuple

from agentopd_jax.envs import datafiles
from agentopd_jax.envs.webshop import vocab

# (items, attributes) file names per catalogue size, as in WebShop's utils.py and verl-agent's `use_small`.
DATA_FILES = {True: ("items_shuffle_1000.json", "items_ins_v2_1000.json"),
              False: ("items_shuffle.json", "items_ins_v2.json")}
HUMAN_FILE = "items_human_ins.json"


# ---------------------------------------------------------------------------------------------- generation
def _title_case(text: str) -> str:
  return " ".join(w[:1].upper() + w[1:] for w in text.split(" "))


def _phrase_list(items: List[str]) -> str:
  if len(items) == 1:
    return items[0]
  if len(items) == 2:
    return f"{items[0]} and {items[1]}"
  return ", ".join(items[:-1]) + f", and {items[-1]}"


def _with_article(noun: str) -> str:
  if noun.endswith("s"):
    return "some " + noun
  return ("an " if noun[0] in "aeiou" else "a ") + noun


def _asin(rng: random.Random, taken: set) -> str:
  while True:
    asin = "B0" + "".join(rng.choices(string.ascii_uppercase + string.digits, k=8))
    if asin not in taken:
      taken.add(asin)
      return asin


def _pricing(rng: random.Random, low: float, high: float) -> str:
  """A pricing string as scraped: usually one amount, sometimes a range, rarely missing (then WebShop uses $100)."""
  u = rng.random()
  if u < 0.01:
    return ""
  price = max(round(rng.uniform(low, high)) - 0.01, 0.99)
  if u < 0.12:
    return f"${price:.2f} - ${price + round(rng.uniform(3, 20)):.2f}"
  return f"${price:.2f}"


def _options(rng: random.Random, kind: vocab.ProductType) -> Dict[str, List[dict]]:
  """Customization options: none for some products, else a few values of some of the type's option sets."""
  if rng.random() < 0.15:
    return {}
  names = [n for n in kind.options if rng.random() < 0.9] or [rng.choice(list(kind.options))]
  out = {}
  for name in names:
    pool = kind.options[name]
    chosen = sorted(rng.sample(range(len(pool)), rng.randint(1, min(6, len(pool)))))
    out[_title_case(name)] = [{"value": _title_case(pool[i]), "image": None} for i in chosen]
  return out


def _product(rng: random.Random, asin: str) -> Tuple[dict, dict]:
  kind = rng.choice(vocab.TYPES)
  brand, noun = rng.choice(vocab.BRANDS), rng.choice(kind.nouns)
  descriptors = rng.sample(kind.descriptors, rng.randint(1, 2))
  attributes = rng.sample(kind.attributes, rng.randint(3, min(6, len(kind.attributes))))
  title = _title_case(" ".join([brand, *descriptors, noun]))
  if rng.random() < 0.5:  # Amazon titles often advertise a feature
    title += ", " + _title_case(attributes[0])
  if rng.random() < 0.4:
    title += f" - {rng.randint(1, 4)} Pack" if kind.category == "food" else f" for {rng.choice(vocab.AUDIENCES)}"
  description = rng.choice(vocab.DESCRIPTIONS).format(
      brand=brand, noun=noun, desc=descriptors[0], Desc=descriptors[0].capitalize(), attr=rng.choice(attributes),
      Extra=rng.choice(vocab.EXTRAS))
  bullets = [rng.choice(vocab.FEATURE_LINES).format(attr=a, Attr=a.capitalize()) for a in attributes[:4]]
  bullets.append(rng.choice(vocab.EXTRAS))
  item = {
      "asin": asin,
      "name": title,
      "full_description": description,
      "small_description": bullets,
      "pricing": _pricing(rng, *kind.price),
      "customization_options": _options(rng, kind),
      "category": kind.category,
      "query": kind.query,
      "product_category": kind.product_category,
      "images": [f"https://m.media-amazon.com/images/I/{asin}.jpg"],
  }
  wanted = rng.sample(attributes, rng.randint(1, min(3, len(attributes))))
  instruction = rng.choice(vocab.INSTRUCTIONS).format(noun=_with_article(noun), attrs=_phrase_list(wanted))
  return item, {"attributes": attributes, "instruction": instruction, "instruction_attributes": wanted}


def generate(num_products: int = 1000, seed: int = 0) -> Tuple[List[dict], Dict[str, dict]]:
  """(items, attributes) for `num_products` products, in the schemas of items_shuffle*.json / items_ins_v2*.json.

  Deterministic in (num_products, seed); product i is the same for every num_products > i.
  """
  rng, taken = random.Random(seed), set()
  items, attrs = [], {}
  for _ in range(num_products):
    item, attr = _product(rng, _asin(rng, taken))
    items.append(item)
    attrs[item["asin"]] = attr
  return items, attrs


def write_files(directory: str, items: List[dict], attributes: Dict[str, dict]) -> None:
  """Writes a catalogue as WebShop's small data files (items_shuffle_1000.json, items_ins_v2_1000.json)."""
  os.makedirs(directory, exist_ok=True)
  for name, data in zip(DATA_FILES[True], (items, attributes)):
    with open(os.path.join(directory, name), "w") as f:
      json.dump(data, f)


# ------------------------------------------------------------------------------------------------ loading
def read_files(data_dir: str, small: bool = True, human_goals: bool = False
               ) -> Tuple[List[dict], Dict[str, dict], Optional[Dict[str, list]]]:
  """(items, attributes, human instructions or None) from a WebShop `data/` folder, every record checked for the
  fields `process` and the goals read, so a damaged or foreign file is one `DataFileError` naming the file, the
  record and the field (WebShop itself would stop on a KeyError somewhere in its product loop)."""
  items_path, attrs_path = (os.path.join(data_dir, name) for name in DATA_FILES[small])
  items = datafiles.expect(datafiles.read_json(items_path), list, items_path)
  for i, item in enumerate(items):
    _check_item(item, f"{items_path}: item {i}")
  attributes = datafiles.expect(datafiles.read_json(attrs_path), dict, attrs_path)
  for asin, info in attributes.items():
    _check_attributes(info, f"{attrs_path}: {asin!r}")
  human = None
  if human_goals:
    human_path = os.path.join(data_dir, HUMAN_FILE)
    human = datafiles.expect(datafiles.read_json(human_path), dict, human_path)
    for asin, instructions in human.items():
      for j, ins in enumerate(datafiles.expect(instructions, list, f"{human_path}: {asin!r}")):
        where = f"{human_path}: {asin!r} instruction {j}"
        datafiles.field(ins, "instruction", str, where)
        datafiles.field(ins, "instruction_attributes", list, where)
        datafiles.field(ins, "instruction_options", (list, dict), where)
  return items, attributes, human


def _check_item(item, where: str) -> None:
  for key in ("asin", "name", "full_description", "category", "query", "product_category"):
    datafiles.field(item, key, str, where)
  where = f"{where} (asin {item['asin']})"
  bullets = datafiles.field(item, "small_description", (str, list), where)
  if isinstance(bullets, list):
    for bullet in bullets:
      datafiles.expect(bullet, str, f"{where}: field 'small_description' entry")
  try:
    _parse_pricing(datafiles.field(item, "pricing", str, where, required=False))
  except ArithmeticError:
    raise datafiles.DataFileError(f"{where}: field 'pricing' {item['pricing']!r} has an amount that is not a "
                                  "number") from None
  options = datafiles.field(item, "customization_options", dict, where, required=False) or {}
  for name, contents in options.items():
    for choice in datafiles.expect(contents, (list, type(None)), f"{where}: option {name!r}") or ():
      datafiles.field(choice, "value", str, f"{where}: option {name!r}")


def _check_attributes(info, where: str) -> None:
  """A missing `attributes` gives WebShop's ['DUMMY_ATTR']; a null one is taken as the list (WebShop's loader then
  fails on it), so it is an error here."""
  if datafiles.field(info, "attributes", list, where, required=False) is None and "attributes" in info:
    raise datafiles.DataFileError(f"{where}: field 'attributes' is null")
  if datafiles.field(info, "instruction", str, where, required=False) is not None:
    if not datafiles.field(info, "instruction_attributes", list, where):  # goals average over them
      raise datafiles.DataFileError(f"{where}: field 'instruction_attributes' is empty")


def _parse_pricing(pricing) -> Tuple[List[float], str]:
  """Amounts after each '$' (non-digits dropped), and the displayed price: `$a` or `$a to $b` (Python floats, so
  `$10.0`). Missing prices become $100.0 as in WebShop (which would crash on a string without any amount)."""
  amounts = [float(Decimal(re.sub(r"[^\d.]", "", part))) for part in (pricing or "").split("$")[1:]]
  if not amounts:
    return [100.0], "$100.0"
  if len(amounts) == 1:
    return amounts, f"${amounts[0]}"
  return amounts[:2], f"${amounts[0]} to ${amounts[1]}"


def process(items: List[dict], attributes: Dict[str, dict], human: Optional[Dict[str, list]] = None,
            num_products: Optional[int] = None) -> List[dict]:
  """Product records as WebShop's `load_products` builds them (keys Title, Description, BulletPoints, Price,
  pricing, options, Attributes, Rating, instruction fields, ...); reviews are never loaded, so Rating is 'N.A.'.

  Skips ASINs that are 'nan' or longer than 10 characters and repeated ASINs. With `human`, products carry their
  human `instructions`; otherwise their synthetic `instruction_text` / `instruction_attributes`.
  """
  products, seen = [], set()
  for p in items[:num_products]:
    asin = p["asin"]
    if asin == "nan" or len(asin) > 10 or asin in seen:
      continue
    seen.add(asin)
    pricing, price_tag = _parse_pricing(p.get("pricing"))
    options = {}
    for name, contents in (p.get("customization_options") or {}).items():
      if contents is not None:
        options[name.lower()] = [c["value"].strip().replace("/", " | ").lower() for c in contents]
    bullets = p["small_description"]
    info = attributes.get(asin, {})
    product = {
        "asin": asin,
        "name": p["name"],
        "category": p["category"],
        "query": p["query"].lower().strip(),
        "product_category": p["product_category"],
        "Title": p["name"],
        "Description": p["full_description"],
        "BulletPoints": bullets if isinstance(bullets, list) else [bullets],
        "Rating": "N.A.",
        "pricing": pricing,
        "Price": price_tag,
        "options": options,
        "Attributes": info["attributes"] if "attributes" in info else ["DUMMY_ATTR"],
    }
    if human is not None:
      if asin in human:
        product["instructions"] = human[asin]
    else:
      product["instruction_text"] = info.get("instruction")
      product["instruction_attributes"] = info.get("instruction_attributes")
    products.append(product)
  return products
