"""What an inference input carries besides a Document's text, screened before inference sees it.

qdrant-client 1.20 hands a ``models.Document``, ``models.Image`` or ``models.InferenceObject`` to
an inference backend (Qdrant Cloud inference, or fastembed in local mode) with everything in it:
a Document's ``options`` (a prompt or prefix option is embedded with the text), an
InferenceObject's ``object`` (any JSON, most often text) and ``options``, an Image's ``options``
and its image, which may be a path or URL, and the ``model`` each names (sent to inference as
given). The text of each is screened as a Document's text is; an image's pixels cannot be, so only
a path or URL is read; a locator and a model name are refused (never redacted: a redacted URL
names another image, a redacted model name another model) when they hold a finding the
collection does not accept.
"""
from __future__ import annotations

import re
from typing import Any

from qdrant_client.http import models

from . import detect as _detect
from .decision import Verdict
from .field_screen import _FieldScreen, _number_text
from .policy import CollectionPolicy
from .sent_form import _ARRAYS, _as_sent

# Qdrant Cloud inference takes an external provider's API key as a top-level option (Qdrant's
# documentation: ``options={"openai-api-key": ...}``); it authenticates the call to the provider
# and is neither embedded nor stored, so it is the one credential an inference input may carry.
PROVIDER_KEYS = frozenset({"openai-api-key", "cohere-api-key", "jina-api-key", "openrouter-api-key"})
# JSON nesting the screen follows (as the text field's, review 44); a deeper input is refused.
MAX_DEPTH = 64
# An image given as data (a data: URI or bare base64): pixels, which no detector reads.
_BASE64 = re.compile(r"[A-Za-z0-9+/=_\-\s]{64,}")


class InferenceShapeError(Exception):
    """An inference input the screen cannot take: nested past :data:`MAX_DEPTH`, or with two keys
    of one object that redact to the same key (``why``: which, for the refusal)."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why


def locator_text(image: Any) -> str | None:
    """An Image's ``image`` as the path or URL qdrant-client sends, or None for data (pixels: no
    string once serialised, a data: URI or base64). A ``pathlib.Path``, or bytes that decode as
    UTF-8, is sent as its string (REST serialises it so: Qdrant Cloud inference fetches the URL),
    so it is read as one; read as the object, it passed as pixels, unscreened."""
    sent = _as_sent(image)
    if not isinstance(sent, str):
        return None
    return None if sent[:5].lower() == "data:" or _BASE64.fullmatch(sent) is not None else sent


def is_pixels(image: Any) -> bool:
    """Whether an Image's ``image`` is data, not a locator (:func:`locator_text`)."""
    return locator_text(image) is None


class InferenceScreen:
    """The screen of one inference input's options and object (:func:`screen_inference`).

    Options are read as a payload's fields are (``_FieldScreen``: each value as ``key: value``,
    under the password-name rule, numbers as their digits), since a credential in them sits under
    a name (``{"api_key": ...}``); an InferenceObject's strings are read as text, as a Document's
    text is, and its keys as keys."""

    def __init__(self, ops: Any, op: str, name: str, pol: CollectionPolicy, point_id: Any, keep_pii: bool,
                 label: str, query: bool = False) -> None:
        self.fields = _FieldScreen(ops, op, name, pol, point_id, keep_pii, *ops.clean_memory(name))
        self.fields.inference = True
        self.fields.query = self.query = query  # a query's input (how a PUBLIC refusal is worded)
        self.label = label  # what refusals call the input ("query (Document)")
        self.ops, self.op, self.name, self.pol, self.keep_pii = ops, op, name, pol, keep_pii
        self.point_ids = [] if point_id is None else [point_id]

    def options(self, options: Any) -> Any:
        """``options`` screened (the same object when nothing changed); a provider's key passes."""
        if options is None:
            return None
        sent = _as_sent(options)  # a Bm25Config as the object it is sent as
        if not isinstance(sent, dict):
            return options
        _depth(sent, "options")
        self.fields.label = f"{self.label} options"
        provider = {k: "receipt" for k in sent if isinstance(k, str) and k in PROVIDER_KEYS
                    and isinstance(_as_sent(sent[k]), str)}  # "receipt": passed as given (_FieldScreen.obj)
        out = self.fields.obj(sent, "", provider or None)
        return options if out is sent else out

    def object(self, value: Any, at: str = "object", depth: int = 0, key: str | None = None) -> Any:
        """An InferenceObject's ``object`` with its keys screened as keys, and its strings as text:
        one under a key as ``key: value`` (as a payload's), one under none (the object itself, or
        an array of them) as a Document's text is."""
        value = _as_sent(value)
        self.fields.label = self.label
        if isinstance(value, str):
            if key is not None:
                return self.fields.value(value, key, at)
            return self.ops.screen_text(self.op, self.name, self.pol, value, point_ids=self.point_ids,
                                        keep_pii=self.keep_pii, field=f"{self.label} {at}", inference=True,
                                        query=self.query)
        if depth >= MAX_DEPTH and isinstance(value, (dict, *_ARRAYS)):
            raise InferenceShapeError(f"its object nests objects or arrays more than {MAX_DEPTH} deep")
        if isinstance(value, dict):
            out: dict[Any, Any] = {}
            for k, v in value.items():
                nk, shown = self.fields.key(k, at) if isinstance(k, str) else (k, str(k))
                if nk in out:
                    raise InferenceShapeError(f"two keys of {at} would both be {shown!r} once redacted")
                out[nk] = self.object(v, f"{at}.{shown}", depth + 1, nk if isinstance(nk, str) else None)
            return value if all(a is b for a, b in zip(out, value)) and all(
                out[k] is v for k, v in value.items()) else out
        if isinstance(value, _ARRAYS):
            items = list(value)
            new = [self.object(v, f"{at}[{i}]", depth + 1, key) for i, v in enumerate(items)]
            return value if isinstance(value, list) and all(a is b for a, b in zip(new, items)) else new
        digits = _number_text(value)
        if digits is None:
            return value
        if key is not None:
            screened = self.fields.value(digits, key, at)
            return value if screened == digits else screened
        screened = self.ops.screen_text(self.op, self.name, self.pol, digits, point_ids=self.point_ids,
                                        keep_pii=self.keep_pii, field=f"{self.label} {at}", inference=True,
                                        query=self.query)
        return value if screened == digits else screened

    def locator(self, image: Any, where: str) -> None:
        """Refuse an Image's path or URL holding a finding: on a PUBLIC collection any (written, the
        collection is mislabelled; in a query, inference would fetch it as given), elsewhere a
        credential (PII in a locator is left, as in the image). Never redacted: the redacted string
        would name another image, or none."""
        text = locator_text(image)
        if text is None:
            return
        _refuse_finding(self.ops, self.op, self.name, self.pol, text, where, "Image",
                        "whose path or URL", "inference would fetch it as given (a locator cannot be redacted: "
                        "it would name another image). Pass the image as data (base64), or from an address "
                        "that holds none of them", self.point_ids,
                        mislabelled=self.pol.is_public and not self.query,
                        public_query=self.pol.is_public and self.query, remember=False)


# Model names seen clean: names repeat across calls, so a plain Document costs one set lookup after
# the first (only clean ones are kept: a refused name is not held in memory).
_CLEAN: set[str] = set()


def _findings(text: str, remember: bool) -> tuple[str, tuple[str, ...], tuple[str, ...]]:
    if remember and text in _CLEAN:
        return text, (), ()
    shown, findings = _detect.redact_with_findings(text)
    if remember and not findings:
        if len(_CLEAN) >= 256:
            _CLEAN.clear()
        _CLEAN.add(text)
    return (shown, tuple(sorted({f.type for f in findings if f.category == "CREDENTIAL"})),
            tuple(sorted({f.type for f in findings})))


def _refuse_finding(ops: Any, op: str, name: str, pol: CollectionPolicy, text: str, where: str, kind: str,
                    whose: str, why: str, point_ids: list[Any], *, mislabelled: bool, remember: bool,
                    public_query: bool = False) -> None:
    """Refuse a string inference reads as given (an Image's locator, an input's model name) holding
    a finding: written to a PUBLIC collection (``mislabelled``) any, SENSITIVITY_MISMATCH; in a query on
    one (``public_query``) a credential as CREDENTIAL_IN_TEXT and PII as SENSITIVITY_MISMATCH
    (inference would read it as given); elsewhere a credential (PII there is left, as in the input's
    text where the policy keeps it). Only model names are remembered clean (``remember``): a locator
    is data, and a process-wide memory of it would let one boundary time whether another sent it."""
    shown, creds, kinds = _findings(text, remember)
    if not kinds or (not creds and not mislabelled and not public_query):
        return
    verdict = Verdict.SENSITIVITY_MISMATCH if mislabelled or not creds else Verdict.CREDENTIAL_IN_TEXT
    raise ops.refuse(ops.decision(
        op, name, pol, verdict,
        f"{where} is a models.{kind} {whose} {shown!r} holds "
        f"{list(creds) if verdict is Verdict.CREDENTIAL_IN_TEXT else list(kinds)}, and {why}",
        point_ids=point_ids, details={"findings": list(kinds), "where": where, "form": kind},
    ))


def _model_name(ops: Any, op: str, name: str, pol: CollectionPolicy, value: Any, where: str, point_id: Any,
                write: bool) -> None:
    """Refuse an inference input whose ``model`` (sent to inference as given, so never redacted:
    the redacted name would be another model) holds a finding (:func:`_refuse_finding`), or is
    no str (a model_construct()ed input: qdrant-client would send what pydantic makes of it)."""
    model = getattr(value, "model", None)  # model_construct() may leave it unset
    kind = type(value).__name__
    if not isinstance(model, str):
        message = (f"{op}: {where} is a models.{kind} whose model is a {type(model).__name__}, not a str, which "
                   "the guard cannot screen as qdrant-client would send it. Build it with "
                   f"models.{kind}(..., model=\"<model name>\"). Nothing was sent")
        if write:
            raise ops.unsupported_write(op, name, pol, message)
        raise ops.refuse(ops.decision(op, name, pol, Verdict.QUERY_REJECTED, message,
                                      details={"where": f"{where}.model", "form": kind}))
    _refuse_finding(ops, op, name, pol, str.__str__(model), f"{where}.model", kind, "whose model name",
                    "inference is sent the name as given (a model name cannot be redacted: it would name "
                    "another model). Name the model without it", [] if point_id is None else [point_id],
                    mislabelled=pol.is_public and write,
                    public_query=pol.is_public and not write, remember=True)


def _depth(value: Any, at: str) -> None:
    """Refuse (InferenceShapeError) an object nested past :data:`MAX_DEPTH` (iteratively: a deep
    one must not exhaust the interpreter's stack before it is refused)."""
    stack = [(value, 0)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, dict):
            items = list(v.values())
        elif isinstance(v, _ARRAYS):
            items = list(v)
        else:
            continue
        if d >= MAX_DEPTH:
            raise InferenceShapeError(f"its {at} nest objects or arrays more than {MAX_DEPTH} deep")
        stack.extend((x, d + 1) for x in items)


def screen_inference(ops: Any, op: str, name: str, pol: CollectionPolicy, value: Any, *, point_id: Any,
                     where: str, keep_pii: bool = False, write: bool = True) -> Any:
    """``value`` (a Document, Image or InferenceObject; anything else is returned as it is) with
    what inference would read of it besides a Document's text screened: the model each names
    (:func:`_model_name`), the options of each, an InferenceObject's object, an Image's path or
    URL (:class:`InferenceScreen`). The same object
    when nothing changed. A Document's text is the caller's (it is screened with the query's
    checks, or embedded by the guard).

    Raises:
        GuardRefusal: as :meth:`TextOps.screen_text` for a finding (on PUBLIC collections any
            finding, SENSITIVITY_MISMATCH, unless ``allow_redaction_on_public``; CREDENTIAL_IN_TEXT),
            or a locator's or model name's (:func:`_refuse_finding`).
        UnsupportedWriteError / GuardRefusal (QUERY_REJECTED): an input nested past 64 levels, or
            whose model is no str.
    """
    if not isinstance(value, (models.Document, models.Image, models.InferenceObject)):
        return value
    _model_name(ops, op, name, pol, value, where, point_id, write)
    if value.options is None and isinstance(value, models.Document):
        return value  # a plain Document: its text is the caller's
    kind = type(value).__name__
    screen = InferenceScreen(ops, op, name, pol, point_id, keep_pii, f"{where} ({kind})", query=not write)
    try:
        update: dict[str, Any] = {}
        options = screen.options(value.options)
        if options is not value.options:
            update["options"] = options
        if isinstance(value, models.InferenceObject):
            obj = screen.object(value.object)
            if obj is not value.object:
                update["object"] = obj
        elif isinstance(value, models.Image):
            screen.locator(value.image, where)
    except InferenceShapeError as exc:
        message = (f"{op}: {where} is a models.{kind}, and {exc.why}: the guard screens what inference "
                   f"reads of it to {MAX_DEPTH} levels, each key once. Flatten it, or remove the data from "
                   "the keys. Nothing was sent")
        if write:
            raise ops.unsupported_write(op, name, pol, message) from None
        raise ops.refuse(ops.decision(op, name, pol, Verdict.QUERY_REJECTED, message,
                                      details={"where": where, "form": kind})) from None
    return value.model_copy(update=update) if update else value
