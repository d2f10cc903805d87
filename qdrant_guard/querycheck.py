"""Checks on a query before it reaches Qdrant: structure (native scan), redaction, intent."""
from __future__ import annotations

import threading
import uuid
from typing import Any, Iterable, Sequence

import numpy as np
from qdrant_client.http import models

from . import detect as _detect
from .decision import Verdict
from .errors import ConfigError, GuardArgumentTypeError, QdrantGuardError
from .pipeline import Call, Offload, Op
from .policy import CollectionPolicy, toml_str
from .receipts import RECEIPT_KEY
from .sentmodels import UncheckedForm
from .sources import path_head
from .textguard import EmbedderError, TextOps
from .field_screen import _number_text, no_card, value_findings
from .password_names import password_finding, password_name_why, password_value
from .inference import screen_inference
from .utility import embedder_model_name, same_model
# The helpers below moved to modules of their own; their public names still import from here.
from .filterroots import (FieldNames, _iter_keys, _kind, _reads_value, as_filter, field_name_roots,
                          operation_filter_roots, query_filter_roots, write_filter_roots)
from .querymap import (_RAW_INPUTS, _TEXT_INPUTS, Visit, iter_prefetch, map_prefetch, map_query, mmr_paths,
                       rest_prefetch)
from .rawstored import (left_behind_filter, left_details, raw_stored_clause, raw_stored_way_out,
                        receipt_params_of, unseen_params_filter)
from .textfold import is_blank, redacted_position, scan_refusal_text, structural_scan

# Inputs that name a stored point, whose stored vector Qdrant then searches with.
_POINT_IDS = (int, str, uuid.UUID)

# What names a key given outside a filter (FieldNames and the models it may hold, an OrderByQuery's order).
_OUTSIDE = (FieldNames, models.OrderBy, models.OrderByQuery, models.PayloadSelectorInclude,
            models.PayloadSelectorExclude)
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
            shape = yield from self.shape(name)
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
                # Read bare first (what a finding in the key charges to the match), then as the payload
                # screen reads a value: bare alone, an apostrophe or a quote before a secret opened a
                # quote never closed and the secret passed.
                findings = _detect.find_sensitive(f"{key}: {text}") or value_findings(key, text)
                if findings and no_card(key, text):
                    # As in a payload: a barcode or a media id under a name for one is no card.
                    findings = [f for f in findings if f.type != "CREDIT_CARD"]
                if not any(f.category == "CREDENTIAL" for f in findings) and password_value(key, text):
                    # As in a payload: a filter that names a password field carries a password, and
                    # matching it asks whether a point holds that password (an SSN-shaped one too).
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
        sentence the credential refusal adds (:func:`~qdrant_guard.password_names.password_name_why`)."""
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
                f"filter_pii = \"owner\" in {self.policy_section(name, pol, 'query')} to let {who} "
                + ("name" if outside else "filter on") + " PII",
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
            f"the match at {at} failed structural validation: {scan_refusal_text(violations, name)}",
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
            f"the query failed structural validation: {scan_refusal_text(violations, name)}",
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


def _text_fields(details: dict[str, Any]) -> dict[str, Any]:
    """The fields of a query check's audit details that say which text was checked: ``query_text``
    (redacted; violation positions index it) and, when the query has two texts, ``query_text_from``
    (``"query_text"`` or ``"query"``) and ``query_texts`` (both, redacted)."""
    return {"query_text": details.get("query_text"),
            **{k: details[k] for k in ("query_text_from", "query_texts") if k in details}}
