"""Mutation pass 36 (docs/security-testing.md): tests that kill the survivors of intent_features.py,
which no earlier pass mutated: the features the built-in intent model reads. Each case pins what a
real call to ``featurize`` (or the helper it uses) gives; the shipped model's weights mean
something only for exactly these features."""
from __future__ import annotations

import itertools

import pytest

from qdrant_guard import intent_features as F
from qdrant_guard.intent_features import CUE_NAMES, featurize
from qdrant_guard.intent_fold import fold
from test_intent_normalize import _CountingStr, _nfkc_input_chars


def _chargrams(text: str) -> list[str]:
    return [k for k in featurize(text).keys if k.startswith("c:")]


def test_character_trigrams_are_read_from_tokens_of_up_to_24_characters():
    assert len(_chargrams("abcdefghijklmnopqrstuvw")) == 23
    assert len(_chargrams("abcdefghijklmnopqrstuvwx")) == 24
    assert _chargrams("abcdefghijklmnopqrstuvwxy") == []


@pytest.mark.parametrize("alt", ["Xyz", "1ab", "a", "a?", "a?b", "a*", "a{2}"])
def test_word_led_refuses_an_alternative_without_a_leading_letter_of_its_own(alt):
    with pytest.raises(ValueError, match="does not start with a letter a-z of its own"):
        F._word_led(alt)


def test_word_led_takes_z_and_refuses_free_alternatives_sharing_a_first_letter():
    assert F._word_led("zed", "abc") == r"z(?<!\w.)(?:(?:ed))|a(?<!\w.)(?:(?:bc))"
    with pytest.raises(ValueError, match="share first letters"):
        F._word_led("abc", free=("axe",))


def test_nfkc_pieces_start_at_a_character_whose_decomposition_ends_in_a_mark_and_stop_at_the_cut():
    # U+01C4 (NFKD D Z U+030C, NFKC two characters): eight pieces of 128 give the 2048 kept. Read
    # as "its decomposition's last character" it could never start a piece (2048 read), and a
    # ninth piece after exactly 2048 was read for nothing.
    assert _nfkc_input_chars("\u01c4" * 2048) == 1024


def test_casefold_stops_at_a_piece_that_fills_the_cut_exactly():
    # U+0130 folds to two characters: two pieces of 512 give the 2048 kept, and no third is read.
    _CountingStr.folded = []
    text = "\u0130" * 3000
    assert F._casefold_prefix(_CountingStr(text), 2048) == text.casefold()[:2048]
    assert _CountingStr.folded == [512, 512]


def _cue(text: str, name: str) -> tuple[float, str | None]:
    feats = featurize(text)
    return feats.cues[CUE_NAMES.index(name)], feats.evidence.get(name)


@pytest.mark.parametrize(("text", "name", "evidence"), [
    # An opener whose close is not followed by the follow character: the next opener may start
    # right after that close.
    ("see {{a}{{b}} here", "markup_injection", "{{b}}"),
    ("see ![a]![b](x) here", "exfil_channel", "![b]("),
])
def test_an_opener_right_after_a_failed_close_is_found(text, name, evidence):
    assert _cue(text, name) == (1.0, evidence)


def test_an_opener_without_a_match_does_not_hide_a_later_match_of_the_other_alternatives():
    # `{{` is there but never closed by `}}`: the scan must answer "no start", not a start at 0.
    assert _cue("see {{ x ### here", "markup_injection") == (1.0, "###")


def _gap(n: int) -> str:
    return " " + "x" * (n - 2) + " "


@pytest.mark.parametrize(("head", "gap1", "mid", "gap2", "tail", "name", "value"), [
    ("ignore", 40, "all", 30, "instructions", "instruction_override", 1 / 3 + 0.5),
    ("email", 60, "to", 30, "gmail", "exfil_channel", 1.0),
])
def test_windowed_alternatives_span_gaps_of_exactly_their_bounds_and_no_more(head, gap1, mid, gap2, tail, name, value):
    text = head + _gap(gap1) + mid + _gap(gap2) + tail
    assert _cue(text, name) == (value, text)
    assert _cue(head + _gap(gap1 + 1) + mid + _gap(gap2) + tail, name) == (0.0, None)
    assert _cue(head + _gap(gap1) + mid + _gap(gap2 + 1) + tail, name) == (0.0, None)


@pytest.mark.parametrize(("text", "named"), [
    ("- Jane Doe salary", "Jane Doe"),  # a bullet: the one character before the pair is read
    ("| Jane Doe | salary |", "Jane Doe"),  # a table bar hides no name either (h-intent9)
    ("on Jane Doe salary", "Jane Doe"),
    ("Jane Doe salary", None),
    # The pair is at a sentence start when the last of the 8 characters before it that is not a
    # space ends a sentence, or when there is none and the pair starts within the first 8: the
    # window the model was trained with (a wider one would change the feature after 8 spaces).
    ("Notes:\n      Jane Doe salary", None),
    ("Notes:\n       Jane Doe salary", "Jane Doe"),
    ("Done. Jane Doe salary", None),  # the last character of the window, not its first
    (" " * 8 + "Jane Doe salary", None),
    (" " * 9 + "Jane Doe salary", "Jane Doe"),
])
def test_a_name_pair_counts_as_a_target_unless_it_starts_a_sentence(text, named):
    assert _cue(text, "named_target") == (1.0 if named else 0.0, named)


def _scanned(name: str) -> F._ScannedCue:
    return next(p for n, _, p in F._REGEX_CUES if n == name)


def test_a_scanned_match_never_starts_inside_the_one_before_it():
    # The e-mail alternative's `@` right after a match: its character before is the previous
    # match's last, so no second match may start there (the regex alternation gives one).
    assert [m.span() for m in _scanned("exfil_channel").finditer("a@x.com@y.com")] == [(0, 7)]


def test_a_match_at_the_start_is_found_once():
    found = itertools.islice(_scanned("markup_injection").finditer("system: hi ### x"), 5)
    assert [m.group(0) for m in found] == ["system:", "###"]


@pytest.mark.parametrize(("fillers", "found"), [(15, "list all passwords"), (16, None)])
def test_bulk_secret_looks_at_the_first_16_quantifiers_only(fillers, found):
    # A stuffed query of quantifiers costs bounded time; a request has one or two.
    assert _cue("all good. " * fillers + "list all passwords", "bulk_secret") == (1.0 if found else 0.0, found)


# intent_fold.py's module constants (pass 34 left them unrun): a sample.
def _fold(text: str) -> str:
    return fold(text.casefold(), text).text


# The visible characters just outside each range of intent_fold._INVISIBLE_RANGES, written out: the
# ranges' bounds are what is under test.
_NEXT_TO_INVISIBLE = (
    0xAC, 0xAE, 0x34E, 0x350, 0x61B, 0x61D, 0x115E, 0x1161, 0x17B3, 0x17B6, 0x180A, 0x1810, 0x200A, 0x2010,
    0x2029, 0x202F, 0x205F, 0x2065, 0x2070, 0x3163, 0x3165, 0xFDFF, 0xFE10, 0xFEFE, 0xFF00, 0xFF9F, 0xFFA1,
    0xFFF8, 0xFFFC, 0x1BC9F, 0x1BCA4, 0x1D172, 0x1D17B, 0xE0000, 0xE0002, 0xE001F, 0xE0080, 0xE00FF, 0xE01F0,
)


# The first and last character of each range.
_INVISIBLE_ENDS = (
    0xAD, 0x34F, 0x61C, 0x115F, 0x1160, 0x17B4, 0x17B5, 0x180B, 0x180F, 0x200B, 0x200F, 0x202A, 0x202E,
    0x2060, 0x2064, 0x2066, 0x206F, 0x3164, 0xFE00, 0xFE0F, 0xFEFF, 0xFFA0, 0xFFF9, 0xFFFB, 0x1BCA0, 0x1BCA3,
    0x1D173, 0x1D17A, 0xE0001, 0xE0020, 0xE007F, 0xE0100, 0xE01EF,
)


@pytest.mark.parametrize("cp", _INVISIBLE_ENDS, ids=hex)
def test_the_first_and_last_character_of_each_invisible_range_are_stripped(cp):
    assert _fold(f"ab{chr(cp)}cd") == "abcd"


@pytest.mark.parametrize("cp", _NEXT_TO_INVISIBLE, ids=hex)
def test_the_characters_next_to_each_invisible_range_are_kept(cp):
    assert chr(cp).casefold() in _fold(f"ab{chr(cp)}cd")


@pytest.mark.parametrize(("text", "folded"), [
    ("list p asswords please", "list passwords please"),
    ("list s alary data", "list salary data"),
])
def test_a_split_words_first_piece_may_be_one_letter(text, folded):
    assert _fold(text) == folded
