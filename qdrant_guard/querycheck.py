"""Checks on a query before it reaches Qdrant: structure (native scan), redaction, intent."""
from __future__ import annotations

import dataclasses
import functools
import math
import re
import threading
import unicodedata
import uuid
from typing import Any, Callable, Iterable, Iterator, Sequence, get_args

import numpy as np
from pydantic import BaseModel
from qdrant_client import grpc
from qdrant_client.conversions.conversion import GrpcToRest
from qdrant_client.http import models

from . import detect as _detect
from .decision import Verdict
from .errors import ConfigError, GuardArgumentTypeError, QdrantGuardError
from .noise import CALIBRATED_VERSIONS, PRIVATE_RNG_IDS, release_bounds
from .names import shell_quote
from .noise_params import DTYPES
from .pipeline import Call, Offload, Op
from .policy import CollectionPolicy, toml_str
from .receipts import RECEIPT_KEY, stored_receipts
from .sentmodels import KEYED_QUERIES as _KEYED_QUERIES, WRITE_SELECTORS as _WRITE_SELECTORS, UncheckedForm
from .sources import path_head
from .textguard import (EmbedderError, TextOps, _number_text, no_card, password_finding, password_name_why,
                        password_value)
from .inference import screen_inference
from .utility import embedder_model_name, same_model
from .vectors import CollectionShape

# Inputs that carry text the guard did not check (a top-level models.Document is checked).
_TEXT_INPUTS = (models.Document, models.InferenceObject, models.TextQuery)
# Vector inputs given by value (as opposed to a point id, text or an image).
_RAW_INPUTS = (list, tuple, np.ndarray, models.SparseVector)
# Inputs that name a stored point, whose stored vector Qdrant then searches with.
_POINT_IDS = (int, str, uuid.UUID)
# Query forms that hold no vector input.
_NO_INPUTS = (models.FusionQuery, models.RrfQuery, models.OrderByQuery, models.SampleQuery, models.FormulaQuery)

Visit = Callable[[Any, str], Any]

# Match forms whose string is full text (tokenised like a query): structurally validated too.
_FULL_TEXT: dict[type, str] = {models.MatchText: "text", models.MatchTextAny: "text_any", models.MatchPhrase: "phrase"}
# Match forms compared with stored keyword values, by their field.
_KEYWORD: dict[type, str] = {models.MatchValue: "value", models.MatchPrefix: "prefix", models.MatchSubstring: "substring",
            models.MatchAny: "any", models.MatchExcept: "except_"}


class QueryChecks(TextOps):
    """Structural validation, redaction and intent classification of query text."""

    def prepare_query(self, op: str, name: str, pol: CollectionPolicy, args: dict[str, Any],
                      query_text: str | None, details: dict[str, Any], at: str = "") -> Op:
        """Check the query's text and return the (possibly rewritten) arguments.

        ``at`` prefixes the places refusals name (``requests[1].`` for a batch request), so that
        a refusal names ``requests[1].query``, not ``query``.

        The whole query is walked: the top-level ``query`` and every (nested) ``prefetch``.
        A generator: the classifier and the embedder run as :class:`Offload` requests.

        Audit details: ``query_text`` is the checked text, redacted, and ``scan``/``intent`` its
        results (scan positions index that redacted text). A query with both ``query_text=`` and a
        ``models.Document`` of another text also gets ``query_texts``, one item per text
        (``from``: ``"query_text"`` or ``"query"``, ``query_text``, ``scan``, ``intent``), and
        ``query_text_from``; the top-level fields are then those of ``query_text=``, but in a
        refusal of the Document's text they are the Document's.
        """
        query = args.get("query")
        document = query if isinstance(query, models.Document) else None
        if document is not None and self.embedder is not None:
            # Before any check reads the text: the embedder is wrong for this vector whatever it says.
            self._refuse_query_embedder_model(op, name, pol, args.get("using"))
        elif document is not None:
            # Without an embedder the Document goes to qdrant-client's inference, which embeds it
            # with the model the Document names.
            self._refuse_query_document_model(op, name, pol, document, args.get("using"), f"{at}query")
        found: list[tuple[str, Any]] = []

        def collect(value: Any, where: str) -> Any:
            found.append((where, value))
            return value

        self.map_inputs(op, name, pol, args, collect, at)
        if any(isinstance(v, models.Image) for _, v in found) and not (
                pol.noise_queries and not pol.raw_allowed(self.boundary())):
            # Under query noise every Image is refused (audited) below, whatever its model.
            self._refuse_query_image_models(op, name, pol, args, found, at)
        unchecked = [w for w, v in found if isinstance(v, _TEXT_INPUTS)
                     and not (w == f"{at}query" and isinstance(v, models.Document))]
        if unchecked:
            raise self.refuse(self.decision(
                op, name, pol, Verdict.QUERY_REJECTED,
                f"text at {unchecked[0]} would be embedded or matched without the guard's checks; on "
                f"{pol.sensitivity.value} collection {name!r} pass query text as the top-level "
                "query=models.Document(text=...), or as query_text= next to a vector",
                details={"unchecked_text": unchecked},
            ))
        raw = [w for w, v in found if isinstance(v, _RAW_INPUTS)]
        noising = pol.noise_queries and not pol.raw_allowed(self.boundary())
        images = [w for w, v in found if isinstance(v, models.Image)]
        if images and not noising:  # under query noise the noise step refuses them, knob or not
            args = self._image_inputs(op, name, pol, args, images, at)
        reranked = mmr_paths(args, at) if noising else []
        # Both forms compare stored vectors with one another, which the query noise never reaches;
        # they are refused wherever a stored vector may be raw (see raw_vectors_left).
        left = capped = 0
        if (reranked or (noising and any(isinstance(v, _POINT_IDS) for _, v in found))) and not pol.raw_in_boundary:
            left, capped = yield from self.raw_vectors_left(op, name, pol)
        raw_stored = pol.raw_in_boundary or left > 0
        if reranked and raw_stored:
            # MMR picks each next result by the candidates' stored vectors compared with one another,
            # inside Qdrant: the order answers how similar raw vectors are to each other, exactly
            # (bisecting the diversity turns it into the differences of their cosines). The query
            # noise never reaches those comparisons, so they are refused as search_matrix_* is.
            raise self.refuse(self.decision(
                op, name, pol, Verdict.QUERY_REJECTED,
                f"{reranked[0]} asks Qdrant to re-rank the candidates by maximal marginal relevance, which "
                f"compares their stored vectors with one another; {pol.sensitivity.value} collection {name!r} "
                f"{raw_stored_clause(pol, left, capped)}, so the order of the "
                "results would tell how similar those raw vectors are to each other, and noise_queries lets a "
                "principal without raw access compare them only through a noised query vector. Query without "
                "mmr (in langchain, similarity_search instead of max_marginal_relevance_search) and diversify "
                f"the results yourself, {raw_stored_way_out(pol, name, left, capped)}",
                details={"where": reranked, "form": "Mmr", **left_details(pol, left, capped)},
            ))
        if query_text is not None and not isinstance(query_text, str):
            raise GuardArgumentTypeError(
                f"query_text= must be the query's text as a str, not {type(query_text).__name__}: pass "
                "the text the query vector was embedded from (query_text='...')")
        # The Document's text is its own; raw vectors next to it (in prefetches) still need query_text=.
        if pol.query.require_text and raw:  # not the scan's switch: it guards intent too
            if query_text is None:
                raise self.refuse(self.decision(
                    op, name, pol, Verdict.TEXT_REQUIRED,
                    f"this collection requires the query's text for its checks, and {raw[0]} is a raw "
                    "vector: pass query_text= next to the vector, or query with models.Document(text=...)",
                    details={"raw_vectors": raw},
                ))
            if is_blank(query_text):
                # "" or "  " or "\u200b" passes every text check trivially, so it would let any raw
                # vector through as if its text had been checked.
                raise self.refuse(self.decision(
                    op, name, pol, Verdict.TEXT_REQUIRED,
                    f"this collection requires the query's text for its checks, and the query_text= given "
                    f"({len(query_text)} characters) has no letter or digit, so there is nothing to check "
                    f"for the raw vector at {raw[0]}: pass the text the vector was embedded from as "
                    "query_text=, or query with models.Document(text=...)",
                    details={"raw_vectors": raw, "blank_query_text": True},
                ))
        # query_text= (the raw vectors' text) and the Document's text are each checked.
        texts: list[tuple[str, str]] = [] if query_text is None else [(query_text, "query_text")]
        if document is not None and document.text != query_text:
            texts.append((document.text, "query"))
        cleaned = ""
        # With two texts each is checked into details of its own (its redaction, scan and intent,
        # positions indexing that redaction), so that neither overwrites the other's; every entry
        # names both, and the allow entry keeps the first at the top level, as for one text.
        many = len(texts) > 1
        own = [{"query_text_from": where} for _, where in texts] if many else [details] * len(texts)
        for (text, _), mine in zip(texts, own):
            self.check_size(op, name, pol, text, mine)  # every size first, before the detector reads any
        scans = [_detect.redact_with_findings(text) for text, _ in texts]  # one scan for the entry and the screen
        listed = [{"from": where, "query_text": red} for (_, where), (red, _) in zip(texts, scans)]
        for (text, _), scanned, mine in zip(texts, scans, own):
            mine["query_text"] = scanned[0]
            if many:
                mine["query_texts"] = listed
            self.validate_structure(op, name, pol, text, mine, findings=scanned[1])
            # Credentials are never embedded: the key governs PII only, as redact_pii does.
            cleaned = self.screen_text(op, name, pol, text, scanned=scanned, keep_pii=not pol.query.redact_query_text)
            yield from self.check_intent(op, name, pol, cleaned, mine)
        if many:
            results = [{k: mine[k] for k in ("scan", "intent", "intent_error") if k in mine} for mine in own]
            details.update(query_text=listed[0]["query_text"], query_text_from=listed[0]["from"], **results[0],
                           query_texts=[{**item, **result} for item, result in zip(listed, results)])
        if document is not None:
            embedded = self.embeddable_text(pol, cleaned)  # the Document's text was checked last
            # Under noise_queries the vector must be the guard's own: Qdrant's (or qdrant-client's)
            # inference would make an exact one; _embed_query refuses without an embedder.
            if self.embedder is not None or noising:
                matrix = yield from self._embed_query(op, name, pol, embedded, details, f"{at}query")
                args = {**args, "query": matrix[0].tolist()}
            else:
                # qdrant-client's inference gets the Document whole: its options too.
                args = {**args, "query": screen_inference(
                    self, op, name, pol, document.model_copy(update={"text": embedded}), point_id=None,
                    where=f"{at}query", keep_pii=not pol.query.redact_query_text, write=False)}
        if noising:
            noised: list[str] = []

            def noise(value: Any, where: str) -> Any:
                if isinstance(value, models.Image):
                    # Inference makes a dense vector of it, which the guard could not noise.
                    raise self.refuse(self.decision(
                        op, name, pol, Verdict.QUERY_REJECTED,
                        f"{where} is a models.Image: inference would embed it into an exact query vector, "
                        f"and noise_queries on {pol.sensitivity.value} collection {name!r} needs every "
                        "query vector noised; embed the image yourself and pass the vector",
                        details={"where": where, "form": "Image"},
                    ))
                if isinstance(value, _POINT_IDS) and raw_stored:
                    # Qdrant would search with the point's stored vector as it is (one the caller
                    # may have stored itself, under lookup_from), against raw vectors: exact scores.
                    # Where every stored vector is noised, they are the vectors reads release.
                    raise self.refuse(self.decision(
                        op, name, pol, Verdict.QUERY_REJECTED,
                        f"{where} is a point id: Qdrant would search with that point's stored vector, "
                        f"unnoised, against the stored vectors of {pol.sensitivity.value} collection {name!r}, "
                        f"which {raw_stored_clause(pol, left, capped)}, and noise_queries needs every query vector "
                        "noised; pass a vector instead, which the guard noises: one of your own, or one "
                        "retrieve(..., with_vectors=True) releases to you"
                        + ("" if pol.raw_in_boundary else f"; {raw_stored_way_out(pol, name, left, capped)}"),
                        details={"where": where, "form": "point id", **left_details(pol, left, capped)},
                    ))
                if not isinstance(value, (list, tuple, np.ndarray)):
                    return value  # sparse vectors, ids of noised vectors: nothing dense to noise
                noised.append(where)
                return self.noise_query(pol, value)  # type: ignore[attr-defined]

            args = self.map_inputs(op, name, pol, args, noise, at)
            if noised:
                details["query_noised"] = True
        return args

    def _image_inputs(self, op: str, name: str, pol: CollectionPolicy, args: dict[str, Any],
                      images: list[str], at: str = "") -> dict[str, Any]:
        """``args`` with each ``models.Image`` input (``images``: where they are) screened
        (``inference.screen_inference``), when ``query.allow_images`` lets them through; refused
        (QUERY_REJECTED) otherwise: the guard cannot read an image, so such a query would pass none
        of its text checks."""
        if not pol.query.allow_images:
            raise self.refuse(self.decision(
                op, name, pol, Verdict.QUERY_REJECTED,
                f"{images[0]} is a models.Image, which inference would embed without any of the guard's checks "
                f"(it cannot read an image) on {pol.sensitivity.value} collection {name!r}: embed the image "
                "yourself and query with the vector and query_text=, or set query.allow_images = true for this "
                "collection to send image queries to inference",
                details={"where": images, "form": "Image"},
            ))

        def screen(value: Any, where: str) -> Any:
            return screen_inference(self, op, name, pol, value, point_id=None, where=where,
                                    keep_pii=not pol.query.redact_query_text, write=False)

        return self.map_inputs(op, name, pol, args, screen, at)

    def raw_vectors_left(self, op: str, name: str, pol: CollectionPolicy) -> Op:
        """How many points of ``name`` hold a dense vector that reads strip but Qdrant would still
        compare as stored: one without a receipt (raw vectors written while the policy had
        ``raw_in_boundary``, or by a client without the guard, which stay in the store when it is
        turned off), or one whose receipt names another noise mechanism than the collection's,
        weaker noise than its ``[noise]`` section, a dtype, mechanism version, scale or lattice
        step ``noise.check_release`` refuses, or, where the policy declares a model for that
        vector, another embedding model (see :func:`left_behind_filter`). Asked only where
        ``raw_in_boundary`` is off; a generator.

        A filter cannot compute a receipt's own calibration, so it matches each parameter set
        (epsilon, delta, radius, dim) it knows to that set's bounds: the policy's own, and those
        of receipts of stronger noise found stored. While the count finds points, one ``scroll``
        (64 points, their receipt container only) looks for receipts the filter would accept but
        for a set it does not know yet; found, the sets are learnt (kept per collection name until
        :meth:`forget_shape`, at most the policy's ``noise.max_receipt_param_sets``; receipts of
        further sets stay counted) and the
        count is asked again. So the count matches what reads release, but for what it concedes below.
        When that cap is reached with points left, one more ``count`` finds how many of them were
        counted only for a set beyond it (the second value returned), for the refusal to name. That
        count runs only for a call refused anyway (points are left) and is not kept: a kept figure
        would go stale as soon as the owner re-writes or deletes those points, which is the fix the
        refusal names, so each refusal states what the store holds when it is made.

        The learnt sets are shared by the client's threads: the room left under the cap is read and
        filled under ``shared["receipt_params_lock"]``, held for those set operations only (never
        across a Qdrant call or a yield), so concurrent learners, each of whose scrolls saw other
        receipts, never hold more than the cap together.

        One exact ``count`` (after the ``get_collection`` of :meth:`shape`, cached too) per
        collection and guarded client while none is found: no guarded client under this policy
        writes a raw vector or one of another mechanism, weaker noise or another model (every
        writer is assumed to run it), so "none" is kept until :meth:`forget_shape` (collections
        created, deleted or re-aliased through this client). A non-zero answer is not kept, so that once the owner has
        re-written or deleted those points the next query finds none. A failure of either call is
        audited (QDRANT_ERROR, the method and the error's type) and raised: the query is not sent.

        The count reads fields of each receipt, not its signature: a receipt whose fields the policy
        accepts is counted as receipted whether or not it verifies (a forged one, one signed by an
        untrusted or revoked key, one over another vector or bound to another collection)."""
        known = self.shared.get("noised_only")
        if known is None:  # one atomic dict call: two first finders must share one set
            known = self.shared.setdefault("noised_only", set())
        if name in known:
            return 0, 0
        cap = pol.noise.max_receipt_param_sets
        capped = 0
        method = "get_collection"
        try:
            shape = yield from self.shape(name)  # type: ignore[attr-defined]
            # Parameter sets of receipts of stronger noise than the policy's, found stored: each is
            # held to its own calibration (a pure function of the set, so never wrong; dropped
            # with the layouts, so a re-created collection's own sets are not capped by the old's).
            seen = self.shared.setdefault("receipt_params", {}).setdefault(name, set())
            lock = self.shared["receipt_params_lock"]
            while True:
                method = "count"
                with lock:
                    known_sets = sorted(seen)
                flt = left_behind_filter(shape, pol, known_sets)
                left = 0 if flt is None else int((yield Call(
                    "count", {"collection_name": name, "count_filter": flt, "exact": True})).count)
                unseen = unseen_params_filter(shape, pol, known_sets) if left else None
                if unseen is None:
                    break
                if len(seen) >= cap:
                    # Receipts of sets past the cap are counted unchecked: the refusal says so.
                    capped = int((yield Call("count", {"collection_name": name, "count_filter": unseen,
                                                       "exact": True})).count)
                    break
                method = "scroll"
                found, _ = yield Call("scroll", {"collection_name": name, "scroll_filter": unseen, "limit": 64,
                                                 "with_payload": [RECEIPT_KEY], "with_vectors": False})
                stored = {t for p in found for t in receipt_params_of(p.payload, shape)}
                with lock:  # the room and the update in one step: learners never pass the cap together
                    new = stored - seen
                    seen.update(sorted(new)[:max(cap - len(seen), 0)])
                if not new:
                    break
        except GeneratorExit:  # abandoned, not failed
            raise
        except BaseException as exc:
            self.record(self.decision(
                op, name, pol, Verdict.QDRANT_ERROR,
                f"Qdrant failed while the guard looked for points of {name!r} whose vectors have no receipt "
                f"({method} raised {type(exc).__name__}; its message is not logged); the query compares stored "
                "vectors with one another, which may be raw, so it was not sent",
                details={"method": method, "error": type(exc).__name__}))
            raise
        if not left:
            # The set taken before the count: forget_shape replaces it, so a count that a
            # re-creation overlapped is not kept for the new collection.
            known.add(name)
        return left, capped

    def _refuse_query_embedder_model(self, op: str, name: str, pol: CollectionPolicy, using: Any) -> None:
        """Refuse (ConfigError, audited as QUERY_REJECTED: :meth:`_model_refusal`), before anything is
        embedded or sent, a query ``models.Document`` the guard would embed with an embedder naming
        another model than the policy declares (``utility.embedding_model(s)``) for the vector
        queried (``using``; None: the unnamed one).

        An embedder that names no model passes: the guard cannot tell which model it is."""
        vname = str.__str__(using) if isinstance(using, str) else ""  # its characters, as qdrant-client sends it
        declared, key = pol.utility.declared_model(vname)
        if declared is None:
            return
        have = embedder_model_name(self.embedder)
        if have is None or same_model(have, declared):
            return
        have = str.__str__(have)
        raise self._model_refusal(
            op, name, pol,
            f"{op}: the query is a models.Document for vector {vname or '<unnamed>'!r} of collection {name!r}, "
            f"which the guard would embed with its embedder's model {have!r}, but the policy "
            f"({self.config.source_path or '<GuardConfig>'}) declares {key} = {toml_str(declared)} for that vector: "
            "vectors of two models do not rank against each other, so the results would be ordered by nothing "
            "the query and the stored vectors share. Pass embedder= "
            f"an embedder of {declared!r} (its model_id names the model), or correct {key} if this collection's "
            f"vectors come from {have!r}. Nothing was embedded or sent",
            {"where": "query", "form": "Document", "embedded_by": "embedder", "vector_name": vname,
             "model": have, "declared": declared, "key": key})

    def _refuse_query_document_model(self, op: str, name: str, pol: CollectionPolicy, document: Any,
                                     using: Any, where: str = "query") -> None:
        """Refuse (ConfigError, audited as QUERY_REJECTED), before anything is checked or sent, a
        query ``models.Document`` that qdrant-client's inference would embed (the guard has no
        embedder) with another model than the policy declares (``utility.embedding_model(s)``) for
        the vector queried."""
        vname = str.__str__(using) if isinstance(using, str) else ""  # its characters, as qdrant-client sends it
        self._refuse_inference_model(op, name, pol, vname, document,
                                     "the query is a models.Document" if where == "query"
                                     else f"{where} is a models.Document", "Document", where)

    def _refuse_inference_model(self, op: str, name: str, pol: CollectionPolicy, vname: str, value: Any,
                                what: str, kind: str, where: str = "query") -> None:
        # The ConfigError for an inference input (Document or Image) naming another model than the
        # one the policy declares for vector ``vname``; nothing when none is declared or it matches.
        declared, key = pol.utility.declared_model(vname)
        if declared is None or not isinstance(value.model, str) or same_model(value.model, declared):
            return
        model = str.__str__(value.model)
        raise self._model_refusal(
            op, name, pol,
            f"{op}: {what} for vector {vname or '<unnamed>'!r} of collection {name!r} "
            f"naming model {model!r}, which qdrant-client's inference would embed it with, "
            f"but the policy ({self.config.source_path or '<GuardConfig>'}) declares {key} = {toml_str(declared)} "
            "for that vector: vectors of two models do not rank against each other. Name "
            f"model={declared!r} in the {kind}, or correct {key} if this collection's vectors come from "
            f"{model!r}. Nothing was sent",
            {"where": where, "form": kind, "embedded_by": "inference", "vector_name": vname,
             "model": model, "declared": declared, "key": key})

    def _model_refusal(self, op: str, name: str, pol: CollectionPolicy, message: str,
                       details: dict[str, Any]) -> ConfigError:
        """The ConfigError of a query refused for its embedding model, audited first as the guard's
        other query refusals are: QUERY_REJECTED (:meth:`audited_model_refusal`), ``details``
        naming where and in what form the model is named, the vector, both model names and the
        policy key."""
        return self.audited_model_refusal(op, name, pol, Verdict.QUERY_REJECTED, message, details)

    def _refuse_query_image_models(self, op: str, name: str, pol: CollectionPolicy, args: dict[str, Any],
                                   found: list[tuple[str, Any]], at: str = "") -> None:
        """Refuse (ConfigError, audited as QUERY_REJECTED), before anything is checked or sent, a
        ``models.Image`` anywhere in the query (``found``: its inputs by path) naming another model
        than the policy declares for the vector of the query or prefetch it is in: qdrant-client's
        inference embeds an Image with the model it names, as it does a Document (the guard never
        embeds one)."""
        using = {f"{at}query": args.get("using")}
        for path, p in iter_prefetch(args.get("prefetch"), f"{at}prefetch"):
            using[f"{path}.query"] = p.using
        for where, value in found:
            if not isinstance(value, models.Image):
                continue
            # A prefetch's inputs are at "<its path>.query..." (no input path below holds ".query").
            level = where[:where.rindex(".query") + 6] if ".query" in where else f"{at}query"
            vname = str.__str__(using[level]) if isinstance(using[level], str) else ""
            self._refuse_inference_model(op, name, pol, vname, value, f"{where} is a models.Image", "Image", where)

    def _embed_query(self, op: str, name: str, pol: CollectionPolicy, text: str, details: dict[str, Any],
                     where: str = "query") -> Op:
        """The guard's embedding of a query's (checked) Document text, a refusal audited either way:
        without an embedder (QUERY_REJECTED), or when it fails (FAIL_CLOSED, then its
        :class:`EmbedderError` is raised)."""
        if self.embedder is None:
            raise self.refuse(self.decision(
                op, name, pol, Verdict.QUERY_REJECTED,
                f"{where} is a models.Document, and noise_queries on {pol.sensitivity.value} collection {name!r} "
                "needs every query vector noised: inference would embed it into an exact one. Pass embedder= "
                "to the client so that the guard embeds (and noises) it, or embed the text yourself and pass "
                "the vector with query_text=",
                details={**details, "where": where, "form": "Document"},
            ))
        try:
            matrix = yield Offload(lambda: self.embed([text], where="query"))
            if not np.isfinite(matrix).all():
                # Sent on, NaN fails in the store (which then got the guard's garbage); noised, it
                # failed in the noise as an unaudited InvalidVectorError.
                raise EmbedderError("query: the embedder returned NaN or Inf values; the call was refused")
            return matrix
        except EmbedderError as exc:
            # Types only: the embedder's message (kept in the raised error) can quote the text.
            cause = type(exc.__cause__).__name__ if exc.__cause__ is not None else None
            self.record(self.decision(
                op, name, pol, Verdict.FAIL_CLOSED,
                "the embedder failed on the query's models.Document text ("
                + (f"it raised {cause}" if cause else "its output is not a finite (n_texts, dim) matrix")
                + "; raised to the caller as EmbedderError, its message is not logged); the query was refused. "
                "Check the embedder passed as embedder=",
                details={**details, "error": type(exc).__name__, "cause": cause},
            ))
            raise

    def map_inputs(self, op: str, name: str, pol: CollectionPolicy, args: dict[str, Any],
                   visit: Visit, at: str = "") -> dict[str, Any]:
        """``args`` with every input of ``query`` and of each (nested) ``prefetch`` passed through
        ``visit(input, where)`` (``where`` prefixed by ``at``); a form the walk does not know is
        refused (QUERY_REJECTED)."""
        new = dict(args)
        try:
            if args.get("query") is not None:
                new["query"] = map_query(args["query"], visit, f"{at}query")
            if args.get("prefetch") is not None:
                new["prefetch"] = map_prefetch(args["prefetch"], visit, f"{at}prefetch")
        except UncheckedForm as exc:
            raise self.refuse_form(op, name, pol, exc) from None
        return new

    def refuse_form(self, op: str, name: str, pol: CollectionPolicy, exc: UncheckedForm) -> QdrantGuardError:
        """The audited refusal of a query part the guard cannot inspect (fail closed)."""
        return self.refuse(self.decision(
            op, name, pol, Verdict.QUERY_REJECTED,
            f"{exc}; pass it as the qdrant_client.models type (e.g. models.Prefetch, models.NearestQuery, "
            "models.LookupLocation, a list of floats)",
            details={"where": exc.where, "form": exc.form},
        ))

    def screen_filters(self, op: str, name: str, pol: CollectionPolicy, roots: Iterable[tuple[str, Any]],
                       details: dict[str, Any]) -> None:
        """Screen the values a read's or a write's filters match against (``roots``: ``(where,
        filter or query)``).

        A filter goes to Qdrant as given and answers for every stored point, so a match value is
        both text sent to the store and a question about it: ``MatchText("123-45-6789")`` on a
        payload field asks whether any point holds that SSN, one guess at a time, whatever the
        result returns. Each string (and integer) of a ``MatchValue``, ``MatchAny``, ``MatchExcept``,
        ``MatchText``, ``MatchTextAny``, ``MatchPhrase``, ``MatchPrefix`` or ``MatchSubstring``, in
        nested filters and formula conditions too, is run through the detector as ``key: value``
        (so ``ssn`` next to a bare number counts), and under a password name by the payload screen's
        rule (any value but a placeholder: ``MatchValue(key="db_password", value="hunter2hunter2x")``
        is a credential, ``value=""`` is not; a numeric ``Range`` bound there too). Credentials are refused (CREDENTIAL_IN_TEXT)
        always (a name-like value under a field named for a credential's attribute, such as
        ``auth_provider: google-oauth2-provider``, is no credential to the detector); PII per
        ``query.filter_pii`` (QUERY_REJECTED). Full-text match strings also pass
        the structural scan of query text (``query.mode``/``enabled`` as for query text).

        Every field name the filters and formulas name (of any ``FieldCondition``, range and geo
        ones too, ``is_empty``/``is_null``, ``NestedCondition``, ``has_vector``, formula keys and
        ``defaults``) is run through the detector alone, once per call, with the same outcome: a
        key is sent to the store as well, and ``is_empty`` on a key named for a person asks about
        that person. So are the field names a call gives outside its filters, given as
        :class:`FieldNames` roots (:func:`field_name_roots`), and an ``OrderByQuery``'s key.

        Raises:
            GuardRefusal: as above (audited; the value itself is not logged, a key only redacted).
        """
        try:
            found = [found for where, root in roots if root is not None
                     for found in _iter_keys(as_filter(root, where), where)]
        except UncheckedForm as exc:
            raise self.refuse_form(op, name, pol, exc) from None
        pii_ok = self._filter_pii_ok(pol)
        # PII that keep_payload_text_in_boundary kept in the text field is redacted for other
        # boundaries; a match on that field would read it back through the filter.
        kept = (pol.keep_payload_text_in_boundary and pol.text_field is not None and self.boundary() != pol.owner
                and pol.query.filter_pii != "allow")
        allowed: list[dict[str, Any]] = []
        keys: dict[str, str] = {}  # key -> its redacted form; each key is scanned once per call
        for key_at, key, cond in found:
            shown = keys.get(key)
            if shown is None:
                shown = keys[key] = self._screen_one_key(op, name, pol, key, key_at, _kind(cond), pii_ok, allowed,
                                                         outside=isinstance(cond, _OUTSIDE))
            if kept and path_head(key) == pol.text_field and _reads_value(cond):
                raise self.refuse(self.decision(
                    op, name, pol, Verdict.REFUSED_CROSS_BOUNDARY,
                    f"{key_at} ({_kind(cond)} on key {shown!r}) reads the value of the text field "
                    f"{pol.text_field!r}, whose stored text keeps personal data for the owner boundary "
                    f"{pol.owner!r} (keep_payload_text_in_boundary); other boundaries get it redacted, and a "
                    "range, an order (order_value) or a formula score on it would return what the redaction "
                    "hides. Use other fields, or read from the owner boundary",
                    details={"filter": key_at, "key": shown, "condition": _kind(cond)},
                ))
            if not isinstance(cond, models.FieldCondition):
                continue
            where = key_at.removesuffix(".key")
            if isinstance(cond.range, models.Range):
                # A numeric PIN or password is probed by ranges as by a match (Range(gte=p, lte=p),
                # or a count's binary search): a bound under a password name is one, as a value is.
                for bound in ("gt", "gte", "lt", "lte"):
                    b = getattr(cond.range, bound)
                    if not isinstance(b, (int, float)) or isinstance(b, bool):
                        continue
                    text = _number_text(b) or float.__repr__(float(b))  # 4920.5 brackets 4921 too
                    if password_value(key, text):
                        at = f"{where}.range.{bound}"
                        self._filter_findings(
                            op, name, pol, [password_finding(0, len(text))],
                            pii_ok, allowed, at, shown, "Range", {"filter": at, "key": shown, "match": "Range"},
                            why=password_name_why(key, "match"))
            match = cond.match
            kind = type(match).__name__
            field_name = _FULL_TEXT.get(type(match)) or _KEYWORD.get(type(match))
            if field_name is None:
                continue
            if kept and path_head(key) == pol.text_field:
                raise self.refuse(self.decision(
                    op, name, pol, Verdict.REFUSED_CROSS_BOUNDARY,
                    f"the filter at {where} ({kind} on key {shown!r}) matches the text field {pol.text_field!r}, "
                    f"whose stored text keeps personal data for the owner boundary {pol.owner!r} "
                    "(keep_payload_text_in_boundary); other boundaries get it redacted, and a filter on it "
                    "would read what the redaction hides. Filter on other fields, or read from the owner "
                    "boundary",
                    details={"filter": where, "key": shown, "match": kind},
                ))
            value = getattr(match, field_name)
            for i, item in enumerate(value if isinstance(value, list) else [value]):
                if isinstance(item, bool) or not isinstance(item, (str, int)):
                    continue
                at = f"{where}.match.{field_name.rstrip('_')}" + (f"[{i}]" if isinstance(value, list) else "")
                text = str(item)
                self._filter_structure(op, name, pol, at, text, details, full_text=type(match) in _FULL_TEXT)
                findings = _detect.find_sensitive(f"{key}: {text}")
                if findings and no_card(key, text):
                    # As in a payload: a barcode or a media id under a name for one is no card.
                    findings = [f for f in findings if f.type != "CREDIT_CARD"]
                if not findings and password_value(key, text):
                    # As in a payload: a filter that names a password field carries a password, and
                    # matching it asks whether a point holds that password.
                    findings = [password_finding(0, len(text))]
                if findings:
                    why = password_name_why(key, "match") if findings[0].validator == "password-name" else ""
                    self._filter_findings(op, name, pol, findings, pii_ok, allowed, at, shown, kind,
                                          {"filter": at, "key": shown, "match": kind}, why=why)
        if allowed:
            details["filter_pii"] = allowed

    def _filter_pii_ok(self, pol: CollectionPolicy) -> bool:
        """Whether this principal may name personal data in a filter or key (``query.filter_pii``)."""
        return pol.query.filter_pii == "allow" or (
            pol.query.filter_pii == "owner" and pol.owner is not None and self.boundary() == pol.owner)

    def screen_key(self, op: str, name: str, pol: CollectionPolicy, key: Any, where: str,
                   details: dict[str, Any]) -> Any:
        """A field name given outside a filter (``facet``'s ``key``), screened as filter keys are
        (:meth:`screen_filters`): credentials refused, personal data per ``query.filter_pii``.
        Returns the key as it may be logged (redacted), or ``key`` itself when it is not a str.

        Raises:
            GuardRefusal: as :meth:`screen_filters` (audited; the key only redacted).
        """
        if not isinstance(key, str):
            return key
        allowed: list[dict[str, Any]] = []
        shown = self._screen_one_key(op, name, pol, key, where, op, self._filter_pii_ok(pol), allowed, outside=True)
        if allowed:
            details.setdefault("filter_pii", []).extend(allowed)
        return shown

    def _screen_one_key(self, op: str, name: str, pol: CollectionPolicy, key: str, at: str, kind: str,
                        pii_ok: bool, allowed: list[dict[str, Any]], *, outside: bool = False) -> str:
        """Run a field name through the detector: refuse its credentials, and its personal data
        unless ``pii_ok`` (allowed ones are added to ``allowed``). Returns the key redacted, the
        only form of it that is logged: a key is the caller's string too, and reaches the store.
        ``outside``: the key was given outside a filter (an argument such as ``order_by``), which
        the refusal's directive names instead of a filter."""
        shown, findings = _detect.redact_with_findings(key)
        if findings:
            self._filter_findings(op, name, pol, findings, pii_ok, allowed, at, shown, kind,
                                  {"filter": at, "key": shown, "condition": kind}, outside=outside)
        return shown

    def _filter_findings(self, op: str, name: str, pol: CollectionPolicy, findings: Sequence[_detect.Finding],
                         pii_ok: bool, allowed: list[dict[str, Any]], at: str, shown: str, kind: str,
                         about: dict[str, Any], *, outside: bool = False, why: str = "") -> None:
        """Refuse a filter's credentials (CREDENTIAL_IN_TEXT) and, unless ``pii_ok``, its personal
        data (QUERY_REJECTED); allowed personal data is added to ``allowed``. ``at`` is a match
        value's path or a key's (``...key``); only ``shown`` (the redacted key) is logged.
        ``outside``: a field name given outside a filter (see :meth:`_screen_one_key`). ``why``: a
        sentence the credential refusal adds (:func:`~qdrant_guard.textguard.password_name_why`)."""
        types = sorted({f.type for f in findings})
        creds = sorted({f.type for f in findings if f.category == "CREDENTIAL"})
        about = {**about, "findings": types}
        value = "match" in about
        if creds:
            raise self.refuse(self.decision(
                op, name, pol, Verdict.CREDENTIAL_IN_TEXT,
                (f"the field name {shown!r} at {at} ({kind}) holds credentials {creds}; a credential is "
                 "never sent to the store: name another field (one whose name holds no credential)")
                if outside else
                (f"the filter at {at} ({kind} on key {shown!r}) holds credentials {creds}; a "
                 "credential is never sent to the store nor matched against it: remove it from the "
                 "filter (if the key holds no credential, filter on another field)" + why),
                details=about,
            ))
        if not pii_ok:
            who = f"the owner boundary {pol.owner!r}" if pol.owner else "an owner boundary"
            what = (f"the field name {shown!r} at {at} ({kind}) is" if outside else
                    f"the filter at {at} ({kind} on key {shown!r}) "
                    + ("matches on" if value else "names a field by"))
            raise self.refuse(self.decision(
                op, name, pol, Verdict.QUERY_REJECTED,
                f"{what} personal data {types}; "
                f"on {pol.sensitivity.value} collection {name!r} such a "
                + ("key" if outside else "filter") + " is a probe (it answers "
                "whether a stored point holds that " + ("value" if value else "field")
                + ", whatever the read returns). " + ("Name " if outside else "Filter on ")
                + "fields that hold no personal data (an id, a source, a category), or set "
                f"query.filter_pii = \"owner\" to let {who} " + ("name" if outside else "filter on") + " PII",
                details=about,
            ))
        allowed.append(about)

    def screen_write_filters(self, op: str, name: str, pol: CollectionPolicy, args: dict[str, Any]) -> dict[str, Any]:
        """:meth:`screen_filters` on the filters of write ``op`` (:func:`write_filter_roots`), before
        anything is sent: a delete or payload change by filter is a probe too (which points it
        matched shows in what is left), and its values reach the store. Returns the details
        (``filter_pii``, ``filter_scan``) for the write's allow entry.

        Raises:
            GuardRefusal: as :meth:`screen_filters` (audited; nothing is written).
        """
        details: dict[str, Any] = {}
        self.screen_filters(op, name, pol, write_filter_roots(op, args), details)
        return details

    def _filter_structure(self, op: str, name: str, pol: CollectionPolicy, at: str, text: str,
                          details: dict[str, Any], *, full_text: bool) -> None:
        """``max_chars`` on a match string, before the detector reads it, and on a full-text match
        string the structural scan of query text (QUERY_REJECTED). A keyword value is compared, not
        tokenised: a hash or an encoded id is a legitimate one."""
        rules = pol.query
        if not rules.enabled:
            return
        violations: list[dict[str, Any]]
        if rules.max_chars is not None and len(text) > rules.max_chars:
            violations = [{"kind": "size_cap", "position": rules.max_chars,
                           "detail": f"{len(text)} characters > max_chars {rules.max_chars}"}]
        elif not full_text:
            return
        else:
            _, found = structural_scan(text, rules)
            if not found:
                return
            # Positions index the match string, which is not logged (it may hold what the scan hides).
            violations = [{"kind": v.kind, "position": v.position, "detail": v.detail} for v in found]
        if rules.mode == "monitor":
            details.setdefault("filter_scan", []).append({"filter": at, "would_reject": violations})
            return
        raise self.refuse(self.decision(
            op, name, pol, Verdict.QUERY_REJECTED,
            f"the match at {at} failed structural validation ("
            + ", ".join(sorted({v["kind"] for v in violations}))
            + "); shorten it, remove repetition or encoded/invisible characters",
            details={"filter": at, "violations": violations},
        ))

    def check_size(self, op: str, name: str, pol: CollectionPolicy, text: str, details: dict[str, Any]) -> bool:
        """The ``max_chars`` cap -> QUERY_REJECTED; ``True`` when the text is over it in monitor mode.

        Checked before anything else reads the whole text (the detector, the scan, the audit entry).
        """
        rules = pol.query
        if not rules.enabled or rules.max_chars is None or len(text) <= rules.max_chars:
            return False
        violation = {"kind": "size_cap", "position": rules.max_chars,
                     "detail": f"{len(text)} characters > max_chars {rules.max_chars}"}
        if rules.mode == "monitor":
            details["scan"] = {"would_reject": [violation]}
            return True
        raise self.refuse(self.decision(
            op, name, pol, Verdict.QUERY_REJECTED,
            f"the query text has {len(text)} characters, above max_chars {rules.max_chars}; shorten it",
            details={"violations": [violation],
                     **({"query_text_from": details["query_text_from"]} if "query_text_from" in details else {})},
        ))

    def validate_structure(self, op: str, name: str, pol: CollectionPolicy, text: str, details: dict[str, Any],
                           *, findings: Sequence[_detect.Finding] = ()) -> None:
        """Native structural scan (token cap, repetition, encoded payloads) -> QUERY_REJECTED.

        ``findings`` are the detector's findings in ``text`` when the audit entry holds the text
        redacted (``details["query_text"]``): violation positions are then given in that text (a
        position inside a redacted span is its placeholder's).
        """
        rules = pol.query
        if not rules.enabled:
            return
        if self.check_size(op, name, pol, text, details):
            for v in details["scan"]["would_reject"]:
                v["position"] = redacted_position(v["position"], findings)
            return
        result, found = structural_scan(text, rules)
        details["scan"] = {"tokens": result.token_count, "repetition": round(result.repetition_ratio, 4)}
        if not found:
            return
        violations = [{"kind": v.kind, "position": redacted_position(v.position, findings), "detail": v.detail}
                      for v in found]
        if rules.mode == "monitor":
            details["scan"]["would_reject"] = violations
            return
        raise self.refuse(self.decision(
            op, name, pol, Verdict.QUERY_REJECTED,
            "the query failed structural validation (" + ", ".join(sorted({v['kind'] for v in violations}))
            + "); shorten it, remove repetition or encoded/invisible characters",
            details={"violations": violations, **_text_fields(details)},
        ))

    def _intent_failed(self, op: str, name: str, pol: CollectionPolicy, exc: Exception,
                       details: dict[str, Any], directive: str) -> QdrantGuardError:
        """The FAIL_CLOSED refusal of a query whose intent could not be classified."""
        details["intent_error"] = repr(exc)
        return self.refuse(self.decision(op, name, pol, Verdict.FAIL_CLOSED, directive,
                                         details={"error": repr(exc), **_text_fields(details)}))

    def check_intent(self, op: str, name: str, pol: CollectionPolicy, text: str, details: dict[str, Any]) -> Op:
        """Intent classification -> INTENT_BLOCKED, or FAIL_CLOSED when the classifier fails.

        A generator: classification is yielded as an :class:`Offload` (off the event loop in async).
        """
        ip = pol.intent
        if not ip.enabled:
            return
        if ip.skip_owner and pol.owner is not None:
            boundary = self.boundary()
            if boundary == pol.owner:
                # Not classified at all (an llm classifier is not called); the entry says so, so
                # that an audit reader can tell a skipped query from one that passed the check.
                details["intent"] = {"skipped": "owner", "boundary": boundary}
                return
        try:
            clf = self.intent_classifier(ip.classifier, ip.timeout_s)
        except Exception as exc:  # a misconfiguration, not an outage: never a reason to go on
            raise self._intent_failed(
                op, name, pol, exc, details,
                f"the intent classifier {ip.classifier!r} could not be loaded ({exc}); the query was refused "
                "whatever intent.fail_closed says. Fix intent.classifier in the policy") from exc
        from .intent import INTENT_LABELS, IntentClassifierError, classify_with_timeout
        from .intent_llm import _MAX_REASONING_CHARS

        try:
            result = yield Offload(lambda: classify_with_timeout(clf, text, ip.timeout_s))
            if not isinstance(getattr(result, "label", None), str) or result.label not in INTENT_LABELS:
                # Outside the contract (e.g. "ADVERSARIAL"): never in `block`, so it would pass as benign.
                raise IntentClassifierError(
                    f"classifier {ip.classifier!r} returned {getattr(result, 'label', result)!r}, not one of "
                    f"{INTENT_LABELS}")
            conf = getattr(result, "confidence", None)
            # Outside [0, 1] (or not a number) a confidence would crash the comparison below, or pass
            # a blocked label as "below min_confidence": a broken result, like a bad label.
            if isinstance(conf, bool) or not isinstance(conf, (int, float)) or not 0.0 <= conf <= 1.0:
                raise IntentClassifierError(
                    f"classifier {ip.classifier!r} returned confidence {conf!r}, not a number in [0, 1]")
        except Exception as exc:  # a broken classifier must never silently allow
            if ip.fail_closed and not pol.is_public:
                raise self._intent_failed(
                    op, name, pol, exc, details,
                    f"the intent classifier failed ({type(exc).__name__}); the query was refused because "
                    "intent.fail_closed = true. Check the classifier service, or set fail_closed = false") from exc
            details["intent_error"] = repr(exc)
            return
        reasoning = getattr(result, "reasoning", "")
        reasoning = reasoning if isinstance(reasoning, str) else repr(reasoning)
        if len(reasoning) > _MAX_REASONING_CHARS:
            # It goes into the audit entry and the refusal; a classifier (any, not only the LLM one)
            # that repeats or elaborates the query would otherwise write all of it, every query.
            reasoning = reasoning[:_MAX_REASONING_CHARS] + "…"
        # The classifier's own name (checked when it was loaded) where its result names none.
        named = getattr(result, "classifier", None)
        details["intent"] = {"label": result.label, "confidence": round(float(result.confidence), 4),
                             "reasoning": reasoning, "classifier": named if isinstance(named, str) else clf.name}
        if result.label in ip.block:
            if result.confidence < ip.min_confidence:
                details["intent"]["below_min_confidence"] = True
                return
            if ip.mode == "monitor":
                details["intent"]["would_block"] = True
                return
            raise self.refuse(self.decision(
                op, name, pol, Verdict.INTENT_BLOCKED,
                f"query classified {result.label} ({result.confidence:.2f}; {reasoning}). "
                "Rephrase the request to what the task needs; a query the task does need that is "
                f"refused is the classifier's false positive, which the policy's intent section for "
                f"collection {name!r} tunes (block, min_confidence, mode = \"monitor\"; `qdrant-guard audit "
                "replay LOG --policy NEW.toml` shows what a change would let through, docs/intent.md)",
                details={"intent": details["intent"], **_text_fields(details)},
            ))

    def intent_classifier(self, spec: str, timeout_s: float) -> Any:
        """The classifier for ``spec`` (loaded once per pipeline; ``llm`` once per timeout).

        A ``module:attr`` factory may load a model: threads that need the same classifier at once
        wait for the first one's load (a lock per spec, made with one ``setdefault``, held over the
        load only, never over a Qdrant call or a yield) rather than each load it and keep their own
        copy. A load that fails leaves nothing cached, so the next caller tries again."""
        cache = self.shared.setdefault("classifiers", {})
        key = (spec, timeout_s) if spec == "llm" else spec
        clf = cache.get(key)
        if clf is None:
            from .intent import load_classifier

            loads = self.shared.setdefault("classifier_loads", {})
            with loads.get(key) or loads.setdefault(key, threading.RLock()):
                clf = cache.get(key)
                if clf is None:
                    clf = cache[key] = load_classifier(spec, timeout_s=timeout_s)
        return clf


def as_filter(value: Any, where: str) -> Any:
    """A filter given as ``models.Filter``, its dict form or a ``grpc.Filter``, as a ``models.Filter``;
    anything else (a query, a condition) is returned as it is, to be walked.

    Raises:
        UncheckedForm: a dict that is not a valid filter, a gRPC filter that does not convert.
    """
    if isinstance(value, grpc.Filter):
        try:
            return GrpcToRest.convert_filter(value)
        except ValueError:  # a condition with no field set: qdrant-client cannot send it either
            raise UncheckedForm(where, value) from None
    if isinstance(value, dict):
        try:
            return models.Filter.model_validate(value)
        except ValueError:  # pydantic's ValidationError
            raise UncheckedForm(where, value) from None
    return value


def _expression_fields(cls: type) -> frozenset[str]:
    """The fields of model ``cls`` that hold a formula expression, where a string is a payload
    key (or a ``$score`` variable) sent to the store as it is."""
    found = _EXPRESSION_FIELDS.get(cls)
    if found is None:
        def holds(annotation: Any) -> bool:
            return annotation is models.MultExpression or any(holds(a) for a in get_args(annotation))

        found = _EXPRESSION_FIELDS[cls] = frozenset(
            name for name, info in getattr(cls, "model_fields", {}).items() if holds(info.annotation))
    return found


_EXPRESSION_FIELDS: dict[type, frozenset[str]] = {}


def _iter_keys(value: Any, where: str, prefix: str = "") -> Iterator[tuple[str, str, Any]]:
    """Every field name in ``value`` (a filter, a formula, nested to any depth) as ``(where, key,
    node)``: ``where`` is the path of the key itself (``...must[0].key``, ``...is_empty.key``,
    ``...nested.key``, ``...formula.sum[1]``), ``key`` a payload path (``people[].ssn`` inside
    ``NestedCondition`` ``people``), ``node`` the ``FieldCondition`` (whose ``match`` is screened
    too) or what named the key."""
    if isinstance(value, models.FieldCondition):
        yield f"{where}.key", prefix + value.key, value
    elif isinstance(value, FieldNames):
        yield from _iter_names(value, value.names, where)
    elif isinstance(value, models.OrderBy):
        yield f"{where}.key", value.key, value
    elif isinstance(value, models.OrderByQuery):
        if isinstance(value.order_by, str):
            yield f"{where}.order_by", value.order_by, value
        else:
            yield from _iter_keys(value.order_by, f"{where}.order_by")
    elif isinstance(value, (models.PayloadSelectorInclude, models.PayloadSelectorExclude)):
        field = "include" if isinstance(value, models.PayloadSelectorInclude) else "exclude"
        yield from _iter_names(value, getattr(value, field), f"{where}.{field}")
    elif isinstance(value, models.NestedCondition):
        nested = value.nested
        yield f"{where}.nested.key", prefix + nested.key, value
        yield from _iter_keys(nested.filter, f"{where}.nested.filter", f"{prefix}{nested.key}[].")
    elif isinstance(value, (models.IsEmptyCondition, models.IsNullCondition)):
        field = "is_empty" if isinstance(value, models.IsEmptyCondition) else "is_null"
        yield f"{where}.{field}.key", prefix + getattr(value, field).key, value
    elif isinstance(value, models.HasVectorCondition):
        yield f"{where}.has_vector", value.has_vector, value
    elif isinstance(value, models.GeoDistanceParams):
        yield f"{where}.to", value.to, value
    elif isinstance(value, models.DatetimeKeyExpression):
        yield f"{where}.datetime_key", value.datetime_key, value
    elif isinstance(value, BaseModel):
        expressions = _expression_fields(type(value))
        if isinstance(value, models.FormulaQuery):
            for key in value.defaults or ():
                if isinstance(key, str):
                    yield f"{where}.defaults", key, value
        for key, item in value.__dict__.items():
            at = f"{where}.{key.rstrip('_')}"
            if key in expressions:
                for i, one in enumerate(item if isinstance(item, list) else [item]):
                    if isinstance(one, str):
                        yield at + (f"[{i}]" if isinstance(item, list) else ""), one, value
            if isinstance(item, (BaseModel, list, tuple)):
                yield from _iter_keys(item, at, prefix)
    elif isinstance(value, (list, tuple)):
        for i, item in enumerate(value):
            if isinstance(item, (BaseModel, list, tuple)):
                yield from _iter_keys(item, f"{where}[{i}]", prefix)


def query_filter_roots(args: dict[str, Any], filter_key: str, where: str = "") -> Iterator[tuple[str, Any]]:
    """The filters of a query's arguments (the one at ``filter_key`` and each prefetch's) and its
    formula queries (whose conditions are filters too), as ``(where, value)`` for
    :meth:`QueryChecks.screen_filters`. Prefetches must be ``models.Prefetch`` already.

    Raises:
        UncheckedForm: (while iterated) a prefetch that is not a ``models.Prefetch``.
    """
    yield f"{where}{filter_key}", args.get(filter_key)
    if isinstance(args.get("query"), _KEYED_QUERIES):
        yield f"{where}query", args["query"]
    for path, p in iter_prefetch(args.get("prefetch"), f"{where}prefetch"):
        yield f"{path}.filter", p.filter
        if isinstance(p.query, _KEYED_QUERIES):
            yield f"{path}.query", p.query




class FieldNames:
    """Field names a call gives outside its filters (``names``: a key, a list of keys, an
    ``OrderBy`` or a ``with_payload`` selector), as a root for :meth:`QueryChecks.screen_filters`,
    which screens them as it screens a filter's keys. ``kind`` (the argument, ``order_by``) is
    logged as the key's ``condition``."""

    __slots__ = ("kind", "names")

    def __init__(self, kind: str, names: Any) -> None:
        self.kind, self.names = kind, names


# The arguments of each method that name payload fields outside a filter (facet's ``key`` is
# screened by ReadOps.budget_oracle, with_lookup's selector by field_name_roots).
_NAME_ARGS: dict[str, tuple[str, ...]] = {
    "scroll": ("order_by", "with_payload"), "retrieve": ("with_payload",), "query_points": ("with_payload",),
    "query_points_groups": ("group_by", "with_payload"), "set_payload": ("key",), "delete_payload": ("keys",),
    "create_payload_index": ("field_name",), "delete_payload_index": ("field_name",),
}


def field_name_roots(method: str, args: dict[str, Any], where: str = "") -> Iterator[tuple[str, Any]]:
    """The field names ``method``'s arguments give outside its filters (``scroll``'s ``order_by``,
    ``group_by``, ``with_payload`` and ``with_lookup``'s, ``set_payload``'s ``key``, ``delete_payload``'s
    ``keys``, a payload index's ``field_name``), as :class:`FieldNames` roots for
    :meth:`QueryChecks.screen_filters`: like a filter's keys, each is sent to the store (an index on,
    or an order by, a field named for a person asks about that person), and a refusal logs it.

    Raises:
        UncheckedForm: (while iterated) a gRPC ``OrderBy`` or payload selector that does not convert.
    """
    for arg in _NAME_ARGS.get(method, ()):
        value = args.get(arg)
        # None and a bool (with_payload=True, the common read) name no field: not walked (~4 us a read).
        if value is not None and not isinstance(value, bool):
            yield f"{where}{arg}", FieldNames(arg, _rest_names(value, f"{where}{arg}"))
    lookup = args.get("with_lookup") if method == "query_points_groups" else None
    if isinstance(lookup, models.WithLookup) and lookup.with_payload is not None:
        at = f"{where}with_lookup.with_payload"
        yield at, FieldNames("with_lookup", _rest_names(lookup.with_payload, at))


def _rest_names(value: Any, where: str) -> Any:
    """A gRPC ``OrderBy`` or payload selector as its REST model (what qdrant-client sends); anything else as it is."""
    try:
        if isinstance(value, grpc.OrderBy):
            return GrpcToRest.convert_order_by(value)
        if isinstance(value, grpc.WithPayloadSelector):
            return GrpcToRest.convert_with_payload_selector(value)
    except ValueError:  # no field set: qdrant-client cannot send it either
        raise UncheckedForm(where, value) from None
    return value


def _iter_names(node: Any, names: Any, where: str) -> Iterator[tuple[str, str, Any]]:
    """The keys of ``names`` (a key, a list of keys, a model, or a dict a client would validate into
    one: every string it holds) as :func:`_iter_keys` yields them, each with ``node``."""
    if isinstance(names, str):
        yield where, names, node
    elif isinstance(names, (list, tuple)):
        for i, item in enumerate(names):
            yield from _iter_names(node, item, f"{where}[{i}]")
    elif isinstance(names, dict):
        for k, item in names.items():
            # The key is the caller's string too: screened as a name, and only redacted in the path
            # (the path is logged; a secret as a dict key was logged as it was).
            at = f"{where}.{_detect.redact(k) if isinstance(k, str) else k}"
            if isinstance(k, str):
                yield at, k, node
            yield from _iter_names(node, item, at)
    elif isinstance(names, BaseModel):
        yield from _iter_keys(names, where)


# What names a key given outside a filter (FieldNames and the models it may hold, an OrderByQuery's order).
_OUTSIDE = (FieldNames, models.OrderBy, models.OrderByQuery, models.PayloadSelectorInclude,
            models.PayloadSelectorExclude)


# What names a key without reading its value back: presence tests, a nested condition's path
# (its own conditions are screened by their keys), payload selectors (the payload is redacted).
_NAMES_ONLY = (models.IsEmptyCondition, models.IsNullCondition, models.NestedCondition, models.HasVectorCondition,
               models.PayloadSelectorInclude, models.PayloadSelectorExclude)


def _reads_value(node: Any) -> bool:
    """Whether what named a key reads back its value some other way than a match (which
    :meth:`QueryChecks.screen_filters` refuses on its own): a range condition (a binary search), an
    order (each point's ``order_value``), a formula (its score). Matches, payload selectors,
    ``group_by`` and presence tests are not."""
    if isinstance(node, models.FieldCondition):
        return node.range is not None
    if isinstance(node, FieldNames):
        return node.kind == "order_by"
    return isinstance(node, BaseModel) and not isinstance(node, _NAMES_ONLY)


def _kind(node: Any) -> str:
    """What named a key, as its audit entry's ``condition``: the argument for :class:`FieldNames`,
    else the model's type (``FieldCondition``, ``OrderBy``)."""
    return node.kind if isinstance(node, FieldNames) else type(node).__name__


def write_filter_roots(method: str, args: dict[str, Any]) -> Iterator[tuple[str, Any]]:
    """The filters of a write call (its points selector when that is a filter, and its
    ``update_filter``), as ``(where, filter)`` for :meth:`QueryChecks.screen_filters`; for
    ``batch_update_points`` those of every operation (``update_operations[i]...``).

    Raises:
        UncheckedForm: (while iterated) a gRPC points selector that does not convert.
    """
    if method == "batch_update_points":
        for i, operation in enumerate(args.get("update_operations") or ()):
            yield from operation_filter_roots(operation, f"update_operations[{i}]")
        return
    if method in _WRITE_SELECTORS:
        yield from _selector_filter_roots(args.get(_WRITE_SELECTORS[method]), _WRITE_SELECTORS[method])
    if args.get("update_filter") is not None:
        yield "update_filter", args["update_filter"]
    yield from field_name_roots(method, args)


def operation_filter_roots(operation: Any, where: str) -> Iterator[tuple[str, Any]]:
    """The filters of one ``batch_update_points`` operation (a ``models.*Operation``): its
    ``FilterSelector``, ``filter`` or ``update_filter``; and the field names of a ``SetPayload``'s
    ``key`` and a ``DeletePayload``'s ``keys`` (:func:`field_name_roots`)."""
    if not isinstance(operation, BaseModel):
        return
    if isinstance(operation, models.SetPayloadOperation) and operation.set_payload.key is not None:
        yield f"{where}.set_payload.key", FieldNames("key", operation.set_payload.key)
    if isinstance(operation, models.DeletePayloadOperation):
        yield f"{where}.delete_payload.keys", FieldNames("keys", operation.delete_payload.keys)
    for field_name in type(operation).model_fields:
        inner, path = getattr(operation, field_name), f"{where}.{field_name}"
        yield from _selector_filter_roots(inner, path)
        for attr in ("filter", "update_filter"):
            if not isinstance(inner, models.FilterSelector) and getattr(inner, attr, None) is not None:
                yield f"{path}.{attr}", getattr(inner, attr)


def _selector_filter_roots(selector: Any, where: str) -> Iterator[tuple[str, Any]]:
    """The filter of a points selector (``models.Filter``/``FilterSelector``, their gRPC forms), if any."""
    if isinstance(selector, grpc.PointsSelector):
        try:
            selector = GrpcToRest.convert_points_selector(selector)
        except ValueError:  # neither ids nor a filter set: qdrant-client cannot send it either
            raise UncheckedForm(where, selector) from None
    if isinstance(selector, models.FilterSelector):
        yield f"{where}.filter", selector.filter
    elif isinstance(selector, (models.Filter, grpc.Filter)):
        yield where, selector


def _text_fields(details: dict[str, Any]) -> dict[str, Any]:
    """The fields of a query check's audit details that say which text was checked: ``query_text``
    (redacted; violation positions index it) and, when the query has two texts, ``query_text_from``
    (``"query_text"`` or ``"query"``) and ``query_texts`` (both, redacted)."""
    return {"query_text": details.get("query_text"),
            **{k: details[k] for k in ("query_text_from", "query_texts") if k in details}}


def redacted_position(position: int, findings: Sequence[_detect.Finding]) -> int:
    """``position`` in a text, as a position in that text with ``findings`` replaced by ``[TYPE]``
    (:func:`~qdrant_guard.detect.replace_findings`); inside a replaced span, its placeholder's start."""
    shift = 0
    for f in findings:
        if position < f.start:
            break
        if position < f.end:
            return f.start + shift
        shift += len(f.type) + 2 - (f.end - f.start)
    return position + shift


_ALNUM = re.compile(r"[^\W_]")  # a character str.isalnum() accepts, found at C speed in a huge text

# The repetition rules, measured again on the text folded (see structural_scan).
_CASELESS_KINDS = frozenset({"repetition", "ngram_run", "glued_repetition"})
# Combining diacritical marks (the blocks for Latin, Greek and Cyrillic, and their supplements):
# what an accent-stripping tokenizer drops after decomposing; dropped wherever they stand.
_DIACRITICS = ((0x0300, 0x036F), (0x1AB0, 0x1AFF), (0x1DC0, 0x1DFF), (0x20D0, 0x20FF), (0xFE20, 0xFE2F))
# Letters of the scripts with case, after NFKD: a nonspacing mark of any block on one of them is
# dropped too (an uncased BERT tokenizer drops every nonspacing mark, so Arabic or Hebrew points on
# Latin letters are the same bypass). Not everywhere: Thai and Devanagari vowel signs are
# nonspacing marks, and dropped from their own letters they would make natural text repeat.
_CASED_LETTERS = (
    (0x41, 0x5A), (0x61, 0x7A), (0xC0, 0x24F), (0x370, 0x3FF), (0x400, 0x52F), (0x531, 0x58F),  # Armenian
    (0x13A0, 0x13FF), (0x1E00, 0x1FFF), (0xAB70, 0xABBF),  # Cherokee and its small letters
)
_MARKS_END = 0x1E950  # every nonspacing mark of Unicode lies below

# Letters that look like a Latin lower case letter (after the lines of Unicode's UTS #39
# confusables, cut down), each pair "letter, Latin letter", keyed on the lower case letter; its
# upper case form maps alike where the two round-trip (so not Greek final sigma, whose lower case
# depends on the next letter, nor dotless i, whose upper case is I). A letter not listed keeps its
# script. Where a script has two lookalikes of one Latin letter both are mapped (Cyrillic н and
# һ to h, в and ь to b, у and ү to y, е and ҽ to e, і and ꙇ to i; Greek ο and σ to o; Armenian ո
# and ռ to n, զ and գ to q): an attacker picks either, so mapping one left the other as a bypass.
# The price: two words of one script that differ only there fold alike (Turkish "sık"/"sik", a
# Kazakh word with н and one with һ), which can only add repeats; measured on natural text in
# docs/security-testing.md ("Lookalike fold 2"). Latin letters that look like another Latin letter
# are mapped too: ı ɩ to i, ɑ to a, ɡ to g, ɣ to y, ʋ to u, ƅ to b, ȷ to j, and the small capitals
# whose shape is the lower case letter's (ᴄ ᴏ ᴜ ᴠ ᴡ ᴢ ꜱ). Not mapped: small capitals shaped like
# a capital (ᴀ ʙ ɪ ...), digits for letters (0/o, 1/l), Greek ς and ϲ (NFKD makes ϲ ς), and
# Hebrew, Arabic, Georgian, Canadian syllabics and other scripts' lookalikes. Mathematical letters,
# fullwidth, circled and letterlike forms need no entry: NFKD makes them ASCII, Greek or ı/ȷ.
_CONFUSABLES = (
    # Cyrillic: the shapes of А В Е К М Н О Р С Т Х in upper case, of а г е о р с у х і ј ѕ ԁ ԛ ԝ ӏ in
    # lower; the second lookalikes һ ь ү ҽ ꙇ
    "аaвbсcгrԁdеeԍgнhіiјjкkӏlмmоoрpԛqѕsтtуyѵvԝwхx" "һhьbүyҽeꙇi"
    # Greek: Α Β Ε Ζ Η Ι Κ Μ Ο Ρ Τ Χ, and α γ ι ν ο ρ υ ω ϳ in lower case; σ (its capital Σ with it:
    # both cases of a letter fold alike)
    "αaβbγyεeζzηhιiκkμmνvοoρpτtυuχxωwϳj" "σo"
    # Armenian: Օ Ս Տ, and ա ց հ ո ք զ օ ս; ռ, գ
    "աwցgհhոnքfզqօoսuտs" "ռnգq"
    # Cherokee (upper case is its usual form; lower case since Unicode 8)
    "ꭰdꭱrꭲtꭵiꭹyꭺaꭻjꭼeꮃwꮇmꮋhꮐgꮓzᏼbꮪsꮩvꮮlꮯcꮲpꮶk"
    # Latin lookalikes of other Latin letters: dotless i, iota, alpha, script g, gamma, v with hook,
    # tone six, dotless j, and the small capitals C O U V W Z S
    "ıiɩiɑaɡgɣyʋuƅbȷjᴄcᴏoᴜuᴠvᴡwᴢzꜱs"
)


@functools.lru_cache(maxsize=1)
def _mark_tables() -> tuple[Any, Any, Any]:
    """``(mark, always, cased)``: lookup tables by code point (the last entry stands for every code
    point from :data:`_MARKS_END` on), built on first use from ``unicodedata`` (about 10 ms)."""
    mark = np.zeros(_MARKS_END + 1, dtype=bool)
    for cp in range(0x300, _MARKS_END):
        mark[cp] = unicodedata.category(chr(cp)) == "Mn"
    always = np.zeros_like(mark)
    for a, b in _DIACRITICS:
        always[a:b + 1] = True
    cased = np.zeros_like(mark)
    for a, b in _CASED_LETTERS:
        cased[a:b + 1] = True
    return mark | always, always, cased


@functools.lru_cache(maxsize=1)
def _confusable_table() -> Any:
    """Code point -> code point of :data:`_CONFUSABLES` in both cases (identity elsewhere), as a
    lookup table up to the highest letter it maps."""
    pairs: dict[str, str] = {}
    for key, latin in zip(_CONFUSABLES[::2], _CONFUSABLES[1::2]):
        pairs[key] = latin
        upper = key.upper()
        if len(upper) == 1 and upper.lower() == key:
            pairs[upper] = latin
    table = np.arange(max(map(ord, pairs)) + 1, dtype="<u4")
    for letter, latin in pairs.items():
        table[ord(letter)] = ord(latin)
    return table


def _unconfused(units: Any) -> Any:
    """``units`` (code points) with each letter of :data:`_CONFUSABLES` made its Latin letter
    (``units`` itself when none is there)."""
    table = _confusable_table()
    inside = units < len(table)
    mapped = table.take(np.where(inside, units, 0))
    change = inside & (mapped != units)
    return np.where(change, mapped, units).astype("<u4") if change.any() else units


def _dropped(units: Any) -> Any:
    """Which of ``units`` (code points of NFKD text) the fold drops: a combining diacritic, or a
    nonspacing mark whose base (the last character before it that is no mark) has case."""
    mark_t, always_t, cased_t = _mark_tables()
    c = np.minimum(units, _MARKS_END)
    mark = mark_t.take(c)
    if not mark.any():
        return mark
    always = always_t.take(c)
    other = mark & ~always
    if not other.any():
        return always
    base = np.maximum.accumulate(np.where(mark, 0, np.arange(len(c))))
    return always | (other & cased_t.take(c.take(base)) & ~mark.take(base))


def _fold(text: str) -> str:
    """``text`` as the repetition rules' second measure reads it: compatibility-decomposed
    (fullwidth and mathematical letters become ASCII ones, ligatures their letters), without
    combining diacritics (nor any nonspacing mark on a Latin, Greek, Cyrillic, Armenian or Cherokee
    letter), Latin lookalikes of other scripts' letters made Latin (:data:`_CONFUSABLES`),
    recomposed (Hangul syllables, kana with voicing marks), in lower case."""
    if text.isascii():
        return text.lower()  # about 1 us for 500 tokens
    decomposed = unicodedata.normalize("NFKD", text)
    units = np.frombuffer(decomposed.encode("utf-32-le", "surrogatepass"), dtype="<u4")
    drop = _dropped(units)
    kept = units[~drop] if drop.any() else units
    # One code point for one, so positions map back as before; before NFC, which composes no
    # Latin letter with what follows it here (a mark after a mapped letter was dropped: its script
    # is cased), and before lower case, which maps both cases of a letter alike.
    latin = _unconfused(kept)
    if latin is not units:  # a letter dropped or mapped
        decomposed = latin.tobytes().decode("utf-32-le", "surrogatepass")
    return unicodedata.normalize("NFC", decomposed).lower()


def _unfolded_position(text: str, position: int) -> int:
    """The index in ``text`` of the character whose fold holds index ``position`` of
    ``_fold(text)`` (computed only for a violation). Exact but where NFC recomposes a character
    the original spelled in parts (a Hangul syllable as jamo): then a few characters late."""
    # Only a prefix long enough to hold ``position`` is mapped, doubled until it does: a violation
    # lies early (the second copy) and mapping all 65,536 characters costs about 80 ms in Python.
    # A prefix ends before a starter, so no canonical reordering crosses its end.
    end = min(len(text), position + 64)
    while True:
        while end < len(text) and unicodedata.combining(unicodedata.normalize("NFKD", text[end])[:1] or " "):
            end += 1
        head = text[:end]
        owners = [i for i, ch in enumerate(head) for _ in unicodedata.normalize("NFKD", ch)]
        units = np.frombuffer(unicodedata.normalize("NFKD", head).encode("utf-32-le", "surrogatepass"), dtype="<u4")
        if len(owners) != len(units):  # a canonical reordering cannot change the count; guard anyway
            return min(position, len(text))
        kept = [owner for owner, gone in zip(owners, _dropped(units).tolist()) if not gone]
        if position < len(kept):
            return kept[position]
        if end >= len(text):
            return len(text)
        end = min(len(text), 2 * end)


def structural_scan(text: str, rules: Any) -> tuple[Any, list[Any]]:
    """The structural scan of query text under ``rules`` (a policy's ``[query]``): the scan's
    result, and its violations with those of the repetition rules (``max_repetition``,
    ``max_ngram_run``, ``max_glued_repetition``) on the text folded (:func:`_fold`) added.

    The scanner compares code points exactly, so copies whose letters change case, take accents
    or turn fullwidth at random (``IgNoRe iGnÓrE ｉgnore ...``) all differ for it, while an
    embedding model whose tokenizer lowers, strips accents (an uncased BERT tokenizer, as
    all-MiniLM-L6-v2 has, does both) or applies NFKC receives the same copy again and again:
    100 such copies passed every rule. So did copies with a few letters swapped for Cyrillic or
    Greek lookalikes, whose word pieces mostly agree; the fold makes those letters Latin. Text
    with lookalike letters (most Cyrillic and Greek text) is always scanned twice. The fold costs about 1 us on 500 ASCII tokens and 20 to
    80 us on 3,500 characters of accented or CJK text, and 20 to 50 ms on 65,536 characters that
    NFKD expands several-fold (U+FDFA, squared katakana; such text passes the default token caps
    only a few thousand characters long); the second scan runs only when the fold changed the
    text and the first scan did not already refuse it. Positions are the original text's."""
    from . import scan as _scan

    result = _scan.scan_query(
        text, max_tokens=rules.max_tokens, max_repetition=rules.max_repetition,
        max_ngram_run=rules.max_ngram_run, encoded_payloads=rules.encoded_payloads,
        max_model_tokens=rules.model_token_cap(), max_glued_repetition=rules.max_glued_repetition,
    )
    violations = list(result.violations)
    if rules.max_repetition is None and rules.max_ngram_run is None and rules.max_glued_repetition is None:
        return result, violations
    if violations and rules.mode == "enforce":
        return result, violations  # refused already: the fold would not change the verdict
    folded = _fold(text)
    if folded == text:
        return result, violations
    # NFKD expands some characters up to 18-fold (U+FDFA): the second scan reads no more than
    # max_chars (or the text's length, if longer), so its cost stays that of a text at the cap.
    folded = folded[:max(len(text), rules.max_chars or 0)]
    found = {v.kind for v in violations}
    caseless = _scan.scan_query(
        folded, max_tokens=None, max_repetition=rules.max_repetition, max_ngram_run=rules.max_ngram_run,
        encoded_payloads=False, max_model_tokens=None, max_glued_repetition=rules.max_glued_repetition,
    )
    for v in caseless.violations:
        if v.kind in _CASELESS_KINDS and v.kind not in found:
            # Per character the fold's lengths add up to the whole fold's, but where the original
            # spelled a composed character in parts (a Hangul syllable as jamo): then the position
            # may be a few characters late.
            at = v.position if text.isascii() else _unfolded_position(text, v.position)
            violations.append(dataclasses.replace(
                v, position=at, detail=v.detail + " (letters compared without case, accents or width)"))
    return result, violations


def is_blank(text: str) -> bool:
    """Whether ``text`` has no letter or digit (empty, whitespace, punctuation, invisible characters):
    it gives the text checks nothing to judge, so it cannot stand for a raw vector's text."""
    return _ALNUM.search(text) is None


def map_query(query: Any, visit: Visit, where: str) -> Any:
    """``query`` rebuilt with each of its inputs (vectors, texts, images and point ids) replaced by
    ``visit(input, where)``.

    Raises:
        UncheckedForm: a form this walk does not know (refused rather than passed on unchecked).
    """
    q = query
    if type(q) is list:
        # A plain vector, the common query: none of the query models below (each isinstance check
        # against one costs about as much as the rest of the walk).
        return _map_input(q, visit, where)
    if isinstance(q, models.NearestQuery):
        return q.model_copy(update={"nearest": _map_input(q.nearest, visit, f"{where}.nearest")})
    if isinstance(q, models.RecommendQuery):
        r = q.recommend
        return q.model_copy(update={"recommend": r.model_copy(update={
            "positive": _map_list(r.positive, visit, f"{where}.recommend.positive"),
            "negative": _map_list(r.negative, visit, f"{where}.recommend.negative"),
        })})
    if isinstance(q, models.DiscoverQuery):
        d = q.discover
        return q.model_copy(update={"discover": d.model_copy(update={
            "target": _map_input(d.target, visit, f"{where}.discover.target"),
            "context": _map_pairs(d.context, visit, f"{where}.discover.context"),
        })})
    if isinstance(q, models.ContextQuery):
        return q.model_copy(update={"context": _map_pairs(q.context, visit, f"{where}.context")})
    if isinstance(q, models.RelevanceFeedbackQuery):
        f = q.relevance_feedback
        feedback = [item.model_copy(update={"example": _map_input(item.example, visit, f"{where}.feedback[{i}]")})
                    for i, item in enumerate(f.feedback)]
        return q.model_copy(update={"relevance_feedback": f.model_copy(update={
            "target": _map_input(f.target, visit, f"{where}.relevance_feedback.target"), "feedback": feedback,
        })})
    if isinstance(q, models.TextQuery):
        return visit(q, where)
    if isinstance(q, _NO_INPUTS):
        return q
    return _map_input(q, visit, where)


def left_behind_filter(shape: CollectionShape, pol: CollectionPolicy,
                       seen: Iterable[tuple[float, float, float, int]] = ()) -> models.Filter | None:
    """The points with a dense vector that a read under ``pol`` strips for its receipt's fields
    (see :meth:`~.reads.ReadOps.releasable_vectors`), or None for a collection without dense
    vectors: a vector whose receipt is not :func:`_accepted_receipt`. That is one without a receipt
    in the receipt container (see :func:`~.receipts.receipts_for_payload`), one whose receipt's
    ``params.mechanism`` is not the collection's ``[noise] mechanism`` (``mechanism_mismatch``),
    one whose signed noise is weaker than the policy's or not one this guard vouches for (its
    dtype, mechanism version, scale or lattice step), or, where ``pol`` declares an embedding model for
    that vector (``utility.embedding_model(s)``), one whose ``model_id`` is neither null nor that
    model (``model_mismatch``; null is released: its signer named no model).

    ``seen``: the ``(epsilon, delta, radius, dim)`` of receipts found stored besides the policy's
    own (:func:`unseen_params_filter`); a receipt of these is held to its own calibration, one of
    others is counted (the policy's own, at each vector's size, are always known).

    A named vector counts only on the points that have it (``HasVectorCondition``); a point without
    a container, or whose container lacks the vector's name (a raw in-boundary update of one vector
    drops that vector's receipt only), counts, and so does a receipt lacking a field (it cannot
    verify). A name holding ``"`` or ``\\`` cannot be written as a payload path: every point having
    that vector counts, which errs towards refusing."""
    seen = tuple(seen)
    conds: list[Any] = []
    for vname, spec in shape.dense.items():
        if '"' in vname or "\\" in vname:
            odd: list[Any] = []
        else:
            known = [_policy_params(pol, spec.size), *seen]
            cal = [(*t, *b) for t in dict.fromkeys(known) if (b := _own_bounds(pol.noise.mechanism, *t)) is not None]
            odd = [models.Filter(must_not=[_accepted_receipt(f'{RECEIPT_KEY}.vectors."{vname}"', vname, pol, cal)])]
        if shape.unnamed:
            conds.extend(odd)  # every point has the unnamed vector
        else:
            conds.append(models.Filter(must=[models.HasVectorCondition(has_vector=vname), *odd]))
    return models.Filter(should=conds) if conds else None


def unseen_params_filter(shape: CollectionShape, pol: CollectionPolicy,
                         seen: Iterable[tuple[float, float, float, int]]) -> models.Filter | None:
    """The points with a vector whose receipt :func:`_accepted_receipt` would accept but for its
    calibration, of ``(epsilon, delta, radius, dim)`` neither ``seen`` nor the policy's own: the
    receipts a count must look at (:func:`receipt_params_of`) before it can hold them to their own
    calibration. None when no vector's receipt can be named by a payload path."""
    seen = tuple(seen)
    conds: list[Any] = []
    for vname, spec in shape.dense.items():
        if '"' in vname or "\\" in vname:
            continue
        at = f'{RECEIPT_KEY}.vectors."{vname}"'
        known = dict.fromkeys([_policy_params(pol, spec.size), *seen])
        must: list[Any] = [_receipt_fields(at, vname, pol)]
        if not shape.unnamed:
            must.insert(0, models.HasVectorCondition(has_vector=vname))
        conds.append(models.Filter(must=must, must_not=[_params_match(f"{at}.params", t) for t in known]))
    return models.Filter(should=conds) if conds else None


def receipt_params_of(payload: Any, shape: CollectionShape) -> set[tuple[float, float, float, int]]:
    """The ``(epsilon, delta, radius, dim)`` of each receipt in ``payload`` for a vector of
    ``shape``, where they are numbers (and ``dim`` an int) a filter can match again."""
    found: set[tuple[float, float, float, int]] = set()
    receipts = stored_receipts(payload)
    for vname in shape.dense:
        rec = receipts.get(vname)
        params = rec.get("params") if isinstance(rec, dict) else None
        if not isinstance(params, dict):
            continue
        eps, delta, radius, dim = (params.get(k) for k in ("epsilon", "delta", "radius", "dim"))
        if (all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
                for v in (eps, delta, radius)) and type(dim) is int):
            found.add((float(eps), float(delta), float(radius), dim))
    return found


def _policy_params(pol: CollectionPolicy, dim: int) -> tuple[float, float, float, int]:
    """The ``(epsilon, delta, radius, dim)`` a guarded write under ``pol`` signs for a vector of
    ``dim`` (laplace_l2 releases state delta 0)."""
    n = pol.noise
    return (float(n.epsilon), 0.0 if n.mechanism == "laplace_l2" else float(n.delta), float(n.radius), dim)


def _params_match(p: str, t: tuple[float, float, float, int]) -> models.Filter:
    """Receipt params at payload path ``p`` of exactly ``t`` = ``(epsilon, delta, radius, dim)``."""
    eps, delta, radius, dim = t
    return models.Filter(must=[
        models.FieldCondition(key=f"{p}.epsilon", range=models.Range(gte=eps, lte=eps)),
        models.FieldCondition(key=f"{p}.delta", range=models.Range(gte=delta, lte=delta)),
        models.FieldCondition(key=f"{p}.radius", range=models.Range(gte=radius, lte=radius)),
        models.FieldCondition(key=f"{p}.dim", match=models.MatchValue(value=dim))])


def _accepted_receipt(at: str, vname: str, pol: CollectionPolicy,
                      calibrations: Sequence[tuple[float, float, float, int, float, float]] = ()) -> models.Filter:
    """A receipt at payload path ``at`` whose fields a read under ``pol`` accepts for vector
    ``vname``: the collection's mechanism (``mechanism_mismatch``), noise no weaker than its
    ``[noise]`` (``noise_shortfall``: epsilon, radius, delta, clip_norm; the policy's epsilon is
    within the class ceiling) from a private generator, in a dtype and mechanism version this guard
    calibrates, and the declared model or none (``model_mismatch``), all as :func:`_receipt_fields`;
    and at a scale and lattice step its own parameters calibrate to (``check_release``).

    A filter does no arithmetic, so the calibration is matched per parameter set:
    ``calibrations`` holds ``(epsilon, delta, radius, dim, least scale, coarsest step)`` of each
    set known (:func:`~.noise.release_bounds`), and a receipt of exactly one of them is held to its
    bounds, as a read holds it; a receipt of any other set matches none (counted, erring towards
    refusing; :meth:`QueryChecks.raw_vectors_left` looks such sets up first). Only sets of noise no
    weaker than the policy's are matched, so their exact epsilon, delta and radius stand for the
    policy's bounds (fewer payload look-ups: local mode reads each condition's path per point).
    Without ``calibrations`` no receipt is accepted. The signature takes a key."""
    p = f"{at}.params"
    n = pol.noise
    bounded = [[
        *_params_match(p, (eps, delta, radius, dim)).must,  # type: ignore[misc]
        models.FieldCondition(key=f"{p}.scale", range=models.Range(gte=scale)),
        models.FieldCondition(key=f"{p}.lattice_step", range=models.Range(gt=0.0, lte=step)),
    ] for eps, delta, radius, dim, scale, step in calibrations
        if eps <= n.epsilon and radius >= n.radius and delta <= max(n.delta, 0.0)]
    must = _receipt_fields(at, vname, pol, noise_bounds=False).must or []
    if len(bounded) == 1:
        return models.Filter(must=[*must, *bounded[0]])
    # An empty should would match every point in some Qdrant versions: none known, none accepted.
    own = (models.Filter(should=[models.Filter(must=b) for b in bounded]) if bounded
           else models.FieldCondition(key=f"{p}.lattice_step", range=models.Range(lt=0.0)))
    return models.Filter(must=[*must, own])


def _receipt_fields(at: str, vname: str, pol: CollectionPolicy, *, noise_bounds: bool = True) -> models.Filter:
    """The fields of :func:`_accepted_receipt` that need no calibration: the collection's
    mechanism, noise no weaker than its ``[noise]`` (epsilon, radius and delta only with
    ``noise_bounds``; :func:`_accepted_receipt` matches them exactly), a private generator, a dtype
    and mechanism version this guard calibrates, a lattice step (``noise_bounds``) and clip_norm
    above 0 (``check_release``), and the declared model or none. A missing field matches none of these.

    A read compares model names but for case, as qdrant-client's inference does
    (:func:`~.utility.same_model`); a filter matches keywords exactly, so the declared name is
    matched as written, lowercased and uppercased where that spelling is still the same model
    (not ``'ß'`` uppercased), and another spelling is counted, erring towards refusing."""
    n = pol.noise
    p = f"{at}.params"
    must: list[Any] = [
        models.FieldCondition(key=f"{p}.mechanism", match=models.MatchValue(value=n.mechanism)),
        models.FieldCondition(key=f"{p}.rng_id", match=models.MatchAny(any=list(PRIVATE_RNG_IDS))),
        models.FieldCondition(key=f"{p}.dtype", match=models.MatchAny(any=list(DTYPES))),
        models.FieldCondition(key=f"{p}.mechanism_version", match=models.MatchAny(any=list(CALIBRATED_VERSIONS))),
    ]
    if noise_bounds:
        must[1:1] = [
            models.FieldCondition(key=f"{p}.epsilon", range=models.Range(lte=n.epsilon)),
            models.FieldCondition(key=f"{p}.radius", range=models.Range(gte=n.radius)),
            models.FieldCondition(key=f"{p}.delta", range=models.Range(lte=max(n.delta, 0.0)))]
        must.append(models.FieldCondition(key=f"{p}.lattice_step", range=models.Range(gt=0.0)))
    if n.clip_norm is not None:
        must.append(models.FieldCondition(key=f"{p}.clip_norm", range=models.Range(gt=0.0, lte=n.clip_norm)))
    else:
        # check_release refuses a clip_norm it cannot read as a positive number; null: not clipped.
        must.append(models.Filter(should=[
            models.IsNullCondition(is_null=models.PayloadField(key=f"{p}.clip_norm")),
            models.FieldCondition(key=f"{p}.clip_norm", range=models.Range(gt=0.0))]))
    declared, _ = pol.utility.declared_model(vname)
    if declared is not None:
        must.append(models.Filter(should=[
            models.IsNullCondition(is_null=models.PayloadField(key=f"{at}.model_id")),
            models.FieldCondition(key=f"{at}.model_id", match=models.MatchAny(any=[
                # Only spellings a read accepts: 'ß'.upper() is 'SS', whose lower() is another name.
                name for name in dict.fromkeys((declared, declared.lower(), declared.upper()))
                if same_model(name, declared)]))]))
    return models.Filter(must=must)


@functools.lru_cache(maxsize=1024)
def _own_bounds(mechanism: str, epsilon: float, delta: float, radius: float, dim: int) -> tuple[float, float] | None:
    """:func:`~.noise.release_bounds` of these parameters, or None where they cannot be calibrated
    (``check_release`` refuses every release of them)."""
    try:
        return release_bounds(mechanism, epsilon, delta, radius, dim)
    except (TypeError, ValueError):
        return None


def raw_stored_clause(pol: CollectionPolicy, left: int, capped: int = 0) -> str:
    """What makes a collection's stored vectors raw, for a refusal: ``raw_in_boundary``, or the
    ``left`` points :meth:`QueryChecks.raw_vectors_left` found, ``capped`` of them counted unchecked
    for a receipt parameter set beyond ``noise.max_receipt_param_sets``."""
    if pol.raw_in_boundary:
        return f"keeps raw vectors for the owner boundary {pol.owner!r} (raw_in_boundary)"
    model = " or another embedding model than the policy declares for it" if _declares_model(pol) else ""
    clause = (f"still holds {left} point(s) with a vector that has no receipt, or whose receipt names another "
              f"noise mechanism than {pol.noise.mechanism!r}{model}, or weaker noise than its [noise] section "
              "states: raw vectors written while the policy had "
              "raw_in_boundary (or written without the guard), which turning it off left in the store, or "
              "releases the policy does not accept, which reads strip but Qdrant still compares as stored")
    if not capped:
        return clause
    cap = pol.noise.max_receipt_param_sets
    return (f"{clause}; {capped} of those point(s) were counted unchecked: their receipts state stronger noise "
            f"in parameter sets (epsilon, delta, radius, dim) beyond the {cap} besides the policy's own that the "
            f"guard holds to their own calibration per collection (noise.max_receipt_param_sets = {cap}), so they "
            "may well be releases reads accept, but the guard did not check them and refuses rather than "
            "compare them unchecked")


def left_details(pol: CollectionPolicy, left: int, capped: int) -> dict[str, Any]:
    """The audit details of a refusal for ``left`` points left behind, ``capped`` of them past the
    cap on receipt parameter sets."""
    if not left:
        return {}
    out: dict[str, Any] = {"unreceipted_points": left}
    if capped:
        out.update(beyond_param_cap=capped, max_receipt_param_sets=pol.noise.max_receipt_param_sets)
    return out


def raw_stored_way_out(pol: CollectionPolicy, name: str, left: int, capped: int = 0, *, action: str = "query") -> str:
    """The fix a refusal for raw stored vectors names (see :func:`raw_stored_clause`)."""
    if pol.raw_in_boundary:
        return f"or {action} from the owner boundary {pol.owner!r}"
    if capped:
        cap = pol.noise.max_receipt_param_sets
        return (f"or raise noise.max_receipt_param_sets of collection {name!r} above {cap} to the number of "
                "parameter sets its receipts state (each costs the check about six payload conditions per "
                "vector, on every such call until none is left behind), or have those points re-written "
                "through the guard (upsert or update_vectors, which noise them at the policy's own [noise]) or "
                f"deleted; any other point(s) of the {left} are raw or releases the policy does not accept: "
                f"`qdrant-guard receipt verify --collection {shell_quote(name)} --policy POLICY --check-noise` "
                f"lists those. Once none is left, this {'query' if action == 'query' else 'call'} runs")
    model = (", a vector of another model re-embedded with the declared one first" if _declares_model(pol)
             else "")
    reasons = ("missing_receipt, mechanism_mismatch, insufficient_noise or model_mismatch" if model
               else "missing_receipt, mechanism_mismatch or insufficient_noise")
    return (f"or have those {left} point(s) re-written through the guard (upsert or update_vectors, which "
            f"noise them with the collection's mechanism and receipt them{model}) or deleted; `qdrant-guard "
            f"receipt verify --collection {shell_quote(name)} --policy POLICY --check-noise` lists them as {reasons}. Once "
            f"none is left, this {'query' if action == 'query' else 'call'} runs")


def _declares_model(pol: CollectionPolicy) -> bool:
    """Whether ``pol`` declares an embedding model for any vector (``utility.embedding_model(s)``)."""
    return pol.utility.embedding_model is not None or bool(pol.utility.embedding_models)


def mmr_paths(args: dict[str, Any], at: str = "") -> list[str]:
    """Where the ``query`` of ``args`` or of any (nested) ``prefetch`` asks for MMR re-ranking
    (``models.NearestQuery(mmr=...)``); the forms were checked by :func:`map_query` before."""
    found: list[str] = []
    queries: list[tuple[str, Any]] = [(f"{at}query", args.get("query"))]
    queries += [(f"{path}.query", p.query) for path, p in iter_prefetch(args.get("prefetch"), f"{at}prefetch")]
    for where, q in queries:
        if isinstance(q, models.NearestQuery) and q.mmr is not None:
            found.append(f"{where}.mmr")
    return found


def map_prefetch(prefetch: Any, visit: Visit, where: str) -> Any:
    """``prefetch`` (one or a list, nested to any depth) with every query input visited."""
    if prefetch is None:
        return None
    if isinstance(prefetch, (list, tuple)):
        return [_map_one_prefetch(p, visit, f"{where}[{i}]") for i, p in enumerate(prefetch)]
    return _map_one_prefetch(prefetch, visit, where)


def iter_prefetch(prefetch: Any, where: str) -> Iterator[tuple[str, models.Prefetch]]:
    """Every prefetch of a (nested) prefetch tree with its path, depth first."""
    if prefetch is None:
        return
    items = list(enumerate(prefetch)) if isinstance(prefetch, (list, tuple)) else [(None, prefetch)]
    for i, p in items:
        path = where if i is None else f"{where}[{i}]"
        if not isinstance(p, models.Prefetch):
            raise UncheckedForm(path, p)
        yield path, p
        yield from iter_prefetch(p.prefetch, f"{path}.prefetch")


def rest_prefetch(prefetch: Any, where: str) -> Any:
    """``prefetch`` with plain dicts turned into ``models.Prefetch`` (Qdrant accepts both)."""
    if isinstance(prefetch, (list, tuple)):
        return [rest_prefetch(p, f"{where}[{i}]") for i, p in enumerate(prefetch)]
    if isinstance(prefetch, dict):
        try:
            return models.Prefetch.model_validate(prefetch)
        except ValueError:  # pydantic's ValidationError
            raise UncheckedForm(where, prefetch) from None
    return prefetch


def _map_one_prefetch(p: Any, visit: Visit, where: str) -> models.Prefetch:
    if not isinstance(p, models.Prefetch):
        raise UncheckedForm(where, p)
    return p.model_copy(update={"query": map_query(p.query, visit, f"{where}.query"),
                                "prefetch": map_prefetch(p.prefetch, visit, f"{where}.prefetch")})


def _map_input(value: Any, visit: Visit, where: str) -> Any:
    if value is None:
        return value
    if isinstance(value, (int, str, uuid.UUID)) and not isinstance(value, bool):
        return visit(value, where)  # a point id: its stored vector, in a collection the lookup check allowed
    if isinstance(value, _RAW_INPUTS + _TEXT_INPUTS + (models.Image,)):
        return visit(value, where)
    raise UncheckedForm(where, value)


def _map_list(values: list[Any] | None, visit: Visit, where: str) -> list[Any] | None:
    if values is None:
        return None
    return [_map_input(v, visit, f"{where}[{i}]") for i, v in enumerate(values)]


def _map_pairs(pairs: Any, visit: Visit, where: str) -> Any:
    def one(pair: Any, path: str) -> Any:
        if not isinstance(pair, models.ContextPair):
            raise UncheckedForm(path, pair)
        return pair.model_copy(update={"positive": _map_input(pair.positive, visit, f"{path}.positive"),
                                       "negative": _map_input(pair.negative, visit, f"{path}.negative")})
    if isinstance(pairs, list):
        return [one(p, f"{where}[{i}]") for i, p in enumerate(pairs)]
    return one(pairs, where)
