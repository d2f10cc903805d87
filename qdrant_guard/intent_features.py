"""Feature extraction for the built-in intent model, shared by the runtime and by
``qdrant_guard.intent_train``: hashed word and character n-grams plus hand-written cues, read from
a bounded, normalised prefix of the query.
"""
from __future__ import annotations

import bisect
import itertools
import math
import re
import unicodedata
import zlib
from dataclasses import dataclass
from functools import lru_cache
from typing import Callable, Iterator

from .intent_fold import INVISIBLE_IN_WORD_RE, fold as _fold


#: Version of the feature extractor below. A model file records the version it was trained with
#: and is refused by a different extractor, because its weights would silently mean nothing.
FEATURE_VERSION = 5  # 2 was doc_noun_strict+process_question, shipped and reverted; 4: escapes, masks, strong leet;
# 5: bulk_secret, a bulk request whose object is a credential or PII noun

# Lexical features look at a bounded prefix (before and after normalisation) so a stuffed
# multi-megabyte query costs bounded time; the length and repetition cues still see that the
# query is long.
_MAX_LEXICAL_CHARS = 2048
_MAX_CHARGRAM_TOKEN = 24

_ZERO_WIDTH = "\u200b\u200c\u200d\u2060\ufeff"
_ZW_STRIP = {ord(c): None for c in _ZERO_WIDTH}
_TOKEN_RE = re.compile(r"[^\W_]+")
_LEET = str.maketrans({"0": "o", "1": "i", "3": "e", "4": "a", "5": "s", "7": "t", "@": "a", "$": "s"})
_LEET_TOKEN_RE = re.compile(r"^(?=.*[a-z])(?=.*[013457])[a-z013457]{4,}$")

_B64_RE = re.compile(r"[A-Za-z0-9+/]{16,}={0,2}")
_HEX_RE = re.compile(r"[0-9a-fA-F](?<!\w.)[0-9a-fA-F]{15,}\b")  # \b[0-9a-fA-F]{16,}\b; see _word_led
# The first repetition of each run is written out: led by a literal (or a choice of them), a
# pattern is searched in C from where they are; led by a repeat, it is tried at every position.
_PCT_RUN_RE = re.compile(r"%[0-9A-Fa-f]{2}(?:%[0-9A-Fa-f]{2}){2,}")
_PCT_ANY_RE = re.compile(r"%[0-9A-Fa-f]{2}")
_ESCAPE_RUN_RE = re.compile(r"(?:\\u[0-9a-fA-F]{4}|\\x[0-9a-fA-F]{2}|&#x?[0-9a-fA-F]+;)"
                            r"(?:\\u[0-9a-fA-F]{4}|\\x[0-9a-fA-F]{2}|&#x?[0-9a-fA-F]+;){2,}")
_ZW_IN_WORD_RE = re.compile(  # (?<=\w)[zero-width]+(?=\w), led by its first character
    r"[\u200b\u200c\u200d\u2060\ufeff](?<=\w[\u200b\u200c\u200d\u2060\ufeff])[\u200b\u200c\u200d\u2060\ufeff]*(?=\w)")
_NAME_PAIR_RE = re.compile(r"[A-Z](?<!\w.)[a-z]+(?:[- ][A-Z][a-z]+)+\b")  # \b[A-Z][a-z]+...; see _word_led

_BULK_VERBS = (r"list|show|give|get|pull|dump|export|print|download|send|fetch|retrieve|enumerate|"
               r"output|return|extract|compile|copy|iterate over|find")


def _nowhere(pos: int) -> int:
    return -1


def _word_led(*alts: str, free: tuple[str, ...] = ()) -> str:
    r"""``\b(?:alt|alt|...)`` (then ``|free|...``) for alternatives that each start with a letter,
    as an alternation without a group around it.

    A pattern led by ``\b`` makes re try it at every position (about 70 us per pattern on the
    2048-character prefix). Written ``a(?<!\w.)(?:lt|...)|b(?<!\w.)(?:...)``, one branch per first
    letter (``(?<!\w.)`` after the letter is the ``\b`` before it), it starts with literals: re
    skips in C to the positions holding one of them, and a branch whose letter is not there costs
    one comparison. Alternatives with different first letters cannot match at one position, so
    only the order within a branch matters, and it is kept. ``free`` alternatives have no ``\b``
    and first letters of their own.
    """
    groups: dict[str, list[str]] = {}
    free_groups: dict[str, list[str]] = {}
    for alt, into in [(a, groups) for a in alts] + [(a, free_groups) for a in free]:
        if not ("a" <= alt[0] <= "z") or alt[1:2] in ("", "?", "*", "+", "{"):
            raise ValueError(f"_word_led: alternative {alt!r} does not start with a letter a-z of its own")
        into.setdefault(alt[0], []).append(f"(?:{alt[1:]})")
    if groups.keys() & free_groups.keys():
        raise ValueError(f"_word_led: free alternatives share first letters with the others: {sorted(free_groups)}")
    return "|".join([rf"{c}(?<!\w.)(?:{'|'.join(rests)})" for c, rests in groups.items()]
                    + [f"{c}(?:{'|'.join(rests)})" for c, rests in free_groups.items()])


class _OpenerScan:
    """The regex alternative ``opener [^close]* close follow``, found by a linear scan.

    As a regex alternative it restarts its scan from every opener, so a run of openers
    (``{{{{...`` or ``![![...``) costs quadratic time: ~9 ms on the 2048-character prefix. Every
    opener before the same first ``close`` ends at that ``close``: they match or fail together.
    """

    def __init__(self, opener: str, close: str, follow: str) -> None:
        self.opener, self.close, self.follow = opener, close, follow
        self.at = re.compile(f"{re.escape(opener)}[^{re.escape(close)}]*+{re.escape(close + follow)}")

    def prepare(self, text: str) -> Callable[[int], int]:
        """The function giving the first start at or after ``pos`` where the alternative matches."""
        if self.opener not in text:
            return _nowhere
        none = len(text) + 1
        found = [-1]  # the last answer, none for "no start"; it holds for any pos up to itself

        def first(pos: int) -> int:
            if found[0] < pos:
                found[0] = none
                i = text.find(self.opener, pos)
                while i >= 0:
                    j = text.find(self.close, i + len(self.opener))
                    if j < 0:
                        break
                    if text.startswith(self.follow, j + 1):
                        found[0] = i
                        break
                    i = text.find(self.opener, j + 1)
            return -1 if found[0] == none else found[0]
        return first


class _WindowScan:
    """The regex alternative ``head [^.]{0,gap1} mid [^.]{0,gap2} tail`` (lazy gaps if ``lazy``),
    found from the positions of its three word-bounded parts.

    As a regex alternative every head retries every mid within ``gap1`` and every mid retries each
    of ``gap2`` positions for a tail: ``put in in in ...`` cost ~7 ms on the 2048-character prefix.
    Here each part is searched once; a mid counts if the nearest tail after it is close enough, a
    head if the nearest such mid after it is (nearest is best: the gaps may not hold a ``.``).
    """

    def __init__(self, head: str, gap1: int, mid: str, gap2: int, tail: str, lazy: bool) -> None:
        self.head, self.mid, self.tail = re.compile(head), re.compile(mid), re.compile(tail)
        self.gap1, self.gap2 = gap1, gap2
        q = "?" if lazy else ""
        self.at = re.compile(f"{head}[^.]{{0,{gap1}}}{q}{mid}[^.]{{0,{gap2}}}{q}{tail}")

    def prepare(self, text: str) -> Callable[[int], int]:
        """The function giving the first start at or after ``pos`` where the alternative matches."""
        h = self.head.search(text)
        if h is None or self.tail.search(text, h.end()) is None:
            return _nowhere
        starts: list[int] = []
        heads = [(m.start(), m.end()) for m in self.head.finditer(text, h.start())]
        tails = [m.start() for m in self.tail.finditer(text, h.end())]
        mids: list[int] = []
        for m in self.mid.finditer(text, h.end()):
            e = m.end()
            k = bisect.bisect_left(tails, e)
            if k < len(tails) and tails[k] - e <= self.gap2 and "." not in text[e:tails[k]]:
                mids.append(m.start())
        for hs, he in heads if mids else ():
            k = bisect.bisect_left(mids, he)
            if k < len(mids) and mids[k] - he <= self.gap1 and "." not in text[he:mids[k]]:
                starts.append(hs)

        def first(pos: int) -> int:
            k = bisect.bisect_left(starts, pos)
            return starts[k] if k < len(starts) else -1
        return first


class _CharThenScan:
    r"""The regex alternative ``[chars]<lit>tail``: one character of ``chars``, then the character
    ``lit`` (``@`` unless given) and ``tail``.

    Found by a search led by the literal ``lit`` (re skips to it in C), with the character before
    it checked by a lookbehind; as a regex alternative its leading class is tried at every
    position.
    """

    def __init__(self, chars: str, tail: str, lit: str = "@") -> None:
        self.lit = lit
        self.find = re.compile(f"{re.escape(lit)}(?<={chars}{re.escape(lit)}){tail}")
        self.at = re.compile(f"{chars}{re.escape(lit)}{tail}")

    def prepare(self, text: str) -> Callable[[int], int]:
        """The function giving the first start at or after ``pos`` where the alternative matches."""
        if self.lit not in text:
            return _nowhere
        none = len(text) + 1
        found = [-1, -1]  # the last (pos, answer), none for "no start"; it holds from pos to itself

        def first(pos: int) -> int:
            if not found[0] <= pos <= found[1]:
                m = self.find.search(text, pos + 1)
                found[0], found[1] = pos, (m.start() - 1 if m else none)
            return -1 if found[1] == none else found[1]
        return first


class _AtStartScan:
    r"""The regex alternative ``^rest`` (without MULTILINE: at position 0 only).

    In an alternation ``^`` gives re no first character to skip to, so the whole alternation
    ran at every position; here ``rest`` is matched once, at 0.
    """

    def __init__(self, rest: str) -> None:
        self.at = re.compile(rest)

    def prepare(self, text: str) -> Callable[[int], int]:
        """The function giving the first start at or after ``pos`` where the alternative matches."""
        if self.at.match(text) is None:
            return _nowhere
        return _at_start


def _at_start(pos: int) -> int:
    return 0 if pos == 0 else -1


class _ScannedCue:
    """A cue regex (``rest``) plus alternatives found by scans, matching as the whole alternation.

    Each scan's alternative either comes before every alternative of ``rest`` that can match at
    the same position or cannot start where one of them does, so the scan wins a tie. None of the
    alternatives matches the empty string.
    """

    def __init__(self, rest: str, *scans: _OpenerScan | _WindowScan | _CharThenScan | _AtStartScan) -> None:
        self.rest = re.compile(rest)
        self.scans = scans

    def finditer(self, text: str) -> Iterator[re.Match[str]]:
        # Each scan is prepared once: its set-up is most of its cost (a window scan lists every
        # head, mid and tail).
        pos = 0
        firsts = [(scan.prepare(text), scan.at) for scan in self.scans]
        rest = self.rest.search(text)
        while pos <= len(text):
            if rest is not None and rest.start() < pos:
                # Only then: searching again from every match would make a run of them quadratic.
                rest = self.rest.search(text, pos)
            m = rest
            best = m.start() if m else len(text) + 1
            for first, at in firsts:
                i = first(pos)
                if 0 <= i <= best:
                    best, m = i, at.match(text, i)
            if m is None:
                return
            yield m
            pos = m.end()

    def search(self, text: str) -> re.Match[str] | None:
        # finditer's first step, without its set-up: this runs on every query.
        m = self.rest.search(text)
        best = m.start() if m else len(text) + 1
        for scan in self.scans:
            i = scan.prepare(text)(0)
            if 0 <= i <= best:
                best, m = i, scan.at.match(text, i)
        return m


# (name, display prefix, pattern over the case-folded text). Order is part of the model format.
_REGEX_CUES: tuple[tuple[str, str, re.Pattern[str] | _ScannedCue], ...] = (
    # Each pattern below led by \b is written with _word_led, its groups of leading words split into
    # alternatives in their order: the same matches.
    ("bulk_request", "bulk request", re.compile(_word_led(
        *(verb + r"\b(?:\s+(?:me|us|out|up))?\s+(?:(?:a|the)\s+)?(?:table of\s+|list of\s+)?"
                 r"(?:all|every|each|entire|whole|full|complete|everyone|everybody)\b"
          for verb in _BULK_VERBS.split("|")),
        r"dump\b", r"exfiltrat\w*"))),
    ("bulk_scope", "bulk scope", re.compile(_word_led(
        *(lead + r"\s+(?:\w+\s+)?(?:collection|index|database|vector store|folder|table|list|pipeline)\b"
          for lead in (r"the\s+(?:entire|whole|full)", "entire", "whole", "full")),
        r"every\s+(?:document|chunk|record|file|payload|ssn|password)s?\b",
        r"all\s+(?:the\s+)?(?:documents|chunks|payloads|records|files|vectors|hits)\b",
        r"vector\s+(?:store|database)\b",
        r"top\s+\d{2,}\b", r"limit\s+\d{3,}\b"))),
    ("sensitive_noun", "sensitive noun", re.compile("(?:" + _word_led(
        "ssns?", "social security(?: numbers?)?", "salar(?:y|ies)", "passwords?", "passw0rds?", "api keys?",
        "private keys?", "secret (?:access )?keys?", "credentials?", "mergers?", "acquisitions?",
        "board (?:memos?|minutes|pack|session|documents?)", "layoffs?", "laid off", "medical", "diagnos[ie]s",
        "bank (?:accounts?|details)", "account numbers?", "routing numbers?", "credit cards?", "card numbers?",
        "home address(?:es)?", "date of birth", "passports?", "performance (?:reviews?|ratings?)", "disciplinary",
        "payroll", "severance", "settlements?", "lawsuits?", "harassment", "hiv", "psychiatric", "compensation",
        "bonus(?:es)?", "tax ids?", "wire instructions", "due diligence", "term sheet", "root password",
        "admin credentials", "lab results", "medications?") + r")\b")),
    ("confidential_marker", "confidentiality marker", re.compile("(?:" + _word_led(
        "confidential", "internal[- ]only", "restricted", "privileged", "classified", "secret(?:ly)?", "unreleased",
        "undisclosed", "unpublished", "unannounced", "not (?:yet )?public", "embargoed",
        "closed (?:board )?session", "hidden",
        "before (?:it'?s|they'?re|the) (?:announced|public|announcement|earnings)") + r")\b")),
    # + the _WindowScan before \bsystem (?:prompt|message)\b.
    # \b(?:developer|debug|maintenance) mode\b is split in three, in that order.
    ("instruction_override", "instruction override", _ScannedCue(
        _word_led(r"system (?:prompt|message)\b", r"you are now\b", r"from now on\b", r"developer mode\b",
                  r"debug mode\b", r"maintenance mode\b", r"no (?:restrictions|content filters|filters)\b",
                  r"without (?:any )?restrictions\b", r"jailbreak\w*", r"dan\b", r"higher priority\b",
                  r"has been (?:updated|disabled)\b", r"is disabled\b", r"instructions you were given\b",
                  r"previous instructions\b", r"override\b"),
        _WindowScan("(?:" + _word_led("ignore", "disregard", "forget", "override", "skip", "bypass") + r")\b", 40,
                    "(?:" + _word_led("previous", "prior", "above", "earlier", "all", "your", "the", "every", "any",
                                      "my") + r")\b", 30,
                    "(?:" + _word_led("instructions?", "rules", "prompt", "guidelines", "polic(?:y|ies)",
                                      "restrictions?", "filters?", "guardrails?", "trust (?:level|boundary)",
                                      "access controls?") + r")\b", lazy=True))),
    ("role_play", "role-play or authority claim", re.compile("(?:" + _word_led(
        "pretend", "act as", "role-?play", "let'?s play a game", "as the (?:ceo|cfo|admin|administrator|developer)",
        "i am the (?:developer|admin|administrator|ceo)", "i authori[sz]e you", "red-?team exercise", "respond as",
        "treat (?:me|everything) as", "who always complies") + r")\b")),
    # + \{\{[^}]*\}\} before \$\{jndi:, and (?:^|\n)[^\S\n]*... split into its \n alternative and the
    # _AtStartScan of its ^ one (which needs a space or s, a or d at 0, where no other can start);
    # #{3} is written ###: every alternative then starts with a literal.
    ("markup_injection", "prompt markup", _ScannedCue(
        r"</?\s*(?:system|context|instructions?|admin|user|assistant)\s*>|\[/?inst\]|"
        r"\n[^\S\n]*(?:system|assistant|developer)\s*:|###|\$\{jndi:", _OpenerScan("{{", "}", "}"),
        _AtStartScan(r"[^\S\n]*(?:system|assistant|developer)\s*:"))),
    # + the _CharThenScan \s--\s*$ after ;\s*drop\s+table\b (it starts with a space, where no other can).
    ("code_injection", "injection syntax", _ScannedCue(
        r"'\s*or\s+1\s*=\s*1|" + _word_led(r"union\s+select\b") + r"|;\s*drop\s+table\b",
        _CharThenScan(r"\s", r"-\s*$", lit="-"))),
    # + !\[[^\]]*\]\( after \bpastebin\b, the _WindowScan after \bdownload link\b and the
    # _CharThenScan [\w.+-]@[\w-]+\.(?:com|net|org)\b before \bfirst letters?\b (its second
    # character, @, is no other alternative's: it cannot start where they do).
    ("exfil_channel", "exfiltration channel", _ScannedCue(
        _word_led(r"webhook\b", r"pastebin\b", r"markdown image\b", r"alt text\b", r"download link\b",
                  r"first letters?\b", free=("https?://",)),
        _OpenerScan("![", "]", "("),
        _WindowScan("(?:" + _word_led("email", "forward", "upload", "post", "send", "put") + r")\b", 60,
                    "(?:" + _word_led("to", "into", "in") + r")\b", 30,
                    "(?:" + _word_led(r"my personal\b", r"gmail\b", r"external\b", r"attacker\b", r"url\b",
                                      r"link\b") + ")", lazy=False),
        _CharThenScan(r"[\w.+-]", r"[\w-]+\.(?:com|net|org)\b"))),
    ("verbatim_dump", "verbatim dump", re.compile(_word_led(
        r"verbatim\b", r"word for word\b", r"full (?:text|payloads?|contents?)\b",
        r"raw (?:text|chunks?|embeddings?|contents?|vectors?)\b", r"unredacted\b", r"unfiltered\b",
        r"do(?:n'?t| not) summari[sz]e\b", r"no summar(?:y|ies)\b", r"in full\b",
        r"until (?:you have returned|done|the entire|every)\b", r"one (?:by|after) (?:one|another)\b"))),
    ("evasion", "evasion", re.compile(_word_led(
        r"without (?:going through )?(?:approval|permission|logging|anyone knowing|telling)\b",
        r"do(?:n'?t| not) (?:log|tell|record)\b", r"quietly\b", r"not supposed to\b",
        r"access (?:was|has been) revoked\b", r"won'?t approve\b", r"so the filter\b", r"not notice\b",
        r"off the record\b", r"before it'?s public\b"))),
    # \b(?:his|her|their|colleague'?s?|coworkers?'?s?|manager'?s|boss'?s|someone else'?s|other people'?s|
    # everyone'?s|everybody'?s|[a-z]+ [a-z]+'s)\b, led by [a-z] as _word_led does with literals.
    ("other_person", "another person's data", re.compile(
        r"[a-z](?<!\w.)(?:(?<=h)(?:is|er)|(?<=t)heir|(?<=c)(?:olleague'?s?|oworkers?'?s?)|(?<=m)anager'?s|"
        r"(?<=b)oss'?s|(?<=s)omeone else'?s|(?<=o)ther people'?s|(?<=e)(?:veryone'?s|verybody'?s)|"
        r"[a-z]* [a-z]+'s)\b")),
    ("own_account", "own-account request", re.compile("(?:" + _word_led(
        "my own", "for myself", "i forgot my",
        *(verb + " my" for verb in ("reset", "change", "update", "rotate", "revoke", "see", "download", "correct")),
        "my (?:password|login|account|payslip|pay stub|salary statement|2fa|w-2|records|medical records|"
        "performance review|bank details|home address|api key|credentials|personal access token|token|"
        "bearer token|npm token|url|regex|code|json|build|ci|tests?)") + r")\b")),
    ("howto_question", "how-to question", re.compile(
        r"^\s*(?:how (?:do|can|should|does|are|is) (?:i|we|the company)|how to|what(?:'s| is| are| does| counts)|"
        r"why (?:does|is|do|did|was)|explain|can i|can you explain|should i|where (?:do|can|would|is) i?|"
        r"where's|when (?:is|are)|is (?:it|there|my|bereavement)|who (?:do|can|approves|reviews|signs)|"
        r"do (?:i|we)|any tips|in \w+, how|our ci|the (?:build|customer|user|link))\b")),
    ("exploratory_cue", "exploratory browsing", re.compile(_word_led(
        r"what (?:documents|docs|files|policies|information|resources|guides|topics|kinds|types|categories|"
        r"reports|materials|templates|training|courses|collections|dashboards|services|datasets|"
        r"(?:\w+ )?(?:exists?|is available))\b", r"overview\b", r"high[- ]level\b", r"big picture\b",
        r"what do we have\b", r"what'?s (?:available|in the|new)\b", r"what can i search\b", r"browse\b",
        r"tour of\b", r"which (?:policies|guides|documents|docs|teams|dashboards|collections|training|"
        r"internal|clinical|regulations|finance|industries|jurisdictions|product|coding)\b", r"landscape\b",
        r"table of contents\b", r"just titles\b", r"titles only\b", r"in general\b", r"broadly\b",
        r"at a high level\b", r"general (?:info|principles|process)\b", r"what should i read\b", r"any docs\b",
        r"summar(?:y|ize) (?:of )?(?:the )?(?:kinds|main|types)\b"))),
)
# bulk_secret: a quantifier (all, every, each, the full list of, everyone's) whose noun phrase ends
# in a credential or PII noun, after a bulk verb or at the start: `list all passwords`, `show every
# bearer token`, `all api keys`. Apart from bulk_request and sensitive_noun so the model can weigh
# the verb and the noun alone low and their conjunction high: the look-alikes use the same words
# with another head (`list all password requirements`, `show every guide about API key rotation`).
# (The noun before `of all` too, `dump the passwords of all accounts`, was tried: the model retrained
# with it refused a benign held-out question that builtin-linear-v1 passed.)
_SECRET_HEAD = "(?:" + _word_led(
    r"passw(?:or|0r)ds?(?: hash(?:es)?)?", r"passphrases?", r"credentials?", r"secrets?", r"tokens?",
    *(kind + r" keys?" for kind in ("api", "private", "secret", "access", "ssh", "signing", "encryption")),
    r"ssns?", r"social security numbers?", *(kind + " card numbers?" for kind in ("credit", "debit", "bank", "payment")),
    r"card numbers?", r"credit cards?", r"cvvs?", r"pins?",
    r"salar(?:y|ies)", r"account numbers?", r"routing numbers?", r"tax ids?", r"passport numbers?",
    r"dates? of birth", r"home address(?:es)?") + r")\b"
# What may follow the noun for it to be the head of its phrase (`passwords in`, `tokens.`), not a
# modifier (`password requirements`, `token expiry settings`).
_SECRET_END = (r"(?=\s*$|\s*[.,;:!?)]|\s+(?:in|from|of|on|for|you|we|that|which|stored|saved|with|and|please|"
               r"here|there|to|across|into|as|at|by|used|held|kept|known|mentioned|found|together)\b)")
_SECRET_VERB = "(?:" + _word_led(*_BULK_VERBS.split("|"), "display", "read", "tell", "want", "need", "collect",
                                 "gather", "what are", "what're", "reveal", "leak", "share", "paste",
                                 "provide", "grab") + r")\b[^.?!\n]{0,30}?"
# Up to three words before the noun, none of them a word that starts another phrase (`guide
# about`, `places where`, `kinds of`).
_SECRET_MODS = (r"(?:\s+(?:of\s+)?(?:the|our|your|their|these|those|stored|saved))?"
                r"(?:\s+(?!(?:about|on|of|for|that|where|which|with|to|in|from|who|whose|how|what|when|why|"
                r"into|by|at|as|rules?|types?|kinds?)\b)[\w'-]+){0,3}?")
_SECRET_QUANT = "(?:" + _word_led("all", "every", "each", "entire", "complete", "full (?:list|set) of",
                                  "complete (?:list|set) of", "whole (?:list|set) of", "everyone'?s",
                                  "everybody'?s") + ")"
_BULK_SECRET_HEAD_RE = re.compile(_SECRET_HEAD)
# (?:^\s*|verb gap)quantifier phrase, tried at each quantifier (found by a search led by literals) with
# the verb looked for just before it: as one regex, every verb retried 30 gap positions (3.9 ms on
# a 2048-character `show show ...`).
_SECRET_QUANT_RE = re.compile(_SECRET_QUANT)
_SECRET_PHRASE_RE = re.compile(rf"{_SECRET_QUANT}{_SECRET_MODS}\s+{_SECRET_HEAD}{_SECRET_END}")
_SECRET_VERB_BEFORE_RE = re.compile(_SECRET_VERB + r"\Z")
_SECRET_TRIES = 16  # quantifiers looked at per query (1.2 ms for 64 on a stuffed query); a request has one or two


def _bulk_secret(low: str) -> str:
    """The text of the first bulk request for secrets in ``low`` (verb through noun), or ``""``."""
    if _BULK_SECRET_HEAD_RE.search(low) is None:
        return ""
    for q in itertools.islice(_SECRET_QUANT_RE.finditer(low), _SECRET_TRIES):
        start = q.start()
        m = _SECRET_PHRASE_RE.match(low, start)
        if m is None:
            continue
        if not low[:start].strip():
            return m.group(0)
        # the longest verb is 12 characters, and the gap after it at most 30
        verb = _SECRET_VERB_BEFORE_RE.search(low, max(0, start - 48), start)
        if verb is not None:
            return low[verb.start():m.end()]
    return ""


_NAMED_ROLE_RE = re.compile(_word_led(
    *(role + r"'s\b" for role in ("ceo", "cfo", "cto", "coo", r"vp of \w+", "general counsel", "hr director",
                                  r"head of \w+", "skip-level")),
    *(kind + r"\s*#?\d+\b" for kind in ("employee", "patient", "ticket", "user", "customer", "room", "bed", "ward")),
    r"project [a-z]+\b", r"q[1-4]\b", r"h[12]\b", r"fy\d{2,4}\b"))

#: Names of the dense (non-hashed) features, in model order.
CUE_NAMES: tuple[str, ...] = tuple(n for n, _, _ in _REGEX_CUES) + (
    "named_target", "encoded_share", "percent_escape", "zero_width_in_word", "styled_chars",
    "leet_tokens", "spaced_letters", "repetition", "length", "bulk_secret",
)
_CUE_DISPLAY = {n: d for n, d, _ in _REGEX_CUES} | {
    "named_target": "named target", "encoded_share": "encoded text", "percent_escape": "percent escape",
    "zero_width_in_word": "zero-width characters inside words", "styled_chars": "styled/compatibility letters",
    "leet_tokens": "leetspeak", "spaced_letters": "spaced-out letters", "repetition": "repetition/stuffing",
    "length": "long query", "bulk_secret": "bulk request for secrets",
}


@dataclass(frozen=True)
class Featurized:
    """The features of one text: hashed n-gram keys and dense cue values.

    Attributes:
        keys: distinct n-gram feature keys (``"w:..."`` word, ``"b:..."`` bigram, ``"c:..."`` char
            trigram), in first-seen order.
        cues: value of each of :data:`CUE_NAMES`, in order.
        evidence: for cues that fired, the text that triggered them (for the reasoning string).
    """

    keys: tuple[str, ...]
    cues: tuple[float, ...]
    evidence: dict[str, str]


# Mathematical alphanumerics, enclosed/squared letters and fullwidth forms; regional indicators
# (flags, from U+1F1E6) excluded.
# Counted as the length their runs remove: one match per run, not per character (findall made
# a string of each of 2048 fullwidth letters, ~0.2 ms).
_STYLED_CLASS = "[\U0001D400-\U0001D7FF\u2460-\u24FF\U0001F100-\U0001F1E5\uFF01-\uFF5E]"
_STYLED_RE = re.compile(f"{_STYLED_CLASS}{_STYLED_CLASS}*")  # [...]+, led by the class: searched in C


# NFKC expands a character up to 18-fold (U+FDFA) and casefolding up to 3-fold, so normalising
# the whole prefix and then cutting did up to 36 864 characters of work for 2048 kept. Both are
# done in pieces instead, stopping once the cut is reached, with the same result:
# NFKC(a + b) == NFKC(a) + NFKC(b) when the compatibility decomposition of b's first character
# starts with a starter (combining class 0) that is never the second character of a canonical
# composition. Nothing in b then reorders with a or composes onto it. The starters that are such
# second characters are Hangul medial vowels and final consonants and the Indic, Myanmar,
# Balinese and other vowel and length marks below. tests/test_intent_normalize.py rebuilds this
# set from unicodedata and fails when a Unicode update changes it (a missing one would let a split
# fall between two characters that compose); scripts/check_nfkc_pieces.py checks the rule over
# all of Unicode.
_COMPOSING_STARTERS = frozenset(
    "\u09be\u09d7\u0b3e\u0b56\u0b57\u0bbe\u0bd7\u0cc2\u0cd5\u0cd6\u0d3e\u0d57\u0dcf\u0ddf\u102e\u1b35"
    "\U00011127\U0001133e\U00011357\U000114b0\U000114ba\U000114bd\U000115af\U00011930"
    + "".join(map(chr, range(0x1161, 0x1176))) + "".join(map(chr, range(0x11A8, 0x11C3))))
_NFKC_PIECE = 128
_CASEFOLD_PIECE = 512


@lru_cache(maxsize=4096)
def _starts_nfkc_piece(ch: str) -> bool:
    first = unicodedata.normalize("NFKD", ch)[0]
    return not unicodedata.combining(first) and first not in _COMPOSING_STARTERS


def _nfkc_prefix(raw: str, limit: int, piece_len: int = _NFKC_PIECE) -> str:
    """``unicodedata.normalize("NFKC", raw)[:limit]``.

    The pieces normalised give fewer than ``limit + 18 * piece_len`` characters, plus twice the
    length of any run of characters that may not start a piece (none of those expands further).
    """
    if raw.isascii():
        return raw[:limit]
    pieces: list[str] = []
    done = start = 0
    n = len(raw)
    while start < n and done < limit:
        end = start + piece_len
        while end < n and not _starts_nfkc_piece(raw[end]):
            end += 1
        piece = unicodedata.normalize("NFKC", raw[start:end])
        pieces.append(piece)
        done += len(piece)
        start = end
    return "".join(pieces)[:limit]


def _casefold_prefix(text: str, limit: int, piece_len: int = _CASEFOLD_PIECE) -> str:
    """``text.casefold()[:limit]``; case folding maps each character on its own."""
    if text.isascii() or len(text) * 3 <= limit:
        return text.casefold()[:limit]
    pieces: list[str] = []
    done = start = 0
    while start < len(text) and done < limit:
        piece = text[start:start + piece_len].casefold()
        pieces.append(piece)
        done += len(piece)
        start += piece_len
    return "".join(pieces)[:limit]


def featurize(text: str) -> Featurized:
    """Extract the model's features from one query text.

    The normalised text is folded (:mod:`qdrant_guard.intent_fold`: leetspeak, lookalike letters,
    invisible characters, spaced and split words, glued percent escapes, base64 and hex fragments)
    before the n-grams and cues are read; the obfuscation cues count the disguises undone.

    Args:
        text: the query.

    Returns:
        The :class:`Featurized` view used by both inference and training.
    """
    return _featurize(text, fold=True)


def _featurize(text: str, *, fold: bool) -> Featurized:
    # fold=False is feature version 1 exactly: the reference the speed-up tests compare with.
    full_len = len(text)
    raw = text[:_MAX_LEXICAL_CHARS]
    styled = 0
    if not raw.isascii():
        styled = len(raw) - len(_STYLED_RE.sub("", raw))
    zw_in_word = len((INVISIBLE_IN_WORD_RE if fold else _ZW_IN_WORD_RE).findall(raw))
    cased = _nfkc_prefix(raw, _MAX_LEXICAL_CHARS).translate(_ZW_STRIP)
    low = _casefold_prefix(cased, _MAX_LEXICAL_CHARS)

    written = _TOKEN_RE.findall(low)
    single = sum(len(tok) == 1 and tok.isalpha() for tok in written)
    n_written = len(written)
    leet = 0
    if fold:
        folded = _fold(low, cased)
        low = folded.text
        leet = folded.leet_words
        styled += folded.lookalike_letters
        tokens = _TOKEN_RE.findall(low)
    else:
        tokens = written
    keys: dict[str, None] = {}
    seen: set[str] = set()
    for tok in tokens:
        if tok in seen:  # repeats add no binary feature; stuffing must not cost per repeat
            continue
        seen.add(tok)
        keys["w:" + tok] = None
        if not fold and _LEET_TOKEN_RE.match(tok) and not tok.isalpha():
            leet += 1
            keys["w:" + tok.translate(_LEET)] = None
        if len(tok) <= _MAX_CHARGRAM_TOKEN:
            padded = f" {tok} "
            for i in range(len(padded) - 2):
                keys["c:" + padded[i:i + 3]] = None
    for a, b in zip(tokens, tokens[1:]):
        keys[f"b:{a} {b}"] = None

    evidence: dict[str, str] = {}
    cues: list[float] = []
    for name, _, pattern in _REGEX_CUES:
        if name not in ("bulk_request", "sensitive_noun", "instruction_override"):
            found = None
        elif isinstance(pattern, re.Pattern):
            found = pattern.findall(low)
        else:  # the value counts at most 3 matches; the cue has no groups, so findall gave group 0
            found = [m.group(0) for m in itertools.islice(pattern.finditer(low), 3)]
        if found is None:
            m = pattern.search(low)
            if m:
                evidence[name] = m.group(0).strip()
                cues.append(1.0)
            else:
                cues.append(0.0)
        elif found:
            evidence[name] = found[0].strip() if isinstance(found[0], str) else ""
            cues.append(min(len(found), 3) / 3.0 + 0.5)
        else:
            cues.append(0.0)

    named = ""
    for m in _NAME_PAIR_RE.finditer(cased):
        before = cased[max(0, m.start() - 8): m.start()].rstrip()
        # A capitalised pair at the start of a sentence is usually just the first words.
        at_sentence_start = before[-1] in ".!?:;\"(" if before else m.start() <= 8
        if not at_sentence_start:
            named = m.group(0)
            break
    if not named:
        m = _NAMED_ROLE_RE.search(low)
        if m:
            named = m.group(0)
    if named:
        evidence["named_target"] = named
    cues.append(1.0 if named else 0.0)

    n_chars = max(len(raw), 1)
    encoded = 0
    for rx in (_PCT_RUN_RE, _ESCAPE_RUN_RE, _HEX_RE):
        for m in rx.finditer(raw):
            encoded += m.end() - m.start()
    for m in _B64_RE.finditer(raw):
        s = m.group(0)
        # Long identifiers and words are not base64; require the mixed classes base64 produces.
        if any(c.isdigit() for c in s) + any(c.isupper() for c in s) + any(c.islower() for c in s) >= 3 \
                or s.endswith("="):
            encoded += len(s)
    if fold:
        encoded += folded.escaped_chars
    encoded_share = min(encoded / n_chars, 1.0)
    if encoded_share:
        evidence["encoded_share"] = f"{encoded_share:.0%} of text"
    cues.append(encoded_share)
    pct = _PCT_ANY_RE.search(raw)
    if pct:
        evidence["percent_escape"] = pct.group(0)
    cues.append(1.0 if pct else 0.0)
    cues.append(min(zw_in_word, 5) / 5.0)
    cues.append(min(styled / n_chars * 4.0, 1.0))
    cues.append(min(leet, 3) / 3.0)
    spaced = single / n_written if n_written >= 6 and single * 2 >= n_written else 0.0
    if fold:  # a spelled-out word (``s a l a r y``) in a plain sentence is as much a disguise as a whole one
        spaced = max(spaced, 1.0 if folded.joined_words else 0.0)
    cues.append(spaced)
    cues.append(1.0 - len(set(tokens)) / len(tokens) if len(tokens) >= 8 else 0.0)
    cues.append(min(full_len, 1000) / 1000.0)
    if fold:  # fold=False stays feature version 1, which had no such cue
        # Plain text only: disguised grabs are the obfuscation cues' (and mostly labelled
        # adversarial); this cue, learnt on plain ones, pulled them towards suspicious, splitting
        # their mass under the threshold on both labels (`list all &#x70;asswords`).
        disguised = encoded_share or pct or zw_in_word or styled or leet or spaced
        bulk = "" if disguised else _bulk_secret(low)
        if bulk:
            evidence["bulk_secret"] = bulk.strip()
        cues.append(1.0 if bulk else 0.0)
    return Featurized(tuple(keys), tuple(cues), evidence)


def hash_key(key: str, hash_bits: int) -> int:
    """Stable bucket of an n-gram key (CRC-32, independent of ``PYTHONHASHSEED``)."""
    return zlib.crc32(key.encode("utf-8", "surrogatepass")) & ((1 << hash_bits) - 1)


def feature_rows(feats: Featurized, hash_bits: int) -> tuple[list[int], list[float]]:
    """Map :class:`Featurized` to (row indices, values) of the model's weight matrix.

    Rows ``[0, 2**hash_bits)`` are hashed n-grams (binary, L2-normalised together); the cue rows
    follow in :data:`CUE_NAMES` order with their raw values.
    """
    base = 1 << hash_bits
    idx = [hash_key(k, hash_bits) for k in feats.keys]
    scale = 1.0 / math.sqrt(len(idx)) if idx else 0.0
    vals = [scale] * len(idx)
    for j, v in enumerate(feats.cues):
        if v:
            idx.append(base + j)
            vals.append(v)
    return idx, vals


def _display(key: str, feats: Featurized) -> str:
    kind, _, body = key.partition(":")
    if kind == "w":
        return f"word '{body}'"
    if kind == "b":
        return f"phrase '{body}'"
    if kind == "c":
        return f"fragment '{body.strip()}'"
    label = _CUE_DISPLAY.get(body, body)
    ev = feats.evidence.get(body)
    return f"{label} '{ev}'" if ev else label
