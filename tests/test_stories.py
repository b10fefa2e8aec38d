"""Guards data/stories.py, the generated `stories` corpus: determinism for a seed (also across
processes), size, clean text (printable ASCII, blank lines only between stories), a vocabulary and
template set too rich to memorise, and that every recorded pronoun Reference agrees with the text:
the attribute sits at attribute_pos, the spans index the names, the distractor differs, and
References survive a JSON round trip.

What makes coreference learnable by a small char-level model within the default budget is guarded
too: references are dense (8-14 per story), each pronoun template's verb phrase selects exactly one
attribute kind (so only *whose* attribute is open), the attribute pools are disjoint from each other
and from the filler words, most references are resolvable inside a 128-char context while a share
reaches back 100+ chars, and copying the most recent word of the right kind is often wrong (the
pronoun's gender must be used).
"""
from __future__ import annotations

import bisect
import hashlib
import os
import random
import re
import subprocess
import sys
import time
from pathlib import Path

import string

import pytest

from data import stories, story_words
from data.stories import (
    REFERENCES_PER_STORY, Reference, _named, corpus_stats, generate_stories, generate_story, join_stories,
)
from data.story_words import (
    ALL_TEMPLATES, ATTRIBUTE_POOLS, FEMALE_NAMES, GENERIC_SLOTS, MALE_NAMES, PET_NAMES,
    PRONOUN_REFERENCES, ROLES, TOWN_ADJECTIVES, TOWNS,
)

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def corpus() -> tuple[str, list[Reference]]:
    """About 300 kB of stories, shared by the property tests."""
    return generate_stories(300_000, seed=7)


def test_deterministic_for_a_seed_and_different_for_another():
    text, refs = generate_stories(50_000, seed=1)
    assert generate_stories(50_000, seed=1) == (text, refs)
    other, _ = generate_stories(50_000, seed=2)
    assert other != text


def test_same_text_in_another_process_with_another_hash_seed():
    """No dependence on set/dict hash order: PYTHONHASHSEED must not change the corpus."""
    code = ("import hashlib; from data.stories import generate_stories; "
            "print(hashlib.sha256(generate_stories(20_000, 5)[0].encode()).hexdigest())")
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                         text=True, check=True).stdout.strip()
    assert out == hashlib.sha256(generate_stories(20_000, 5)[0].encode()).hexdigest()


def test_run_as_a_file_it_says_how_to_run_it():
    """`python data/stories.py` (its statistics) ended in ModuleNotFoundError: the repository root is not on the
    path of a script run as a file; as `python data/prepare.py`, it now says to run it as a module."""
    done = subprocess.run([sys.executable, "data/stories.py"], cwd=ROOT, capture_output=True, text=True)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == "error: run it from the repository root as a module: python -m data.stories\n"


@pytest.mark.parametrize("n_chars", [1, 5_000, 120_000])
def test_size_stops_at_the_story_that_crosses_n_chars(n_chars):
    text, _ = generate_stories(n_chars, seed=3)
    last_story = text.split("\n\n")[-1]
    assert n_chars <= len(text) < n_chars + len(last_story) + 2


def test_default_size_is_about_1_5_mb_and_fast():
    t0 = time.process_time()  # CPU time: a busy machine does not make it fail
    text, _ = generate_stories()
    seconds = time.process_time() - t0
    assert 1_500_000 <= len(text) < 1_510_000
    assert seconds < 5, f"generating 1.5 MB took {seconds:.1f} s of CPU (budget 5 s)"


@pytest.mark.parametrize("n_chars", [0, -1, -1000])
def test_rejects_a_non_positive_size(n_chars):
    with pytest.raises(ValueError, match="n_chars"):
        generate_stories(n_chars)


def test_text_is_printable_ascii_and_blank_lines_only_separate_stories(corpus):
    text, _ = corpus
    assert set(text) <= {chr(c) for c in range(32, 127)} | {"\n"}
    stories = text.split("\n\n")
    assert len(stories) > 100
    for story in stories:
        assert story and story == story.strip(), repr(story[:80])
    assert "\n " not in text and " \n" not in text and "  " not in text  # no template brings its own edges
    assert all(template == template.strip() and "\n" not in template for template in ALL_TEMPLATES)


def test_whole_text_is_the_stories_of_generate_story_joined(corpus):
    """generate_stories = generate_story repeatedly from one Random(seed), offsets shifted."""
    text, refs = corpus
    rng = random.Random(7)
    pieces, expected, offset = [], [], 0
    while offset < len(text):
        story, story_refs = generate_story(rng)
        for r in story_refs:
            assert story[r.attribute_pos:].startswith(r.attribute)
            expected.append((r.pronoun_pos + offset, r.attribute_pos + offset, r.attribute))
        pieces.append(story)
        offset += len(story) + 2
    assert "\n\n".join(pieces) == text
    assert [(r.pronoun_pos, r.attribute_pos, r.attribute) for r in refs] == expected


def test_every_reference_agrees_with_the_text(corpus):
    text, refs = corpus
    assert len(refs) > 500
    for r in refs:
        separator = text.rfind("\n\n", 0, r.pronoun_pos)
        story_start = 0 if separator < 0 else separator + 2
        prefix = text[story_start:r.attribute_pos]
        assert "\n\n" not in text[r.pronoun_pos:r.attribute_pos + len(r.attribute)]
        # the pronoun and the attribute are whole words at their offsets, pronoun first
        assert re.match(rf"{r.pronoun}\b", text[r.pronoun_pos:]), text[r.pronoun_pos:][:20]
        assert not text[r.pronoun_pos - 1].isalpha()
        assert re.match(rf"{re.escape(r.attribute)}\b", text[r.attribute_pos:])
        assert r.pronoun_pos < r.attribute_pos
        # genders: she -> a girl with a boy as distractor, he -> the reverse
        she = r.pronoun == "she"
        girl, boy = (r.antecedent, r.distractor) if she else (r.distractor, r.antecedent)
        assert r.pronoun in ("she", "he") and girl in FEMALE_NAMES and boy in MALE_NAMES
        # attributes: a known kind, both from its pool, different, both stated before the pronoun
        assert r.kind in ATTRIBUTE_POOLS
        assert {r.attribute, r.distractor_attribute} <= set(ATTRIBUTE_POOLS[r.kind])
        assert r.attribute != r.distractor_attribute
        before = text[story_start:r.pronoun_pos]
        assert re.search(rf"\b{r.attribute}\b", before), (r, before)
        assert re.search(rf"\b{r.distractor_attribute}\b", before), (r, before)
        # spans: every mention of each name in this story before the attribute, in order
        for name, spans in ((r.antecedent, r.antecedent_spans), (r.distractor, r.distractor_spans)):
            found = [(m.start() + story_start, m.end() + story_start)
                     for m in re.finditer(rf"\b{name}\b", prefix)]
            assert spans == found and spans, (name, spans, found)
            assert all(text[s:e] == name for s, e in spans)


def test_names_never_collide_with_pet_names():
    assert not set(PET_NAMES) & (set(FEMALE_NAMES) | set(MALE_NAMES))
    assert not set(ATTRIBUTE_POOLS["pet_name"]) & (set(FEMALE_NAMES) | set(MALE_NAMES))  # (the pool drawn from)
    assert not set(FEMALE_NAMES) & set(MALE_NAMES)


def test_the_word_lists_keep_every_sentence_about_one_character():
    """Edits the lists invite, each of which made the corpus lie unseen: a name that is also a word the templates
    capitalise ("Soon he ..." read as a mention of Soon), an opener that is a pronoun ("She he gave ..."), a boy
    introduced as a girl, a value listed twice (a distractor with the antecedent's own value), a reminder told by
    pronoun (a reference never recorded), a filler that names someone, a line ending in its own punctuation
    ("Wait for me!."), a list of templates the corpus uses but ALL_TEMPLATES (the stats' count) leaves out."""
    names = set(FEMALE_NAMES) | set(MALE_NAMES)

    def fields(template: str) -> set[str]:
        return {f for _, f, _, _ in string.Formatter().parse(template) if f}

    capitalised = {w for t in ALL_TEMPLATES for w in re.findall(r"[A-Z][a-z]+", re.sub(r"\{[^}]*\}", " ", t))}
    capitalised |= {w for pool in GENERIC_SLOTS.values() for v in pool for w in re.findall(r"[A-Z][a-z]+", v)}
    assert not names & capitalised, names & capitalised
    pronouns = {"she", "he", "her", "his", "him", "hers"}
    assert not {w.lower() for opener in story_words.WHEN for w in opener.split()} & pronouns
    assert {n.split()[-1] for n in story_words.FEMALE_NOUNS} == {"girl"}
    assert {n.split()[-1] for n in story_words.MALE_NOUNS} == {"boy"}
    for pool in (*ATTRIBUTE_POOLS.values(), *GENERIC_SLOTS.values(), FEMALE_NAMES, MALE_NAMES, ROLES):
        assert len(set(pool)) == len(pool), [v for v in pool if pool.count(v) > 1]
    for template in story_words.REMINDERS:
        assert "name" in fields(template) and not fields(template) & {"subj", "Subj"}, template
    for template in story_words.FILLERS:
        assert fields(template) <= set(GENERIC_SLOTS), template
    for line in story_words.LINES + story_words.QUESTIONS + story_words.EXCLAIMS:
        assert line[-1].isalpha(), line

    def texts(value) -> list[str]:  # every string in the module's lists, dicts of lists, lists of pairs
        if isinstance(value, str):
            return [value]
        items = value.values() if isinstance(value, dict) else value if isinstance(value, tuple) else []
        return [text for item in items for text in texts(item)]
    every = texts(tuple(v for name, v in vars(story_words).items() if name.isupper()))
    sentences = {t for t in every if "{" in t or t.endswith((".", "!", "?", '"'))}  # (the templates, wherever)
    assert sentences == set(ALL_TEMPLATES)


def test_all_kinds_and_both_pronouns_are_referenced(corpus):
    _, refs = corpus
    assert {r.kind for r in refs} == set(ATTRIBUTE_POOLS)
    assert {r.pronoun for r in refs} == {"she", "he"}


def test_rich_enough_not_to_be_memorised(corpus):
    text, refs = corpus
    stats = corpus_stats(text, refs)
    assert stats["word_types"] >= 300, stats
    assert len(ALL_TEMPLATES) >= 30
    # references reach back past the nearby words, yet most stay inside a 128-char context
    assert stats["share_reach_back_100+"] >= 0.25, stats
    assert stats["share_in_128_window"] >= 0.65, stats


def test_a_pronoun_never_directly_follows_a_sentence_about_the_third_character(corpus):
    """'Mia waved to the baker. Then he ...' would let "he" mean the baker: a filler must intervene."""
    text, refs = corpus
    role = re.compile(rf"\bthe ({'|'.join(ROLES)})\b")
    for r in refs:
        start = max(0, r.pronoun_pos - 400)  # two sentences back is far less than 400 chars
        ends = [m.end() + start for m in re.finditer(r'[.!?]"?(?= |\n)', text[start:r.pronoun_pos])]
        previous_sentence = text[ends[-2]:ends[-1]] if len(ends) >= 2 else text[start:ends[-1]]
        assert not role.search(previous_sentence), text[ends[-2]:r.attribute_pos + 20]


# ---- what makes coreference learnable ----


def _after_pronoun(template: str) -> list[tuple[str, str | None]]:
    """The (literal, field) pairs of a reference template after its {subj}."""
    parsed = [(lit, name) for lit, name, _, _ in string.Formatter().parse(template)]
    i = [name for _, name in parsed].index("subj")
    return parsed[i + 1:]


def test_each_pronoun_template_selects_exactly_one_kind():
    """The words between the pronoun and the attribute (the verb phrase) fix the kind: no two kinds
    share one, and the selected field is the first attribute field after the pronoun."""
    kind_of_phrase: dict[str, str] = {}
    for kind, template in PRONOUN_REFERENCES:
        assert "{subj}" in template and template.count("{subj}") == 1, template
        phrase = ""
        for literal, name in _after_pronoun(template):
            phrase += literal
            if name in ATTRIBUTE_POOLS:
                assert name == kind, (template, name)
                break
            assert name in (None, "poss"), template  # nothing random between pronoun and attribute
            phrase += "{poss}" if name == "poss" else ""
        assert kind_of_phrase.setdefault(phrase, kind) == kind, (phrase, template)
    for phrase in kind_of_phrase:  # no phrase is the start of another kind's phrase either
        for other, kind in kind_of_phrase.items():
            if other != phrase and other.startswith(phrase):
                assert kind == kind_of_phrase[phrase], (phrase, other)


def test_attribute_pools_are_disjoint_from_each_other_and_from_the_fillers():
    """A colour in the text is always a toy's colour, a place always someone's home: the only
    question is whose."""
    words = {kind: {w.lower() for v in pool for w in v.split()} for kind, pool in ATTRIBUTE_POOLS.items()}
    kinds = sorted(words)
    for i, a in enumerate(kinds):
        for b in kinds[i + 1:]:
            assert not words[a] & words[b], (a, b, words[a] & words[b])
    every = set().union(*words.values())
    for slot, pool in GENERIC_SLOTS.items():
        generic = {w.lower().strip("?!,.") for v in pool for w in v.split()}
        assert not generic & every, (slot, generic & every)


def test_the_templates_own_words_hold_only_the_four_known_attribute_words():
    """The docs said no attribute word appears in a filler; the templates hold bell, clock, grey and well (scenery:
    "Somewhere a bell rang"), kept because changing a template changes the corpus. No fifth may join them."""
    every = {w.lower() for pool in ATTRIBUTE_POOLS.values() for v in pool for w in v.split()}
    literal = {w.lower() for t in ALL_TEMPLATES for w in re.findall(r"[A-Za-z]+", re.sub(r"\{[^}]*\}", " ", t))}
    assert literal & every == {"bell", "clock", "grey", "well"}


def test_references_are_dense(corpus):
    """Most of a story's body is pronoun references: 8-14 per story, several per 1000 chars."""
    text, refs = corpus
    stories = text.split("\n\n")
    lo, hi = REFERENCES_PER_STORY
    assert 8 <= lo <= hi <= 15
    rng = random.Random(11)
    counts = [len(generate_story(rng)[1]) for _ in range(200)]
    assert min(counts) >= lo and max(counts) <= hi
    assert len(refs) / len(text) * 1000 >= 5, len(refs) / len(text) * 1000
    assert len(refs) >= 8 * len(stories)


def test_most_recent_word_of_the_kind_is_often_the_distractors(corpus):
    """Copying the latest word of the right kind is not enough: for a good share of references the
    latest one before the pronoun is the distractor's, so the pronoun's gender must be used."""
    text, refs = corpus
    latest_is_distractor = 0
    for r in refs:
        last = {w: text.rfind(w, 0, r.pronoun_pos) for w in (r.attribute, r.distractor_attribute)}
        latest_is_distractor += last[r.distractor_attribute] > last[r.attribute]
    share = latest_is_distractor / len(refs)
    assert 0.2 <= share <= 0.6, share


def test_every_kind_has_several_templates_and_the_distractor_value_differs():
    kinds = {k for k, _ in PRONOUN_REFERENCES}
    assert kinds == set(ATTRIBUTE_POOLS)
    for kind in kinds:
        assert sum(k == kind for k, _ in PRONOUN_REFERENCES) >= 3, kind
        assert len(ATTRIBUTE_POOLS[kind]) >= 10, kind


def test_reminders_often_tell_the_same_sentence_by_name(corpus):
    """"Mia played with her red kite. Leo played with his blue drum. Then she played with her ":
    the same verb phrase leads to both characters' values; only the possessive's gender (and the
    name) tells them apart. Such a twin of the antecedent often lies within 128 chars."""
    for _, template in PRONOUN_REFERENCES:
        named = _named(template)
        assert named.startswith("{name} ") and "{subj}" not in named and "{when}" not in named
    text, refs = corpus
    twins = 0
    for r in refs:
        phrase = text[r.pronoun_pos + len(r.pronoun):r.attribute_pos]  # " played with her "
        window = text[max(0, r.attribute_pos - 128):r.pronoun_pos]
        twins += f"{r.antecedent}{phrase}{r.attribute}" in window
    assert twins / len(refs) >= 0.3, twins / len(refs)


# ---- mutation audit: guards the tests above left open ----


def test_the_article_before_a_vowel_is_an(corpus):
    """"a {colour} kite" with orange, "a {pet}" with owl: the text said "a orange kite", "a owl"."""
    text, _ = corpus
    assert re.search(r"\ban [a-z]", text)  # (an orange kite, an owl, an umbrella: the rule was used)
    assert not re.search(r"\b[Aa] [aeiou]", text), re.search(r".{30}\b[Aa] [aeiou].{30}", text)[0]


def test_a_text_that_reaches_n_chars_exactly_takes_no_further_story():
    """n_chars is reached, not passed: a story ending exactly at n_chars is the last one."""
    two = [("Once upon a time.", []), ("The end.", [])]
    assert join_stories(two, n_chars=len("Once upon a time.")) == ("Once upon a time.", [])
    assert join_stories(two, n_chars=len("Once upon a time.") + 1)[0] == "Once upon a time.\n\nThe end."


def test_a_reference_is_in_the_128_char_window_only_with_its_antecedent_named_there():
    """The attribute said in the window is not enough: the antecedent's last mention must be in it too."""
    def reference(text: str) -> Reference:
        return Reference(pronoun_pos=text.index("she"), pronoun="she", attribute_pos=len(text) - 3, attribute="red",
                         kind="colour", antecedent="Mia", antecedent_spans=[(0, 3)], distractor="Leo",
                         distractor_spans=[], distractor_attribute="blue")
    for gap, share in ((200, 0.0), (50, 1.0)):
        text = "Mia" + "." * gap + " red " + "." * 10 + " she " + "red"
        assert corpus_stats(text, [reference(text)])["share_in_128_window"] == share, gap


def test_corpus_stats_counts_the_stories():
    text, refs = generate_stories(5_000, seed=3)
    assert corpus_stats(text, refs)["stories"] == len(text.split("\n\n")) >= 2


def test_the_third_character_is_introduced_before_the_body_mentions_it(corpus):
    """A story without a third character never names a role: "the baker" would come from nowhere."""
    text, _ = corpus
    role = re.compile(rf"\b({'|'.join(ROLES)})\b")
    for story in text.split("\n\n"):
        first = role.search(story)
        assert first is None or first.start() < story.index("\n"), story[:300]


def test_about_half_the_stories_have_a_third_character(corpus):
    """The third character is a coin flip per story: without it the tests above would pass on no role at all."""
    text, _ = corpus
    role = re.compile(rf"\b({'|'.join(ROLES)})\b")
    stories_ = text.split("\n\n")
    with_third = sum(bool(role.search(story.split("\n")[0])) for story in stories_)
    assert len(stories_) > 100 and 0.35 < with_third / len(stories_) < 0.65, (with_third, len(stories_))


def test_a_pronoun_after_a_sentence_about_the_third_character_waits_for_a_filler(monkeypatch):
    """'Mia waved to the baker. Then he ...' would let "he" mean the baker. In the corpus it needs no
    reminder and no filler drawn; with those switched off every such pronoun still gets a filler first."""
    monkeypatch.setattr(stories, "FILLERS_BEFORE_PRONOUN", (0,))
    monkeypatch.setattr(stories, "P_REMIND_ANTECEDENT", 0.0)
    monkeypatch.setattr(stories, "P_REMIND_DISTRACTOR", 0.0)
    text, refs = generate_stories(100_000, seed=3)
    role = re.compile(rf"\bthe ({'|'.join(ROLES)})\b")
    for r in refs:
        start = max(0, r.pronoun_pos - 400)
        ends = [m.end() + start for m in re.finditer(r'[.!?]"?(?= |\n)', text[start:r.pronoun_pos])]
        previous_sentence = text[ends[-2]:ends[-1]]
        assert not role.search(previous_sentence), text[ends[-2]:r.attribute_pos + 20]


def test_a_story_gives_its_characters_several_kinds_of_attribute():
    """Most stories tell three or four of the five facts (toy, pet, home, food, clothes): with one or two,
    a story's references all select the same one or two kinds."""
    rng = random.Random(11)
    kinds = [len({r.kind for r in generate_story(rng)[1]}) for _ in range(200)]
    assert sum(kinds) / len(kinds) >= 3.5, sum(kinds) / len(kinds)


def test_a_reference_reaching_back_exactly_100_chars_counts_as_100_plus():
    r = Reference(pronoun_pos=95, pronoun="she", attribute_pos=103, attribute="red", kind="colour", antecedent="Mia",
                  antecedent_spans=[(0, 3)], distractor="Leo", distractor_spans=[], distractor_attribute="blue")
    stats = corpus_stats("Mia" + "." * 100 + "red", [r])
    assert stats["mean_reach_back_chars"] == 100 and stats["share_reach_back_100+"] == 1.0


def test_python_m_data_stories_is_a_command_like_the_others():
    """`python -m data.stories --seed 5` printed the default corpus's statistics, the argument ignored; `| head`
    ended in a BrokenPipeError traceback, `> /dev/full` in an OSError one. It runs through run_cli now."""
    from conftest import ROOT
    refused = subprocess.run([sys.executable, "-m", "data.stories", "--seed", "5"], cwd=ROOT, capture_output=True,
                             text=True, timeout=60)
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr == "error: unrecognized arguments: --seed 5 (see python -m data.stories --help)\n"
    with open("/dev/full", "w") as full:
        done = subprocess.run([sys.executable, "-m", "data.stories"], cwd=ROOT, stdout=full, stderr=subprocess.PIPE,
                              text=True, timeout=60)
    assert done.returncode == 2 and done.stderr == "error: No space left on device: standard output\n"


def _template_regex(templates) -> str:
    """An alternation that matches any sentence rendered from `templates` (a field: words without end punctuation)."""
    def literal(lit: str) -> str:  # "a " may have become "an "
        return re.escape(lit)[:-2] + r"n?\ " if re.search(r'(^|[\s"])[Aa] $', lit) else re.escape(lit)

    def one(t: str) -> str:
        return "".join(literal(lit) + (r'[^.!?\n"]+?' if name is not None else "")
                       for lit, name, _, _ in string.Formatter().parse(t))
    return "|".join(f"(?:{one(t)})" for t in templates)


def test_the_possessive_after_a_pronoun_has_the_pronouns_gender(corpus):
    """'Then he played with her blue drum': the possessive must agree with the pronoun, or the gender cue is a lie."""
    text, refs = corpus
    with_possessive = 0
    for r in refs:
        words = re.findall(r"[a-z]+", text[r.pronoun_pos + len(r.pronoun):r.attribute_pos])
        possessives = [w for w in words if w in ("her", "his")]
        assert possessives in ([], ["her" if r.pronoun == "she" else "his"]), text[r.pronoun_pos:r.attribute_pos]
        with_possessive += bool(possessives)
    assert with_possessive > len(refs) / 4


def test_either_the_girl_or_the_boy_opens_a_story(corpus):
    """The first character introduced is a coin flip: the girl is not always first."""
    text, _ = corpus
    names = set(FEMALE_NAMES) | set(MALE_NAMES)
    firsts = [next(w for w in re.findall(r"[A-Z][a-z]+", story) if w in names) for story in text.split("\n\n")]
    share_girl = sum(name in FEMALE_NAMES for name in firsts) / len(firsts)
    assert 0.35 < share_girl < 0.65, share_girl


def test_a_story_tells_three_or_four_facts():
    """Three or four of the five facts (toy, pet, home, food, clothes), both counts drawn."""
    counts = {len(stories._Story(random.Random(seed)).facts) for seed in range(200)}
    assert counts == {3, 4}, counts


def test_the_number_of_references_per_story_spans_its_whole_range():
    lo, hi = REFERENCES_PER_STORY
    rng = random.Random(11)
    counts = {len(generate_story(rng)[1]) for _ in range(300)}
    assert min(counts) == lo and max(counts) == hi, counts


def record_what_is_said(monkeypatch) -> list[tuple[str, str]]:
    """The list that each sentence a story says is added to, as (template, subject name), from now on."""
    said: list[tuple[str, str]] = []
    original = stories._Story.say

    def recording(self, template, subject):
        said.append((template, subject.name))
        return original(self, template, subject)
    monkeypatch.setattr(stories._Story, "say", recording)
    return said


def test_every_template_is_used_and_each_character_tells_its_facts_in_its_own_order(monkeypatch):
    """Every template (named actions, dialogue, third-character events included) appears in a corpus of this size;
    the second character's facts are not always told in the first character's order."""
    said = record_what_is_said(monkeypatch)
    generate_stories(300_000, seed=7)
    assert set(ALL_TEMPLATES) <= {t for t, _ in said}, set(ALL_TEMPLATES) - {t for t, _ in said}
    fact_of = {t: fact for fact, ts in story_words.FACT_INTRODUCTIONS.items() for t in ts}
    openings, differ = set(story_words.OPENINGS), 0
    starts = [i for i, (t, _) in enumerate(said) if t in openings] + [len(said)]
    for a, b in zip(starts, starts[1:]):
        order: dict[str, list[str]] = {}
        for t, name in said[a:b]:
            if t in fact_of:
                order.setdefault(name, []).append(fact_of[t])
        first, second = order.values()
        differ += first != second
    assert differ > (len(starts) - 1) / 4, differ


def test_paragraphs_introductions_then_body_then_the_ending_alone():
    """A story's first line is its introductions, its last line the ending alone, and the body between them is
    often broken into more than one paragraph."""
    text, _ = generate_stories(100_000, seed=5)
    introductions = sum(story_words.FACT_INTRODUCTIONS.values(), ()) + story_words.THIRD_INTRODUCTIONS
    intro = re.compile(rf"(?:{_template_regex(introductions)})$")
    ending = re.compile(_template_regex(story_words.ENDINGS))
    names = set(FEMALE_NAMES) | set(MALE_NAMES)
    pieces = text.split("\n\n")
    for story in pieces:
        lines = story.split("\n")
        assert intro.search(lines[0]), lines[0][-120:]
        assert ending.fullmatch(lines[-1]), lines[-1]
        named = [w for w in re.findall(r"[A-Z][a-z]+", lines[-1]) if w in names]
        opener = next(w for w in re.findall(r"[A-Z][a-z]+", story) if w in names)
        assert not named or named[0] == opener, (opener, lines[-1])  # the ending is about the first character
    assert sum(len(story.split("\n")) > 3 for story in pieces) > len(pieces) / 2


def test_a_reference_is_in_the_128_char_window_counted_back_from_the_attribute_not_the_pronoun():
    text = "Mia red " + "." * 100 + " she " + "." * 30 + "red"
    r = Reference(pronoun_pos=text.index("she"), pronoun="she", attribute_pos=len(text) - 3, attribute="red",
                  kind="colour", antecedent="Mia", antecedent_spans=[(0, 3)], distractor="Leo", distractor_spans=[],
                  distractor_attribute="blue")
    assert r.attribute_pos - 128 > 0 >= r.pronoun_pos - 128  # (Mia is in the pronoun's window, not the attribute's)
    assert corpus_stats(text, [r])["share_in_128_window"] == 0.0


def test_each_story_introduces_a_girl_and_a_boy_each_by_the_right_noun(corpus):
    """'a girl named Leo': the noun of each introduction agrees with the name's gender, and a story introduces
    exactly two characters that way, one girl and one boy."""
    text, _ = corpus
    for story in text.split("\n\n"):
        intro = story.split("\n")[0]
        found = re.findall(r"\b(girl|boy) (?:named|called) ([A-Z][a-z]+)\b", intro)
        assert sorted(noun for noun, _ in found) == ["boy", "girl"], intro
        for noun, name in found:
            assert name in (FEMALE_NAMES if noun == "girl" else MALE_NAMES), (noun, name)


def test_a_sentence_about_both_characters_names_two_different_ones(corpus):
    """'{name} and {other}': the other is the second character, never the subject again ("Mia and Mia")."""
    text, _ = corpus
    names = set(FEMALE_NAMES) | set(MALE_NAMES)
    both = 0
    for sentence in re.split(r'(?<=[.!?])"? ', text.replace("\n", " ")):
        said = [w for w in re.findall(r"[A-Z][a-z]+", sentence) if w in names]
        assert len(said) == len(set(said)), sentence
        both += len(said) == 2
    assert both > 100


def test_a_story_keeps_its_town(corpus):
    """The town and its adjective are drawn once per story: "a sleepy village" is not "the city" two lines on."""
    text, _ = corpus
    towns, phrases = "|".join(TOWNS), "|".join(TOWN_ADJECTIVES)
    with_two = 0
    for story in text.split("\n\n"):
        said = re.findall(rf"\b({towns})\b(?! hall)", story)
        assert len(set(said)) <= 1, said
        adjectives = re.findall(rf"\b({phrases}) (?:{towns})\b(?! hall)", story)
        assert len(set(adjectives)) <= 1, adjectives
        with_two += len(said) >= 2
    assert with_two > 10


def _said(monkeypatch, n_stories=200, seed=11):
    """[(template, subject name)] of each of n_stories stories."""
    said = record_what_is_said(monkeypatch)
    rng, out = random.Random(seed), []
    for _ in range(n_stories):
        said.clear()
        generate_story(rng)
        out.append(list(said))
    return out


def test_the_body_interleaves_actions_and_dialogue_with_the_references(monkeypatch):
    """The body's episodes are shuffled: named actions and dialogue do not all come after the last reference,
    and a dialogue is a line from each of the two main characters."""
    references = {t for _, t in story_words.PRONOUN_REFERENCES}
    others = set(story_words.NAMED_ACTIONS) | set(story_words.DIALOGUES)
    early = dialogues = 0
    for said in _said(monkeypatch):
        last_reference = max(i for i, (t, _) in enumerate(said) if t in references)
        early += any(t in others for t, _ in said[:last_reference])
        lines = [name for t, name in said if t in story_words.DIALOGUES]
        assert len(lines) in (0, 2) and len(set(lines)) == len(lines), lines
        dialogues += bool(lines)
    assert early > 50 and dialogues > 50, (early, dialogues)


def test_the_references_are_about_either_character(corpus):
    """Each body episode picks its subject afresh: the antecedent is not always the character introduced first."""
    text, refs = corpus
    names = set(FEMALE_NAMES) | set(MALE_NAMES)
    first_of = {}
    for start, story in zip([0] + [m.end() for m in re.finditer("\n\n", text)], text.split("\n\n")):
        first_of[start] = next(w for w in re.findall(r"[A-Z][a-z]+", story) if w in names)
    starts = sorted(first_of)
    about_first = sum(r.antecedent == first_of[starts[bisect.bisect(starts, r.pronoun_pos) - 1]] for r in refs)
    assert 0.35 < about_first / len(refs) < 0.65, about_first / len(refs)


def test_paragraph_breaks_in_the_body_are_occasional(corpus):
    """A new paragraph now and then (a 0.15 chance after an episode), not after every episode."""
    text, refs = corpus
    pieces = text.split("\n\n")
    body_lines = sum(len(story.split("\n")) - 2 for story in pieces)
    assert len(pieces) <= body_lines < len(refs) / 2, (body_lines, len(refs))


def test_corpus_stats_counts_words_of_any_case_and_reaches_back_from_the_last_mention():
    def ref(text, spans, attribute_pos):
        return Reference(pronoun_pos=text.index("she"), pronoun="she", attribute_pos=attribute_pos, attribute="red",
                         kind="colour", antecedent="Mia", antecedent_spans=spans, distractor="Leo",
                         distractor_spans=[], distractor_attribute="blue")
    text = "Mia red. Saw Mia saw. Then she red"  # short: the 128-char window starts at the text's start
    last = [m.span() for m in re.finditer("Mia", text)]
    r = ref(text, last, len(text) - 3)
    stats = corpus_stats(text, [r])
    assert (stats["words"], stats["word_types"]) == (8, 5)  # (Saw/saw one type: types are lower-cased)
    assert stats["mean_reach_back_chars"] == r.attribute_pos - last[-1][1]
    assert stats["share_in_128_window"] == 1.0
    longer = text + " Then it rained." * 20  # (the window of an attribute near the start is not counted from the end)
    assert len(longer) > 128 > r.attribute_pos and corpus_stats(longer, [r])["share_in_128_window"] == 1.0
    far = "Mia" + "." * 100 + " she red"
    both = corpus_stats(far, [ref(far, [(0, 3)], len(far) - 3), r])
    assert both["share_reach_back_100+"] == 0.5
