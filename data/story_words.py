"""The stories corpus's word lists and sentence templates (data/stories.py is the code that uses them).

Edit here to change what the stories say; the generator's rules (which words may share a story, how
references are recorded) are in data/stories.py. The pools are disjoint by design: see the notes
beside each group.
"""
from __future__ import annotations

# ---- word lists ----------------------------------------------------------------------------------
# Character names, pet names and every other capitalised word are disjoint, so a character's name
# can be found in the text with a whole-word match. The words of the attribute pools (colours, toys,
# pets, pet names, homes, foods, clothes) are disjoint from each other and from every generic slot,
# so a colour in the text is always a toy's colour, a place always someone's home, and so on; the
# templates' own words hold four of them (bell, clock, grey, well), which stay: changing a template
# changes the corpus, and every result measured on it (tests/test_stories.py pins the four).

FEMALE_NAMES = (
    "Mia", "Ava", "Lily", "Emma", "Zoe", "Nora", "Ella", "Ruby", "Lucy", "Anna", "Sara", "Hana",
    "Ivy", "Maya", "Lena", "Tara", "Nina", "Alma", "Eva", "Clara", "Greta", "Olga", "Rita", "Vera",
    "Wendy", "Kira", "Dora", "Edith", "Fiona", "Gwen", "Hilda", "Jana", "Kate", "Leah", "Mona",
    "Nell", "Pia", "Rosa", "Tess", "Una", "Yara", "Zara", "Bella", "Cora", "Freya", "Ingrid",
)
MALE_NAMES = (
    "Leo", "Sam", "Max", "Ben", "Tom", "Jack", "Finn", "Owen", "Eli", "Noah", "Liam", "Omar",
    "Hugo", "Ivan", "Jonas", "Karl", "Luca", "Milo", "Nico", "Otto", "Paul", "Raj", "Theo",
    "Victor", "Yusuf", "Zack", "Adam", "Carl", "Dan", "Emil", "Felix", "Gus", "Hank", "Igor",
    "Jude", "Kai", "Leon", "Marco", "Ned", "Oscar", "Pete", "Ravi", "Sven", "Tim", "Abel", "Bruno",
)
FEMALE_NOUNS = ("girl", "little girl", "young girl", "clever girl", "cheerful girl")
MALE_NOUNS = ("boy", "little boy", "young boy", "clever boy", "cheerful boy")
PET_NAMES = (
    "Tib", "Pip", "Bo", "Dot", "Fizz", "Biscuit", "Pepper", "Rex", "Moss", "Nutmeg", "Sprout",
    "Ziggy", "Button", "Clover", "Pickle", "Waffle", "Muffin", "Bean", "Peanut", "Toffee", "Noodle",
    "Pebble", "Socks", "Whiskers", "Smudge", "Bramble", "Maple", "Juniper", "Domino", "Comet",
    "Patch", "Scamp", "Tinker", "Rusty", "Sooty", "Fluff", "Wiggles", "Gizmo", "Bubbles", "Acorn",
)
PETS = (
    "cat", "dog", "puppy", "kitten", "rabbit", "hamster", "parrot", "goat", "pony", "duck",
    "goose", "frog", "turtle", "mouse", "owl", "hen", "lamb", "ferret", "canary", "lizard",
    "piglet", "donkey", "hedgehog", "goldfish",
)
COLOURS = (
    "red", "blue", "green", "yellow", "orange", "purple", "pink", "white", "black", "brown",
    "grey", "golden", "silver", "violet", "crimson", "scarlet", "turquoise", "navy",
)
OBJECTS = (
    "kite", "ball", "drum", "book", "boat", "bucket", "lantern", "whistle", "basket", "umbrella",
    "bicycle", "wagon", "flute", "trumpet", "shovel", "marble", "backpack", "notebook", "crayon",
    "balloon", "compass", "teapot", "cup", "sled", "spoon", "key", "box", "jar", "rope", "violin",
    "guitar", "camera", "clock", "bell", "robot", "puzzle", "skateboard", "pencil",
)
CLOTHES = (
    "hat", "coat", "scarf", "cap", "jacket", "sweater", "cloak", "vest", "shawl", "beret", "apron",
    "poncho",
)
FOODS = (
    "apples", "plums", "figs", "cherries", "grapes", "pears", "walnuts", "almonds", "raisins",
    "cookies", "crackers", "pretzels", "peanuts", "berries", "olives", "dates", "muffins", "buns",
    "sweets", "toffees", "lemons", "peaches", "apricots", "sandwiches", "chestnuts", "carrots",
    "radishes", "tomatoes",
)
PLACES = (
    "mill", "river", "bridge", "lake", "bakery", "market", "harbour", "forest", "orchard", "pond",
    "windmill", "lighthouse", "station", "meadow", "castle", "farm", "school", "library", "park",
    "beach", "hill", "well", "garden", "canal", "square", "tower", "barn", "fountain", "quarry",
    "chapel",
)
LANDSCAPES = (
    "sea", "hills", "mountains", "woods", "valley", "moor", "coast", "plain", "cliffs", "marsh",
    "dunes", "fields",
)
TOWNS = ("village", "town", "hamlet", "city", "port")
TOWN_ADJECTIVES = (
    "small", "quiet", "busy", "sleepy", "windy", "sunny", "old", "tiny", "little", "pretty",
)
WEATHER_ADJECTIVES = (
    "windy", "rainy", "sunny", "foggy", "cold", "warm", "bright", "misty", "cloudy", "still",
    "frosty", "stormy",
)
DAY_PARTS = ("morning", "afternoon", "evening", "day", "night")
DIRECTIONS = ("north", "south", "east", "west")
SMELLS = ("rain", "bread", "smoke", "pine", "roses", "salt", "hay", "soup", "mud", "honey", "tar")
ROAD_ADJECTIVES = (
    "long", "narrow", "muddy", "dusty", "steep", "winding", "wide", "rocky", "smooth", "empty",
)
STRUCTURES = (
    "wall", "gate", "bench", "oak", "statue", "fence", "shed", "cottage", "stable", "tent",
)
WILD_ANIMALS = (
    "crow", "sparrow", "squirrel", "deer", "bee", "butterfly", "beetle", "snail", "robin", "heron",
    "badger", "mole", "swan", "bat", "moth", "magpie", "pigeon", "seagull", "ant", "toad",
)
WILD_VERBS = (
    "hopped", "flew", "crawled", "ran", "jumped", "climbed", "wandered", "darted", "scurried",
)
PREPOSITIONS = ("onto", "over", "under", "across", "along", "past", "around", "behind", "near")
THINGS = (
    "fence", "roof", "path", "wall", "gate", "hedge", "chimney", "stone", "log", "cart",
    "puddle", "window", "ladder", "barrel", "steps",
)
CARGO = (
    "hay", "wood", "stones", "bricks", "sacks", "barrels", "pumpkins", "turnips", "flowers",
    "coal", "wool", "fish", "cabbages",
)
NUMBERS = (
    "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
)
GROUNDS = ("field", "yard", "road", "street", "lawn", "grass", "rooftops", "valley")
FEELINGS = (
    "happy", "tired", "sleepy", "hungry", "excited", "proud", "calm", "cheerful", "curious",
    "brave",
)
DAY_ADJECTIVES = ("happy", "busy", "strange", "lovely", "long", "funny", "quiet", "wonderful")
SEATS = ("bench", "log", "wall", "fence", "stone", "steps", "stool", "grass", "swing")
FURNITURE = ("bed", "table", "stairs", "sofa", "chair", "cupboard", "blanket", "desk", "rug")
ROLES = (
    "baker", "farmer", "teacher", "doctor", "painter", "miller", "potter", "weaver", "gardener",
    "shopkeeper", "sailor", "carpenter", "tailor", "librarian", "shepherd", "cook", "musician",
    "mayor", "beekeeper", "clockmaker",
)
ROLE_ADJECTIVES = (
    "old", "kind", "tall", "busy", "cheerful", "grumpy", "quiet", "clever", "young", "friendly",
)
ROLE_ITEMS = (
    "ladder", "sack", "wheelbarrow", "broom", "pie", "lamp", "parcel", "letter", "hammer", "loaf",
)
HABITS = (
    "knew every path in the valley", "told long stories", "grew tall sunflowers",
    "got up before dawn", "kept bees behind the house", "sang while working", "never stopped talking",
    "fixed anything that was broken", "fed the birds every morning",
)
LINES = (
    "Look at the sky", "What a lovely day", "I am so hungry", "Wait for me", "Let us go and play",
    "I can hear the sea", "It is getting late", "The wind is cold today", "I found a shiny stone",
    "We should go home soon", "This is the best day ever", "My feet are tired",
    "I know a secret path", "Let us race to the gate", "I think it will snow",
)
QUESTIONS = (
    "Where are you going", "Do you want to play", "Is it going to rain", "What is that noise",
    "Can you see the boats", "Who lives in that house", "Shall we have a picnic",
    "Have you ever seen a whale",
)
EXCLAIMS = ("Hooray", "Oh no", "Look out", "Good job", "How wonderful", "Come quickly", "Hurry up")

SPOTS = (  # generic places for fillers and named actions; never a home (PLACES)
    "crossroads", "town hall", "post office", "bus stop", "toy shop", "ferry landing", "sawmill",
    "bandstand", "old oak", "churchyard", "corner shop", "water pump",
)
WHEN = (  # openers of a pronoun reference: "{when} {subj} ..."
    "Then", "Later", "Soon", "Next", "After that", "After a while", "Before long", "In the evening",
    "That night", "At noon", "Suddenly", "Once again", "Meanwhile", "At last", "Now",
)

# Slots filled afresh each time they occur in a sentence (fillers, settings, props).
GENERIC_SLOTS: dict[str, tuple[str, ...]] = {
    "spot": SPOTS, "landscape": LANDSCAPES, "town": TOWNS, "town_adj": TOWN_ADJECTIVES,
    "weather_adj": WEATHER_ADJECTIVES, "day_part": DAY_PARTS, "direction": DIRECTIONS,
    "smell": SMELLS, "road_adj": ROAD_ADJECTIVES, "structure": STRUCTURES, "wild": WILD_ANIMALS,
    "wild_verb": WILD_VERBS, "prep": PREPOSITIONS, "thing": THINGS, "cargo": CARGO,
    "number": NUMBERS, "ground": GROUNDS, "feeling": FEELINGS, "day_adj": DAY_ADJECTIVES,
    "furniture": FURNITURE, "seat": SEATS, "habit": HABITS, "line": LINES,
    "question": QUESTIONS, "exclaim": EXCLAIMS, "role_item": ROLE_ITEMS, "when": WHEN,
}

# ---- attributes ----------------------------------------------------------------------------------
# A "fact" is one introduction sentence; it fixes one or two attribute kinds of a character.
FACTS: dict[str, tuple[str, ...]] = {
    "toy": ("colour", "object"),
    "pet": ("pet", "pet_name"),
    "home": ("home",),
    "food": ("food",),
    "clothes": ("clothes",),
}
ATTRIBUTE_POOLS: dict[str, tuple[str, ...]] = {
    "colour": COLOURS, "object": OBJECTS, "pet": PETS, "pet_name": PET_NAMES, "home": PLACES,
    "food": FOODS, "clothes": CLOTHES,
}
FACT_OF_KIND = {kind: fact for fact, kinds in FACTS.items() for kind in kinds}

# ---- templates -----------------------------------------------------------------------------------
# Fields: {name} the subject, {other} the other main character, {subj}/{Subj} she|he, {poss}/{Poss}
# her|his, attribute kinds ({colour}, {pet_name}, ...) of the subject, {role} the story's third
# character, and the generic slots above. "a {x}" becomes "an {x}" before a vowel.

OPENINGS = (
    "Once upon a time there was a {noun} named {name}.",
    "Long ago, in a {town_adj} {town} by the {landscape}, there lived a {noun} called {name}.",
    "In a {town_adj} {town} near the {landscape} lived a {noun} named {name}.",
    "This is a story about a {noun} called {name}.",
    "There was once a {noun} named {name} who lived in a {town_adj} {town}.",
    "Not far from the {landscape} lived a {noun} named {name}.",
)
SECOND_INTRODUCTIONS = (
    "{other}'s best friend was a {noun} named {name}.",
    "Next door lived a {noun} called {name}.",
    "In the same street lived a {noun} named {name}.",
    "One day {other} met a {noun} named {name}.",
    "{other} had a friend, a {noun} named {name}.",
)
FACT_INTRODUCTIONS: dict[str, tuple[str, ...]] = {
    "toy": (
        "{name} had a {colour} {object}.",
        "{Subj} had a {colour} {object} that {subj} took everywhere.",
        "{Poss} favourite thing was a {colour} {object}.",
        "{name}'s most precious thing was an old {colour} {object}.",
    ),
    "pet": (
        "{Subj} had a {pet} named {pet_name}.",
        "{name} lived with a {pet} called {pet_name}.",
        "{Subj} had a pet {pet}, and its name was {pet_name}.",
    ),
    "home": (
        "{Subj} lived in a little house by the {home}.",
        "{name}'s house stood near the {home}.",
        "{Poss} family lived next to the {home}.",
    ),
    "food": (
        "{Subj} always carried a bag of {food}.",
        "{name} loved {food} more than anything.",
        "{Poss} pockets were always full of {food}.",
    ),
    "clothes": (
        "{Subj} wore a {clothes} every day.",
        "{name} never went out without {poss} {clothes}.",
        "{name} had a warm {clothes}.",
    ),
}
THIRD_INTRODUCTIONS = (
    "Nearby lived a {role_adj} {role} who {habit}.",
    "Everyone in the {town} knew the {role_adj} {role}.",
    "At the end of the street worked a {role_adj} {role}.",
)
# The recorded references: (kind selected, template). The pronoun is lower case mid-sentence, and
# the field named by `kind` is the first word after it that depends on who the pronoun refers to.
# The words before that field fix the kind: no two kinds share a verb phrase, so the only question
# left to the reader is *whose* attribute comes next.
PRONOUN_REFERENCES: tuple[tuple[str, str], ...] = (
    ("colour", "{when} {subj} played with {poss} {colour} {object}."),
    ("colour", "{when} {subj} painted a star on {poss} {colour} {object}."),
    ("colour", "{when} {subj} polished {poss} {colour} {object} until it shone."),
    ("colour", "{when} {subj} showed everyone {poss} {colour} {object}."),
    ("object", "{when} {subj} cleaned {poss} {object} with a soft cloth."),
    ("object", "{when} {subj} forgot {poss} {object} at the {spot}."),
    ("object", "{when} {subj} wrapped {poss} {object} in paper."),
    ("pet", "{when} {subj} fed {poss} {pet}."),
    ("pet", "{when} {subj} brushed {poss} {pet}, {pet_name}."),
    ("pet", "{when} {subj} told {poss} {pet} all about it."),
    ("pet_name", "{when} {subj} whistled for {pet_name}."),
    ("pet_name", "{when} {subj} took {pet_name} for a walk."),
    ("pet_name", "{when} {subj} gave {pet_name} a treat."),
    ("home", "{when} {subj} ran all the way back to the {home}."),
    ("home", "{when} {subj} walked home to the house by the {home}."),
    ("home", "{when} {subj} could see {poss} house by the {home}."),
    ("food", "{when} {subj} opened {poss} bag of {food}."),
    ("food", "{when} {subj} shared {poss} {food} with a hungry {wild}."),
    ("food", "{when} {subj} ate the last of {poss} {food}."),
    ("clothes", "{when} {subj} put on {poss} {clothes}."),
    ("clothes", "{when} {subj} found a hole in {poss} {clothes}."),
    ("clothes", "{when} {subj} hung {poss} {clothes} on a hook."),
)
# Reminders: a character named, with one of its attributes. Each kind has several.
REMINDERS = (
    "{name} showed {poss} {colour} {object} to {other}.",
    "{name} picked up {poss} {colour} {object} and smiled.",
    "{name} told {other}, \"My {object} is {colour}.\"",
    "\"Look at my {colour} {object}!\" said {name}.",
    "{name} gave {pet_name} a pat on the head.",
    "{name} and {poss} {pet} ran down to the {landscape}.",
    "{name} called to {other}, \"Come and meet my {pet}, {pet_name}!\"",
    "{name}'s {pet} {pet_name} was asleep in the sun.",
    "From the window {name} could see the {home}.",
    "{name} said, \"I want to go home to the {home}.\"",
    "{name} lived closest to the {home}.",
    "{name} ate some {food} and felt {feeling}.",
    "{name} offered {other} some {food}.",
    "{name} asked {other}, \"Would you like some {food}?\"",
    "{name} pulled {poss} {clothes} tight.",
    "{name} asked {other}, \"Do you like my {clothes}?\"",
    "{name} was proud of {poss} {clothes}.",
)
NAMED_ACTIONS = (
    "{name} and {other} walked to the {spot}.",
    "{name} sat on the {seat} and watched a {wild}.",
    "{name} waved to the {role}.",
    "{name} felt {feeling} all of a sudden.",
)
DIALOGUES = (
    "\"{line},\" said {name}.",
    "{name} said, \"{line}.\"",
    "\"{question}?\" asked {name}.",
    "{name} shouted, \"{exclaim}!\"",
    "{name} said to {other}, \"{line}.\"",
)
# Fillers mention nobody by name or pronoun: they put distance between a mention and a reference.
WEATHER = (
    "The sun shone over the {landscape}.",
    "A {weather_adj} wind blew from the {direction}.",
    "Soft rain fell on the roofs.",
    "Grey clouds rolled over the {landscape}.",
    "It was a {weather_adj} {day_part}.",
    "Snow lay on the path.",
    "The air smelled of {smell}.",
    "Thunder rumbled far away.",
)
SCENERY = (
    "The road was {road_adj} and {road_adj}.",
    "Near the {spot} there was an old {structure}.",
    "The {spot} was quiet.",
    "The {landscape} stretched out for miles.",
    "Lanterns glowed along the street.",
)
EVENTS = (
    "A {wild} {wild_verb} {prep} the {thing}.",
    "Somewhere a bell rang {number} times.",
    "A cart full of {cargo} rolled past.",
    "Someone was singing.",
    "A leaf landed on the {ground}.",
    "A {wild} sat very still on the {thing}.",
    "Far away a clock struck {number}.",
)
THIRD_EVENTS = (
    "The {role} waved from a window.",
    "Just then the {role} walked by with a {role_item}.",
    "The {role} was humming an old song.",
    "Far off, the {role} called out a greeting.",
)
ENDINGS = (
    "In the end, {name} and {other} went home {feeling}.",
    "That night everyone in the {town} slept well.",
    "And that was the end of a {day_adj} day.",
    "The next morning, the sun rose over the {landscape} again.",
    "{name} and {other} stayed friends for many years.",
)
FILLERS = WEATHER + SCENERY + EVENTS
ALL_TEMPLATES = (
    OPENINGS + SECOND_INTRODUCTIONS + sum(FACT_INTRODUCTIONS.values(), ()) + THIRD_INTRODUCTIONS
    + tuple(t for _, t in PRONOUN_REFERENCES) + REMINDERS + NAMED_ACTIONS + DIALOGUES + FILLERS
    + THIRD_EVENTS + ENDINGS
)
