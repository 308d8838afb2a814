"""The pages of the WebShop site as the text agent sees them: visible strings joined by ' [SEP] ' (the real env's
`convert_html_to_text(simple=True)` of its Jinja templates), plus the clickables `get_available_actions` finds.

Reproduced from renderings of the real templates (research notes §3.3 and Appendix B) instead of rendering HTML:
each page is the list of its text nodes, each as its template writes it around the value, kept as bs4 keeps them
(`_text`). Clickables map lower-cased button texts and product ASINs, then option values, to what they click; like
the real dict, a later option value equal to an earlier key replaces it in place (the env still dispatches on the
clicked text, so a button wins over an option value that shadows it).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Mapping, Sequence

SEP = " [SEP] "
BACK_TO_SEARCH, PREV_PAGE, NEXT_PAGE, BUY_NOW = "Back to Search", "< Prev", "Next >", "Buy Now"
SUB_PAGES = ("Description", "Features", "Reviews")  # item-page buttons opening a sub-page
ATTRIBUTES = "Attributes"  # a sub-page without a button (show_attrs is off): only an option value "attributes" opens it
_ASCII_SPACES = " \n\t\f\r"  # bs4's BeautifulSoup.ASCII_SPACES


@dataclass(frozen=True)
class Click:
  """What a clickable does: a button (by its label), a product link (its ASIN) or an option value of `option`."""
  kind: str  # "button" | "product" | "option"
  target: str
  option: str = ""


@dataclass(frozen=True)
class Page:
  kind: str  # "search" | "results" | "item" | "description" | "features" | "reviews" | "done"
  text: str
  clickables: Dict[str, Click] = field(default_factory=dict)

  @property
  def has_search_bar(self) -> bool:
    return self.kind == "search"

  def available_actions(self) -> dict:
    """`get_available_actions()`: the search page has the search bar and the 'search' button, others none."""
    return {"has_search_bar": self.has_search_bar, "clickables": list(self.clickables)}


def _text(nodes: Iterable) -> str:
  """`convert_html_to_text(simple=True)` of the page's text nodes: each stripped, joined by ' [SEP] '. An empty value
  makes no node; bs4 turns a node of ASCII whitespace only into '\n' when it holds a newline (the join skips '\n')
  and into ' ' otherwise, which stays as an empty slot; so does any other node that strips to nothing."""
  kept = []
  for node in map(str, nodes):
    if node and not ("\n" in node and not node.strip(_ASCII_SPACES)):
      kept.append(node.strip())
  return SEP.join(kept)


def _buttons(labels: Iterable[str]) -> Dict[str, Click]:
  return {label.lower(): Click("button", label) for label in labels}


def search_page(instruction: str) -> Page:
  return Page("search", _text(["WebShop", "Instruction:", instruction, "Search"]), _buttons(["Search"]))


def results_page(instruction: str, products: Sequence[Mapping], page: int, total: int) -> Page:
  """Page `page` of a search: its products (ASIN, title, price), `< Prev` after page 1, `Next >` always."""
  buttons = [BACK_TO_SEARCH] + ([PREV_PAGE] if page > 1 else []) + [NEXT_PAGE]
  fields = ["Instruction:", instruction, BACK_TO_SEARCH, f"Page {page} (Total results: {total})", *buttons[1:]]
  clickables = _buttons(buttons)
  for p in products:
    fields += [p["asin"], p["Title"], p["Price"]]
    clickables[p["asin"].lower()] = Click("product", p["asin"])
  return Page("results", _text(fields), clickables)


def item_page(instruction: str, product: Mapping) -> Page:
  """A product: its options (name, then values) before the title, price, rating and the action buttons. Chosen
  options are not marked in the simple text."""
  fields = ["Instruction:", instruction, BACK_TO_SEARCH, PREV_PAGE]
  for name, values in product["options"].items():
    fields += [name, *values]
  fields += [product["Title"], f"Price: {product['Price']}", f"Rating: {product['Rating']}", *SUB_PAGES, BUY_NOW]
  clickables = _buttons([BACK_TO_SEARCH, PREV_PAGE, *SUB_PAGES, BUY_NOW])
  for name, values in product["options"].items():
    for value in values:
      clickables[value] = Click("option", value, name)
  return Page("item", _text(fields), clickables)


def sub_page(instruction: str, product: Mapping, which: str) -> Page:
  """Description (its text), Features (one node per bullet point), Reviews (empty: reviews are never loaded) or
  Attributes (one node per attribute, then category, query and product category). The templates write a space
  before each bullet point and attribute, so an empty one is an empty slot."""
  content: List[str] = {
      "Description": [product["Description"]],
      "Features": [f" {b}" for b in product["BulletPoints"]],
      "Reviews": [],
      ATTRIBUTES: [*(f" {a}" for a in product["Attributes"]), product["category"], product["query"],
                   product["product_category"]],
  }[which]
  return Page(which.lower(), _text(["Instruction:", instruction, BACK_TO_SEARCH, PREV_PAGE, *content]),
              _buttons([BACK_TO_SEARCH, PREV_PAGE]))


def _tojson(options: Mapping[str, str]) -> str:
  """Flask's `tojson` filter: sorted keys, ASCII, and <, >, &, ' escaped for HTML."""
  text = json.dumps(dict(options), sort_keys=True)
  for char, escape in (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026"), ("'", "\\u0027")):
    text = text.replace(char, escape)
  return text


def done_page(asin: str, options: Mapping[str, str], reward: float) -> Page:
  """The page after Buy Now, as `SimServer.done` renders it: it passes only the reward, ASIN, options and
  instruction, so the template's other variables print `None` (or nothing, for attributes of the missing goal).
  The purchase details sit in a hidden block that the text conversion still includes. No clickables."""
  fields = ["Thank you for shopping with us!", "Your code:", "None", "(Paste it in your MTurk interface.)",
            "Purchased", "asin", asin, "options", _tojson(options), "attrs", "None", "category", "None", "query",
            "None", "product category", "None", "Target", "asin", "options", "attrs", "price upper",
            "instuction text", "category", "product category", "query", "Goal", "None", "Reward",
            "Your score (min 0.0, max 1.0)", repr(float(reward)), "Reward Details", "None"]
  return Page("done", _text(fields))
