"""Text that is about to be embedded or stored: detect, refuse or redact before anything sees it."""
from __future__ import annotations

import json
import re
import unicodedata
from typing import Any, Mapping, Sequence

import numpy as np
from pydantic_core import to_jsonable_python
from qdrant_client.http import models

from . import detect as _detect
from .identifiers import generalize_identifiers
from .decision import Verdict
from .errors import GuardArgumentTypeError, InvalidVectorError, QdrantGuardError
from .pipeline import GuardPipeline, Offload, Op
from .policy import CollectionPolicy
from .receipts import RECEIPT_KEY
from .sources import path_head
from .vectors import join_vector_struct, split_vector_struct

# What the client sends as a JSON array (and Qdrant stores and indexes as one).
_ARRAYS = (list, tuple, set, frozenset)
# What the screens read as they are; anything else is sent as pydantic serialises it.
_AS_IS = (str, int, float, bool, type(None), dict, *_ARRAYS)
_EXACT = frozenset(_AS_IS)


def _as_sent(value: Any) -> Any:
    """``value`` as qdrant-client sends and stores it (local mode, REST and gRPC alike serialise a
    payload with pydantic): bytes and a str-valued Enum become the string, a dataclass or model an
    object, a deque or generator a list. The screens read that form: the Python object hid it (a
    secret as ``b"sk_live_..."`` was stored as the string, unscreened). A value pydantic cannot
    serialise is returned as it is (the client refuses it). A str subclass (a ``(str, Enum)``
    member, a class whose ``__str__`` masks it) is its characters, as it is stored: its
    ``__str__``, ``__format__``, ``__eq__`` or ``__hash__`` could show the screens something else;
    a dict or list subclass is what pydantic serialises of it."""
    if isinstance(value, _AS_IS):
        if type(value) in _EXACT or not isinstance(value, (str, dict, *_ARRAYS)):
            return value  # numbers (and their subclasses) hold no string
        if isinstance(value, str):
            return str.__str__(value)
        # A dict or list subclass: REST sends its stored entries (pydantic's serialiser reads the
        # dict or list itself), whatever its items() or __iter__ show the screen.
    try:
        return to_jsonable_python(value)
    except (ValueError, TypeError):
        return value


class PointSelection(tuple):  # type: ignore[type-arg]
    """The points a payload rewrite targets (its ``points=`` ids), passed where a screen takes one
    point id, so that its refusals name them; ``by_filter``: a filter selects them (no id known)."""

    by_filter = False

    def __repr__(self) -> str:
        return "'by filter'" if self.by_filter else repr(list(self))


def selection_of(selector: Any) -> PointSelection:
    """The :class:`PointSelection` of a ``points=`` selector as the caller gave it: its ids (a list,
    a tuple, a ``PointIdsList``), or by filter; no id for anything else (a generator is not
    consumed here)."""
    if isinstance(selector, models.PointIdsList):
        selector = selector.points
    if isinstance(selector, (list, tuple)):
        return PointSelection(selector)
    chosen = PointSelection()
    # gRPC's Filter and PointsSelector too, which this module does not import.
    chosen.by_filter = (isinstance(selector, (models.Filter, models.FilterSelector))
                        or type(selector).__name__ in ("Filter", "PointsSelector"))
    return chosen


def _named_points(point_ids: Sequence[Any]) -> tuple[list[Any], str]:
    """The ids a refusal lists for ``point_ids`` (a :class:`PointSelection` in it expanded, None
    dropped: a payload rewrite has no single point), and the lead its directive takes ("the points
    a filter selects: ") when a selection is by filter."""
    ids: list[Any] = []
    lead = ""
    for p in point_ids:
        if isinstance(p, PointSelection):
            ids.extend(p)
            lead = "the points a filter selects: " if p.by_filter else lead
        elif p is not None:
            ids.append(p)
    return ids, lead


class EmbedderError(QdrantGuardError):
    """The guard's embedder failed or returned something that is not a float matrix."""


class TextOps(GuardPipeline):
    """Redaction before embedding and before storage (mixed into the pipeline)."""

    def screen_text(self, op: str, name: str, pol: CollectionPolicy, text: str, *,
                    point_ids: Sequence[Any] = (), keep_pii: bool = False,
                    scanned: tuple[str, list[Any]] | None = None, field: str | None = None,
                    why: str = "", inference: bool = False, query: bool = False, at: str = "") -> str:
        """Apply the collection's text rules to ``text`` and return what may be embedded/stored.

        Credentials are refused (``CREDENTIAL_IN_TEXT``) or redacted per ``credentials_in_text``;
        PII is redacted on sensitive collections (unless ``keep_pii``); on a PUBLIC collection any
        finding is refused as mislabelled (``SENSITIVITY_MISMATCH``) unless
        ``allow_redaction_on_public``. ``scanned`` is ``redact_with_findings(text)`` when the
        caller already has it (a query's text is also redacted for its audit entry). ``field``:
        where in a payload ``text`` is (``payload field 'meta.e'``, already redacted: it is
        logged) when it is not the text field (``payload_fields``). ``why``: a sentence the refusal
        adds (what made a value a finding when the detector's types alone would not say).
        ``inference``: ``field`` is in what an inference input sends besides its text (a
        Document's options), which ``payload_fields`` does not govern. ``query``: ``text`` is what a
        query sends to inference: on a PUBLIC collection only its credentials are screened (refused,
        or redacted under ``credentials_in_text = "redact"``) and its PII passed as given, since a
        finding in a question is no sign that the collection is mislabelled. ``at``: the place a
        refusal's directive starts with (``point 5: vector 'a' (Document)``).
        """
        if not isinstance(text, str):
            raise GuardArgumentTypeError(f"text must be str, not {type(text).__name__}")
        redacted, findings = _detect.redact_with_findings(text) if scanned is None else scanned
        if not findings:
            return text
        kinds = sorted({f.type for f in findings})
        creds = [f for f in findings if f.category == "CREDENTIAL"]
        public_query = query and pol.is_public
        if public_query and not creds:
            return text
        ids, lead = _named_points(point_ids)
        lead = f"{at}: {lead}" if at else lead
        if pol.is_public and not pol.allow_redaction_on_public and not public_query:
            raise self.refuse(self.decision(
                op, name, pol, Verdict.SENSITIVITY_MISMATCH,
                f"{lead}{field or 'text'} sent to PUBLIC collection {name!r} contains {kinds}; the collection is "
                "mislabelled: store it in a sensitive collection, remove the data, or set "
                "allow_redaction_on_public = true to redact it"
                + (" (or payload_fields = \"text_field\" to store fields besides the text field as given)"
                   if field and not inference else "") + why,
                point_ids=ids, details=_where({"findings": kinds}, field),
            ))
        if creds and pol.credentials_in_text == "refuse":
            # On PUBLIC collections "redact" is a policy error without allow_redaction_on_public.
            also = " with allow_redaction_on_public = true" if pol.is_public and not pol.allow_redaction_on_public else ""
            raise self.refuse(self.decision(
                op, name, pol, Verdict.CREDENTIAL_IN_TEXT,
                f"{lead}{field or 'text'} contains credentials {sorted({f.type for f in creds})}; credentials are never "
                + ("sent to inference" if inference else "stored" if field else "embedded")
                + f": remove them, or set credentials_in_text = \"redact\"{also}" + why,
                point_ids=ids, details=_where({"findings": kinds}, field),
            ))
        if public_query or keep_pii or not pol.redact_pii:
            # PII stays; only the credentials go (they are never kept).
            return _detect.replace_findings(text, creds) if creds else text
        return redacted

    def embeddable_text(self, pol: CollectionPolicy, screened: str) -> str:
        """What the embedder sees of already-screened text: identifiers generalised on sensitive
        collections when ``generalize_identifiers`` is on."""
        if pol.generalize_identifiers and not pol.is_public:
            return generalize_identifiers(screened)
        return screened

    def public_points(self, op: str, name: str, pol: CollectionPolicy,
                      points: list[models.PointStruct]) -> list[models.PointStruct]:
        """PUBLIC collections under a policy: screen every point's text field and
        ``models.Document`` texts; returns the points to store, with the screened (redacted) text."""
        out = []
        for p in points:
            payload = self.public_payload(op, name, pol, p.payload, point_id=p.id)
            vector = self.public_vector(op, name, pol, p.vector, point_id=p.id)
            out.append(p if payload is p.payload and vector is p.vector
                       else p.model_copy(update={"payload": payload, "vector": vector}))
        return out

    def public_payload(self, op: str, name: str, pol: CollectionPolicy, payload: Any, *,
                       point_id: Any = None, key: str | None = None) -> Any:
        """``payload`` with its text field and (``payload_fields``) its other strings screened (the
        same object when there is nothing to screen). ``key``: ``set_payload``'s path, under which
        the payload lands (no text field there); it is refused on any finding."""
        payload = _as_dict(payload)
        if key is not None:
            self.public_key_path(op, name, pol, key)
            payload = self.screen_payload_fields(op, name, pol, payload, point_id=point_id, top=False, under=key)
            return self.text_below_key(op, name, pol, payload, key, point_id=point_id)
        if not isinstance(payload, dict):
            return payload
        payload = self.screen_payload_fields(op, name, pol, payload, point_id=point_id)
        text = _as_sent(payload.get(pol.text_field)) if pol.text_field else None
        if isinstance(text, (str, dict, *_ARRAYS)) or _number_text(text) is not None:
            # The form read is the one stored (a generator read twice would be stored empty).
            payload = {**payload, pol.text_field: text}
            return self._guard_text_field(op, name, pol, payload, point_id=point_id, in_boundary=False)
        return payload

    def public_key_path(self, op: str, name: str, pol: CollectionPolicy, key: Any) -> None:
        """Refuse (SENSITIVITY_MISMATCH) ``set_payload``'s ``key`` on a PUBLIC collection when it holds
        a finding (``payload_fields`` other than ``text_field``): a key path cannot be redacted
        (``[EMAIL]`` is an array index to Qdrant), and it is stored as a key."""
        if pol.payload_fields == "text_field" or not isinstance(key, str):
            return
        shown, findings = _detect.redact_with_findings(key)
        if findings:
            kinds = sorted({f.type for f in findings})
            raise self.refuse(self.decision(
                op, name, pol, Verdict.SENSITIVITY_MISMATCH,
                f"set_payload's key {shown!r} sent to PUBLIC collection {name!r} contains {kinds}; the "
                "collection is mislabelled, and a key path cannot be redacted: set the payload under a key "
                "that holds no such data, or store it in a sensitive collection",
                details={"findings": kinds, "key": shown},
            ))

    def public_vector(self, op: str, name: str, pol: CollectionPolicy, vector: Any, *, point_id: Any) -> Any:
        """A vector struct with each ``models.Document`` text screened, and what inference reads of
        each Document, Image and InferenceObject besides (``inference.screen_inference``: the model
        name, options, an InferenceObject's object, an Image's path or URL); the same object when
        it has none."""
        vecs = split_vector_struct(vector)
        docs: dict[str, Any] = {}
        for k, v in vecs.items():
            if type(v) is list:
                continue  # a plain vector (nearly every one): nothing inference reads
            new = v
            if isinstance(v, models.Document):
                new = v.model_copy(update={"text": self._document_text(op, name, pol, v, k, point_id)})
            if isinstance(v, (models.Document, models.Image, models.InferenceObject)):
                from .inference import screen_inference  # it builds on this module
                new = screen_inference(self, op, name, pol, new, point_id=point_id,
                                       where=f"point {point_id!r} vector {k or '<unnamed>'!r}")
            if new is not v:
                docs[k] = new
        if not docs:
            return vector
        if isinstance(vector, dict):
            # A dict even for a lone vector named "": a bare value is the unnamed vector, which
            # Qdrant refuses on a collection of named vectors.
            return {**vecs, **docs}
        return join_vector_struct({**vecs, **docs})

    def public_policy(self, args: dict[str, Any]) -> CollectionPolicy | None:
        """The policy of the call's collection when it is PUBLIC under an explicit policy (its
        writes are screened); None without a policy or on a sensitive collection."""
        if self.transparent:
            return None
        pol = self.policy(args["collection_name"])
        return pol if pol.is_public else None

    def guard_payload_text(self, op: str, name: str, pol: CollectionPolicy, payload: dict[str, Any], *,
                           point_id: Any, in_boundary: bool) -> dict[str, Any]:
        """Redact the policy's text payload field (an unredacted SSN in the payload defeats the point),
        and screen the payload's other strings per ``payload_fields`` (:meth:`screen_payload_fields`)."""
        payload = self.screen_payload_fields(op, name, pol, payload, point_id=point_id)
        return self._guard_text_field(op, name, pol, payload, point_id=point_id, in_boundary=in_boundary)

    def _guard_text_field(self, op: str, name: str, pol: CollectionPolicy, payload: dict[str, Any], *,
                          point_id: Any, in_boundary: bool) -> dict[str, Any]:
        field = pol.text_field
        if not field:
            return payload
        value = _as_sent(payload.get(field))
        if isinstance(value, _ARRAYS):
            value = [_as_sent(v) for v in value]
        keep = in_boundary and pol.keep_payload_text_in_boundary
        if isinstance(value, str):
            payload[field] = self.screen_text(op, name, pol, value, point_ids=[point_id], keep_pii=keep)
        elif isinstance(value, (dict, *_ARRAYS)):
            # Qdrant indexes an array of strings like text. PII is never kept in one: readers of
            # other boundaries get only a string field redacted. A tuple or set is sent as an array.
            # An object (or an array of objects or arrays) holds text too: its strings passed
            # unscreened, PII and (under payload_fields = "text_field") credentials stored as given.
            payload[field] = self._text_leaves(op, name, pol, value, point_id)
        elif _number_text(value) is not None:
            # Never kept either (the stricter choice: reads redact a number for other boundaries too).
            payload[field] = self._text_number(op, name, pol, value, point_id)
        return payload

    def text_below_key(self, op: str, name: str, pol: CollectionPolicy, payload: Any, key: Any, *,
                       point_id: Any = None) -> Any:
        """``set_payload``'s ``payload`` under ``key`` with its strings screened by the text field's
        rules when ``key`` is a path into the text field (``text``, ``text.body``, ``text[0]``):
        it lands in the text field, and was stored as given (payload_fields keeps PII, and reads
        none under ``text_field``)."""
        if not pol.text_field or path_head(key) != pol.text_field:
            return payload
        return self._text_leaves(op, name, pol, payload, point_id)

    def _text_leaves(self, op: str, name: str, pol: CollectionPolicy, value: Any, point_id: Any,
                     depth: int = 0) -> Any:
        """An array or object in the text field with every string in it screened by the text
        field's rules (PII never kept) and every number as :meth:`_text_number` reads it, to 64
        levels of objects and arrays (Qdrant's JSON nesting is bounded; so is this: a 65th is
        refused, as the message says). Keys are left to the payload screen (``payload_fields``)."""
        value = _as_sent(value)
        if isinstance(value, str):
            return self.screen_text(op, name, pol, value, point_ids=[point_id])
        if depth >= 64 and isinstance(value, (dict, *_ARRAYS)):
            raise self.unsupported_write(  # type: ignore[attr-defined]
                op, name, pol, f"{op}: point {point_id!r}: the text field {pol.text_field!r} nests objects or "
                "arrays more than 64 deep; the guard screens its text to that depth. Flatten it. Nothing was written")
        if isinstance(value, dict):
            return {k: self._text_leaves(op, name, pol, v, point_id, depth + 1) for k, v in value.items()}
        if isinstance(value, _ARRAYS):
            return [self._text_leaves(op, name, pol, v, point_id, depth + 1) for v in value]
        return self._text_number(op, name, pol, value, point_id)

    def _text_number(self, op: str, name: str, pol: CollectionPolicy, value: Any, point_id: Any) -> Any:
        """A number in the text field, screened as its digits by the text field's rules (as the
        payload screen reads numbers): ``{"text": 4111111111111111}`` kept the card the string lost.
        Redacted, it becomes the redacted string."""
        digits = _number_text(value)
        if digits is None:
            return value
        screened = self.screen_text(op, name, pol, digits, point_ids=[point_id])
        return value if screened == digits else screened

    def clean_values(self, name: str) -> set[tuple[str, str]]:
        """The (key, value) pairs the payload screen found clean in writes to collection ``name``
        by the caller's boundary (bounded; see ``_CLEAN_VALUES_MAX``)."""
        return self.clean_memory(name)[1]

    def clean_keys(self, name: str) -> dict[str, int]:
        """The payload keys the payload screen found clean in writes to collection ``name`` by the
        caller's boundary, each with its ``_number_bound`` (bounded; see ``_CLEAN_KEYS_MAX``)."""
        return self.clean_memory(name)[0]

    def clean_memory(self, name: str) -> tuple[dict[str, int], set[tuple[str, str]]]:
        """:meth:`clean_keys` and :meth:`clean_values` of ``name`` and the caller's boundary. Keys
        are scoped like values: a process-wide set let a writer time whether another boundary (or a
        write to another collection) had used a key."""
        shared = self.shared
        values, keys = shared.get("clean_values"), shared.get("clean_keys")
        if values is None or keys is None:
            values, keys = shared.setdefault("clean_values", {}), shared.setdefault("clean_keys", {})
        scope = (name, self.boundary())
        found, known = values.get(scope), keys.get(scope)
        if found is None or known is None:
            # Any name gets a scope before Qdrant sees the call (one that does not exist too):
            # bounded like the pairs, emptied when full.
            with shared["clean_lock"]:  # the counts must stay those of what is held
                if len(values) >= _CLEAN_VALUE_SCOPES_MAX:
                    values.clear()
                    keys.clear()
                    shared["clean_values_held"] = shared["clean_keys_held"] = 0
                found, known = values.setdefault(scope, set()), keys.setdefault(scope, {})
        return known, found

    def remember_clean_value(self, memory: set[tuple[str, str]], pair: tuple[str, str]) -> None:
        """Add ``pair`` to ``memory`` (a :meth:`clean_values` set). All scopes together hold at
        most ``_CLEAN_VALUES_MAX`` pairs, as the process-wide memory did: all are emptied when full."""
        # Steps of concurrent calls run in parallel threads: unlocked, a lost count let the memory
        # outgrow its bound. No I/O under the lock.
        with self.shared["clean_lock"]:
            held = self.shared.get("clean_values_held", 0)  # added since all were last emptied
            if held >= _CLEAN_VALUES_MAX:
                for s in list((self.shared.get("clean_values") or {}).values()):
                    s.clear()
                memory.clear()
                held = 0
            memory.add(pair)
            self.shared["clean_values_held"] = held + 1

    def remember_clean_key(self, memory: dict[str, int], key: str, bound: int) -> None:
        """Add ``key`` to ``memory`` (a :meth:`clean_keys` dict); at most ``_CLEAN_KEYS_MAX`` keys
        over all scopes, all emptied when full."""
        with self.shared["clean_lock"]:  # as remember_clean_value
            held = self.shared.get("clean_keys_held", 0)
            if held >= _CLEAN_KEYS_MAX:
                for d in list((self.shared.get("clean_keys") or {}).values()):
                    d.clear()
                memory.clear()
                held = 0
            memory[key] = bound
            self.shared["clean_keys_held"] = held + 1

    def screen_payload_fields(self, op: str, name: str, pol: CollectionPolicy, payload: Any, *,
                              point_id: Any, top: bool = True, under: Any = None, label: str = "payload") -> Any:
        """``payload`` with every string besides the text field, values and keys at any depth,
        screened per ``payload_fields`` (the same object when nothing changed; a dict otherwise).
        ``top``: ``payload`` is the point's whole payload (its text field, screened by
        :meth:`guard_payload_text`, and on sensitive collections its receipt container, which the
        guard verifies and writes itself, are skipped), not a ``set_payload`` value under a key.
        ``under``: that key (a Qdrant key path); the payload is read as the object it is stored as
        there, so under a password name (``key="db_password"``, ``key="creds.password"``) its keys
        that hold a password are read as one (``_holder_key``), and under an account or service
        name (``key="smtp"``) a bare ``pass`` key is ``smtp.pass``. Only the path is known: a stored
        sibling (``key="env[0]"`` beside a stored ``name``) is not read.

        Raises:
            GuardRefusal: CREDENTIAL_IN_TEXT or SENSITIVITY_MISMATCH as :meth:`screen_text` (the
                field is named with its keys redacted; no value is logged); UNSUPPORTED_WRITE when
                two keys of one object redact to the same key.
        """
        payload = _as_dict(payload)
        if pol.payload_fields == "text_field" or not isinstance(payload, dict):
            return payload
        keep_pii = not (pol.is_public or pol.payload_fields == "all")
        skip: dict[str, str] = {}
        if top:
            if pol.text_field:
                skip[pol.text_field] = "text"
            if not pol.is_public:
                skip[RECEIPT_KEY] = "receipt"
        secret = parent = None
        if isinstance(under, str):
            secret = path_password_name(under)
            parent = None if secret is not None else (_path_names(under) or [under])[-1]
        screen = _FieldScreen(self, op, name, pol, point_id, keep_pii, *self.clean_memory(name))
        screen.label = label
        if isinstance(under, str):
            screen.under = under
        return screen.obj(payload, "", skip, secret, parent)

    def screen_collection_metadata(self, op: str, name: str, pol: CollectionPolicy, metadata: Any) -> Any:
        """A collection's ``metadata`` (create/recreate/update_collection) screened as a payload's
        fields besides the text field are (``payload_fields``): every reader of the collection gets
        it from ``get_collection``. The same object when nothing changed."""
        if metadata is None:
            return None
        return self.screen_payload_fields(op, name, pol, metadata, point_id=None, top=False,
                                          label="collection metadata")

    def embed_documents(self, op: str, name: str, pol: CollectionPolicy, vecs: dict[str, Any], *,
                        where: str, point_id: Any = None) -> Op:
        """Replace ``models.Document`` vectors by embeddings of their redacted text (a generator:
        the embedder runs as an :class:`Offload`); a refusal of a text names ``point_id`` and the
        vector."""
        # Checked even next to a Document: before anything is embedded, and by name.
        for k, v in vecs.items():
            if isinstance(v, (models.Image, models.InferenceObject)):
                raise InvalidVectorError(
                    f"{where}: vector {k or '<unnamed>'!r} is a {type(v).__name__}; the guard can only "
                    "screen text, so embed it yourself and send the vector (with a receipt) instead"
                )
        docs = {k: v for k, v in vecs.items() if isinstance(v, models.Document)}
        if not docs:
            return vecs
        # A str subclass (in a model_construct'ed Document) as its characters, which are what is
        # screened: its __format__, __add__ or lower() could show the embedder other text.
        texts = [self.embeddable_text(pol, self._document_text(op, name, pol, d, k, point_id))
                 for k, d in docs.items()]
        matrix = yield Offload(lambda: self.embed(texts, where=where))
        out = dict(vecs)
        for (k, _), row in zip(docs.items(), matrix):
            out[k] = row
        return out

    def _document_text(self, op: str, name: str, pol: CollectionPolicy, doc: models.Document, vector_name: str,
                       point_id: Any) -> str:
        """A Document's text screened, its refusal naming the point and the vector as the vector
        checks' do (``point 5: vector 'a' (Document): ...``; a batch adds its ``.vector['a']``)."""
        try:
            return self.screen_text(op, name, pol, str.__str__(doc.text) if isinstance(doc.text, str) else doc.text,
                                    point_ids=[point_id],
                                    at="" if point_id is None else f"point {point_id!r}: vector "
                                                                   f"{vector_name or '<unnamed>'!r} (Document)")
        except QdrantGuardError as exc:
            if point_id is not None and not hasattr(exc, "_qg_point"):
                exc._qg_point = point_id  # type: ignore[attr-defined]
                exc._qg_vector = vector_name  # type: ignore[attr-defined]
            raise

    def embed(self, texts: list[str], *, where: str) -> np.ndarray:
        """Embed already-screened texts with the guard's embedder (fail closed)."""
        if self.embedder is None:
            raise InvalidVectorError(
                f"{where}: models.Document on a sensitive collection needs the guard to embed the "
                "redacted text: pass embedder= to the client (a callable list[str] -> array)"
            )
        try:
            matrix = np.asarray(self.embedder(texts), dtype=np.float64)
        except Exception as exc:
            # The usual first mistake: handing over a one-text function, embed(text: str).
            hint = (f" ({_EMBEDDER_CONTRACT})" if isinstance(exc, (TypeError, AttributeError, ValueError))
                    else "")
            raise EmbedderError(f"{where}: the embedder failed: {exc!r}; the call was refused{hint}") from exc
        if matrix.ndim != 2 or matrix.shape[0] != len(texts):
            raise EmbedderError(
                f"{where}: the embedder returned shape {matrix.shape} for {len(texts)} text(s); "
                f"expected (n_texts, dim): {_EMBEDDER_CONTRACT}"
            )
        return matrix


_EMBEDDER_CONTRACT = ("embedder= is called with a list of texts, even for one, and must return one row per "
                      "text: wrap a one-text function f as lambda texts: [f(t) for t in texts]")


def _sent_key(key: Any) -> Any:
    """A payload key as it is stored: a str subclass its characters; bytes or an Enum the string
    pydantic makes of it (qdrant-client's models validate payload keys so); a number, boolean or
    None as JSON writes a key (local mode stores ``{7: v}`` as ``{"7": v}``); anything else as it
    is (the client refuses it). Read as given, a bytes key holding a secret was never screened."""
    if isinstance(key, str):
        return str.__str__(key)
    sent = _as_sent(key)
    if isinstance(sent, str):
        return str.__str__(sent)
    return json.dumps(sent) if sent is None or isinstance(sent, (int, float)) else key


def _as_dict(payload: Any) -> Any:
    """A ``set_payload``/``overwrite_payload`` payload given as another Mapping (``UserDict``,
    ``MappingProxyType``) as the dict qdrant-client's REST model validates it into and sends: read as
    it is, it was passed on unscreened."""
    # type() first: a dict (nearly every payload) skips typing.Mapping's slow isinstance check.
    return (dict(payload) if type(payload) is not dict and isinstance(payload, Mapping)
            and not isinstance(payload, dict) else payload)


def _stored_keys(payload: Any) -> Any:
    """A ``set_payload``/``overwrite_payload`` payload with its top-level keys as the client stores
    them: a str subclass key is its characters, bytes or an Enum its text (``_sent_key``). Looked
    up by its own ``__eq__``/``__hash__`` (or as bytes), a key stored as the receipt key could pass
    the reserved-key check as another name, and ``b"text"`` the text field's screen."""
    payload = _as_dict(payload)
    if isinstance(payload, dict) and any(type(k) is not str for k in payload):
        return {_sent_key(k): v for k, v in payload.items()}
    return payload


def _where(details: dict[str, Any], field: str | None) -> dict[str, Any]:
    return {**details, "field": field} if field else details


# Payload keys the detector found nothing in: the same few keys recur on every point of every
# write, and scanning them again cost about a third of the screen. Only keys without a finding are
# kept (no secret stays in memory past its call); per (collection, writer boundary) like values
# (TextOps.clean_keys), bounded over all scopes, and emptied when full.
_CLEAN_KEYS_MAX = 4096
# The same for (key, value) pairs: metadata values (a source, a language, a category) recur too,
# and their screen was most of the field screen's time. A value is screened as ``key: "value"``,
# so the key is part of what was found clean (an API key is a finding only under a secret-like
# name). Short pairs under clean keys only: long values seldom recur. Values are data: each
# (collection, writer boundary) has its own memory (TextOps.clean_values), so a writer cannot
# time whether another boundary stored a value, and nothing is shared across guards.
_CLEAN_VALUES_MAX = 4096  # pairs, over all scopes
_CLEAN_VALUE_SCOPES_MAX = 64
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
# In a structured payload the key is explicit: a value under a password name is a password,
# whatever its entropy (the detector, reading free text, needs three classes or entropy >= 3.5).
# "token", "secret" and "key" keep the detector's rules ({"token": "the"} in NLP payloads).
_PASSWORD_WORDS = ("password", "passwd", "passphrase", "passcode", "pwd")
# Abbreviations that name nothing but a password as the last word (``db_pw``, ``PW``, ``smtpPswd``).
_PASSWORD_SHORT = frozenset({"pw", "pswd", "pword"})
# "pass" names a password after the account or service it opens (``db_pass``, ``SMTP_PASS``,
# ``mysql_root_pass``), and so does a bare "pass" key in an object under such a name (nodemailer's
# ``{"auth": {"user": u, "pass": p}}``, ``{"smtp": {"pass": p}}``: read as ``auth.pass``); alone or
# after any other word it is as often a ticket, a round or a result (``{"pass": "first"}``,
# ``boarding_pass``, ``day_pass``, ``first_pass``). A list of the senses that are no password could
# never be complete, and each miss would refuse ordinary data; a miss here leaves a password to the
# detector, as before.
_PASS_OWNERS = frozenset({
    "db", "database", "sql", "mysql", "mariadb", "pg", "postgres", "postgresql", "psql", "mssql", "oracle",
    "mongo", "mongodb", "redis", "rabbitmq", "amqp", "mq", "kafka", "sasl", "elastic", "es", "jdbc", "ldap",
    "bind", "smtp", "imap", "pop", "pop3", "mail", "email", "ftp", "sftp", "ssh", "vnc", "rdp", "vpn",
    "wifi", "wlan", "router", "user", "username", "usr", "admin", "root", "sudo", "master", "login",
    "logon", "account", "acct", "auth", "api", "app", "client", "service", "svc", "keystore", "truststore",
    "key", "cert", "registry", "docker", "git", "repo", "web", "http", "basic", "credential", "credentials", "creds",
})
# A bare "pass" or "pin" key, read under its object's name (``{"auth": {"pass": p}}`` as
# ``auth.pass``, ``{"card": {"pin": p}}`` as ``card.pin``): these spellings are looked up as they
# are; any other (``pass1``, ``ＰＡＳＳ``, ``_pin``) is never remembered as a clean key (_bare_word).
_BARE_EXACT = {"pass": "pass", "PASS": "pass", "Pass": "pass", "pin": "pin", "PIN": "pin", "Pin": "pin"}
# "pin" only after what it unlocks: alone it is also India's postal code (``{"pin": "560001"}``),
# and ``map_pin`` or ``pin_code`` (a postal code again) name no secret.
_PIN_OWNERS = frozenset({"card", "sim", "atm", "debit", "credit", "bank", "account", "login", "security",
                         "access", "unlock", "wallet", "phone", "device"})
# A bare "pin" key is read as a PIN only in an object named for a card or a SIM (``{"card": {"pin":
# p}}``); under a device, phone or account it is as often a GPIO pin or a postal code
# (``{"device": {"pin": 13}}``, ``{"account": {"address": ..., "pin": "560001"}}``).
_BARE_PIN_OWNERS = frozenset({"card", "sim", "atm", "debit", "credit", "bank"})
# Keys beside a bare "pass" that make a number under it a tally of test results (``{"api": {"pass":
# 120, "fail": 3}}``): a password is not stored beside a count of failures (_tally).
_TALLY_KEYS = frozenset({"fail", "failed", "fails", "failure", "failures", "skip", "skipped", "skips", "error",
                         "errors", "xfail", "xfailed", "broken", "total", "warn", "warning", "warnings"})
# Keys of an object under a password name that hold the password itself (``{"password": {"value":
# p}}``, ``{"db_password": {"current": p, "new": q}}``): a key made only of these words, or one of
# no word or one character (``{"x": p}``, ``{"0": p}``). Any other key describes the password and
# is read under its own name (``min_length``, ``algorithm``, ``hash``, and JSON Schema's ``type``,
# ``title``, ``description``, ``format``).
_HOLDER_WORDS = frozenset({"value", "val", "v", "plain", "plaintext", "clear", "cleartext", "secret", "current",
                           "new", "old", "previous", "confirm", "confirmation", "initial", "temp", "temporary",
                           "default", "raw", "data", "text", "string", "str"})
_WORDS = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")
# Not a password: placeholders such as "[REDACTED]", "<your password>", "${DB_PASSWORD}",
# "{{ db_password }}", and the guard's own "[GENERIC_SECRET]" (empty and one-character runs apart).
_PLACEHOLDER = re.compile(r"\[[A-Za-z_ .-]+\]|<[A-Za-z_ .-]+>|\$\{[A-Za-z0-9_]+\}|\{\{ ?[A-Za-z0-9_.]+ ?\}\}")
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
# One key of a Qdrant key path: quoted, or up to the next "." or "["; an index ("[0]", "[]") aside.
_PATH_PART = re.compile(r'"([^"]*)"|\[[^\]]*\]|([^.\["]+)')
# An absolute or home-relative POSIX path without spaces.
_PATH_VALUE = re.compile(r"~?/\S*\Z")


def _name_words(name: str) -> list[str]:
    """The words of a field name, read as the detector reads text: full-width and other compatibility
    forms as ASCII (NFKC) and invisible format characters dropped (``ＰＡＳＳＷＯＲＤ``,
    ``pass<ZWSP>word``). Look-alike letters of other scripts stay what they are, as for the detector."""
    if not name.isascii():
        name = "".join(c for c in unicodedata.normalize("NFKC", name) if unicodedata.category(c) != "Cf")
    return _WORDS.findall(name)


def _drop_digits(words: list[str]) -> list[str]:
    """``words`` without its trailing digit words (``userPassword2``, ``db2``), in place."""
    while words and words[-1].isdigit():
        words.pop()
    return words


def _last_word(name: str) -> str:
    """``name``'s last word in lower case, trailing digits aside (``userPassword2``: ``password``);
    empty when it has none."""
    words = _drop_digits(_name_words(name))
    return words[-1].lower() if words else ""


def _password_name(name: str) -> bool:
    """True when ``name``'s last word (snake_case, kebab-case, dotted or camelCase; trailing digits
    aside; :func:`_name_words`) is a password word, or ends with one other than ``pwd``
    (``dbpassword``): ``password``, ``DB_PASSWORD``, ``userPassword2``, ``adminpasswd``, ``pwd``;
    or ``pw``, ``pswd``, ``pword`` (``db_pw``, ``PW``); or ``word``/``phrase``/``code`` after a
    ``pass`` that is the first word or a password name itself (``pass_word``, ``pass-word``,
    ``db_pass_code``; not ``boarding_pass_code``); or ``pass`` after an account or service word
    (``_PASS_OWNERS``: ``db_pass``, ``SMTP_PASS``, ``admin_pass``); or ``pin`` after what it unlocks
    (``_PIN_OWNERS``: ``card_pin``, ``SIM_PIN``). Not ``password_policy``, ``passwordHash``,
    ``passwords`` (a count as often as a list), ``pass``, ``boarding_pass``, ``first_pass``,
    ``bypass``, ``passport``, ``pin``, ``map_pin``, ``pin_code``."""
    words = _drop_digits(_name_words(name))
    if not words:
        return False
    last = words[-1].lower()
    if last in _PASSWORD_WORDS or last.endswith(_PASSWORD_WORDS[:4]) or last in _PASSWORD_SHORT:
        return True
    if last not in ("pass", "word", "phrase", "code", "pin"):
        return False
    words.pop()
    _drop_digits(words)  # db2_pass: the word before the digits
    before = words[-1].lower() if words else ""
    if last == "pass":
        return before in _PASS_OWNERS
    if last == "pin":
        return before in _PIN_OWNERS
    # pass_word, db_pass_code; not boarding_pass_code (a ticket's code).
    return before == "pass" and (len(words) < 2 or _password_name("_".join(words)))


def _holder_key(key: str) -> bool:
    """Whether ``key``, in an object under a password name, holds the password (``_HOLDER_WORDS``)."""
    if len(key) <= 1:
        return True
    words = _name_words(key)
    return all(w.isdigit() or w.lower() in _HOLDER_WORDS for w in words)


def _path_names(path: str) -> list[str]:
    """The keys of a Qdrant key path (``creds.password``, ``env[0].value``, ``"a.b".c``), indexes aside."""
    return [m.group(1) if m.group(1) is not None else m.group(2) for m in _PATH_PART.finditer(path)
            if m.group(1) is not None or m.group(2)]


def _bare_word(key: str) -> str:
    """``pass`` or ``pin`` when ``key`` is that word alone, in any spelling :func:`_password_name`
    reads (``PASS``, ``pass2``, ``_pin``, full-width or with invisible characters); else ``""``."""
    words = _drop_digits(_name_words(key))
    word = words[0].lower() if len(words) == 1 else ""
    return word if word in ("pass", "pin") else ""


def _held_name(parent: str, key: str) -> str | None:
    """The password name a bare ``pass``/``pin`` ``key`` of an object under ``parent`` is read under
    (``auth.pass``, ``user.pass2``: ``_PASS_OWNERS``; ``card.pin``: ``_BARE_PIN_OWNERS``), None for
    any other key or parent."""
    word = _BARE_EXACT.get(key) or _bare_word(key)
    if word == "pin" and _last_word(parent) not in _BARE_PIN_OWNERS:
        return None
    held = f"{parent}.{key}"
    return held if word and _password_name(held) else None


def _tally(obj: Mapping[Any, Any], v: Any) -> bool:
    """Whether ``v``, under a bare ``pass`` key of ``obj``, is a count of test results: a number
    (not a bool) beside a ``fail``/``skip``/``error``/``total`` key (``_TALLY_KEYS``, any case).
    YAML's ``db: {pass: 12345678}`` has no such sibling and stays a password."""
    if type(v) is bool or not isinstance(v, (int, float)):
        return False
    return any(isinstance(x, str) and x.lower() in _TALLY_KEYS for x in obj)


def path_password_name(path: str) -> str | None:
    """The password name a value at key path ``path`` is read under, None when there is none: its
    last key when that is a password name (:func:`_password_name`; a bare ``pass`` under an account
    or service name as ``auth.pass``), or the password name an object of it holds the value under
    (``password.value``, ``db_password.x``: :func:`_holder_key`)."""
    names = _path_names(path) or [path]
    for i in range(len(names) - 1, -1, -1):
        if _password_name(names[i]):
            return names[i]
        if i and _held_name(names[i - 1], names[i]):
            return f"{names[i - 1]}.{names[i]}"
        if i == 0 or not _holder_key(names[i]):
            return None
    return None


def _number_bound(key: str) -> int:
    """What a clean key is remembered with: numbers of smaller magnitude under it need no screen
    (``_SHORT_NUMBER``), or ``_KEY_PASSWORD``."""
    if _password_name(key):
        return _KEY_PASSWORD
    if not _PLAIN_KEY.fullmatch(key):
        return 0
    lower = key.lower()
    return _SHORT_SSN_NUMBER if "ssn" in lower or "social" in lower else _SHORT_NUMBER


def _placeholder(value: str) -> bool:
    return not value or value == value[0] * len(value) or _PLACEHOLDER.fullmatch(value) is not None


def _working_directory(name: str, value: str) -> bool:
    """``{"PWD": "/home/alice"}``: an environment dump's working directory, not a password."""
    return _PATH_VALUE.match(value) is not None and _name_words(name)[-1].lower() in ("pwd", "oldpwd")


def password_finding(start: int, end: int) -> _detect.Finding:
    """The finding the password-name rule gives a value at ``start:end`` (GENERIC_SECRET, validator
    ``password-name``): the payload screen and filters report it alike."""
    return _detect.Finding("GENERIC_SECRET", start, end, "password-name", "CREDENTIAL")


def password_value(name: str, value: str) -> bool:
    """Whether ``value`` given under field ``name`` (a key path: :func:`path_password_name`) is a
    password by the password-name rule (a password name, not a placeholder, not a working directory
    under ``pwd``): what the payload screen finds besides the detector, and so do filters (a match
    on a password field names one, as does one on ``password.value``)."""
    held = path_password_name(name)
    return held is not None and not _placeholder(value) and not _working_directory(held, value)


def password_name_why(name: str, verb: str = "store") -> str:
    """What a refusal by the password-name rule adds: which name made the value a password (a
    sibling ``name`` field is not in the value's path) and how to store a flag or a label under it,
    since the detector's ``GENERIC_SECRET`` alone does not say why ``"yes"`` is one."""
    return (f". The value is read under the password name {_detect.redact(name)!r}: any value under a "
            "field named for a password (its last word) is taken as a password, a flag such as \"yes\" "
            "or a label too, but for placeholders (\"\", \"********\", \"[REDACTED]\", \"${VAR}\"); "
            f"{verb} a flag as true/false, or name the field for what it holds")


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
                raise self.ops.unsupported_write(
                    self.op, self.name, self.pol,
                    f"{self.op}: two keys of the payload object at {path or '<top level>'!r} of point "
                    f"{self.point_id!r} would both be stored as {shown!r} once redacted, and one would "
                    "overwrite the other; remove the data from the keys. Nothing was written")
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
        # The value is read as JSON assigns it, after its key: the detector finds a generic secret
        # only next to a secret-like name ("api_key: ..."). A quote or backslash inside would end or
        # escape the quoted form early, so such a value is given bare.
        name = key if isinstance(key, str) else str(key)
        pair = (name, value)
        if pair in self.clean_values:
            return value
        quote = '' if '"' in value or "\\" in value else '"'
        head = f"{name}: {quote}"
        n, h = len(value), len(head)
        why = ""
        found = [f for f in _detect.find_sensitive(f"{head}{value}{quote}") if f.end > h and f.start < h + n]
        if found and no_card(name, value, f"{self.under}.{at}"):
            found = [f for f in found if f.type != "CREDIT_CARD"]
        if not found:
            if self.password_key(name) and not _placeholder(value) and not _working_directory(name, value):
                found = [password_finding(h, h + n)]
                why = password_name_why(name)
            else:
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
