"""Text that is about to be embedded or stored: detect, refuse or redact before anything sees it.

This module is the :class:`TextOps` mixin the guarded client's writes and reads use. A payload value
as the client sends it is in :mod:`qdrant_guard.sent_form`, the password-name rule in
:mod:`qdrant_guard.password_names` and the payload field screen in :mod:`qdrant_guard.field_screen`.
"""
from __future__ import annotations

from typing import Any, Sequence

import numpy as np
from qdrant_client.http import models

from . import detect as _detect
from .decision import Verdict
from .dispatch import Dispatch
from .errors import GuardArgumentTypeError, InvalidVectorError, QdrantGuardError
from .field_screen import _FieldScreen, _number_text
from .identifiers import generalize_identifiers
from .password_names import _path_names, path_password_name
from .pipeline import Offload, Op
from .policy import CollectionPolicy
from .receipts import RECEIPT_KEY
from .sent_form import _ARRAYS, _as_dict, _as_sent
from .sources import path_head
from .vectors import join_vector_struct, split_vector_struct


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


def point_words(point_id: Any) -> str:
    """How a refusal names what ``point_id`` is: ``point 5``, a payload rewrite's ``points 1, 2``
    (the first five, then ``(+N more)``, as :class:`GuardRefusal` lists ids) or ``the points a
    filter selects``; "" for none (a collection's metadata, a query's inference options)."""
    if not isinstance(point_id, PointSelection):
        return "" if point_id is None else f"point {point_id!r}"
    if point_id.by_filter:
        return "the points a filter selects"
    if not point_id:
        return "the points selected"
    shown = ", ".join(repr(p) for p in point_id[:5])
    more = f" (+{len(point_id) - 5} more)" if len(point_id) > 5 else ""
    return f"{'point' if len(point_id) == 1 else 'points'} {shown}{more}"


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


class TextOps(Dispatch):
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
        query sends to inference; on a PUBLIC collection it follows the writes' rule (any finding
        refused, ``SENSITIVITY_MISMATCH``, unless ``allow_redaction_on_public``), with a refusal
        worded for a query. ``at``: the place a refusal's directive starts with (``point 5: vector
        'a' (Document)``).
        """
        if not isinstance(text, str):
            raise GuardArgumentTypeError(f"text must be str, not {type(text).__name__}")
        redacted, findings = _detect.redact_with_findings(text) if scanned is None else scanned
        if not findings:
            return text
        kinds = sorted({f.type for f in findings})
        creds = [f for f in findings if f.category == "CREDENTIAL"]
        ids, lead = _named_points(point_ids)
        lead = f"{at}: {lead}" if at else lead
        mislabelled = pol.is_public and not pol.allow_redaction_on_public
        # The keys below are per collection: a top-level one is refused as an unknown key.
        section = self.policy_section(name, pol)
        if mislabelled and not query:
            raise self.refuse(self.decision(
                op, name, pol, Verdict.SENSITIVITY_MISMATCH,
                f"{lead}{field or 'text'} sent to PUBLIC collection {name!r} contains {kinds}; the collection is "
                "mislabelled: store it in a sensitive collection, remove the data, or set "
                f"allow_redaction_on_public = true in {section} to redact it"
                + (" (or payload_fields = \"text_field\" to store fields besides the text field as given)"
                   if field and not inference else "") + why,
                point_ids=ids, details=_where({"findings": kinds}, field),
            ))
        if creds and pol.credentials_in_text == "refuse":
            # On PUBLIC collections "redact" is a policy error without allow_redaction_on_public.
            also = " with allow_redaction_on_public = true" if mislabelled else ""
            raise self.refuse(self.decision(
                op, name, pol, Verdict.CREDENTIAL_IN_TEXT,
                f"{lead}{field or 'text'} contains credentials {sorted({f.type for f in creds})}; credentials are never "
                + ("sent to inference" if inference else "stored" if field else "embedded" if query else "stored or embedded")
                + f": remove them, or set credentials_in_text = \"redact\"{also} in {section}" + why,
                point_ids=ids, details=_where({"findings": kinds}, field),
            ))
        if mislabelled:
            # A query on PUBLIC: its personal data would reach inference (a remote provider, for
            # Qdrant Cloud inference) as given, and a question is not where public data comes from.
            raise self.refuse(self.decision(
                op, name, pol, Verdict.SENSITIVITY_MISMATCH,
                f"{lead}{field or 'text'} of a query on PUBLIC collection {name!r} contains {kinds}, which "
                "inference would embed as given: remove the data from the query, or set "
                f"allow_redaction_on_public = true in {section} to send it redacted" + why,
                point_ids=ids, details=_where({"findings": kinds}, field),
            ))
        if keep_pii or not pol.redact_pii:
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
            raise self.unsupported_write(
                op, name, pol, f"{op}: {point_words(point_id) or 'the payload'}: the text field "
                f"{pol.text_field!r} nests objects or arrays more than 64 deep; the guard screens its text to "
                "that depth. Flatten it. Nothing was written")
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
