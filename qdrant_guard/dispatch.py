"""Which guarded operation a call runs (``run``), and the collection-level calls the guard answers.

A mixin over :class:`qdrant_guard.pipeline.GuardPipeline`: ``run`` refuses collection names the
guard cannot vouch for, picks the ``op_*`` method for the call and, around it, forgets cached
source sizes after writes that may change them; the collection-level calls (collection info,
listings, aliases, existence, the operator-only ones) are answered here, hiding the names of
collections the caller may not see (``hides_names``, ``name_visible``).
"""
from __future__ import annotations

from typing import Any

from .decision import MAX_IDS_IN_RECORD, Verdict
from .errors import ConfigError, GuardArgumentTypeError, InvalidVectorError, QdrantGuardError
from .policy import CollectionPolicy
from .names import folded_name, path_segment_name, shown
from .notfound import missing_collection_error
from .sentargs import plain_args
from .sentmodels import UncheckedForm, sent_models
from .sentnames import plain_names
from .sparseslots import ADDS_SPARSE_SLOTS, asked_sparse_slots, sparse_slots_message
from .surface import ADMIN, OPERATOR_ONLY, PAYLOAD, READ_COLLECTION, SNAPSHOT_RECOVERY, WRITE_COLLECTION, WRITE_VECTORS
from .withheld import ADMIN_COUNTED, admin_answer_for, describe_collection, describe_hidden, without_operation_ids
from .callchecks import CallChecks
from .pipeline import Call, Op, mark_audited


# Methods that may add, retag or delete points of a source (see _forget_source_sizes_after).
# delete_shard_key deletes the points of its shard; cluster_collection_update can too
# (DropShardingKey), or copy points into another shard key (ReplicatePoints).
# The point updates, whose answers carry Qdrant's operation id (one list of them for a batch).
_POINT_UPDATES = WRITE_VECTORS | PAYLOAD | WRITE_COLLECTION


_CHANGES_SOURCES = frozenset({
    "upsert", "upload_points", "upload_collection", "batch_update_points", "set_payload",
    "overwrite_payload", "delete_payload", "clear_payload", "delete", "delete_collection",
    "recreate_collection", "update_collection_aliases", "migrate", "delete_shard_key",
    "cluster_collection_update",
})


# The reads such a method's operation may make before its write. Any other call it sends counts
# as the write: once it is sent, the store may have changed, whether or not the call then fails.
_READS_BEFORE_WRITE = frozenset({
    "get_collection", "get_collections", "get_aliases", "get_collection_aliases", "collection_exists",
    "retrieve", "scroll", "count",
})


# Methods that store a collection's metadata (qdrant-client 1.20), which get_collection returns.
_TAKES_METADATA = frozenset({"create_collection", "recreate_collection", "update_collection"})


# The calls that make or remove a collection's storage directory, named after the collection.
_MAKES_OR_REMOVES_STORAGE = frozenset({"create_collection", "recreate_collection", "delete_collection"})


class Dispatch(CallChecks):
    """The entry point of every guarded call and the collection-level operations."""

    # -- entry point ----------------------------------------------------------------------
    def run(self, method: str, args: dict[str, Any]) -> Op:
        """The operation for ``method`` with its bound arguments (without ``self``).

        Raises:
            TypeError: ``collection_name`` is not a str (the policy is looked up by it).
        """
        name = args.get("collection_name", "")
        if not isinstance(name, str):
            raise GuardArgumentTypeError(f"{method}() argument 'collection_name' must be str, not {type(name).__name__}")
        if not self.transparent:
            args = plain_names(method, args)
            name = args.get("collection_name", "")
            if path_segment_name(name):
                raise self.refuse_path_name(method, name)
            if method in _MAKES_OR_REMOVES_STORAGE:
                self.refuse_folded_name(method, name)
            try:
                # Checked as sent: every check below walks these copies, and they are what is sent.
                args = plain_args(method, sent_models(method, args))
            except UncheckedForm as exc:
                raise self.refuse_form(method, name, self.policy(name), exc) from None  # type: ignore[attr-defined]
        handler = getattr(self, f"op_{method}", None)
        if handler is not None:
            op = handler(method, args)
        elif method in READ_COLLECTION:
            op = self.op_collection_access(method, args, "read")
        elif method in WRITE_COLLECTION:
            op = self.op_collection_access(method, args, "write")
        elif method in ADMIN:
            op = self.op_collection_access(method, args, "admin")
        elif method in OPERATOR_ONLY:
            op = self.op_operator_only(method, args)
        else:
            raise QdrantGuardError(f"qdrant_guard has no guard for method {method!r}; this is a bug")
        if method in _CHANGES_SOURCES:
            op = self._forget_source_sizes_after(op, unwaited=not args.get("wait", True))
        if method in _POINT_UPDATES and not self.transparent:
            op = self._writer_answers(name, op)
        return op if self.transparent else self._audit_unlisted(method, op)

    def refuse_path_name(self, method: str, name: str) -> QdrantGuardError:
        """The audited refusal of a collection name that, read as a path, leads to another
        directory than its own (:func:`~qdrant_guard.names.path_segment_name`): the guard decides
        by the name's policy, and local mode would act on the collection whose directory it reaches."""
        return self.refuse(self.decision(
            method, name, None, Verdict.REFUSED_CROSS_BOUNDARY,
            f"collection name {shown(name)} holds a '.', '..' or empty path segment: local mode keeps each "
            "collection in a directory named after it, so this name reaches another collection's storage "
            "(delete_collection('pub/../payroll') deleted payroll's points) while the guard decides by "
            "this name's policy. No collection can be created under such a name; use the collection's "
            "own name",
            details={"reason": "path_segment"},
        ))

    def refuse_folded_name(self, method: str, name: str) -> None:
        """Refuse (audited) creating or deleting collection ``name`` when a collection the policy
        lists under another policy has a name that differs only by case or Unicode normalisation
        (:func:`~qdrant_guard.names.folded_name`): on a file system that ignores those, local mode
        (and a server's storage) keeps both in one directory, so the call would open or remove the
        listed collection's points under this name's policy."""
        listed = self.config.collections
        try:
            mine = self.policy(name)
        except ConfigError:  # unlisted = "refuse": refused by its own path
            return
        key = folded_name(name)
        for other, pol in listed.items():
            if other == name or pol == mine or folded_name(other) != key:
                continue
            # Under names_visible = "accessible" a hidden listed name is not told (the audit has it).
            said = repr(other) if self.name_visible(other) else "a collection the policy lists"
            raise self.refuse(self.decision(
                method, name, mine, Verdict.REFUSED_CROSS_BOUNDARY,
                f"collection name {shown(name)} differs from {said} only by case or Unicode normalisation, "
                "and its policy differs: on a file system that ignores those (macOS, Windows) both names "
                f"are one directory, so {method} would act on that collection's points under this name's "
                f"policy; use another name, or list {shown(name)} in the policy with the same policy",
                details={"reason": "folded_name", "same_folded_as": other},
            ))

    def _writer_answers(self, name: str, op: Op) -> Op:
        """``op``, whose answer a principal who may not read collection ``name`` gets without
        operation ids (:func:`without_operation_ids`)."""
        result = yield from op
        try:
            pol = self.policy(name)
        except ConfigError:  # unlisted = "refuse": the call was refused before it could answer
            return result
        if pol.is_public or pol.may_read(self.boundary()):
            return result
        return without_operation_ids(result)

    def _forget_source_sizes_after(self, op: Op, *, unwaited: bool = False) -> Op:
        """``op``, after which (done, failed or abandoned), if it sent its write, every guard of
        this process on the same store drops its cached source sizes.

        The extraction budget's cap is a share of a source's size, cached for reads. A write may
        add, retag or delete points of a source: kept, the size of before would set the cap of
        after (after the owner deletes points, a reader's share of what is left could exceed
        ``max_source_coverage``). All collections' sizes go, as the write may name an alias.
        ``unwaited``: sent with ``wait=False`` (upload_points' default), so Qdrant acknowledged it
        before applying it, and a count made meanwhile is of before it: no count begun within
        ``SOURCE_SIZE_TTL_S`` of the acknowledgement is kept. A write that failed or was abandoned
        once sent is taken as unwaited: a server may still apply it (a request the client timed
        out, an async write cancelled in flight). A write refused before it was sent (by the
        guard, or by a read of its operation failing) changed nothing, and keeps the sizes.
        """
        sent = ended = False
        try:
            request = next(op)
            while True:
                if not sent and isinstance(request, Call) and request.method not in _READS_BEFORE_WRITE:
                    sent = True
                try:
                    result = yield request
                except GeneratorExit:
                    op.close()
                    raise
                except BaseException as exc:
                    request = op.throw(exc)
                else:
                    request = op.send(result)
        except StopIteration as stop:
            ended = True
            return stop.value
        finally:
            if sent:
                self.shared.pop("source_sizes", None)
                self.shared["size_epoch"].wrote(unwaited=unwaited or not ended)

    def _audit_unlisted(self, method: str, op: Op) -> Op:
        """``op``, with the refusal of a collection unlisted under ``unlisted = "refuse"`` (raised
        as ConfigError wherever the operation looks a policy up) audited before it propagates."""
        try:
            return (yield from op)
        except ConfigError as exc:
            name = getattr(exc, "unlisted", None)
            if name is not None:
                self.record(self.decision(method, name, None, Verdict.REFUSED_CROSS_BOUNDARY, str(exc),
                                          details={"unlisted": "refuse"}))
            raise

    def op_collection_access(self, method: str, args: dict[str, Any], need: str) -> Op:
        """Boundary check for calls that touch one collection without returning its vectors."""
        name = args.get("collection_name")
        pol = self.gate(method, args, need) if name is not None else None
        if pol is not None and method in ADDS_SPARSE_SLOTS:
            args = self.refuse_sparse_slots(method, args["collection_name"], pol, args)
        if (args.get("metadata") is not None and method in _TAKES_METADATA and not self.transparent
                and name is not None):
            # get_collection hands the metadata to every reader: screened as a payload's fields are.
            screen_pol = pol if pol is not None else self.policy(name)
            args = {**args, "metadata": self.screen_collection_metadata(  # type: ignore[attr-defined]
                method, name, screen_pol, args["metadata"])}
        counted = False
        if pol is not None:
            # A payload index's field_name is sent to the store like a filter's keys: screened as they are.
            details = (self.screen_write_filters(method, name, pol, args)  # type: ignore[attr-defined]
                       if method in ("create_payload_index", "delete_payload_index") else {})
            directive = f"{need} access granted"
            if method in ADMIN_COUNTED and not pol.may_read(self.boundary()):
                # An administrator who may not read (a writer of a collection without an owner).
                counted = True
                details = {**details, "hidden": ADMIN_COUNTED[method]}
                directive += ("; the point counts and sizes in the answer are withheld, as get_collection "
                              "withholds them from a principal who may not read the collection")
            self.record(self.decision(method, name, pol, Verdict.ALLOW, directive, details=details))
        if method in ("create_collection", "recreate_collection", "delete_collection", "update_collection",
                      "create_vector_name", "delete_vector_name"):
            self.forget_shape(name)
        if pol is None:
            return (yield Call(method, args))
        answer = yield from self.forward(method, name, pol, Call(method, args))
        return admin_answer_for(method, answer) if counted else answer

    def refuse_sparse_slots(self, method: str, name: str, pol: CollectionPolicy, args: dict[str, Any]) -> dict[str, Any]:
        """``args`` as they are to be sent, unless they would add a sparse vector slot to sensitive
        collection ``name`` (:mod:`qdrant_guard.sparseslots`): refused (audited UNSUPPORTED_WRITE,
        reason ``sparse_vector``, as a sparse vector written there is) before anything is sent.

        Raises:
            InvalidVectorError: a sparse slot is asked for (the error a write to it would raise).
            GuardArgumentTypeError: the sparse or vector name config does not validate.
        """
        try:
            slots, args = asked_sparse_slots(method, args)
        except GuardArgumentTypeError as exc:
            self.record(self.decision(method, name, pol, Verdict.UNSUPPORTED_WRITE, str(exc),
                                      details={"error": type(exc).__name__, "reason": "invalid_input"}))
            raise
        if not slots:
            return args
        message = sparse_slots_message(method, name, pol.sensitivity.value, slots)
        self.record(self.decision(method, name, pol, Verdict.UNSUPPORTED_WRITE, message,
                                  details={"error": "InvalidVectorError", "reason": "sparse_vector",
                                           "sparse_vectors": slots[:MAX_IDS_IN_RECORD]}))
        refusal = InvalidVectorError(message)
        refusal.reason = "sparse_vector"  # type: ignore[attr-defined]
        raise mark_audited(refusal)

    # -- names (names_visible) ---------------------------------------------------------------
    def hides_names(self) -> bool:
        """Whether this guard answers only the names its principal may see (``names_visible``)."""
        return not self.transparent and self.config.names_visible == "accessible"

    def name_visible(self, name: str) -> bool:
        """Whether the principal is told that collection or alias ``name`` exists: always under
        ``names_visible = "all"``; under ``"accessible"`` when the principal may read, write or
        own it under the policy (administrators own or write it). The answer depends on the
        policy and the credential only, never on the store: a hidden name that exists and one
        that does not are answered alike."""
        if not self.hides_names():
            return True
        try:
            pol = self.policy(name)
        except ConfigError:  # unlisted = "refuse": no principal reads, writes or owns it
            return False
        boundary = self.boundary()
        return pol.may_read(boundary) or pol.may_write(boundary)

    def _hidden_name(self, method: str, name: str, answer: str) -> None:
        """Audit a name answered as missing because the principal may not see it."""
        try:
            pol: CollectionPolicy | None = self.policy(name)
        except ConfigError:
            pol = None
        self.record(self.decision(
            method, name, pol, Verdict.REFUSED_CROSS_BOUNDARY,
            f"names_visible = \"accessible\": the principal may not read, write or own collection {name!r}, so "
            f"it is answered {answer}, as a collection that does not exist is (Qdrant was not asked)",
            details={"names_visible": "accessible", "answered": answer}))

    def _names_listed(self, method: str, hidden: list[str], what: str) -> None:
        """Audit a list answered without the names the principal may not see."""
        self.record(self.decision(
            method, None, None, Verdict.ALLOW,
            f"{what} allowed" + (f": {len(hidden)} the principal may not read, write or own left out "
                                 "(names_visible = \"accessible\")" if hidden else ""),
            details={"names_visible": "accessible", "hidden": hidden[:MAX_IDS_IN_RECORD],
                     "hidden_count": len(hidden)} if hidden else {"names_visible": "accessible"}))

    def op_get_collections(self, method: str, args: dict[str, Any]) -> Op:
        """Every collection's name, or under ``names_visible = "accessible"`` those the principal
        may see (:meth:`name_visible`)."""
        if not self.hides_names():
            return (yield Call(method, args))
        resp = yield from self.forward(method, None, None, Call(method, args))
        kept = [c for c in resp.collections if self.name_visible(c.name)]
        self._names_listed(method, [c.name for c in resp.collections if c not in kept], "collection list")
        return resp.model_copy(update={"collections": kept})

    def op_get_aliases(self, method: str, args: dict[str, Any]) -> Op:
        """Every alias, or under ``names_visible = "accessible"`` those whose own name and
        collection the principal may both see (the entry names both)."""
        if not self.hides_names():
            return (yield Call(method, args))
        resp = yield from self.forward(method, None, None, Call(method, args))
        kept = [a for a in resp.aliases if self.name_visible(a.alias_name) and self.name_visible(a.collection_name)]
        self._names_listed(method, [a.alias_name for a in resp.aliases if a not in kept], "alias list")
        return resp.model_copy(update={"aliases": kept})

    def op_get_collection_aliases(self, method: str, args: dict[str, Any]) -> Op:
        """A collection's aliases; under ``names_visible = "accessible"``, none for a collection the
        principal may not see (what a missing collection answers), and those it may see of a
        visible one."""
        if not self.hides_names():
            return (yield Call(method, args))
        name = args["collection_name"]
        if not self.name_visible(name):
            from qdrant_client.http import models

            self._hidden_name(method, name, "with no aliases")
            return models.CollectionsAliasesResponse(aliases=[])
        resp = yield from self.forward(method, name, None, Call(method, args))
        kept = [a for a in resp.aliases if self.name_visible(a.alias_name)]
        self._names_listed(method, [a.alias_name for a in resp.aliases if a not in kept], "alias list")
        return resp.model_copy(update={"aliases": kept})

    def op_collection_exists(self, method: str, args: dict[str, Any]) -> Op:
        """Whether the name exists; under ``names_visible = "accessible"``, False for a name the
        principal may not see, whether it exists or not."""
        name = args["collection_name"]
        if self.name_visible(name):
            return (yield Call(method, args))
        self._hidden_name(method, name, "False")
        return False

    def op_get_collection(self, method: str, args: dict[str, Any]) -> Op:
        """The collection's configuration for any principal who may see its name (surface.DESCRIBE;
        under ``names_visible = "accessible"`` a hidden name raises what a missing one raises); what is counted
        from its points, its payload index schema and its ``metadata`` (which the owner writes)
        only for principals who may read it (see :func:`describe_collection`). Outside the owner
        boundary of a budgeted collection, the index schema without its per-field point counts,
        unless the budget only monitors."""
        if self.transparent:
            return (yield Call(method, args))
        name = args["collection_name"]
        if not self.name_visible(name):
            self._hidden_name(method, name, "as not found")
            raise missing_collection_error(name, remote=self.shared.get("remote", False))
        boundary = self.boundary()
        pol: CollectionPolicy | None
        try:
            pol = self.policy(name)
        except ConfigError:  # unlisted = "refuse": the call answers, but no one reads the collection
            pol, reader = None, False
        else:
            if pol.is_public:
                return (yield Call(method, args))
            reader = pol.may_read(boundary)
        budgeted = (reader and pol is not None and pol.diversity.enabled
                    and pol.diversity.max_source_coverage is not None and boundary != pol.owner)
        monitor = budgeted and pol is not None and pol.diversity.mode == "monitor"
        if not reader:
            why = ("a principal who may not read the collection gets its configuration only: what is counted "
                   "from its points, its payload index schema, its metadata and the text of an optimizer error "
                   "are withheld, as count() is refused")
        elif budgeted:
            why = ("read access granted; the payload index schema's per-field point counts are "
                   f"{'shown (the budget only monitors)' if monitor else 'withheld'}: outside the owner "
                   "boundary a count filter may only name the source field (diversity.max_source_coverage)")
        else:
            why = "read access granted"
        hidden = describe_hidden(reader=reader, budgeted=budgeted)
        # Decided and audited before the call: what is hidden depends on the policy, not on the answer.
        self.record(self.decision(method, name, pol, Verdict.ALLOW, why, monitor=monitor,
                                  details={"would_hide" if monitor else "hidden": hidden} if hidden else {}))
        info = yield from self.forward(method, name, pol, Call(method, args))
        if info is None:
            return info
        return describe_collection(info, reader=reader, budgeted=budgeted and not monitor)

    def op_operator_only(self, method: str, args: dict[str, Any]) -> Op:
        """Refuse, under a policy, a call only an operator may make (see surface.OPERATOR_ONLY)."""
        if self.transparent:
            return (yield Call(method, args))
        name = args.get("collection_name")
        pol = self.policy(name) if isinstance(name, str) else None
        why = ("the guard cannot tell what a snapshot holds, so a copy of a sensitive collection could be "
               "restored under a name with a weaker policy. Restore snapshots"
               if method in SNAPSHOT_RECOVERY else
               "it acts on the whole cluster (replicas or the full snapshots of every collection, whichever "
               "boundary owns them). Do cluster maintenance")
        raise self.refuse(self.decision(
            method, name, pol, Verdict.REFUSED_CROSS_BOUNDARY,
            f"{method} is refused under a guard policy: {why} as the operator, with a client constructed "
            "without guard=",
        ))
