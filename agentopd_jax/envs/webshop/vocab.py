"""What the synthetic catalogue is made of: product types in WebShop's five categories, each with its scrape query,
Amazon category path, product nouns, attribute phrases, option sets and a price range.

The values imitate the real `items_shuffle_1000.json` / `items_ins_v2_1000.json` data (research notes §3.1, §3.7):
attributes are short lower-case phrases ("natural looking", "machine wash", "gluten free"), option names are
Amazon's customization names ("color", "size", "flavor name"), and category paths use the ` › ` separator that the
type reward splits on. Option values are chosen so that most survive WebShop's option matching (`normalize_color`
plus token-set fuzz, §3.5) when the right one is bought; a few realistic ones do not ("blueberry" reads as the colour
"blue"), as in the real data, which is why even a perfect buyer scores below 100% there.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Tuple


@dataclass(frozen=True)
class ProductType:
  category: str  # one of WebShop's five: beauty, fashion, food, furniture, electronics
  query: str  # the search query the product was scraped with; the type reward compares it
  product_category: str  # Amazon breadcrumb, levels joined by " › "
  nouns: Tuple[str, ...]  # what the product is, as named in titles and instructions
  descriptors: Tuple[str, ...]  # title words that are not attributes
  attributes: Tuple[str, ...]  # candidate attribute phrases (a product gets several, an instruction 1-3)
  options: Dict[str, Tuple[str, ...]]  # option name -> candidate values (a product draws a few of each)
  price: Tuple[float, float]  # typical price range in dollars


COLORS_APPAREL = ("black", "white", "navy blue", "heather grey", "red", "olive green", "burgundy", "light blue",
                  "charcoal", "khaki", "pink", "royal blue", "beige", "dark green", "purple")
SIZES_APPAREL = ("small", "medium", "large", "x-large", "xx-large", "3x-large")
SIZES_SHOES = ("6", "6.5", "7", "7.5", "8", "8.5", "9", "9.5", "10", "10.5", "11", "12", "13")
COLORS_FURNITURE = ("black", "white", "espresso", "walnut", "natural", "grey", "rustic brown", "oak", "cherry",
                    "dark brown", "light grey")

TYPES: Tuple[ProductType, ...] = (
    # ------------------------------------------------------------------ beauty
    ProductType(
        "beauty", "hair extensions",
        "Beauty & Personal Care › Hair Care › Hair Extensions, Wigs & Accessories › Hair Extensions",
        ("clip in hair extensions", "hair extension", "tape in hair extensions", "ponytail extension"),
        ("straight", "wavy", "curly", "thick", "full head", "seamless", "double weft"),
        ("natural looking", "high quality", "long lasting", "easy use", "synthetic hair", "natural hair",
         "hair extensions", "easy apply"),
        {"color": ("natural black", "dark brown", "light brown", "ash blonde", "ombre brown", "burgundy",
                   "honey blonde", "jet black", "medium brown", "platinum blonde"),
         "size": ("14 inch", "16 inch", "18 inch", "20 inch", "22 inch", "24 inch")},
        (9.0, 60.0)),
    ProductType(
        "beauty", "face moisturizer",
        "Beauty & Personal Care › Skin Care › Face › Creams & Moisturizers › Face Moisturizers",
        ("face moisturizer", "face cream", "night cream", "day cream"),
        ("hydrating", "daily", "lightweight", "rich", "gentle", "overnight"),
        ("dry skin", "sensitive skin", "fine lines", "paraben free", "cruelty free", "natural ingredients",
         "hyaluronic acid", "anti aging", "dark spots"),
        {"size": ("1.7 fl oz (pack of 1)", "1 ounce", "2 ounce", "3.4 fl oz (pack of 1)", "1.7 ounce (pack of 2)")},
        (8.0, 45.0)),
    ProductType(
        "beauty", "nail polish",
        "Beauty & Personal Care › Foot, Hand & Nail Care › Nail Art & Polish › Nail Polish",
        ("nail polish", "gel nail polish", "nail polish set", "nail lacquer"),
        ("glossy", "matte", "shimmer", "quick dry", "salon", "chip resistant"),
        ("long lasting", "non toxic", "nail polish", "easy apply", "high gloss", "quick drying", "nail art"),
        {"color": ("cherry red", "nude", "coral", "lavender", "black", "white", "rose gold", "navy", "mint green",
                   "burgundy", "clear")},
        (4.0, 25.0)),
    ProductType(
        "beauty", "shampoo",
        "Beauty & Personal Care › Hair Care › Shampoo & Conditioner › Shampoos",
        ("shampoo", "shampoo and conditioner set", "clarifying shampoo", "dry shampoo"),
        ("moisturizing", "volumizing", "repairing", "daily", "argan oil", "tea tree"),
        ("hair growth", "hair loss", "sulfate free", "dry hair", "natural ingredients", "damaged hair",
         "color treated", "paraben free", "fine hair"),
        {"size": ("8 fl oz (pack of 1)", "16 fl oz (pack of 1)", "33.8 fl oz", "8 fl oz (pack of 2)"),
         "scent": ("coconut", "lavender", "citrus", "unscented", "eucalyptus", "vanilla")},
        (6.0, 40.0)),
    ProductType(
        "beauty", "eyeshadow palette",
        "Beauty & Personal Care › Makeup › Eyes › Eyeshadow",
        ("eyeshadow palette", "eye shadow palette", "eyeshadow"),
        ("35 color", "18 shades", "nude", "smokey", "glitter", "professional"),
        ("eye shadow", "long lasting", "highly pigmented", "cruelty free", "easy carry", "waterproof"),
        {"color": ("warm nude", "smokey", "rose gold", "bronze", "galaxy", "sunset", "matte neutral")},
        (6.0, 35.0)),
    ProductType(
        "beauty", "toothpaste",
        "Health & Household › Oral Care › Toothpaste",
        ("toothpaste", "whitening toothpaste", "kids toothpaste"),
        ("natural", "charcoal", "enamel", "fresh", "herbal", "daily"),
        ("fluoride free", "fresh breath", "sensitive teeth", "natural ingredients", "teeth whitening", "sls free"),
        {"flavor name": ("mint", "spearmint", "cinnamon", "strawberry", "bubble gum", "fresh mint"),
         "size": ("4 ounce (pack of 1)", "4 ounce (pack of 3)", "6 ounce (pack of 2)")},
        (3.0, 20.0)),
    # ------------------------------------------------------------------ fashion
    ProductType(
        "fashion", "men's t-shirts",
        "Clothing, Shoes & Jewelry › Men › Clothing › Shirts › T-Shirts",
        ("t-shirt", "crew neck t-shirt", "graphic tee", "v-neck t-shirt"),
        ("casual", "athletic", "slim", "vintage", "basic", "summer"),
        ("machine wash", "short sleeve", "cotton spandex", "classic fit", "regular fit", "polyester cotton",
         "moisture wicking", "soft material", "tumble dry"),
        {"color": COLORS_APPAREL, "size": SIZES_APPAREL},
        (8.0, 30.0)),
    ProductType(
        "fashion", "women's dresses",
        "Clothing, Shoes & Jewelry › Women › Clothing › Dresses",
        ("maxi dress", "midi dress", "sundress", "wrap dress", "cocktail dress"),
        ("floral", "casual", "boho", "summer", "elegant", "ruffle", "flowy"),
        ("machine wash", "hand wash", "polyester spandex", "long sleeve", "elastic waist", "daily wear",
         "slim fit", "short sleeve", "v neck"),
        {"color": COLORS_APPAREL, "size": SIZES_APPAREL},
        (18.0, 55.0)),
    ProductType(
        "fashion", "men's running shoes",
        "Clothing, Shoes & Jewelry › Men › Shoes › Athletic › Running › Road Running",
        ("running shoes", "sneakers", "walking shoes", "trail running shoes"),
        ("breathable", "lightweight", "mesh", "cushioned", "athletic", "casual"),
        ("rubber sole", "non slip", "arch support", "lace closure", "memory foam", "light weight",
         "shock absorption"),
        {"color": ("black", "white", "grey", "navy", "black/white", "blue", "red", "all black"),
         "size": SIZES_SHOES},
        (25.0, 90.0)),
    ProductType(
        "fashion", "women's sandals",
        "Clothing, Shoes & Jewelry › Women › Shoes › Sandals › Flat Sandals",
        ("sandals", "flip flops", "slide sandals", "wedge sandals"),
        ("summer", "strappy", "casual", "beach", "comfortable", "platform"),
        ("open toe", "ankle strap", "rubber sole", "non slip", "arch support", "high heel"),
        {"color": ("black", "brown", "beige", "white", "tan", "pink", "gold", "silver"),
         "size": SIZES_SHOES[:9]},
        (15.0, 50.0)),
    ProductType(
        "fashion", "men's jeans",
        "Clothing, Shoes & Jewelry › Men › Clothing › Jeans",
        ("jeans", "slim fit jeans", "denim jeans", "straight leg jeans"),
        ("classic", "stretch", "ripped", "relaxed", "vintage", "distressed"),
        ("machine wash", "button closure", "slim fit", "relaxed fit", "straight leg", "cotton spandex",
         "zipper closure"),
        {"color": ("dark indigo", "vintage blue", "rinse", "black", "grey", "indigo"),
         "size": ("30w x 30l", "32w x 30l", "32w x 32l", "34w x 32l", "36w x 30l", "38w x 32l")},
        (20.0, 60.0)),
    ProductType(
        "fashion", "women's hoodies",
        "Clothing, Shoes & Jewelry › Women › Clothing › Fashion Hoodies & Sweatshirts",
        ("hoodie", "pullover hoodie", "zip up hoodie", "sweatshirt"),
        ("oversized", "cropped", "fleece", "casual", "cozy", "drawstring"),
        ("long sleeve", "machine wash", "drawstring closure", "fleece lined", "soft material", "hand wash",
         "teen girls"),
        {"color": COLORS_APPAREL, "size": SIZES_APPAREL},
        (16.0, 45.0)),
    ProductType(
        "fashion", "necklaces for women",
        "Clothing, Shoes & Jewelry › Women › Jewelry › Necklaces › Pendant Necklaces",
        ("pendant necklace", "necklace", "heart necklace", "choker necklace"),
        ("dainty", "layered", "minimalist", "birthstone", "initial", "crystal"),
        ("sterling silver", "gift box", "hypoallergenic", "valentine day", "adjustable chain", "perfect gift"),
        {"color": ("silver", "gold", "rose gold"), "size": ("16 inch", "18 inch", "20 inch")},
        (10.0, 60.0)),
    # ------------------------------------------------------------------ food
    ProductType(
        "food", "protein bars",
        "Grocery & Gourmet Food › Snacks & Sweets › Snack Foods › Bars › Protein Bars",
        ("protein bars", "protein bar", "snack bars", "keto bars"),
        ("chewy", "crunchy", "low carb", "whey", "vegan", "meal replacement"),
        ("gluten free", "high protein", "low sugar", "non gmo", "plant based", "individually wrapped", "soy free",
         "keto friendly"),
        {"flavor name": ("chocolate peanut butter", "cookie dough", "salted caramel", "birthday cake",
                         "peanut butter", "chocolate chip", "cookies and cream", "blueberry"),
         "size": ("12 count (pack of 1)", "12 count (pack of 2)", "15 count", "24 count")},
        (12.0, 45.0)),
    ProductType(
        "food", "ground coffee",
        "Grocery & Gourmet Food › Beverages › Coffee, Tea & Cocoa › Coffee › Ground Coffee",
        ("ground coffee", "coffee", "whole bean coffee", "decaf coffee"),
        ("medium", "bold", "smooth", "colombian", "breakfast blend", "french roast"),
        ("medium roast", "dark roast", "fair trade", "certified organic", "low acid", "non gmo", "kosher"),
        {"flavor name": ("original", "hazelnut", "french vanilla", "caramel", "mocha", "breakfast blend"),
         "size": ("12 ounce (pack of 1)", "12 ounce (pack of 2)", "2 pound", "32 ounce")},
        (7.0, 35.0)),
    ProductType(
        "food", "herbal tea",
        "Grocery & Gourmet Food › Beverages › Coffee, Tea & Cocoa › Tea › Herbal",
        ("herbal tea", "tea bags", "loose leaf tea", "sleep tea"),
        ("calming", "soothing", "relaxing", "caffeine free", "detox", "wellness"),
        ("caffeine free", "certified organic", "individually wrapped", "non gmo", "natural ingredients",
         "gluten free"),
        {"flavor name": ("chamomile", "ginger", "hibiscus", "lemon ginger", "rooibos", "green tea"),
         "size": ("20 count (pack of 6)", "20 count (pack of 1)", "100 count")},
        (5.0, 25.0)),
    ProductType(
        "food", "crackers",
        "Grocery & Gourmet Food › Snacks & Sweets › Snack Foods › Crackers",
        ("crackers", "cheese crackers", "rice crackers", "snack crackers"),
        ("crispy", "baked", "whole grain", "seeded", "thin", "savory"),
        ("gluten free", "low carb", "keto friendly", "non gmo", "whole grain", "dairy free", "ready eat"),
        {"flavor name": ("sea salt", "cheddar", "garlic herb", "everything", "original", "black pepper"),
         "size": ("4.25 ounce (pack of 6)", "7 ounce (pack of 4)", "10 ounce")},
        (4.0, 30.0)),
    ProductType(
        "food", "chocolate gift box",
        "Grocery & Gourmet Food › Candy & Chocolate › Chocolate › Chocolate Truffles",
        ("chocolate gift box", "chocolate truffles", "assorted chocolates", "chocolate gift basket"),
        ("gourmet", "assorted", "luxury", "belgian", "holiday", "handmade"),
        ("valentine day", "gift basket", "individually wrapped", "perfect gift", "nut free", "milk chocolate"),
        {"size": ("12 piece", "24 piece", "36 piece", "48 piece")},
        (12.0, 70.0)),
    # ------------------------------------------------------------------ furniture
    ProductType(
        "furniture", "office chair",
        "Home & Kitchen › Furniture › Home Office Furniture › Home Office Chairs › Home Office Desk Chairs",
        ("office chair", "desk chair", "gaming chair", "ergonomic chair"),
        ("ergonomic", "mesh", "swivel", "executive", "rolling", "mid back"),
        ("lumbar support", "high back", "height adjustable", "easy assemble", "pu leather", "heavy duty",
         "living room"),
        {"color": ("black", "grey", "white", "blue", "pink", "brown")},
        (45.0, 250.0)),
    ProductType(
        "furniture", "coffee table",
        "Home & Kitchen › Furniture › Living Room Furniture › Tables › Coffee Tables",
        ("coffee table", "lift top coffee table", "round coffee table", "side table"),
        ("modern", "rustic", "farmhouse", "industrial", "mid century", "minimalist"),
        ("living room", "solid wood", "storage space", "easy assemble", "mid century", "wood finish",
         "metal frame"),
        {"color": COLORS_FURNITURE},
        (60.0, 300.0)),
    ProductType(
        "furniture", "bookshelf",
        "Home & Kitchen › Furniture › Home Office Furniture › Bookcases",
        ("bookshelf", "bookcase", "ladder shelf", "storage shelf"),
        ("5 tier", "4 tier", "open", "industrial", "corner", "tall"),
        ("storage space", "living room", "easy assemble", "engineered wood", "metal frame", "space saving"),
        {"color": COLORS_FURNITURE},
        (35.0, 180.0)),
    ProductType(
        "furniture", "throw pillow covers",
        "Home & Kitchen › Bedding › Decorative Pillows, Inserts & Covers › Throw Pillow Covers",
        ("throw pillow covers", "pillow covers", "cushion covers", "pillowcases"),
        ("decorative", "velvet", "boho", "linen", "farmhouse", "soft"),
        ("super soft", "living room", "machine washable", "hidden zipper", "double sided", "pack of 2"),
        {"color": ("cream white", "navy", "grey", "mustard yellow", "sage green", "blush pink", "teal"),
         "size": ("18 x 18 inch", "20 x 20 inch", "16 x 16 inch", "12 x 20 inch")},
        (8.0, 30.0)),
    ProductType(
        "furniture", "nightstand",
        "Home & Kitchen › Furniture › Bedroom Furniture › Nightstands",
        ("nightstand", "bedside table", "end table", "night stand"),
        ("modern", "small", "2 drawer", "rustic", "floating", "wooden"),
        ("storage space", "easy assemble", "solid wood", "bedroom furniture", "metal legs", "living room"),
        {"color": COLORS_FURNITURE},
        (30.0, 160.0)),
    ProductType(
        "furniture", "area rug",
        "Home & Kitchen › Home Décor Products › Area Rugs, Runners & Pads › Area Rugs",
        ("area rug", "runner rug", "shag rug", "washable rug"),
        ("vintage", "geometric", "boho", "distressed", "modern", "abstract"),
        ("living room", "non slip", "machine washable", "easy clean", "dining room", "stain resistant"),
        {"color": ("grey", "blue", "beige", "multicolor", "ivory", "navy", "terracotta"),
         "size": ("2' x 3'", "4' x 6'", "5' x 7'", "8' x 10'", "2'6\" x 8'")},
        (25.0, 200.0)),
    # ------------------------------------------------------------------ electronics
    ProductType(
        "electronics", "wireless earbuds",
        "Electronics › Headphones, Earbuds & Accessories › Headphones & Earbuds › Earbud Headphones",
        ("wireless earbuds", "bluetooth earbuds", "earbuds", "sports earbuds"),
        ("true wireless", "in ear", "mini", "stereo", "bass", "touch control"),
        ("noise cancelling", "wireless bluetooth", "fast charging", "water resistant", "hands free",
         "stereo sound", "charging case"),
        {"color": ("black", "white", "blue", "pink", "grey", "green")},
        (15.0, 120.0)),
    ProductType(
        "electronics", "phone case",
        "Cell Phones & Accessories › Cases, Holsters & Sleeves › Basic Cases",
        ("phone case", "iphone case", "clear case", "wallet case"),
        ("slim", "protective", "shockproof", "magnetic", "glitter", "rugged"),
        ("shock absorbing", "wireless charging", "heavy duty", "easy install", "drop protection", "card holder"),
        {"color": ("black", "clear", "blue", "pink", "purple", "green", "red"),
         "size": ("iphone 13", "iphone 13 pro", "iphone 14", "iphone 14 pro max", "iphone 15")},
        (7.0, 30.0)),
    ProductType(
        "electronics", "hdmi cable",
        "Electronics › Computers & Accessories › Computer Accessories & Peripherals › Cables & Accessories › "
        "Cables & Interconnects › HDMI Cables",
        ("hdmi cable", "high speed hdmi cable", "braided hdmi cable", "hdmi cord"),
        ("8k", "4k", "braided", "ultra", "premium", "long"),
        ("high speed", "gold plated", "4k ultra hd", "plug play", "high definition", "ethernet port"),
        {"size": ("3 feet", "6 feet", "10 feet", "15 feet", "25 feet"),
         "number of items": ("1", "2", "3")},
        (5.0, 30.0)),
    ProductType(
        "electronics", "portable charger",
        "Cell Phones & Accessories › Chargers & Power Adapters › Portable Power Banks",
        ("portable charger", "power bank", "battery pack", "magnetic power bank"),
        ("10000mah", "20000mah", "slim", "compact", "dual usb", "solar"),
        ("fast charging", "usb port", "easy carry", "led display", "wireless charging", "high capacity"),
        {"color": ("black", "white", "blue", "pink", "silver")},
        (15.0, 60.0)),
    ProductType(
        "electronics", "bluetooth speaker",
        "Electronics › Portable Audio & Video › Portable Speakers & Docks › Portable Bluetooth Speakers",
        ("bluetooth speaker", "portable speaker", "wireless speaker", "shower speaker"),
        ("loud", "waterproof", "outdoor", "mini", "stereo", "party"),
        ("water resistant", "wireless bluetooth", "stereo sound", "easy carry", "outdoor use", "long battery",
         "hands free"),
        {"color": ("black", "blue", "red", "grey", "camo", "teal")},
        (18.0, 130.0)),
    ProductType(
        "electronics", "tv wall mount",
        "Electronics › Television & Video › Television Accessories › TV Mounts, Stands & Turntables › TV Wall & "
        "Ceiling Mounts",
        ("tv wall mount", "tv mount", "full motion tv mount", "monitor mount"),
        ("full motion", "tilting", "swivel", "low profile", "articulating", "universal"),
        ("heavy duty", "easy install", "stainless steel", "cable management", "living room", "space saving"),
        {"size": ("26-55 inch", "32-65 inch", "37-70 inch", "42-85 inch")},
        (20.0, 90.0)),
)

BRANDS = (
    "Acorn", "Aurelia", "Bellora", "Brightway", "Cascadia", "Cedarline", "Corvo", "Daybreak", "Driftwood", "Elmstead",
    "Emberly", "Fernhill", "Fjordic", "Galeforce", "Glimmer", "Halcyon", "Harbor & Pine", "Ironbark", "Juniper",
    "Kestrel", "Lark & Loom", "Lumiere", "Maplecrest", "Meridian", "Mistral", "Northwind", "Novalee", "Oakhaven",
    "Orchard Lane", "Pebblebrook", "Quillon", "Redwood", "Riverstone", "Saltmarsh", "Silverleaf", "Solstice",
    "Sparrow", "Summit", "Tidewater", "Trailhead", "Umbra", "Valenti", "Verdant", "Wildflower", "Willowby", "Zephyr",
)

AUDIENCES = ("Women", "Men", "Home", "Gift", "Everyday Use")

# Instruction sentences: {noun} is a product noun with its article ("a", "an" or "some"), {attrs} a
# natural-language list of 1-3 attribute phrases.
INSTRUCTIONS = (
    "i need {noun} that is {attrs}",
    "i am looking for {noun} which is {attrs}",
    "i'm looking for {noun} that is {attrs}",
    "i want {noun} that is {attrs}",
    "find me {noun} that is {attrs}",
    "i would like {noun} that is {attrs}",
    "can you find me {noun} that is {attrs}",
    "help me find {noun} that is {attrs}",
)

FEATURE_LINES = (
    "{Attr}: designed for everyday use and built to last.",
    "{Attr} - a thoughtful detail you will notice from the first day.",
    "Made with care: {attr}, carefully inspected before shipping.",
    "{Attr} and easy to love; backed by our satisfaction guarantee.",
)

DESCRIPTIONS = (
    "Meet the {brand} {noun}. {Desc} and {attr}, it is made for people who want quality without the fuss.",
    "{brand} brings you a {desc} {noun} that is {attr}. Thoughtfully designed and tested for daily use.",
    "This {noun} from {brand} is {desc} and {attr}. {Extra}",
)

EXTRAS = (
    "Order with confidence: we offer a 30-day hassle-free return policy.",
    "A great gift idea for birthdays, holidays and special occasions.",
    "Package includes everything you need to get started.",
    "Please allow slight differences in color due to lighting and screen settings.",
)
