"""The payload field screen: each leaf of a payload screened as ``key: "value"`` under its key's
rules (a password name, a number's digits, a barcode or media id, a card), with the clean keys and
values a writer's scope remembers.
"""
from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any, Callable, Mapping

from . import detect as _detect
from .password_names import (
    _BARE_EXACT,
    _bare_word,
    _drop_digits,
    _held_name,
    _holder_key,
    _last_word,
    _name_words,
    _password_name,
    _placeholder,
    _tally,
    _working_directory,
    password_finding,
    password_name_why,
)
from .policy import CollectionPolicy
from .sent_form import _ARRAYS, _as_sent, _sent_key

if TYPE_CHECKING:  # textguard imports this module: TextOps is named in an annotation only
    from .textguard import TextOps


# Longest value the clean-values memory keeps (textguard's _CLEAN_VALUES_MAX says why).
_CLEAN_VALUE_MAX_LEN = 256
# Leaves the screen passes as they are: JSON true/false/null hold no digits or characters.
_SCALARS = (bool, type(None))
# A number is screened as the digits JSON stores (``key: "4111111111111111"``), as a string of
# those digits would be. Under a plain key (letters, digits, ``_ . -``: nothing in it reaches
# across ``: "``, nothing decodes or folds), one of fewer than 13 digits (signed or not) holds no
# finding by the detector's rules unless it has 9 digits and the key names an SSN: numbers need a
# card's 13+ digits, an SSN's 9 bare only after "ssn" (as a word) or "social security" (any case, joined or
# not), a NANP phone separators, E.164 a "+", an IBAN letters; the encodings 12+ characters (base64
# of digits only never decodes to ASCII: its first byte is 0xD0 or more) or 24+ decimal digits
# (hex); assigned secrets 16+ characters of two classes or 8+ of three (a sign and digits are two).
# So a remembered clean key holds the bound below which its numbers skip the detector: 10**12, or
# 10**8 under a key containing "ssn" or "social", 0 under any other key; test_payload_values pins
# both bounds against the detector. A password name (the rule below) is -1: every number screened.
_PLAIN_KEY = re.compile(r"[A-Za-z0-9_.-]*")
_SHORT_NUMBER = 10**12
_SHORT_SSN_NUMBER = 10**8
_KEY_PASSWORD = -1
# Integral floats are the integers JSON readers see (JavaScript has no other kind), and a fraction
# is no number form the detector finds. Above 2**53 a float no longer holds every integer, but the
# one it holds it holds exactly: 6.200000010156593e+17 is the 18-digit card 620000001015659264 to
# int() or pandas. Below 10**19 (19 digits, a card's most) each is screened as its integer; a
# larger one has 20+ digits, which no rule finds in a run of digits (hex wants 24+ that spell
# ASCII, which the 53 bits of a float cannot choose).
_EXACT_FLOAT = 1e19
# A value's double quotes and backslashes as apostrophes and slashes, for its quoted reading (value_findings).
_UNQUOTE = str.maketrans('"\\', "'/")
# What JSON escapes in a string (ensure_ascii off): a quote, a backslash, a control character.
_JSON_ESCAPED = re.compile(r'["\\\x00-\x1f]')
# Shortest value whose readings share one detect.one_value_reader (value_findings): below it the
# reader costs what the kernel pass it saves (an 80-100 character two-line value: the same time).
_SHARED_READ_MIN = 128


def stored_findings(name: str, value: str,
                    read: Callable[[str], list[_detect.Finding]] | None = None) -> list[_detect.Finding]:
    """The detector's findings in ``value`` as the JSON stored or sent writes it after its key
    (``name: "<value escaped>"``), in the value's offsets (a finding is widened to the characters
    whose escapes it touches); [] when JSON escapes nothing in it. The neutral readings miss some:
    a secret behind an escaped quote or a control character ('\\\\"a8f3...', '\\na8f3...') the
    detector finds only beside its escape. ``read``: the detector (:func:`detect.find_sensitive`, or
    the :func:`detect.one_value_reader` of the value's other readings)."""
    if not _JSON_ESCAPED.search(value):
        return []
    h = len(name) + 3
    escaped = json.dumps(value, ensure_ascii=False)[1:-1]
    # Most such values (text with newlines) hold nothing: the offset map below is built only for a
    # finding, which keeps the common case at one more detector call.
    hits = [f for f in (read or _detect.find_sensitive)(f'{name}: "{escaped}"')
            if f.end > h and f.start < h + len(escaped)]
    if not hits:
        return []
    out: list[str] = []
    index: list[int] = []  # for each character of the escaped text, the value's index it spells
    at = 0
    for m in _JSON_ESCAPED.finditer(value):
        i = m.start()
        out.append(value[at:i])
        index.extend(range(at, i))
        esc = json.dumps(m.group(), ensure_ascii=False)[1:-1]
        out.append(esc)
        index.extend([i] * len(esc))
        at = i + 1
    out.append(value[at:])
    index.extend(range(at, len(value)))
    n = len(index)  # JSON escapes character by character, so "".join(out) == escaped
    return [_detect.Finding(f.type, index[max(f.start - h, 0)], index[min(f.end - h, n) - 1] + 1, f.validator,
                            f.category)
            for f in hits]


def value_findings(name: str, value: str) -> list[_detect.Finding]:
    """The detector's findings in ``value`` read as JSON assigns it after its key ``name``, in the
    value's offsets: the detector finds a generic secret only next to a secret-like name
    ("api_key: ..."). A quote or backslash inside would end or escape the quoted form early, so
    such a value is given bare; bare, one that opens with a quote reads as a quote never closed
    ('api_key: "a8f3...'), so it is read quoted too, each quote and backslash as one neutral
    character; then as the JSON stored or sent escapes it (:func:`stored_findings`)."""
    quote = '' if '"' in value or "\\" in value else '"'
    head = f"{name}: {quote}"
    n, h = len(value), len(head)
    # A value JSON escapes only control characters in (text with newlines) is read twice, and the
    # escaped reading's view with its escapes decoded is this first reading's text: one reader
    # lets the kernel read that text once.
    read = (_detect.one_value_reader() if quote and n >= _SHARED_READ_MIN and _JSON_ESCAPED.search(value)
            else _detect.find_sensitive)
    found = [f for f in read(f"{head}{value}{quote}") if f.end > h and f.start < h + n]
    if not found and '"' in value:
        h = len(name) + 3
        found = [f for f in _detect.find_sensitive(f'{name}: "{value.translate(_UNQUOTE)}"')
                 if f.end > h and f.start < h + n]
    if found:
        return [_detect.Finding(f.type, max(f.start - h, 0), min(f.end - h, n), f.validator, f.category)
                for f in found]
    return stored_findings(name, value, read)


# A name field and a value field of one object (Kubernetes env lists, AWS tags): the value is read
# under the name too. Upper case as well: the detector reads "NAME: x ... VALUE: y" in text so, and
# the prefixed pairs of CloudFormation parameters and outputs and Elastic Beanstalk option settings
# (the detector reads any prefix in text; a look at every key of every object would cost the screen).
_NAME_FIELDS = ("name", "key", "field", "Name", "Key", "Field", "NAME", "KEY", "FIELD", "ParameterKey", "OutputKey",
                "OptionName")
_VALUE_FIELDS = ("value", "Value", "VALUE", "ParameterValue", "OutputValue")
# Field names of product barcodes (_barcode).
_BARCODE_WORDS = frozenset({"ean", "gtin", "upc", "isbn", "barcode"})
# Words of a field name that say it may hold a card number (_media_id).
_CARD_WORDS = frozenset({"card", "cards", "pan", "cc", "credit", "payment", "payments", "jcb"})


def _number_bound(key: str) -> int:
    """What a clean key is remembered with: numbers of smaller magnitude under it need no screen
    (``_SHORT_NUMBER``), or ``_KEY_PASSWORD``."""
    if _password_name(key):
        return _KEY_PASSWORD
    if not _PLAIN_KEY.fullmatch(key):
        return 0
    lower = key.lower()
    return _SHORT_SSN_NUMBER if "ssn" in lower or "social" in lower else _SHORT_NUMBER


def _barcode(name: str, value: str) -> bool:
    """A product barcode under a field named for one (``ean``, ``gtin``, ``upc``, ``isbn``,
    ``barcode``, as the last word; ``productEan``, ``gtin13``): 8, 12, 13 or 14 digits with a valid
    GS1 check digit. About one EAN-13 in ten with a ``4`` prefix (GS1 Germany) also passes Luhn as a
    13-digit Visa number, which refused product catalogues on PUBLIC collections."""
    if not (value.isascii() and value.isdigit() and len(value) in (8, 12, 13, 14)):
        return False
    if _last_word(name) not in _BARCODE_WORDS:
        return False
    body = [int(c) for c in reversed(value[:-1])]
    return (10 - sum(d * (3 if i % 2 == 0 else 1) for i, d in enumerate(body)) % 10) % 10 == int(value[-1])


def _media_id(name: str, value: str, path: str = "") -> bool:
    """A 19-digit id in 3528..3589e15 under a field whose last word is ``id``/``ids`` (``media_id``,
    ``id``) and none of whose words, nor those of the ``path`` it is in, names a card
    (``_CARD_WORDS``): Instagram's media ids fall in JCB's 19-digit range, and one in ten passes
    Luhn (``card_id``, ``card.id`` or ``payment.card.id`` holding a card still is one)."""
    if not (len(value) == 19 and value.isascii() and value.isdigit() and "3528" <= value[:4] <= "3589"):
        return False
    words = [w.lower() for w in _drop_digits(_name_words(name))]
    return (bool(words) and words[-1] in ("id", "ids") and not _CARD_WORDS.intersection(words)
            and not _CARD_WORDS.intersection(w.lower() for w in _name_words(path)))


def no_card(name: str, value: str, path: str = "") -> bool:
    """Whether ``value`` under field ``name`` (a key or key path; ``path``: the keys it is under) is
    no card number whatever Luhn says: a product barcode (:func:`_barcode`) or a media id
    (:func:`_media_id`). The payload screen and filters drop their ``CREDIT_CARD`` findings alike."""
    return _barcode(name, value) or _media_id(name, value, path)


def _number_text(value: Any) -> str | None:
    """The digits JSON stores of an int (an int subclass's value, not its ``__str__``), or of the
    integer an integral float (a float subclass's value) below 10**19 is; None for anything else
    (bool is JSON true/false)."""
    if isinstance(value, int):
        return None if isinstance(value, bool) else int.__repr__(value)
    if isinstance(value, float):
        # A float subclass's value, as for ints: its own is_integer() or __lt__ could hide the card.
        value = float.__float__(value)
        if value.is_integer() and -_EXACT_FLOAT < value < _EXACT_FLOAT:
            return int.__repr__(int(value))
    return None


class _FieldScreen:
    """One payload's screen (:meth:`TextOps.screen_payload_fields`)."""

    def __init__(self, ops: TextOps, op: str, name: str, pol: CollectionPolicy, point_id: Any,
                 keep_pii: bool, clean_keys: dict[str, int], clean_values: set[tuple[str, str]]) -> None:
        self.ops, self.op, self.name, self.pol, self.point_id, self.keep_pii = ops, op, name, pol, point_id, keep_pii
        self.clean_keys, self.clean_values = clean_keys, clean_values
        self.remember = True  # False while a sibling object's value is read under "value" (obj)
        self.under = ""  # set_payload's key path the payload is stored under (a card's id is a card)
        self.found = 0  # values with a finding so far
        self.label = "payload"  # what refusals call the screened object
        self.inference = False  # an inference input's options (screen_text's inference)
        self.query = False  # ... of a query (screen_text's query)
        # A payload set by filter, or a collection's metadata, has no point to name.
        self.point_ids = [] if point_id is None else [point_id]

    def obj(self, value: dict[Any, Any], path: str, skip: Mapping[str, str] | None = None,
            secret: str | None = None, parent: str | None = None) -> dict[Any, Any]:
        """``value`` screened (``path``: where it is, for refusals). ``secret``: the password name the
        object is under; its keys that hold the password (:func:`_holder_key`) are read under it.
        ``parent``: the key the object is under; a bare ``pass`` or ``pin`` key (:func:`_held_name`)
        is read as ``parent.pass`` (``auth.pass``, ``card.pin``)."""
        out: dict[Any, Any] = {}
        changed = False
        clean_keys, clean_values = self.clean_keys, self.clean_values
        names = (_sibling_names(value) if ("value" in value or "Value" in value or "VALUE" in value
                                            or "ParameterValue" in value or "OutputValue" in value) else ())
        late = False  # a name or value field given as another kind of key (found only as stored)
        for k, v in value.items():
            # A remembered clean key with a remembered clean string, a short number, true, false
            # or null, is what the screen below returns unchanged; only the check for a key stored
            # twice is left.
            if (type(k) is str and (not skip or k not in skip) and k not in out and not (names and k in _VALUE_FIELDS)
                    and not (secret and _holder_key(k)) and not (parent is not None and k in _BARE_EXACT)):
                bound = clean_keys.get(k)
                if bound is not None:
                    tv = type(v)
                    if ((tv is str and (k, v) in clean_values) or tv in _SCALARS
                            or ((tv is int or tv is float) and -bound < v < bound)):
                        out[k] = v
                        continue
            given = k
            if type(k) is not str:
                k = _sent_key(k)  # screen the key as it is stored (a str subclass's characters, bytes' text)
                late = late or k in _NAME_FIELDS or k in _VALUE_FIELDS
            kind = skip.get(k) if skip and isinstance(k, str) else None
            if kind == "receipt":
                out[k] = v
                changed = changed or k is not given
                continue
            nk, shown = self.key(k, path)
            at = f"{path}.{shown}" if path else shown
            sent = _as_sent(v) if kind == "text" else v
            nv: Any  # the value as stored: a str, a screened list, or the node's screened form
            if kind == "text" and isinstance(sent, str):
                nv = sent
            elif kind == "text" and isinstance(sent, _ARRAYS):
                # Its strings are the text field's (guard_payload_text); anything else in it is not.
                items = [_as_sent(x) for x in sent]
                screened = [x if isinstance(x, str) else self.node(x, nk, f"{at}[{i}]") for i, x in enumerate(items)]
                nv = v if sent is v and all(a is b for a, b in zip(screened, sent)) else screened
            else:
                if secret and isinstance(k, str) and _holder_key(k):
                    # {"password": {"value": p}}: p is the password, read under the password name
                    # only (under "value" first, a clean answer would be remembered for "value").
                    nv = self.node(v, secret, at)
                elif (parent is not None and isinstance(k, str) and (k in _BARE_EXACT or k not in clean_keys)
                      and (held := _held_name(parent, k)) and not _tally(value, v)):
                    # A remembered key other than _BARE_EXACT is no bare pass or pin (key()).
                    nv = self.node(v, held, at)  # {"auth": {"pass": p}}: auth.pass
                elif names and k in _VALUE_FIELDS:
                    # {"name": "db_password", "value": v}: v is read under its name as well. Under
                    # "value" it is remembered only once every name found it clean too: what a
                    # name finds is a secret, and none stays in memory past its call.
                    remember, self.remember, found = self.remember, False, self.found
                    nv = self.node(v, nk, at)
                    self.remember = remember
                    for n in names:
                        nv = self.node(nv, n, at)
                    if self.found == found and type(v) is str:
                        self.remember_pair(k, v)
                else:
                    nv = self.node(v, nk, at)
            if nk in out:
                from .textguard import point_words  # textguard imports this module
                of = point_words(self.point_id)
                raise self.ops.unsupported_write(
                    self.op, self.name, self.pol,
                    f"{self.op}: two keys of the payload object at {path or '<top level>'!r}"
                    f"{' of ' + of if of else ''} would both be stored as {shown!r} once redacted, and one "
                    "would overwrite the other; remove the data from the keys. Nothing was written")
            changed = changed or nk is not given or nv is not v
            out[nk] = nv
        if late:
            # The names and value fields as stored: a str subclass "value" key that hides from a
            # lookup by its __hash__/__eq__, or b"name", is that field once sent.
            extra = [n for n in _sibling_names(out) if n not in names]
            for f in _VALUE_FIELDS:
                if extra and f in out:
                    nv = out[f]
                    if isinstance(nv, str):
                        clean_values.discard((f, nv))  # remembered before its name was known
                    for n in extra:
                        nv = self.node(nv, n, f"{path}.{f}" if path else f)
                    changed = changed or nv is not out[f]
                    out[f] = nv
        return out if changed else value

    def node(self, value: Any, key: Any, at: str) -> Any:
        value = _as_sent(value)
        if isinstance(value, str):
            return self.value(value, key, at)
        if isinstance(value, dict):
            if isinstance(key, str):
                if self.password_key(key):
                    return self.obj(value, at, secret=key)
                return self.obj(value, at, parent=key)
            return self.obj(value, at)
        if isinstance(value, _ARRAYS):
            items = list(value)
            out = [self.node(x, key, f"{at}[{i}]") for i, x in enumerate(items)]
            return value if all(a is b for a, b in zip(out, items)) else out
        digits = _number_text(value)
        if digits is None:
            return value
        # Screened as the digits JSON stores; redacted, it becomes the redacted string ("[SSN]"),
        # as a string would: no number can stand for a placeholder.
        screened = self.value(digits, key, at)
        return value if screened == digits else screened

    def password_key(self, key: str) -> bool:
        """Whether ``key`` is a password name (:func:`_password_name`), remembered or not."""
        bound = self.clean_keys.get(key)
        return _password_name(key) if bound is None else bound == _KEY_PASSWORD

    def key(self, key: Any, path: str) -> tuple[Any, str]:
        """The key to store and the key as it may be logged (redacted: a path names it in refusals)."""
        if not isinstance(key, str):
            return key, str(key)
        if key in self.clean_keys:
            return key, key
        findings = _detect.find_sensitive(key)
        if not findings:
            # Keys are the writer's data: 4,096 of 1 MB each would stay. A bare pass or pin spelled
            # otherwise than _BARE_EXACT (pass1, ＰＡＳＳ) is not kept: obj() reads a kept key as none.
            if len(key) <= _CLEAN_VALUE_MAX_LEN and (key in _BARE_EXACT or not _bare_word(key)):
                self.ops.remember_clean_key(self.clean_keys, key, _number_bound(key))
            return key, key
        redacted = _detect.replace_findings(key, findings)
        where = f"{self.label} key {(path + '.' if path else '') + redacted!r}"
        return self.ops.screen_text(self.op, self.name, self.pol, key, point_ids=self.point_ids,
                                    keep_pii=self.keep_pii, scanned=(redacted, findings), field=where,
                                    inference=self.inference, query=self.query), redacted

    def value(self, value: str, key: Any, at: str) -> str:
        # The value is read as JSON assigns it, after its key (value_findings).
        name = key if isinstance(key, str) else str(key)
        pair = (name, value)
        if pair in self.clean_values:
            return value
        n = h = len(value)
        why = ""
        found = [_detect.Finding(f.type, f.start + h, f.end + h, f.validator, f.category)
                 for f in value_findings(name, value)]  # shifted past a head, as the clip below wants
        if found and no_card(name, value, f"{self.under}.{at}"):
            found = [f for f in found if f.type != "CREDIT_CARD"]
        if (not any(f.category == "CREDENTIAL" for f in found) and self.password_key(name)
                and not _placeholder(value) and not _working_directory(name, value)):
            # A password whatever else the detector reads in it: one shaped as an SSN, a card
            # number or an e-mail was that PII only, stored as given on payload_fields = "credentials".
            found = [password_finding(h, h + n)]
            why = password_name_why(name)
        elif not found:
            # Not under a key with a finding (PII stays in a key on payload_fields = "credentials"):
            # nothing found stays in memory past its call.
            self.remember_pair(name, value)
            return value
        self.found += 1
        # Offsets back into the value (a finding that began in the key is clipped to the value).
        findings = [_detect.Finding(f.type, max(f.start - h, 0), min(f.end - h, n), f.validator, f.category)
                    for f in found]
        return self.ops.screen_text(self.op, self.name, self.pol, value, point_ids=self.point_ids,
                                    keep_pii=self.keep_pii, field=f"{self.label} field {at!r}", why=why,
                                    scanned=(_detect.replace_findings(value, findings), findings),
                                    inference=self.inference, query=self.query)

    def remember_pair(self, name: str, value: str) -> None:
        """Remember ``(name, value)`` as clean when it may be: short, under a remembered clean key."""
        if self.remember and len(name) + len(value) <= _CLEAN_VALUE_MAX_LEN and name in self.clean_keys:
            self.ops.remember_clean_value(self.clean_values, (name, value))


def _sibling_names(obj: dict[Any, Any]) -> list[str]:
    """The names an object's ``value`` field is assigned to: its ``name``/``key``/``field`` strings."""
    return [n for n in (_as_sent(obj[f]) for f in _NAME_FIELDS if f in obj) if isinstance(n, str)]
