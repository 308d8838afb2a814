"""WebShop on crafted products the generated catalogue never has: option values that equal a button's text,
whitespace-only or empty fields, and records lacking the fields WebShop's loader fills in (price, options,
attributes) or ignores.

Expected page texts were obtained by rendering verl-agent's vendored WebShop templates (commit 796ed31,
`agent_system/environments/env_package/webshop/webshop/web_agent_site/templates/*.html`) with Jinja 3.1.6
(autoescape on, as Flask's `render_template_string`) for these same processed products, then converting them with
`WebAgentTextEnv.convert_html_to_text(simple=True)` and `get_available_actions` on beautifulsoup4 4.11.1
(WebShop's pin), and are written out here by hand.
"""
import pytest

pytest.importorskip("bm25s")
pytest.importorskip("rapidfuzz")

from agentopd_jax.envs.webshop import catalog, pages, reward, search  # noqa: E402
from agentopd_jax.envs.webshop.env import Shop, WebshopEnv  # noqa: E402

INSTR = "i need a hair extension"
HEAD = f"Instruction: [SEP] {INSTR} [SEP] Back to Search [SEP] < Prev"
CATEGORY = "Beauty & Personal Care › Hair Care › Hair Extensions"


def _raw(asin, name, description, bullets, options):
  options = {k: [{"value": v, "image": None} for v in vs] for k, vs in options.items()}
  return {"asin": asin, "name": name, "full_description": description, "small_description": bullets,
          "pricing": "$12.99", "customization_options": options, "category": "beauty", "query": "hair extensions",
          "product_category": CATEGORY, "images": ["x.jpg"]}


# Option values equal to every button text of the item page (and to Attributes, the sub-page without a button, and
# Next >, a results-page button); a whitespace-only description; bullets empty, blank, with a newline, NBSP, tab.
SHADOWING, BLANK = catalog.process(
    [_raw("B0EDGE0001", "Foo Bar Hair Extension", "  ", ["bp1", "", "  ", " \n ", "bp2", "\u00a0", "\t"],
          {"Color": ["Natural Black", "Buy Now"], "Size": ["Description", "< Prev"],
           "Style": ["Back to Search", "Features", "Reviews", "Attributes", "Next >"]}),
     _raw("B0EDGE0002", " \t ", "\n", [""], {})],
    {"B0EDGE0001": {"attributes": ["natural looking", "", "long lasting"]}})


def test_item_page_keeps_real_text_and_clickable_order():
  item = pages.item_page(INSTR, SHADOWING)
  assert item.text == (
      f"{HEAD} [SEP] color [SEP] natural black [SEP] buy now [SEP] size [SEP] description [SEP] < prev [SEP] style "
      "[SEP] back to search [SEP] features [SEP] reviews [SEP] attributes [SEP] next > [SEP] Foo Bar Hair Extension "
      "[SEP] Price: $12.99 [SEP] Rating: N.A. [SEP] Description [SEP] Features [SEP] Reviews [SEP] Buy Now")
  assert item.available_actions()["clickables"] == [
      "back to search", "< prev", "description", "features", "reviews", "buy now", "natural black", "attributes",
      "next >"]


def test_whitespace_fields_keep_empty_slots():
  """A node of ASCII blanks without a newline (an empty bullet renders ' ') or of other blanks (NBSP) is an empty
  slot; one with a newline, or an empty value (no node), is not."""
  assert pages.sub_page(INSTR, SHADOWING, "Features").text == f"{HEAD} [SEP] bp1 [SEP]  [SEP]  [SEP] bp2 [SEP]  [SEP] "
  assert pages.sub_page(INSTR, SHADOWING, "Description").text == f"{HEAD} [SEP] "
  assert pages.sub_page(INSTR, BLANK, "Description").text == HEAD  # "\n"
  assert pages.sub_page(INSTR, BLANK, "Features").text == f"{HEAD} [SEP] "
  assert pages.item_page(INSTR, BLANK).text == (
      f"{HEAD} [SEP]  [SEP] Price: $12.99 [SEP] Rating: N.A. [SEP] Description [SEP] Features [SEP] Reviews [SEP] "
      "Buy Now")
  assert pages.results_page(INSTR, [BLANK], 1, 1).text == (
      f"Instruction: [SEP] {INSTR} [SEP] Back to Search [SEP] Page 1 (Total results: 1) [SEP] Next > [SEP] "
      "B0EDGE0002 [SEP]  [SEP] $12.99")


def test_attributes_page():
  assert pages.sub_page(INSTR, SHADOWING, "Attributes").text == (
      f"{HEAD} [SEP] natural looking [SEP]  [SEP] long lasting [SEP] beauty [SEP] hair extensions [SEP] {CATEGORY}")
  assert pages.sub_page(INSTR, BLANK, "Attributes").text == (
      f"{HEAD} [SEP] DUMMY_ATTR [SEP] beauty [SEP] hair extensions [SEP] {CATEGORY}")


PLAIN_ITEM = (f"{HEAD} [SEP] Foo Hair Extension [SEP] Price: $12.99 [SEP] Rating: N.A. [SEP] Description [SEP] "
              "Features [SEP] Reviews [SEP] Buy Now")


def _load(tmp_path, edit_item=lambda item: None, edit_attributes=lambda attributes: None):
  """One record through the real-data path (`read_files` checks it, `process` builds the product)."""
  item = _raw("B0EDGE0003", "Foo Hair Extension", "Soft.", ["bp1"], {})
  attributes = {"B0EDGE0003": {"attributes": ["natural looking"], "instruction": "i need hair",
                               "instruction_attributes": ["natural looking"]}}
  edit_item(item)
  edit_attributes(attributes)
  catalog.write_files(str(tmp_path), [item], attributes)
  return catalog.process(*catalog.read_files(str(tmp_path)))[0]


@pytest.mark.parametrize("edit", [lambda p: p.pop("pricing"), lambda p: p.update(pricing=None),
                                  lambda p: p.update(pricing="")])
def test_a_missing_price_is_webshops_100_dollars(tmp_path, edit):
  product = _load(tmp_path, edit)
  assert (product["pricing"], product["Price"]) == ([100.0], "$100.0")
  assert pages.item_page(INSTR, product).text == PLAIN_ITEM.replace("$12.99", "$100.0")
  assert pages.results_page(INSTR, [product], 1, 1).text.endswith("B0EDGE0003 [SEP] Foo Hair Extension [SEP] $100.0")


@pytest.mark.parametrize("edit", [lambda p: p.pop("customization_options"),
                                  lambda p: p.update(customization_options=None),
                                  lambda p: p.update(customization_options={"Color": None})])
def test_missing_options_are_none(tmp_path, edit):
  product = _load(tmp_path, edit)
  assert product["options"] == {} and pages.item_page(INSTR, product).text == PLAIN_ITEM


def test_fields_webshop_drops_or_only_shows_as_images_change_nothing(tmp_path):
  """`images` (MainImage, an <img> with no text) and the keys `clean_product_keys` pops (product_information,
  brand, ...) leave the product's pages as they are; a `small_description` string is one bullet point."""
  plain = _load(tmp_path / "plain")
  assert _load(tmp_path / "images", lambda p: p.pop("images")) == plain
  assert _load(tmp_path / "extra", lambda p: p.update(product_information={"Color": "Black"}, brand="Foo")) == plain
  one = _load(tmp_path / "one", lambda p: p.update(small_description="bp1"))
  assert one == plain and pages.sub_page(INSTR, one, "Features").text == f"{HEAD} [SEP] bp1"


@pytest.mark.parametrize("edit", [lambda a: a.pop("B0EDGE0003"), lambda a: a["B0EDGE0003"].pop("attributes")])
def test_missing_attributes_are_webshops_dummy(tmp_path, edit):
  product = _load(tmp_path, edit_attributes=edit)
  assert product["Attributes"] == ["DUMMY_ATTR"]
  assert pages.sub_page(INSTR, product, "Attributes").text == (
      f"{HEAD} [SEP] DUMMY_ATTR [SEP] beauty [SEP] hair extensions [SEP] {CATEGORY}")


GOAL = {"asin": "B0EDGE0001", "query": "hair extensions", "name": "Foo Bar Hair Extension",
        "product_category": CATEGORY, "instruction_text": INSTR, "attributes": ["natural looking"],
        "price_upper": 40.0, "goal_options": {"color": "buy now"}}


@pytest.fixture()
def env():
  env = WebshopEnv()
  env.shop = Shop({p["asin"]: p for p in (SHADOWING, BLANK)}, [], {"B0EDGE0001": 12.99, "B0EDGE0002": 12.99},
                  search.SearchEngine([SHADOWING, BLANK]))
  env.reset(GOAL)
  env.step("search[foo bar hair extension]")
  return env


def test_buy_now_buys_although_an_option_shadows_it(env):
  env.step("click[b0edge0001]")
  env.step("click[natural black]")
  obs, score, done, infos = env.step("click[buy now]")
  expected = reward.get_reward(SHADOWING, GOAL, 12.99, {"color": "natural black"}).total
  assert done and score == expected == pytest.approx(2 / 3) and env.options == {"color": "natural black"}
  assert obs == pages.done_page("B0EDGE0001", {"color": "natural black"}, expected).text
  assert infos["available_actions"] == {"has_search_bar": True, "clickables": ["search"]}  # the next session's


@pytest.mark.parametrize("name", ["description", "features", "reviews", "attributes"])
def test_sub_page_buttons_win_over_options(env, name):
  item = env.step("click[b0edge0001]")[0]
  assert env.step(f"click[{name}]")[0] == pages.sub_page(INSTR, SHADOWING, name.capitalize()).text
  assert env.options == {} and env.page.kind == name
  assert env.step("click[< prev]")[0] == item


def test_navigation_buttons_win_over_options(env):
  results = env.page.text
  env.step("click[b0edge0001]")
  assert env.step("click[< prev]")[0] == results and env.options == {}
  env.step("click[b0edge0001]")
  assert env.step("click[back to search]")[0] == pages.search_page(INSTR).text


def test_an_option_named_like_a_results_button_is_still_an_option(env):
  item = env.step("click[b0edge0001]")[0]
  assert env.step("click[next >]")[0] == item and env.options == {"style": "next >"}
