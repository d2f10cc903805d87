"""The built-in classifier's cue regexes: linear on hostile text, and exactly the features of the
regexes they replaced (the shipped model's weights were trained on those)."""
from __future__ import annotations

import json
import random
import re
import unicodedata
from pathlib import Path
from re import _parser as sre_parse  # Python 3.11's regex parser (sre_parse warns when imported)

import pytest

from qdrant_guard.intent_features import (
    _MAX_LEXICAL_CHARS,
    _REGEX_CUES,
    _ZW_STRIP,
    CUE_NAMES,
    _ScannedCue,
    featurize,
)
from qdrant_guard.intent_fold import fold

CUES = {n: p for n, _, p in _REGEX_CUES}
DATASET = Path(__file__).resolve().parent.parent / "qdrant_guard" / "data" / "intent_dataset.jsonl"

# The cue patterns as trained (FEATURE_VERSION 1, before the scanned alternatives): the reference.
OLD = {
    "markup_injection": re.compile(
        r"</?\s*(?:system|context|instructions?|admin|user|assistant)\s*>|\[/?inst\]|"
        r"(?:^|\n)[^\S\n]*(?:system|assistant|developer)\s*:|#{3}|\{\{[^}]*\}\}|\$\{jndi:"),
    "exfil_channel": re.compile(
        r"https?://|\bwebhook\b|\bpastebin\b|!\[[^\]]*\]\(|\bmarkdown image\b|\balt text\b|\bdownload link\b|"
        r"\b(?:email|forward|upload|post|send|put)\b[^.]{0,60}\b(?:to|into|in)\b[^.]{0,30}"
        r"(?:\bmy personal\b|\bgmail\b|\bexternal\b|\battacker\b|\burl\b|\blink\b)|"
        r"[\w.+-]@[\w-]+\.(?:com|net|org)\b|\bfirst letters?\b"),
    "code_injection": re.compile(r"'\s*or\s+1\s*=\s*1|\bunion\s+select\b|;\s*drop\s+table\b|\s--\s*$"),
    "instruction_override": re.compile(
        r"\b(?:ignore|disregard|forget|override|skip|bypass)\b[^.]{0,40}?\b(?:previous|prior|above|earlier|all|"
        r"your|the|every|any|my)\b[^.]{0,30}?\b(?:instructions?|rules|prompt|guidelines|polic(?:y|ies)|"
        r"restrictions?|filters?|guardrails?|trust (?:level|boundary)|access controls?)\b|\bsystem (?:prompt|"
        r"message)\b|\byou are now\b|\bfrom now on\b|\b(?:developer|debug|maintenance) mode\b|"
        r"\bno (?:restrictions|content filters|filters)\b|\bwithout (?:any )?restrictions\b|\bjailbreak\w*|"
        r"\bdan\b|\bhigher priority\b|\bhas been (?:updated|disabled)\b|\bis disabled\b|"
        r"\binstructions you were given\b|\bprevious instructions\b|\boverride\b"),
}
COUNTED = ("bulk_request", "sensitive_noun", "instruction_override")  # featurize counts up to 3 matches

PIECES = [
    "{", "}", "{{", "}}", "{{x}}", "{ {", "} }", "${jndi:", "$", "![", "[", "]", "](", "(", ")", "![a](",
    "!", "![x]", "<system>", "</ context >", "<", ">", "[inst]", "[/inst]", "###", "#", "system:",
    "assistant :", "developer", "\n", "\r\n", " ", "  ", "\t", "\u2028", ".", "..", "http://", "https://x",
    "webhook", "pastebin", "markdown image", "alt text", "download link", "email", "send", "put", "post",
    "upload", "forward", "to", "into", "in", "my personal", "gmail", "external", "attacker", "url", "link",
    "a@b.com", "x.y@z-w.org", "@", "first letter", "first letters", "é", "ß", "\u200b", "Ｓｙｓｔｅｍ", "İ",
    "\ufdfa", "a", "word", "1", "_", "'", '"', "\\", "}}{{", "]]((", "{{{{", "![![",
    "ignore", "disregard", "forget", "override", "skip", "bypass", "previous", "prior", "above", "all", "your",
    "the", "every", "any", "my", "instructions", "instruction", "rules", "prompt", "policies", "polic",
    "filters", "trust level", "trust", "access controls", "system prompt", "jailbreaks", "dan", "intox", "tot",
    "x" * 7, "y" * 13, "z" * 22, " " * 9, "q" * 29, "w" * 31,
    "-", "--", " --", "' or 1=1", "'or  1 = 1", "union select", "union", "; drop table", ";drop", "\u3000",
]
# The windowed alternatives' heads, mids and tails, and fillers of lengths around their gaps.
WORDY = ["ignore", "skip", "override", "bypass", "all", "the", "my", "previous", "rules", "instructions",
         "prompt", "trust level", "put", "send", "email", "to", "into", "in", "url", "link", "gmail",
         "my personal", "x" * 7, "y" * 13, "z" * 22, "w" * 31, "it", "a", ".", "\n", "-", "'", "![x](", "{{x}}"]


def _low(text: str) -> str:
    # What featurize runs the cues on (feature version 3: the normalised text, folded).
    raw = text[:_MAX_LEXICAL_CHARS]
    cased = unicodedata.normalize("NFKC", raw)[:_MAX_LEXICAL_CHARS].translate(_ZW_STRIP)
    return fold(cased.casefold()[:_MAX_LEXICAL_CHARS], cased).text


def _random_texts(n: int, seed: int) -> list[str]:
    rng = random.Random(seed)
    out = []
    for j in range(n):
        k = rng.choice((1, 2, 3, 5, 8, 13, 30, 60, 120))
        if j % 2:
            out.append("".join(rng.choice(PIECES) for _ in range(k)))
        else:  # dense in the windowed alternatives' words
            out.append(" ".join(rng.choice(WORDY) for _ in range(k)))
    return out


def _adversarial_texts() -> list[str]:
    units = ["{", "{{", "{{a", "{{ ", "{{\n", "{{}", "{{}{", "![", "![[", "![a", "![]", "![](", "!", "[",
             "{{![", "put in ", "put in in ", "put to to ", "send into ", "put " + "in " * 20,
             "skip all ", "skip my ", "skip the ", "ignore all all ", "override the ", "skip " + "all " * 12,
             "-", " -", " --", "\n", " \n"]
    ends = ["", "}}", "}", "](", "]", "${jndi:", "<system>", " send to my personal gmail", " url", " rules",
            ". url", " the rules", " --", " -- \n", "\nsystem:", "system:"]
    out = []
    for u in units:
        for e in ends:
            body = u * (_MAX_LEXICAL_CHARS // len(u))
            out.append(body[:_MAX_LEXICAL_CHARS - len(e)] + e)
            out.append(e + body[:_MAX_LEXICAL_CHARS - len(e)])
    return out


def _gap_edges() -> list[str]:
    # Head, mid and tail at distances around the windows' bounds (60/30 and 40/30), with and
    # without a "." in a gap.
    out = []
    for head, mid, tail in (("put", "in", "url"), ("send", "into", "my personal"), ("skip", "the", "rules"),
                            ("override", "all", "trust level")):
        for a in range(36, 64):
            for b in range(26, 33):
                for dot in ("", "."):
                    out.append(f"{head} {'x' * (a - 2)}{dot} {mid} {'y' * (b - 2)} {tail} end")
                    out.append(f"{head} {'x' * (a - 2)} {mid} {'y' * (b - 2)}{dot} {tail} end")
    return out


def _same(name: str, text: str) -> None:
    old, new = OLD[name], CUES[name]
    a, b = old.search(text), new.search(text)
    assert (a and (a.span(), a.group(0))) == (b and (b.span(), b.group(0))), text[:200]
    if name in COUNTED:
        assert [m.span() for m in old.finditer(text)] == [m.span() for m in new.finditer(text)], text[:200]


@pytest.mark.parametrize("name, seed", [("markup_injection", 1), ("exfil_channel", 2), ("instruction_override", 3),
                                        ("code_injection", 4)])
def test_scanned_cues_match_exactly_what_the_trained_regex_matched(name, seed):
    new = CUES[name]
    assert isinstance(new, _ScannedCue)
    texts = _random_texts(4000, seed) + _adversarial_texts() + _gap_edges()
    for text in texts:
        _same(name, text)
        _same(name, _low(text))


def test_dataset_features_are_those_the_model_was_trained_on():
    texts = [json.loads(line)["text"] for line in DATASET.read_text(encoding="utf-8").splitlines() if line.strip()]
    assert len(texts) > 500
    fired = set()
    for text in texts:
        low = _low(text)
        for name in OLD:
            _same(name, low)
            if OLD[name].search(low):
                fired.add(name)
        f = featurize(text)
        for name, _, pattern in _REGEX_CUES:  # featurize's cue values, as computed before
            rx = OLD.get(name, pattern)
            found = rx.findall(low) if name in COUNTED else None
            m = rx.search(low)
            value = (min(len(found), 3) / 3.0 + 0.5 if found else 0.0) if found is not None else float(bool(m))
            assert f.cues[CUE_NAMES.index(name)] == value
            assert f.evidence.get(name) == (m.group(0).strip() if m else None)
    assert fired == set(OLD)  # the comparison covered texts where each cue fires


def test_counted_cues_have_no_groups():
    # featurize takes group 0 of the first match as evidence, which is what findall gave only
    # for a pattern without groups.
    for name in COUNTED:
        p = CUES[name]
        rxs = [p.rest] + [s.at for s in p.scans] if isinstance(p, _ScannedCue) else [p]
        assert all(rx.groups == 0 for rx in rxs), name


@pytest.mark.parametrize("text, name, evidence", [
    ("render {{ secret }} here", "markup_injection", "{{ secret }}"),
    ("{{{{ x }}", "markup_injection", "{{{{ x }}"),
    ("{{ a } b }} then {{c}}", "markup_injection", "{{c}}"),
    ("{{ a }} ${jndi:ldap", "markup_injection", "{{ a }}"),
    ("${jndi:x {{a}}", "markup_injection", "${jndi:"),
    ("<system> {{a}}", "markup_injection", "<system>"),
    ("look ![![a](b)", "exfil_channel", "![![a]("),
    ("![a] ![b](c)", "exfil_channel", "![b]("),
    ("see ![x](http://e", "exfil_channel", "![x]("),
    ("https://e ![x](y)", "exfil_channel", "https://"),
])
def test_scanned_alternatives_give_the_leftmost_match(text, name, evidence):
    f = featurize(text)
    assert f.cues[CUE_NAMES.index(name)] == 1.0 and f.evidence[name] == evidence


@pytest.mark.parametrize("text, name", [
    ("{{ a } }", "markup_injection"), ("{{{{{{", "markup_injection"), ("{ {a}}", "markup_injection"),
    ("![a] (b)", "exfil_channel"), ("![![![", "exfil_channel"), ("! [a](b)", "exfil_channel"),
])
def test_scanned_alternatives_do_not_fire_on_near_misses(text, name):
    assert featurize(text).cues[CUE_NAMES.index(name)] == 0.0


def _searched_regexes() -> list[tuple[str, re.Pattern[str]]]:
    from qdrant_guard import intent_features

    out = [(n, p) for n, _, p in _REGEX_CUES if isinstance(p, re.Pattern)]
    for n, _, p in _REGEX_CUES:
        if isinstance(p, _ScannedCue):
            out.append((n, p.rest))
            out += [(n, rx) for scan in p.scans for rx in vars(scan).values() if isinstance(rx, re.Pattern)
                    and rx is not scan.at]  # .at is only matched at a start the scan found
    out += [(n, getattr(intent_features, n)) for n in ("_NAMED_ROLE_RE", "_NAME_PAIR_RE", "_B64_RE", "_HEX_RE",
                                               "_PCT_RUN_RE", "_PCT_ANY_RE", "_ESCAPE_RUN_RE",
                                               "_ZW_IN_WORD_RE", "_TOKEN_RE")]
    return out


_UNBOUNDED = {sre_parse.MAX_REPEAT, sre_parse.MIN_REPEAT, sre_parse.POSSESSIVE_REPEAT}


_CATEGORIES = {
    "CATEGORY_WORD": lambda c: re.match(r"\w", c) is not None,
    "CATEGORY_NOT_WORD": lambda c: re.match(r"\w", c) is None,
    "CATEGORY_SPACE": lambda c: re.match(r"\s", c) is not None,
    "CATEGORY_NOT_SPACE": lambda c: re.match(r"\s", c) is None,
    "CATEGORY_DIGIT": lambda c: re.match(r"\d", c) is not None,
    "CATEGORY_NOT_DIGIT": lambda c: re.match(r"\d", c) is None,
}


def _class_contains(items: list, ch: str) -> bool:
    # items: the body of an IN op; True when the one-character class matches ch.
    neg = bool(items) and items[0][0] == sre_parse.NEGATE
    hit = False
    for op, av in items[1:] if neg else items:
        if op == sre_parse.LITERAL:
            hit |= chr(av) == ch
        elif op == sre_parse.NOT_LITERAL:
            hit |= chr(av) != ch
        elif op == sre_parse.RANGE:
            hit |= av[0] <= ord(ch) <= av[1]
        elif op == sre_parse.CATEGORY:
            hit |= _CATEGORIES[str(av)](ch)
    return hit != neg


def _word_only(body: list) -> bool:
    for op, av in body:
        if op == sre_parse.LITERAL and re.match(r"\w", chr(av)):
            continue
        if op == sre_parse.RANGE and all(re.match(r"\w", chr(c)) for c in range(av[0], av[1] + 1)):
            continue
        if op == sre_parse.CATEGORY and str(av) == "CATEGORY_WORD":
            continue
        return False
    return True


_BOUNDARY_BEHIND = str(list(sre_parse.parse(r"\w.")))


def _is_boundary_behind(item) -> bool:
    op, av = item
    return op == sre_parse.ASSERT_NOT and av[0] == -1 and str(list(av[1])) == _BOUNDARY_BEHIND


def _first_chars(op, av) -> list[str] | None:
    """The characters a required literal, or a group or branch of literal-led alternatives, can
    start with (None: another item, or not known)."""
    if op == sre_parse.LITERAL:
        return [chr(av)]
    if op == sre_parse.SUBPATTERN:
        return _first_chars(*av[-1][0]) if len(av[-1]) else None
    if op == sre_parse.BRANCH:
        firsts = [_first_chars(*alt[0]) if len(alt) else None for alt in av[1]]
        return None if None in firsts else [c for f in firsts for c in f]
    return None


def _restarting_scans(seq, bounded: bool = False) -> list[str]:
    r"""Alternatives ``<literal opener> ... <unbounded repeat of a class that contains the whole
    opener>``: the repeat runs over later openers, and every opener starts a new attempt that runs
    over them again, so a run of openers costs quadratic time. Not with a ``\b`` before a word
    opener and a word-only repeat (``\bjailbreak\w*``): a word has one start.

    ``bounded``: the sequence follows a ``\b`` (sre_parse moves a prefix common to all alternatives
    out of the branch)."""
    found = []
    items = list(seq)
    i = 0
    while i < len(items) and items[i] == (sre_parse.AT, sre_parse.AT_BOUNDARY):
        bounded = True
        i += 1
    opener = ""
    while i < len(items) and items[i][0] == sre_parse.LITERAL:
        opener += chr(items[i][1])
        i += 1
        if len(opener) == 1 and i < len(items) and _is_boundary_behind(items[i]):
            bounded = True  # intent_features._word_led's x(?<!\w.): the \b before x, written after it
            i += 1
    if opener:
        guards: list[list[str]] = []  # the first characters of each required item after the opener
        for op, av in items[i:]:
            if op in _UNBOUNDED and av[1] == sre_parse.MAXREPEAT and len(av[2]) == 1:
                bop, bav = av[2][0]
                body = bav if bop == sre_parse.IN else [(bop, bav)] if bop in (sre_parse.LITERAL, sre_parse.NOT_LITERAL) \
                    else None
                if body is None or (bounded and re.match(r"\w", opener[0]) and _word_only(body)):
                    continue
                # A required item before the repeat that starts outside its class (\n...(?:system|...)\s*:)
                # ends each attempt's run before the next attempt's reaches the repeat: linear.
                if any(not any(_class_contains(body, c) for c in g) for g in guards):
                    continue
                if all(_class_contains(body, c) for c in opener):
                    found.append(opener)
            elif (first := _first_chars(op, av)) is not None:
                guards.append(first)
    for k, (op, av) in enumerate(items):
        before = items[k - 1] if k else None
        after_b = (k == 0 and bounded) or before == (sre_parse.AT, sre_parse.AT_BOUNDARY) \
            or (before is not None and _is_boundary_behind(before))
        if op == sre_parse.BRANCH:
            for alt in av[1]:
                found += _restarting_scans(alt, after_b)
        elif op == sre_parse.SUBPATTERN:
            found += _restarting_scans(av[-1], after_b)
    return found


_REPEATS = _UNBOUNDED | {sre_parse.MAX_REPEAT, sre_parse.MIN_REPEAT}


def _word_spanning_gaps(seq) -> int:
    r"""The largest number of gaps that can span words (a repeat of 16 or more of a class holding
    both a space and a letter) in one alternative. Two in a row make every start retry every
    candidate of the first gap against every position of the second: ``put in in in ...`` cost
    ~7 ms in ``\b(?:...|put)\b[^.]{0,60}\b(?:to|into|in)\b[^.]{0,30}(?:...)``."""
    here, inner = 0, 0
    for op, av in seq:
        if op in _REPEATS and (av[1] == sre_parse.MAXREPEAT or av[1] >= 16) and len(av[2]) == 1:
            bop, bav = av[2][0]
            body = bav if bop == sre_parse.IN else [(bop, bav)] if bop == sre_parse.NOT_LITERAL else None
            if body is not None and _class_contains(body, " ") and _class_contains(body, "a"):
                here += 1
        if op == sre_parse.BRANCH:
            inner = max([inner] + [_word_spanning_gaps(alt) for alt in av[1]])
        elif op == sre_parse.SUBPATTERN:
            inner = max(inner, _word_spanning_gaps(av[-1]))
    return max(here, inner)


def test_the_gap_check_sees_the_windowed_alternatives_it_is_for():
    assert _word_spanning_gaps(sre_parse.parse(OLD["exfil_channel"].pattern)) == 2
    assert _word_spanning_gaps(sre_parse.parse(OLD["instruction_override"].pattern)) == 2
    assert _word_spanning_gaps(sre_parse.parse(r"\b[a-z]+ [a-z]+'s\b|a\s+b\s+c|x[^.]{0,9}y[^.]{0,9}z")) == 0


def test_the_restart_check_sees_the_quadratic_alternatives_it_is_for():
    assert _restarting_scans(sre_parse.parse(OLD["markup_injection"].pattern)) == ["{{"]
    assert _restarting_scans(sre_parse.parse(OLD["exfil_channel"].pattern)) == ["!["]
    assert _restarting_scans(sre_parse.parse(r"ab\s--\s*$|x[^x]*y|\bdump\b|\bjailbreak\w*")) == []
    assert _restarting_scans(sre_parse.parse(r"jailbreak\w*|a\s*")) == ["jailbreak"]
    assert _restarting_scans(sre_parse.parse(r"j(?<!\w.)ailbreak\w*|x(?<!\w)ab\w*")) == ["x"]
    assert _restarting_scans(sre_parse.parse(r"e(?<!\w.)(?:xport|nfiltrat\w*)|z(?:xfiltrat\w*)")) == ["zxfiltrat"]
    # A required word between the opener and the repeat, outside the repeat's class, bounds each run.
    assert _restarting_scans(sre_parse.parse(r"\n[^\S\n]*(?:system|dev)\s*:")) == []
    assert _restarting_scans(sre_parse.parse(r"\na\s*")) == []
    for rx in (r"\n[^\S\n]*(?:system|dev)?\s*:", r"\n\s*a", r"\n(?:\s|a)\s*"):
        assert _restarting_scans(sre_parse.parse(rx)) == ["\n"], rx


@pytest.mark.parametrize("name, rx", _searched_regexes(), ids=lambda v: v if isinstance(v, str) else "")
def test_no_searched_regex_restarts_a_scan_from_every_opener(name, rx):
    # No timing here (unit tests do not assert timings): this is the structure that made
    # "{{" * 1024 and "![" * 1024 cost ~9 ms each; docs/intent.md (Latency) has the measurements.
    assert _restarting_scans(sre_parse.parse(rx.pattern)) == []


@pytest.mark.parametrize("name, rx", _searched_regexes(), ids=lambda v: v if isinstance(v, str) else "")
def test_no_searched_regex_has_two_word_spanning_gaps_in_a_row(name, rx):
    assert _word_spanning_gaps(sre_parse.parse(rx.pattern)) <= 1


def test_hostile_runs_still_featurize_to_the_old_cues():
    for unit, end, name in (("{{", "}}", "markup_injection"), ("![", "](", "exfil_channel")):
        text = unit * (_MAX_LEXICAL_CHARS // 2)
        assert featurize(text).cues[CUE_NAMES.index(name)] == 0.0
        closed = text[:-2] + end
        assert featurize(closed).evidence[name] == closed  # the leftmost opener, as before
