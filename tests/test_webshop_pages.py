"""WebShop pages and site logic: page texts byte for byte against the real templates' renderings (research notes
Appendix B), clickables in their real order, and `WebAgentTextEnv.step`'s action semantics (§3.4)."""
import pytest

pytest.importorskip("bm25s")
pytest.importorskip("rapidfuzz")

from agentopd_jax.envs.webshop import catalog, pages, reward, search  # noqa: E402
from agentopd_jax.envs.webshop.env import Shop, WebshopEnv, build_shop, parse_action  # noqa: E402

INSTR = "i need a long clip-in hair extension which is natural looking, and price lower than 40.00 dollars"
# Appendix B, verbatim (observation, then get_available_actions()).
B_SEARCH = f"WebShop [SEP] Instruction: [SEP] {INSTR} [SEP] Search"
B_RESULTS_1 = (f"Instruction: [SEP] {INSTR} [SEP] Back to Search [SEP] Page 1 (Total results: 50) [SEP] Next > [SEP] "
               "B09C337K8S [SEP] Foo Bar Hair Extension 20 inch [SEP] $12.99 [SEP] B0ABCDEF12 [SEP] Other thing [SEP] "
               "$10.0 to $20.5")
B_RESULTS_2 = (f"Instruction: [SEP] {INSTR} [SEP] Back to Search [SEP] Page 2 (Total results: 50) [SEP] < Prev [SEP] "
               "Next > [SEP] B09C337K8S [SEP] Foo Bar Hair Extension 20 inch [SEP] $12.99 [SEP] B0ABCDEF12 [SEP] "
               "Other thing [SEP] $10.0 to $20.5")
B_ITEM = (f"Instruction: [SEP] {INSTR} [SEP] Back to Search [SEP] < Prev [SEP] color [SEP] natural black [SEP] "
          "dark brown [SEP] size [SEP] 18 inch [SEP] 20 inch [SEP] Foo Bar Hair Extension [SEP] Price: $12.99 [SEP] "
          "Rating: N.A. [SEP] Description [SEP] Features [SEP] Reviews [SEP] Buy Now")
B_ITEM_CLICKABLES = ["back to search", "< prev", "description", "features", "reviews", "buy now", "natural black",
                     "dark brown", "18 inch", "20 inch"]
B_DESCRIPTION = f"Instruction: [SEP] {INSTR} [SEP] Back to Search [SEP] < Prev [SEP] desc text"
B_FEATURES = f"Instruction: [SEP] {INSTR} [SEP] Back to Search [SEP] < Prev [SEP] bp1 [SEP] bp2"
B_REVIEWS = f"Instruction: [SEP] {INSTR} [SEP] Back to Search [SEP] < Prev"
B_DONE = ('Thank you for shopping with us! [SEP] Your code: [SEP] (Paste it in your MTurk interface.) [SEP] Purchased '
          '[SEP] asin [SEP] B09C337K8S [SEP] options [SEP] {"color": "natural black"} [SEP] attrs [SEP] category [SEP] '
          'query [SEP] product category [SEP] Target [SEP] asin [SEP] options [SEP] attrs [SEP] price upper [SEP] '
          'instuction text [SEP] category [SEP] product category [SEP] query [SEP] Goal [SEP] {} [SEP] Reward [SEP] '
          'Your score (min 0.0, max 1.0) [SEP] 0.6666666666666666 [SEP] Reward Details [SEP] Undefined')


def _raw(asin, name, pricing, options, description="desc text", bullets=("bp1", "bp2")):
  return {"asin": asin, "name": name, "full_description": description, "small_description": list(bullets),
          "pricing": pricing, "customization_options": options, "category": "beauty", "query": "hair extensions",
          "product_category": "Beauty & Personal Care › Hair Care › Hair Extensions", "images": ["x.jpg"]}


FOO_OPTIONS = {"Color": [{"value": "Natural Black", "image": None}, {"value": "Dark Brown", "image": None}],
               "Size": [{"value": "18 Inch", "image": None}, {"value": "20 Inch", "image": None}]}
FOO = catalog.process([_raw("B09C337K8S", "Foo Bar Hair Extension", "$12.99", FOO_OPTIONS)],
                      {"B09C337K8S": {"attributes": ["natural looking"]}})[0]
LISTED = catalog.process([_raw("B09C337K8S", "Foo Bar Hair Extension 20 inch", "$12.99", {}),
                          _raw("B0ABCDEF12", "Other thing", "$10.00 - $20.50", {})], {})


def test_search_page_golden():
  page = pages.search_page(INSTR)
  assert page.text == B_SEARCH
  assert page.available_actions() == {"has_search_bar": True, "clickables": ["search"]}


def test_results_pages_golden():
  first, second = pages.results_page(INSTR, LISTED, 1, 50), pages.results_page(INSTR, LISTED, 2, 50)
  assert first.text == B_RESULTS_1 and second.text == B_RESULTS_2
  assert first.available_actions() == {"has_search_bar": False,
                                       "clickables": ["back to search", "next >", "b09c337k8s", "b0abcdef12"]}
  assert second.available_actions()["clickables"] == ["back to search", "< prev", "next >", "b09c337k8s",
                                                      "b0abcdef12"]


def test_item_and_sub_pages_golden():
  item = pages.item_page(INSTR, FOO)
  assert item.text == B_ITEM
  assert item.available_actions() == {"has_search_bar": False, "clickables": B_ITEM_CLICKABLES}
  for which, text in (("Description", B_DESCRIPTION), ("Features", B_FEATURES), ("Reviews", B_REVIEWS)):
    sub = pages.sub_page(INSTR, FOO, which)
    assert sub.text == text
    assert sub.available_actions() == {"has_search_bar": False, "clickables": ["back to search", "< prev"]}


def test_done_page_is_appendix_b_with_the_variables_the_real_server_leaves_unset():
  """Appendix B's done page came from a stub that left the template's extra variables undefined (printed as
  nothing / 'Undefined') and passed goal={}; `SimServer.done` passes them as None, which Jinja prints as 'None'."""
  expected = (B_DONE.replace("Your code: [SEP] (", "Your code: [SEP] None [SEP] (")
              .replace("attrs [SEP] category [SEP] query [SEP] product category [SEP] Target",
                       "attrs [SEP] None [SEP] category [SEP] None [SEP] query [SEP] None [SEP] product category "
                       "[SEP] None [SEP] Target")
              .replace("Goal [SEP] {}", "Goal [SEP] None").replace("Details [SEP] Undefined", "Details [SEP] None"))
  page = pages.done_page("B09C337K8S", {"color": "natural black"}, 2 / 3)
  assert page.text == expected
  assert page.available_actions() == {"has_search_bar": False, "clickables": []}
  assert pages.done_page("B0", {"size": "l", "color": "it's"}, 1.0).text.count(
      '{"color": "it\\u0027s", "size": "l"} [SEP] attrs') == 1  # Flask tojson: sorted keys, HTML-safe
  assert "max 1.0) [SEP] 1.0 [SEP]" in pages.done_page("B0", {}, 1.0).text


def test_processing_matches_webshop_load_products():
  assert (FOO["Title"], FOO["Price"], FOO["pricing"], FOO["Rating"]) == ("Foo Bar Hair Extension", "$12.99",
                                                                         [12.99], "N.A.")
  assert FOO["options"] == {"color": ["natural black", "dark brown"], "size": ["18 inch", "20 inch"]}
  assert (LISTED[1]["Price"], LISTED[1]["pricing"]) == ("$10.0 to $20.5", [10.0, 20.5])
  raw = [_raw("B000000001", "A", "", {"Color": [{"value": " Black/White ", "image": None}], "Size": None}),
         _raw("B000000001", "dup", "$1", {}), _raw("nan", "nan", "$1", {}), _raw("B0000000001", "long", "$1", {}),
         dict(_raw("B000000002", "B", "$3.5 - $4 - $5", {}), small_description="one bullet", query=" Mixed Case ")]
  a, b = catalog.process(raw, {"B000000002": {"attributes": ["x"], "instruction": "i", "instruction_attributes": []}})
  assert (a["Price"], a["pricing"], a["options"], a["Attributes"]) == ("$100.0", [100.0], {"color": ["black | white"]},
                                                                      ["DUMMY_ATTR"])
  assert (b["Price"], b["pricing"], b["BulletPoints"], b["query"]) == ("$3.5 to $4.0", [3.5, 4.0], ["one bullet"],
                                                                       "mixed case")
  assert a["instruction_text"] is None and b["instruction_text"] == "i"


@pytest.fixture()
def env():
  return WebshopEnv()


def _first_search(env, query="hair extensions black"):
  obs, score, done, infos = env.step(f"search[{query}]")
  assert (score, done) == (0.0, False) and "Page 1 (Total results: 50)" in obs
  return obs, infos


def test_parse_action():
  assert parse_action("search[a b]") == ("search", "a b")
  assert parse_action("click[x] [y]") == ("click[x] ", "y")  # greedy, like WebShop's regex
  assert parse_action("click[]") == ("click[]", None) and parse_action("noop") == ("noop", None)


def test_reset_and_no_ops(env):
  obs, infos = env.reset(0)
  instruction = env.shop.goals[0]["instruction_text"]
  assert obs == pages.search_page(instruction).text
  assert infos == {"available_actions": {"has_search_bar": True, "clickables": ["search"]}, "won": False,
                   "task_score": 0.0}
  for action in ("click[search]", "search[]", "Search[x]", "click[next >]", "buy now", "click[buy now]", ""):
    assert env.step(action) == (obs, 0.0, False, infos)


def test_results_paging(env):
  env.reset(0)
  obs, infos = _first_search(env)
  clickables = infos["available_actions"]["clickables"]
  assert clickables[:2] == ["back to search", "next >"] and len(clickables) == 12
  assert all(c == c.lower() and c.upper() in obs for c in clickables[2:])
  obs2, _, _, infos2 = env.step("click[next >]")
  assert "Page 2 (Total results: 50) [SEP] < Prev [SEP] Next >" in obs2
  assert infos2["available_actions"]["clickables"][:3] == ["back to search", "< prev", "next >"]
  assert env.step("click[< prev]")[0] == obs
  for _ in range(5):
    last = env.step("click[next >]")[0]
  assert last.endswith("Page 6 (Total results: 50) [SEP] < Prev [SEP] Next >")  # Next > even past the end
  assert env.step("click[back to search]")[0] == pages.search_page(env.goal["instruction_text"]).text


def test_item_page_options_sub_pages_and_navigation(env):
  env.reset(0)
  results, infos = _first_search(env)
  env.step("click[next >]")
  page2 = env.page.text
  asin = env.page.available_actions()["clickables"][3]
  item, _, _, infos = env.step(f"click[{asin.upper()}]")  # the argument is lower-cased before matching
  product = env.shop.products[asin.upper()]
  assert item == pages.item_page(env.goal["instruction_text"], product).text
  values = [v for vs in product["options"].values() for v in vs]
  assert infos["available_actions"]["clickables"] == ["back to search", "< prev", "description", "features",
                                                      "reviews", "buy now", *values]
  if values:
    assert env.step(f"click[{values[-1]}]")[0] == item  # choosing an option is not shown in the simple text
    assert env.options == {list(product["options"])[-1]: values[-1]}
  for which in ("description", "features", "reviews"):
    sub = env.step(f"click[{which}]")[0]
    assert sub == pages.sub_page(env.goal["instruction_text"], product, which.capitalize()).text
    assert env.step("click[buy now]")[0] == sub  # not clickable on a sub-page
    assert env.step("click[< prev]")[0] == item
  assert env.step("click[< prev]")[0] == page2  # back to the results page it came from
  assert env.options == {}  # a results page starts over
  assert env.step("search[hair extensions black]")[0] == results  # search works without a search bar


def test_buy_scores_with_webshop_reward_and_ends(env):
  env.reset(7)
  goal = env.shop.goals[7]
  env.step(f"search[{goal['instruction_text']}]")
  asin = env.page.available_actions()["clickables"][2]
  env.step(f"click[{asin}]")
  obs, score, done, infos = env.step("click[buy now]")
  expected = reward.get_reward(env.shop.products[asin.upper()], goal, env.shop.prices[asin.upper()], {}).total
  assert done and score == expected and infos["task_score"] == expected and infos["won"] == (expected == 1.0)
  assert obs == pages.done_page(asin.upper(), {}, expected).text
  # verl-agent's WebAgentTextEnv resets to a new session once Buy Now is done, and its worker then reads
  # get_available_actions() off that session's search page.
  assert infos["available_actions"] == env.available_actions() == {"has_search_bar": True, "clickables": ["search"]}
  assert env.page.kind == "done"


def test_episode_is_cut_after_max_steps():
  env = WebshopEnv(max_steps=3)
  env.reset(0)
  assert env.step("x")[2] is False and env.step("x")[2] is False
  obs, score, done, infos = env.step("x")
  assert done and infos["truncated"] and not infos["won"] and score == 0.0
  with pytest.raises(RuntimeError):
    WebshopEnv().step("x")


def test_reset_accepts_a_goal_dict_and_custom_shop():
  products = [FOO] + LISTED[1:]
  env = WebshopEnv()
  env.shop = Shop({p["asin"]: p for p in products}, [], {"B09C337K8S": 12.99, "B0ABCDEF12": 15.0},
                  search.SearchEngine(products))
  goal = {"asin": "B09C337K8S", "query": "hair extensions", "name": "Foo Bar Hair Extension",
          "product_category": FOO["product_category"], "instruction_text": INSTR, "attributes": ["natural looking"],
          "price_upper": 40.0, "goal_options": {"color": "natural black"}}
  assert env.reset(goal)[0] == B_SEARCH
  env.step("search[long clip-in hair extension natural]")
  assert env.page.text == (f"Instruction: [SEP] {INSTR} [SEP] Back to Search [SEP] Page 1 (Total results: 1) [SEP] "
                           "Next > [SEP] B09C337K8S [SEP] Foo Bar Hair Extension [SEP] $12.99")  # only matching docs
  assert env.step("click[b09c337k8s]")[0] == B_ITEM
  env.step("click[natural black]")
  obs, score, done, infos = env.step("click[buy now]")
  assert (score, done, infos["won"]) == (1.0, True, True)


def test_shop_is_built_once_per_configuration():
  assert build_shop() is build_shop() and WebshopEnv().shop is WebshopEnv().shop
  with pytest.raises(ValueError, match="human goals"):
    build_shop(human_goals=True)
