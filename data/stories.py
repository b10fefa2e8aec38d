"""A deterministic synthetic corpus of short stories: the default `stories` dataset.

Why this corpus needs attention. Each story introduces one girl and one boy, each with attributes
of their own (a coloured toy, a named pet, a home, a food, a piece of clothing), e.g.

    ... a girl named Mia. Mia had a red kite. She had a cat named Tib. ...
    ... a boy called Leo. He had a blue drum. He lived with a dog called Rex. ...

The body of the story is mostly pronoun references, 8-14 of them, each one selecting one attribute:

    ... Leo showed his blue drum to Mia. Mia picked up her red kite and smiled. It was windy.
    Then she played with her red kite. ...

The word after "her " is not predictable from the nearby words: which *kind* of word comes is fixed
by the verb ("played with" -> the toy's colour, "fed" -> the pet, "put on" -> the clothes), but
*which* colour depends on who "she" is: it is Mia's colour, stated with her name earlier (in her
introduction, or in a reminder a sentence or two before), next to the distractor (Leo, the other
gender, with a different value of the same kind, often mentioned more recently). A model can only
predict it by attending from "her " back to the antecedent's words, skipping the distractor's.
Most references are resolvable inside a short context: the antecedent's name and its attribute
both lie in the 128 characters (about 25 words) before the attribute; a share reach back further
(`corpus_stats` measures it). Names, pets, colours and places are drawn afresh for every story,
sentences are built from a hundred templates and a dozen openers, and the words of the attribute
kinds appear in no generic slot and in no template but four (`bell`, `clock`, `grey`, `well`: scenery
such as "Somewhere a bell rang"), so the text cannot simply be memorised and attributes are rarely
confused with scenery (where `bell`, `clock` or `well` is an attribute in a story that also says the
scenery sentence, the probe counts the scenery as an earlier mention of the attribute; "Grey clouds",
capitalised, is another word to it, and another token).

Pronouns stay unambiguous: a story has exactly one female and one male character who are referred
to by pronoun; the optional third character is a role ("the old baker") never referred to by
pronoun. Every pronoun reference that selects an attribute is recorded as a `Reference` (where the
pronoun, the attribute, the antecedent's and the distractor's names are), for attention probes.

Everything is drawn from one `random.Random(seed)`, so a seed gives the same text on any machine.
"""
from __future__ import annotations

import functools
import math
import random
import re
import string
import sys
from dataclasses import dataclass, field, replace
from typing import Iterable, Sequence

if __name__ == "__main__" and not __package__:  # `python data/stories.py`: the repository root is not importable
    print("error: run it from the repository root as a module: python -m data.stories", file=sys.stderr)
    sys.exit(2)

from data.story_words import (
    FEMALE_NAMES, MALE_NAMES, FEMALE_NOUNS, MALE_NOUNS, TOWNS, TOWN_ADJECTIVES, ROLES,
    ROLE_ADJECTIVES, GENERIC_SLOTS, FACTS, ATTRIBUTE_POOLS, FACT_OF_KIND, OPENINGS,
    SECOND_INTRODUCTIONS, FACT_INTRODUCTIONS, THIRD_INTRODUCTIONS, PRONOUN_REFERENCES, REMINDERS,
    NAMED_ACTIONS, DIALOGUES, THIRD_EVENTS, ENDINGS, FILLERS, ALL_TEMPLATES,
)


_PRONOUNS = {
    "female": {"subj": "she", "Subj": "She", "poss": "her", "Poss": "Her"},
    "male": {"subj": "he", "Subj": "He", "poss": "his", "Poss": "His"},
}
_ARTICLE = re.compile(r'(^|[\s"])[Aa] $')  # a literal ending in the article "a "/"A "


# ---- references ----------------------------------------------------------------------------------
@dataclass
class Reference:
    """A pronoun reference that selects an attribute of its antecedent; offsets are char offsets."""

    pronoun_pos: int  # offset of the pronoun ("she"/"he") in the text
    pronoun: str  # "she" or "he"
    attribute_pos: int  # offset where the selected attribute starts (what the model must predict)
    attribute: str  # the attribute text, e.g. "red": the first word that depends on the antecedent
    kind: str  # which attribute kind is selected: "colour", "pet", "object", ... (see FACTS)
    antecedent: str  # the antecedent's name, e.g. "Mia"
    antecedent_spans: list[tuple[int, int]]  # [start, end) of its mentions before attribute_pos
    distractor: str  # the other main character's name (the other gender)
    distractor_spans: list[tuple[int, int]]  # [start, end) of its mentions before attribute_pos
    distractor_attribute: str  # the distractor's attribute of the same kind (always different)


def _shifted(r: Reference, offset: int) -> Reference:
    """The same reference with every offset moved by `offset`."""
    return replace(
        r, pronoun_pos=r.pronoun_pos + offset, attribute_pos=r.attribute_pos + offset,
        antecedent_spans=[(s + offset, e + offset) for s, e in r.antecedent_spans],
        distractor_spans=[(s + offset, e + offset) for s, e in r.distractor_spans],
    )


# ---- rendering -----------------------------------------------------------------------------------
@dataclass
class _Character:
    name: str
    gender: str  # "female" | "male"
    noun: str  # "girl", "little boy", ...
    attributes: dict[str, str] = field(default_factory=dict)  # kind -> value


@functools.lru_cache(maxsize=None)
def _parse(template: str) -> tuple[tuple[str, str | None], ...]:
    """The template as (literal text, field name or None) pairs."""
    return tuple((literal, name) for literal, name, _, _ in string.Formatter().parse(template))


@functools.lru_cache(maxsize=None)
def _fields(template: str) -> frozenset[str]:
    """The field names a template uses."""
    return frozenset(name for _, name in _parse(template) if name is not None)


@functools.lru_cache(maxsize=None)
def _facts_needed(template: str) -> frozenset[str]:
    """Which facts (FACTS keys) a template's attribute fields need the story to have introduced."""
    return frozenset(FACT_OF_KIND[name] for name in _fields(template) if name in FACT_OF_KIND)


def _render(template: str, slots: dict[str, str], rng: random.Random) -> tuple[str, dict[str, int]]:
    """Fill a template; returns the text and the offset of each field's first occurrence."""
    parts: list[str] = []
    offsets: dict[str, int] = {}
    length = 0
    for literal, name in _parse(template):
        if name is None:
            parts.append(literal)
            length += len(literal)
            continue
        if name in slots:
            value = slots[name]
        else:  # a generic slot: a fresh word each time it occurs
            value = rng.choice(GENERIC_SLOTS[name])
        if value[0] in "aeiou" and _ARTICLE.search(literal):
            literal = literal[:-1] + "n "
        parts.append(literal)
        length += len(literal)
        offsets.setdefault(name, length)
        parts.append(value)
        length += len(value)
    return "".join(parts), offsets


class _Writer:
    """Accumulates one story's sentences: " " between sentences, "\n" between paragraphs."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.length = 0
        self.separator = ""

    def sentence(self, text: str) -> int:
        """Append a sentence; returns its offset in the story."""
        self.parts.append(self.separator)
        self.length += len(self.separator)
        start = self.length
        self.parts.append(text)
        self.length += len(text)
        self.separator = " "
        return start

    def paragraph(self) -> None:
        """Start a new paragraph at the next sentence (a single newline, never a blank line)."""
        if self.parts:
            self.separator = "\n"

    def text(self) -> str:
        return "".join(self.parts)


# ---- stories -------------------------------------------------------------------------------------
def _make_characters(rng: random.Random) -> tuple[_Character, _Character]:
    """One girl and one boy whose attributes differ within every kind."""
    girl = _Character(rng.choice(FEMALE_NAMES), "female", rng.choice(FEMALE_NOUNS))
    boy = _Character(rng.choice(MALE_NAMES), "male", rng.choice(MALE_NOUNS))
    for kind, pool in ATTRIBUTE_POOLS.items():
        girl.attributes[kind], boy.attributes[kind] = rng.sample(pool, 2)
    return girl, boy


def _slots(subject: _Character, other: _Character, story: dict[str, str]) -> dict[str, str]:
    """Field values for a sentence about `subject` (with `other` as the second character)."""
    return {
        **story, **subject.attributes, **_PRONOUNS[subject.gender],
        "name": subject.name, "other": other.name, "noun": subject.noun,
    }


# How a story's body is built (see generate_story).
REFERENCES_PER_STORY = (8, 14)  # pronoun references per story: most of the body
P_REMIND_ANTECEDENT = 0.85 # a reference episode first names the antecedent with the attribute...
P_REMIND_DISTRACTOR = 0.6  # ... and/or the distractor with its own (same kind), in random order
FILLERS_BEFORE_PRONOUN = (0, 0, 0, 0, 1, 1, 2)  # short fillers between the reminders and the pronoun
P_TWIN_REMINDER = 0.6  # a reminder repeats the reference's verb phrase, by name


@functools.lru_cache(maxsize=None)
def _named(template: str) -> str:
    """A pronoun reference told by name: "{when} {subj} played with ..." -> "{name} played with ..."."""
    return template.replace("{when} {subj}", "{name}")


class _Story:
    """One story as it is told: its characters, chosen facts and setting, the text so far."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.girl, self.boy = _make_characters(rng)
        self.first, self.second = (self.girl, self.boy) if rng.random() < 0.5 else (self.boy, self.girl)
        self.facts = rng.sample(tuple(FACTS), rng.randint(3, 4))
        self.kinds = [kind for fact in FACTS if fact in self.facts for kind in FACTS[fact]]
        self.has_third = rng.random() < 0.5
        self.setting = {  # fixed for the whole story
            "role": rng.choice(ROLES), "role_adj": rng.choice(ROLE_ADJECTIVES),
            "town": rng.choice(TOWNS), "town_adj": rng.choice(TOWN_ADJECTIVES),
        }
        self.writer = _Writer()
        self.last_mentions_role = False  # did the latest sentence mention the third character?

    def other(self, character: _Character) -> _Character:
        return self.boy if character is self.girl else self.girl

    def say(self, template: str, subject: _Character) -> tuple[int, dict[str, int]]:
        """Write one sentence about `subject`; (where it starts, where each field landed in it)."""
        self.last_mentions_role = "role" in _fields(template)
        text, offsets = _render(template, _slots(subject, self.other(subject), self.setting), self.rng)
        return self.writer.sentence(text), offsets

    def usable(self, templates: tuple[str, ...]) -> list[str]:
        ok = [t for t in templates if _facts_needed(t) <= set(self.facts)]
        return ok if self.has_third else [t for t in ok if "role" not in _fields(t)]

    def introductions(self) -> None:
        """Each main character with every chosen fact, then the third character."""
        rng = self.rng
        for character, openings in ((self.first, OPENINGS), (self.second, SECOND_INTRODUCTIONS)):
            self.say(rng.choice(openings), character)
            for fact in rng.sample(self.facts, len(self.facts)):
                self.say(rng.choice(FACT_INTRODUCTIONS[fact]), character)
        if self.has_third:
            self.say(rng.choice(THIRD_INTRODUCTIONS), self.first)
        self.writer.paragraph()

    def reference(self, subject: _Character) -> tuple[int, int, str, _Character]:
        """A pronoun-reference episode: maybe reminders of the antecedent's attribute and of the
        distractor's (same kind, by name, in random order), 0-2 short fillers, then the pronoun
        sentence -> (pronoun offset, attribute offset, kind, antecedent)."""
        rng = self.rng
        kind = rng.choice(self.kinds)
        template = rng.choice([t for k, t in PRONOUN_REFERENCES if k == kind])
        # A reminder names a character and states its attribute of the kind the pronoun selects.
        reminders = [t for t in REMINDERS if kind in _fields(t) and _facts_needed(t) <= set(self.facts)]
        said = [c for c, p in ((subject, P_REMIND_ANTECEDENT), (self.other(subject), P_REMIND_DISTRACTOR))
                if rng.random() < p]
        for character in rng.sample(said, len(said)):
            # Often the reminder is the reference's own sentence told by name ("Mia played with
            # her red kite."), for the antecedent and the distractor alike: the same words lead
            # to both characters' values, and only the possessive's gender tells them apart.
            twin = rng.random() < P_TWIN_REMINDER
            self.say(_named(template) if twin else rng.choice(reminders), character)
        n_fillers = rng.choice(FILLERS_BEFORE_PRONOUN)
        if self.last_mentions_role:  # never "Mia waved to the baker. Then he ...": he is unambiguous
            n_fillers = max(n_fillers, 1)
        for _ in range(n_fillers):
            self.say(rng.choice(FILLERS), subject)
        start, offsets = self.say(template, subject)
        return start + offsets["subj"], start + offsets[kind], kind, subject

    def body(self) -> list[tuple[int, int, str, _Character]]:
        """Mostly pronoun-reference episodes, a few named actions, dialogue and third-character
        lines: so most references can be resolved inside a short context, and the most recent
        attribute of the right kind is often the distractor's. Returns the references made."""
        rng = self.rng
        episodes = ["reference"] * rng.randint(*REFERENCES_PER_STORY) + ["action"] * rng.randint(0, 2)
        episodes += ["dialogue"] * rng.randint(0, 1) + ["third"] * (self.has_third and rng.randint(0, 1))
        rng.shuffle(episodes)
        refs = []
        for episode in episodes:
            subject = rng.choice((self.girl, self.boy))
            if episode == "reference":
                refs.append(self.reference(subject))
            elif episode == "action":
                self.say(rng.choice(self.usable(NAMED_ACTIONS)), subject)
            elif episode == "dialogue":
                self.say(rng.choice(self.usable(DIALOGUES)), subject)
                self.say(rng.choice(self.usable(DIALOGUES)), self.other(subject))
            else:
                self.say(rng.choice(THIRD_EVENTS), subject)
            if rng.random() < 0.15:
                self.writer.paragraph()
        self.writer.paragraph()
        return refs

    def records(self, text: str, refs: list[tuple[int, int, str, _Character]]) -> list[Reference]:
        """The references made, with every mention of both characters before each attribute."""
        mentions = {c.name: [m.span() for m in re.finditer(rf"\b{c.name}\b", text)] for c in (self.girl, self.boy)}
        out = []
        for pronoun_pos, attribute_pos, kind, antecedent in refs:
            distractor = self.other(antecedent)
            out.append(Reference(
                pronoun_pos=pronoun_pos,
                pronoun=_PRONOUNS[antecedent.gender]["subj"],
                attribute_pos=attribute_pos,
                attribute=antecedent.attributes[kind],
                kind=kind,
                antecedent=antecedent.name,
                antecedent_spans=[s for s in mentions[antecedent.name] if s[0] < attribute_pos],
                distractor=distractor.name,
                distractor_spans=[s for s in mentions[distractor.name] if s[0] < attribute_pos],
                distractor_attribute=distractor.attributes[kind],
            ))
        return out


def generate_story(rng: random.Random) -> tuple[str, list[Reference]]:
    """One story: introductions, a body of pronoun references, an ending; offsets relative to the
    story's start."""
    story = _Story(rng)
    story.introductions()
    refs = story.body()
    story.say(rng.choice(ENDINGS), story.first)
    text = story.writer.text()
    return text, story.records(text, refs)


def join_stories(stories: Iterable[tuple[str, list[Reference]]], n_chars: float = math.inf
                 ) -> tuple[str, list[tuple[int, Reference]]]:
    """Stories joined by a blank line ("\\n\\n"), as in the corpus, until the text reaches n_chars
    (it may stop at the end of the story that crosses it) -> (text, [(where the reference's story
    starts in text, the reference with offsets inside its story)])."""
    parts: list[str] = []
    references: list[tuple[int, Reference]] = []
    length = 0
    for story, refs in stories:
        if length >= n_chars:
            break
        if parts:
            parts.append("\n\n")
            length += 2
        references.extend((length, r) for r in refs)
        parts.append(story)
        length += len(story)
    return "".join(parts), references


def generate_stories(n_chars: int = 1_500_000, seed: int = 1337) -> tuple[str, list[Reference]]:
    """The corpus: stories joined by a blank line until the text reaches n_chars; references with
    offsets into the whole text. Deterministic: the same (n_chars, seed) gives the same text and
    references on any machine."""
    if n_chars <= 0:
        raise ValueError(f"n_chars must be positive, got {n_chars}")
    rng = random.Random(seed)
    text, references = join_stories(iter(lambda: generate_story(rng), None), n_chars)
    return text, [_shifted(r, start) for start, r in references]


def corpus_stats(text: str, references: list[Reference]) -> dict[str, float]:
    """Size, vocabulary and reach-back figures of a generated corpus (for `__main__` and tests)."""
    words = re.findall(r"[A-Za-z]+", text)
    # Reach-back: from the end of the antecedent's last name mention to the attribute.
    reach = [r.attribute_pos - r.antecedent_spans[-1][1] for r in references]
    # Resolvable in a 128-char context: the antecedent's last mention and an earlier occurrence of
    # the attribute (its introduction or a reminder) both lie in the 128 chars before the attribute.
    in_window = 0
    for r in references:
        window_start = max(r.attribute_pos - 128, 0)
        stated = re.search(rf"\b{r.attribute}\b", text[window_start:r.pronoun_pos]) is not None
        in_window += stated and r.antecedent_spans[-1][0] >= window_start
    return {
        "chars": len(text),
        "stories": text.count("\n\n") + 1,
        "words": len(words),
        "word_types": len({w.lower() for w in words}),
        "templates": len(ALL_TEMPLATES),
        "references": len(references),
        "mean_reach_back_chars": sum(reach) / max(len(reach), 1),
        "share_reach_back_100+": sum(d >= 100 for d in reach) / max(len(reach), 1),
        "share_in_128_window": in_window / max(len(reach), 1),
    }


def main(argv: Sequence[str] | None = None) -> None:
    """`python -m data.stories`: two stories of the default corpus, then its statistics (corpus_stats)."""
    import time

    from tinygpt.errors import ArgParser
    ArgParser(prog="python -m data.stories", description="Print two stories of the default corpus (1,500,000 "
              "characters, seed 1337) and its statistics.").parse_args(argv)  # (any argument was ignored)
    t0 = time.perf_counter()
    corpus, refs = generate_stories()
    seconds = time.perf_counter() - t0
    for sample in corpus.split("\n\n")[:2]:
        print(sample, end="\n\n")
    for key, value in corpus_stats(corpus, refs).items():
        print(f"{key:>24}: {value:.3f}" if isinstance(value, float) else f"{key:>24}: {value}")
    print(f"{'generation_seconds':>24}: {seconds:.2f}")


if __name__ == "__main__":  # (through run_cli: `| head` ends quietly, a full disk or Ctrl-C is one line)
    from tinygpt.errors import run_cli
    run_cli(main)
