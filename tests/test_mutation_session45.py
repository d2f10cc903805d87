"""Mutation pass 25: tests that kill the mutants of sentpoints.py, sentargs.py, sentmodels.py,
inference.py, audit_mac.py, point_uuid.py and the format-v2 (writer id ``w``, ``mac``) lines of
audit.py / audit_verify.py that the earlier tests let survive (docs/security-testing.md,
"Mutation pass 25"). Each names the mutant it kills.

Real local-mode Qdrant, real keys and policies (guardkit), real audit files; no mocks.
"""
from __future__ import annotations

import uuid

import numpy as np
import pytest
from guardkit import DIM, create, make_kit, models, snapshot, unit

from qdrant_guard import GuardRefusal, QdrantClient, QdrantGuardError

REAL = uuid.UUID(int=0x1234)
FAKE = uuid.UUID(int=0x5678)


@pytest.fixture()
def kit(tmp_path):
    return make_kit(tmp_path)


_OWNED = {"class": "PROPRIETARY", "owner": "hr", "intent": {"enabled": False},
          "diversity": {"max_source_fraction": 1.0, "min_unique_sources": 1}}


def _owned(kit, n=4):
    """``docs`` (PROPRIETARY, owner hr) holding points 1..n, read by hr's alice."""
    c = QdrantClient(":memory:", guard=kit.config({"docs": _OWNED}), principal=kit.principal("alice", "hr"))
    create(c, "docs")
    rng = np.random.default_rng(3)
    c.upsert("docs", [models.PointStruct(id=i, vector=unit(rng), payload={"who": f"p{i}"}) for i in range(1, n + 1)])
    return c


class _Int(int):
    def __int__(self):
        return 1

    def __index__(self):
        return 1


# --- sentpoints.py ------------------------------------------------------------------------------

def _nested(levels):
    x = "leaf"
    for _ in range(levels):
        x = [x]
    return {"a": x}


def test_plain_payload_depth_is_exactly_127_nested_arrays():
    # _PLAIN_DEPTH = 128 +- 1: the deepest array of a plain payload sits at depth 127 (the
    # payload's own object is depth 0); one more level is rebuilt.
    from qdrant_guard.sentpoints import plain, sent_point

    ok = models.PointStruct(id=1, vector=[0.5], payload=_nested(127))
    deep = models.PointStruct(id=1, vector=[0.5], payload=_nested(128))
    assert plain(ok) and sent_point(ok, 0) is ok
    assert not plain(deep)
    copy = sent_point(deep, 0)
    assert copy is not deep and copy.payload == deep.payload


# --- sentargs.py --------------------------------------------------------------------------------

def test_plain_ids_beside_a_subclass_id_are_kept(kit):
    # plain_scalar's `return value` for an exact id -> None: in a list mixing a plain id with an
    # int subclass, the plain one was sent as None.
    from qdrant_guard.sentargs import plain_ids

    assert plain_ids([1, _Int(2), str(REAL), REAL], "ids") == [1, 2, str(REAL), REAL]
    c = _owned(kit)
    got = c.retrieve("docs", ids=[1, _Int(2)], with_payload=True)
    assert sorted(p.payload["who"] for p in got) == ["p1", "p2"]


class _Lying(uuid.UUID):
    """A UUID whose text (what local mode and an f-string read) is another point's id."""

    def __str__(self):
        return str(FAKE)

    def __format__(self, spec):
        return str(FAKE)


class _LyingFloat(float):
    def __int__(self):
        return 1


def _two_uuids(kit):
    c = QdrantClient(":memory:", guard=kit.config({"docs": _OWNED}), principal=kit.principal("alice", "hr"))
    create(c, "docs")
    rng = np.random.default_rng(5)
    c.upsert("docs", [models.PointStruct(id=str(REAL), vector=unit(rng), payload={"who": "real"}),
                      models.PointStruct(id=str(FAKE), vector=unit(rng), payload={"who": "fake"})])
    return c


def test_ids_given_as_a_range_are_read(kit):
    # plain_ids' `return plain_scalar(value, where)` (ids that are no list or tuple) and
    # plain_scalar's last `return value` -> None: the ids became None.
    c = _owned(kit)
    got = c.retrieve("docs", ids=range(1, 3), with_payload=True)
    assert sorted(p.payload["who"] for p in got) == ["p1", "p2"]


def test_float_subclass_scalars_are_sent_as_floats():
    # plain_scalar's float branch: negated, a float subclass stayed itself (its __int__ read by
    # whoever int()s it) and anything else went through float.__float__ (TypeError); `return
    # float.__float__(value)` -> None dropped the value.
    from qdrant_guard.sentargs import plain_args, plain_scalar

    got = plain_scalar(_LyingFloat(5.0), "limit")
    assert type(got) is float and got == 5.0
    other = object()
    assert plain_scalar(other, "offset") is other
    args = {"collection_name": "docs", "limit": _LyingFloat(5.0), "offset": _LyingFloat(2.0)}
    out = plain_args("query_points", args)
    assert [(type(out[k]), out[k]) for k in ("limit", "offset")] == [(float, 5.0), (float, 2.0)]


def test_a_list_selector_deletes_the_point_the_server_is_sent(kit):
    # _selector's `isinstance(value, (list, tuple))` negated: an exact list of ids was passed
    # as it is, and local mode deleted the point the UUID subclass's str() names (FAKE).
    c = _two_uuids(kit)
    c.delete("docs", points_selector=[_Lying(int=REAL.int)])
    assert [p.payload["who"] for p in c.scroll("docs", with_payload=True)[0]] == ["fake"]


def test_a_point_ids_list_is_passed_as_it_is_or_as_its_plain_ids():
    # _selector's `ids is value.points` flipped: a PointIdsList of plain ids was copied, and one
    # with a subclass id was sent as it is.
    from qdrant_guard.sentargs import plain_args

    args = {"collection_name": "docs", "points_selector": models.PointIdsList(points=[1, str(REAL)])}
    assert plain_args("delete", args) is args
    odd = models.PointIdsList.model_construct(points=[_Int(2), _Lying(int=REAL.int)])
    sent = plain_args("delete", {"collection_name": "docs", "points_selector": odd})["points_selector"]
    assert [(type(x), x) for x in sent.points] == [(int, 2), (uuid.UUID, REAL)]


def test_a_filter_selector_still_deletes_what_it_matches(kit):
    # _selector's last `return value` -> None: a FilterSelector became None.
    c = _owned(kit)
    c.delete("docs", points_selector=models.FilterSelector(filter=models.Filter(
        must=[models.FieldCondition(key="who", match=models.MatchValue(value="p2"))])))
    assert sorted(p.payload["who"] for p in c.scroll("docs", with_payload=True)[0]) == ["p1", "p3", "p4"]


def test_an_id_of_another_type_is_refused_by_its_own_type(kit):
    # sent_id's last `return pid` -> None: a float id in a snapshotted point became None, and the
    # point-id check named NoneType, not the float the caller gave.
    c = _owned(kit)
    point = models.PointStruct.model_construct(id=1.5, vector=unit(np.random.default_rng(6)), payload={"who": "x"})
    with pytest.raises(QdrantGuardError, match=r"point_id must be int, str or uuid\.UUID, not float"):
        c.upsert("docs", [point])
    assert sorted(p.payload["who"] for p in c.scroll("docs", with_payload=True)[0]) == ["p1", "p2", "p3", "p4"]


# --- audit_mac.py -------------------------------------------------------------------------------

def test_mac_key_and_entry_mac_known_answers():
    # The MAC key is 32 bytes of HKDF-SHA256 (length 32 +- 1 survived: writer and verifier derive
    # alike, but a log written by one release must verify under the next). Known answers for the
    # seed 00..1f and the digest 00..1f; EntryMac (the writer's) equals entry_mac (the verifier's)
    # and the RFC 2104 HMAC.
    import hashlib
    import hmac

    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from qdrant_guard.audit_mac import MAC_PREFIX, EntryMac, entry_mac, mac_key

    sk = Ed25519PrivateKey.from_private_bytes(bytes(range(32)))
    key = mac_key(sk)
    assert len(key) == 32
    assert key.hex() == "7fc7f756c1b5ca36c87733ee74e754ce71e0e698c9ab5da00e11642b80b79838"
    digest = bytes(range(32))
    want = "a083f341f773c28bbf2e8073398286194478cd031641d87825849d51a198bee0"
    assert entry_mac(key, digest) == want == hmac.new(key, MAC_PREFIX + digest, hashlib.sha256).hexdigest()
    assert EntryMac("w", key).mac(digest) == want


def test_mac_key_refuses_what_is_no_ed25519_private_key():
    # mac_key's `raise GuardArgumentTypeError` deleted: a public key or bytes reached
    # private_bytes (AttributeError) instead of the guard's error naming the type.
    from qdrant_guard import keys
    from qdrant_guard.audit_mac import mac_key
    from qdrant_guard.errors import GuardArgumentTypeError

    sk, pk = keys.generate_keypair()
    for bad in (pk, b"\0" * 32, None):
        with pytest.raises(GuardArgumentTypeError, match=r"mac_key\(\) private_key must be an Ed25519PrivateKey, not "
                                                         + type(bad).__name__):
            mac_key(bad)


def test_a_vector_dict_with_a_non_str_name_is_snapshotted():
    # _plain_vector's `type(k) is not str` -> `return True` (or the test flipped): a named-vector
    # dict keyed by an int was taken as plain and sent with the int key; the snapshot sends the
    # name pydantic dumps, its str.
    from qdrant_guard.sentpoints import plain, sent_point, sent_vectors

    p = models.PointStruct.model_construct(id=1, vector={1: [0.5], "b": [0.25]})
    u = models.PointVectors.model_construct(id=1, vector={1: [0.5]})
    assert not plain(p) and not plain(u)
    assert sent_point(p, 0).vector == {"1": [0.5], "b": [0.25]}
    assert sent_vectors(u, 0).vector == {"1": [0.5]}


# --- sentmodels.py ------------------------------------------------------------------------------

def test_a_has_id_filter_reads_a_uuid_subclass_as_its_value(kit):
    # _real_uuid's `return real_uuid(value)` -> None: the rebuilt filter held None for the id.
    c = _two_uuids(kit)
    flt = models.Filter(must=[models.HasIdCondition(has_id=[_Lying(int=REAL.int)])])
    assert c.count("docs", count_filter=flt).count == 1
    page, _ = c.scroll("docs", scroll_filter=flt, with_payload=True)
    assert [p.payload["who"] for p in page] == ["real"]


@pytest.mark.parametrize("selector", ["ids", "filter"])
def test_a_uuid_subclass_without_a_value_in_a_selector_is_refused(kit, selector):
    # _real_uuid's `raise UncheckedForm` deleted: the empty id became None in the rebuilt model.
    c = _two_uuids(kit)
    empty = object.__new__(_Lying)
    sel = (models.PointIdsList(points=[empty]) if selector == "ids" else
           models.FilterSelector(filter=models.Filter(must=[models.HasIdCondition(has_id=[empty])])))
    with pytest.raises(GuardRefusal, match="a _Lying, a UUID subclass without a value: pass a plain uuid.UUID"):
        c.delete("docs", points_selector=sel)
    assert sorted(p.payload["who"] for p in c.scroll("docs", with_payload=True)[0]) == ["fake", "real"]


# --- inference.py -------------------------------------------------------------------------------

SECRET = "sk_live_4eC39HqLyjWDarjtT1zdp7dc"


def test_what_is_pixels_and_what_is_a_locator():
    # is_pixels: a non-str image is data (True -> None/False survived), a data: URI (any case) is
    # data even when it is no bare base64 (`or` -> `and`, `[:5]` -> `[:6]` survived), bare
    # base64 from 64 characters on.
    from qdrant_guard.inference import is_pixels

    assert is_pixels(b"\x89PNG\r\n") is True and is_pixels(None) is True
    assert is_pixels("data:image/png;base64,iVBORw0KGgo=") is True
    assert is_pixels("DATA:image/png;base64," + SECRET) is True
    assert is_pixels("A" * 64) is True and is_pixels("A" * 63) is False
    assert is_pixels("https://example.org/a.png") is False and is_pixels("/srv/img/a.png") is False


def _guard_lets_through(call):
    """``call`` must not be refused by the guard; it then fails in qdrant-client (no inference
    backend installed here) or succeeds."""
    try:
        call()
    except QdrantGuardError:
        raise
    except ImportError as exc:
        assert "fastembed" in str(exc)


def test_a_public_image_given_as_a_data_uri_is_pixels_not_a_locator(kit):
    # The data: URI holds text a detector reads as a key; it is image data, which inference decodes,
    # not a location it fetches: let through. Not pixels (the `or`/`[:5]`/`return None` mutants),
    # it was refused as a locator holding a STRIPE_KEY.
    c = QdrantClient(":memory:", guard=kit.config({"pub": {"class": "PUBLIC"}}), principal=kit.principal("alice", "hr"))
    create(c, "pub")
    img = models.Image(image="data:image/png;base64," + SECRET, model="m")
    _guard_lets_through(lambda: c.upsert("pub", [models.PointStruct(id=1, vector=img)]))
    with pytest.raises(GuardRefusal, match="whose path or URL"):
        c.upsert("pub", [models.PointStruct(id=1, vector=models.Image(image="https://x.org/" + SECRET, model="m"))])


# --- audit.py / audit_verify.py: format v2 ------------------------------------------------------

def _v2_log(tmp_path, sk, n=3):
    from qdrant_guard.audit import AuditLog
    from qdrant_guard.receipts import ReceiptSigner

    p = tmp_path / "audit.jsonl"
    log = AuditLog(p, signer=ReceiptSigner(sk))
    for i in range(n):
        log.append({"event": "e", "i": i})
    log.close()
    return p


def test_repair_refuses_a_signer_whose_writer_key_is_not_given(tmp_path):
    # _check_repair_writer: `writer_keys is not None` flipped (a TypeError when none were given)
    # or its raise deleted: the repair entry would carry a MAC the given writer keys do not
    # authenticate, so verifying with them would report the repair itself.
    from qdrant_guard import keys
    from qdrant_guard.audit import repair_audit_file, verify_audit_file
    from qdrant_guard.audit_mac import writer_keys
    from qdrant_guard.errors import GuardArgumentValueError
    from qdrant_guard.receipts import ReceiptSigner

    sk, _ = keys.generate_keypair()
    other, _ = keys.generate_keypair()
    p = _v2_log(tmp_path, sk)
    with open(p, "ab") as fh:
        fh.write(b'{"torn')
    before = p.read_bytes()
    with pytest.raises(GuardArgumentValueError, match="not among the writer keys given"):
        repair_audit_file(p, signer=ReceiptSigner(other), writer_keys=writer_keys([sk]))
    assert p.read_bytes() == before
    # Without writer keys the same signer may repair (nothing to be reported against), once it is
    # told to trust the entries' writer: its repair entry is a checkpoint that vouches for them.
    owner, repairer = ReceiptSigner(sk), ReceiptSigner(other)
    rep = repair_audit_file(p, signer=repairer, trusted_keys={owner.key_id: owner.public_key,
                                                              repairer.key_id: repairer.public_key})
    assert rep.ok
    assert verify_audit_file(p, writer_keys=writer_keys([sk, other])).ok


@pytest.mark.parametrize("bad", [["kid"], {"kid": "0" * 64}, {1: b"k" * 32}, "kid"])
def test_writer_keys_of_the_wrong_shape_are_refused_by_repair_and_verify(tmp_path, bad):
    # The writer_keys type checks of repair_audit_file and verify_audit_file: `or` -> `and` (a
    # list reached .items(): AttributeError) and the pair's `and` -> `or` (a str key took a str
    # MAC key, which hmac refuses later with a TypeError, or never, when no entry names it).
    from qdrant_guard import keys
    from qdrant_guard.audit import repair_audit_file, verify_audit_file
    from qdrant_guard.errors import GuardArgumentTypeError

    sk, _ = keys.generate_keypair()
    p = _v2_log(tmp_path, sk)
    before = p.read_bytes()
    with pytest.raises(GuardArgumentTypeError, match=r"repair_audit_file\(\) writer_keys must be a mapping"):
        repair_audit_file(p, writer_keys=bad)
    with pytest.raises(GuardArgumentTypeError, match=r"verify_audit_file\(\) writer_keys must be a mapping"):
        verify_audit_file(p, writer_keys=bad)
    assert p.read_bytes() == before


def _inference_client(kit):
    c = QdrantClient(":memory:", guard=kit.config({
        "pub": {"class": "PUBLIC"}, "pii": {"class": "PII", "owner": "hr", "intent": {"enabled": False}}}),
        principal=kit.principal("alice", "hr"))
    create(c, "pub")
    create(c, "pii")
    return c


def test_an_options_refusal_says_inference_and_names_its_point(kit):
    # InferenceScreen: `fields.inference = True` -> False gave an option the payload's wording (a
    # payload_fields hint that does not govern options; "stored" for what is sent to inference);
    # `point_id is None` flipped recorded the write's refusal with no point and the query's with
    # [None].
    from guardkit import audit_records

    c = _inference_client(kit)
    doc = models.Document(text="hi", model="m", options={"prompt": SECRET})
    with pytest.raises(GuardRefusal) as ei:
        c.upsert("pub", [models.PointStruct(id=7, vector=doc)])
    assert "options field 'prompt' sent to PUBLIC collection" in str(ei.value)
    assert "payload_fields" not in str(ei.value)
    rec = audit_records(kit)[-1]
    assert rec["verdict"] == "SENSITIVITY_MISMATCH" and rec["point_ids"] == [7]
    with pytest.raises(GuardRefusal, match="credentials are never sent to inference"):
        c.query_points("pii", query=doc)
    rec = audit_records(kit)[-1]
    assert rec["verdict"] == "CREDENTIAL_IN_TEXT" and rec["point_ids"] == []


def test_an_inference_object_nests_64_levels_not_65(kit):
    # InferenceScreen.object's `depth: int = 0` +- 1: 64 nested arrays (the outermost at depth
    # 0) are screened; a 65th is refused, as MAX_DEPTH says.
    from qdrant_guard.errors import UnsupportedWriteError

    def nested(n):
        x = "plain words"
        for _ in range(n):
            x = [x]
        return x

    c = _inference_client(kit)
    ok = models.InferenceObject(object=nested(64), model="m")
    _guard_lets_through(lambda: c.upsert("pub", [models.PointStruct(id=1, vector=ok)]))
    deep = models.InferenceObject(object=nested(65), model="m")
    with pytest.raises(UnsupportedWriteError, match="nests objects or arrays more than 64 deep"):
        c.upsert("pub", [models.PointStruct(id=1, vector=deep)])


class _CleanFirst(dict):
    """A payload object whose first ``items()`` hides its entries; its storage holds them."""

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.calls = 0

    def items(self):
        self.calls += 1
        if self.calls == 1:
            return [(k, "fine") for k in dict.keys(self)]
        return dict.items(self)


def test_a_dict_subclass_inside_a_list_is_snapshotted(kit):
    # _plain_nested's `t not in _LEAVES` -> `return True`: a dict subclass inside a list made the
    # payload plain, so it was screened through its own items() and stored as it holds.
    from qdrant_guard.sentpoints import plain

    SSN = "my ssn is 123-45-6789"
    assert not plain(models.PointStruct(id=1, vector=[0.5], payload={"notes": [_CleanFirst(note=SSN)]}))
    c = _inference_client(kit)
    with pytest.raises(GuardRefusal):
        c.upsert("pub", [models.PointStruct(id=1, vector=unit(np.random.default_rng(12)),
                                            payload={"notes": [_CleanFirst(note=SSN)]})])
    assert snapshot(c, "pub") == []


def test_an_inference_objects_own_text_is_redacted_and_refused_as_inference_text(kit):
    # InferenceScreen.object on a bare string: `return self.ops.screen_text(...)` -> None sent no
    # object at all where the redacted text belongs; `inference=True` -> False gave its refusal
    # the payload wording (a payload_fields hint, which does not govern inference inputs).
    c = QdrantClient(":memory:", guard=kit.config({
        "pub": {"class": "PUBLIC"},
        "red": {"class": "PUBLIC", "allow_redaction_on_public": True}}), principal=kit.principal("alice", "hr"))
    create(c, "pub")
    create(c, "red")
    g = c.guard
    obj = models.InferenceObject(object="write to bob@example.com", model="m")
    got = g.public_vector("upsert", "red", g.policy("red"), obj, point_id=1)
    assert got is not obj and got.object == "write to [EMAIL]" and obj.object == "write to bob@example.com"
    listed = g.public_vector("upsert", "red", g.policy("red"),
                             models.InferenceObject(object=["a", "mail bob@example.com"], model="m"), point_id=1)
    assert listed.object == ["a", "mail [EMAIL]"]
    # Every item redacted (`a is b` flipped to `is not` returned the caller's list then).
    alone = g.public_vector("upsert", "red", g.policy("red"),
                            models.InferenceObject(object=["mail bob@example.com"], model="m"), point_id=1)
    assert alone.object == ["mail [EMAIL]"]
    with pytest.raises(GuardRefusal) as ei:
        c.upsert("pub", [models.PointStruct(id=1, vector=obj)])
    assert "sent to PUBLIC collection 'pub' contains ['EMAIL']" in str(ei.value)
    assert "payload_fields" not in str(ei.value)


@pytest.mark.parametrize("point, first", [
    (models.PointStruct(id=1, vector=models.Document(text="x", model="m", options={"k": object()})),
     "Unable to serialize unknown type: object"),
    (models.PointStruct.model_construct(id=1, vector="not a vector"), "Input should be a valid list"),
    (models.PointStruct.model_construct(id=1, vector=("x",)), "Input should be a valid number"),
])
def test_a_vector_that_cannot_be_sent_is_refused_not_sent_as_null(kit, point, first):
    # _arrays' `raise PydanticSerializationError` deleted: an option pydantic cannot serialise
    # was dumped as None and the Document sent with {"k": null}; _sent_vector's `raise
    # _refused(...)` deleted: a vector that does not validate became None. The refusal names
    # pydantic's first error (`errors()[0]` +- 1 named the second or the last).
    import re

    from qdrant_guard.sentpoints import UnsnapshotableInput, sent_point

    with pytest.raises(UnsnapshotableInput, match=r"points\[0\] \(point id 1\): its vector cannot be read as "
                       r"qdrant-client would send it \(" + re.escape(first) + r"\)"):
        sent_point(point, 0)
    c = QdrantClient(":memory:", guard=kit.config({"pub": {"class": "PUBLIC"}}), principal=kit.principal("alice", "hr"))
    create(c, "pub")
    with pytest.raises(UnsnapshotableInput, match="its vector cannot be read as qdrant-client would send it"):
        c.upsert("pub", [point])


def test_a_numpy_vector_point_without_payload_is_stored(kit):
    # _sent_payload's `payload is None or ...` -> `and`: a snapshotted point with no payload was
    # refused as "a NoneType, not a dict".
    c = QdrantClient(":memory:", guard=kit.config({"pub": {"class": "PUBLIC"}}), principal=kit.principal("alice", "hr"))
    create(c, "pub")
    vec = np.asarray(unit(np.random.default_rng(13)))
    c.upsert("pub", [models.PointStruct.model_construct(id=3, vector=vec, payload=None)])
    [(pid, payload, _)] = snapshot(c, "pub")
    assert pid == 3 and not payload


def test_payload_keys_are_snapshotted_as_json_keys(kit):
    # _sent_payload / _merges_keys: a mapping that is no dict is read through dict() (negated:
    # pydantic refused the mappingproxy); a lone non-str key is sent as its JSON key, not refused
    # (`and` -> `or`, `<` -> `<=`); two non-str keys that serialise alike are refused (`type(k) is
    # not str` flipped to `is str` looked only at dicts holding a str key).
    import types

    c = QdrantClient(":memory:", guard=kit.config({"pub": {"class": "PUBLIC"}}), principal=kit.principal("alice", "hr"))
    create(c, "pub")
    rng = np.random.default_rng(14)
    c.upsert("pub", [models.PointStruct.model_construct(id=1, vector=unit(rng),
                                                        payload=types.MappingProxyType({"note": "hi"}))])
    c.upsert("pub", [models.PointStruct(id=2, vector=unit(rng), payload={"m": {1: "a"}})])
    assert sorted((pid, payload) for pid, payload, _ in snapshot(c, "pub")) == [(1, {"note": "hi"}), (2, {"m": {"1": "a"}})]
    with pytest.raises(QdrantGuardError, match=r"point id 4\): two keys of one payload object are sent as the same key"):
        c.upsert("pub", [models.PointStruct(id=4, vector=unit(rng), payload={"m": {b"1": "a", 1: "b"}})])
    assert sorted(pid for pid, _, _ in snapshot(c, "pub")) == [1, 2]


def test_a_query_by_an_int_subclass_id_is_its_value(kit):
    # _real_uuids' last test (`and` -> `or`, negated): the dump of an int-subclass query id (an
    # int) went to _real_uuid and was refused as a UUID without a value.
    c = _owned(kit)
    got = c.query_points("docs", query=_Int(2), limit=5).points
    assert sorted(p.id for p in got) == [1, 3, 4]


def test_an_inference_objects_keys_nest_64_levels_and_collide_refused(kit):
    # InferenceScreen.object's dict branch: `depth + 1` +- (64 nested objects pass, 65 do not),
    # and two keys that redact to one key refused (the raise deleted, the later value replaced
    # the earlier one in what is sent).
    from qdrant_guard.errors import UnsupportedWriteError

    def nested(n):
        x = "plain words"
        for _ in range(n):
            x = {"k": x}
        return x

    c = QdrantClient(":memory:", guard=kit.config({
        "pub": {"class": "PUBLIC"}, "red": {"class": "PUBLIC", "allow_redaction_on_public": True}}),
        principal=kit.principal("alice", "hr"))
    create(c, "pub")
    create(c, "red")
    _guard_lets_through(lambda: c.upsert("pub", [models.PointStruct(
        id=1, vector=models.InferenceObject(object=nested(64), model="m"))]))
    with pytest.raises(UnsupportedWriteError, match="nests objects or arrays more than 64 deep"):
        c.upsert("pub", [models.PointStruct(id=1, vector=models.InferenceObject(object=nested(65), model="m"))])
    both = models.InferenceObject(object={"bob@example.com": "a", "[EMAIL]": "b"}, model="m")
    with pytest.raises(UnsupportedWriteError, match=r"two keys of object would both be '\[EMAIL\]' once redacted"):
        c.upsert("red", [models.PointStruct(id=1, vector=both)])


def test_a_v2_entry_with_a_malformed_writer_or_mac_is_an_edited_line(tmp_path):
    # _parse_line's v2 form test: `and` -> `or` took a non-str writer id or a MAC that is no
    # 64-digit hex as well formed.
    import hashlib
    import json

    from qdrant_guard import keys
    from qdrant_guard.audit import verify_audit_file
    from qdrant_guard.canonical import canonical_json

    sk, _ = keys.generate_keypair()
    p = _v2_log(tmp_path, sk)
    good = p.read_bytes()
    lines = good.splitlines(keepends=True)
    for field, value in (("w", 5), ("mac", "zz" * 32), ("mac", 7)):
        e = json.loads(lines[1])
        e[field] = value
        body = {k: v for k, v in e.items() if k not in ("hash", "ckpt", "mac")}
        e["hash"] = hashlib.sha256(canonical_json(body)).hexdigest()
        nxt = json.loads(lines[2])
        nxt["prev"] = e["hash"]
        nxt["hash"] = hashlib.sha256(canonical_json({k: v for k, v in nxt.items() if k not in ("hash", "ckpt", "mac")})).hexdigest()
        p.write_bytes(lines[0] + canonical_json(e) + b"\n" + canonical_json(nxt) + b"\n")
        rep = verify_audit_file(p)
        assert (rep.ok, rep.problem, rep.index) == (False, "edited", 2), (field, value, rep)
        assert "a field has the wrong type or form" in rep.detail
    p.write_bytes(good)
    assert verify_audit_file(p).ok


def test_an_unauthenticated_entry_before_a_torn_tail_is_the_first_problem(tmp_path):
    # _scan_fork: `first_unauth[0] < bad_line` compares line numbers (`first_unauth[-1]`, the
    # reason, raised a TypeError; the report must name the forged entry, then the torn tail).
    from qdrant_guard import keys
    from qdrant_guard.audit import verify_audit_file
    from qdrant_guard.audit_mac import writer_keys

    sk, _ = keys.generate_keypair()
    other, _ = keys.generate_keypair()
    p = _v2_log(tmp_path, sk, n=2)
    from qdrant_guard.audit import AuditLog
    from qdrant_guard.receipts import ReceiptSigner

    mine, theirs = ReceiptSigner(sk), ReceiptSigner(other)
    # A writer whose key the verifier is not given; the writers trust each other's checkpoints
    # (without that, each refuses to open a log the other appended to).
    log = AuditLog(p, signer=theirs, trusted_keys={mine.key_id: mine.public_key})
    log.append({"event": "other"})
    log.close()
    log = AuditLog(p, signer=mine, trusted_keys={theirs.key_id: theirs.public_key})
    log.append({"event": "e", "i": 3})
    log.close()
    with open(p, "ab") as fh:
        fh.write(b'{"torn')
    rep = verify_audit_file(p, writer_keys=writer_keys([sk]))
    assert (rep.ok, rep.problem, rep.index, rep.valid_prefix) == (False, "unauthenticated", 3, 2)
    assert rep.unauthenticated == (3,) and "after it, line 5: torn_tail" in rep.detail


def test_an_inference_objects_numbers_are_screened_as_their_digits(kit):
    # InferenceScreen.object's number branch: a clean number, bool or None is passed as itself
    # (`digits is None` flipped, `return value` -> None and the keyed `return value if ...` ->
    # None replaced them with None); a number under a password-like key is read with its key
    # (`key is not None` flipped read it as bare digits, which hold nothing); a card number
    # alone or under any key is found.
    c = QdrantClient(":memory:", guard=kit.config({"pub": {"class": "PUBLIC"}}), principal=kit.principal("alice", "hr"))
    create(c, "pub")
    g = c.guard

    def screen(obj):
        value = models.InferenceObject(object=obj, model="m")
        return value, g.public_vector("upsert", "pub", g.policy("pub"), value, point_id=1)

    value, got = screen({"n": 5, "f": True, "z": None, "x": 2.5})
    assert got is value and got.object == {"n": 5, "f": True, "z": None, "x": 2.5}
    value, got = screen(83615902)
    assert got is value
    with pytest.raises(GuardRefusal, match=r"field 'object\.password' sent to PUBLIC collection"):
        screen({"password": 83615902})
    for card in (4111111111111111, {"n": 4111111111111111}, [4111111111111111]):
        with pytest.raises(GuardRefusal, match="CREDIT_CARD"):
            screen(card)


def test_a_bare_number_refusal_says_inference_and_options_nest_63_levels_not_64(kit):
    # InferenceScreen.object's bare-number `inference=True` -> False (the payload_fields hint);
    # _depth's stack start (value, 0) +- 1 (the options object is level 0: 63 arrays inside pass,
    # 64 are refused, as for an InferenceObject's own object).
    from qdrant_guard.errors import UnsupportedWriteError

    def nested(n):
        x = "w"
        for _ in range(n):
            x = [x]
        return x

    c = QdrantClient(":memory:", guard=kit.config({"pub": {"class": "PUBLIC"}}), principal=kit.principal("alice", "hr"))
    create(c, "pub")
    g = c.guard
    with pytest.raises(GuardRefusal) as ei:
        g.public_vector("upsert", "pub", g.policy("pub"), models.InferenceObject(object=4111111111111111, model="m"),
                        point_id=1)
    assert "(InferenceObject) object sent to PUBLIC collection 'pub' contains ['CREDIT_CARD']" in str(ei.value)
    assert "payload_fields" not in str(ei.value)
    ok = models.Document(text="t", model="m", options={"p": nested(63)})
    assert g.public_vector("upsert", "pub", g.policy("pub"), ok, point_id=1).options == ok.options
    with pytest.raises(UnsupportedWriteError, match="its options nest objects or arrays more than 64 deep"):
        g.public_vector("upsert", "pub", g.policy("pub"),
                        models.Document(text="t", model="m", options={"p": nested(64)}), point_id=1)


def test_an_image_locator_without_a_credential_passes_where_it_may(kit):
    # InferenceScreen.locator's `not findings or (not creds and not public)` -> `and`: a clean
    # URL on a PUBLIC write, and one holding only PII on a sensitive collection, were refused.
    c = QdrantClient(":memory:", guard=kit.config({
        "pub": {"class": "PUBLIC"},
        "pii": {"class": "PII", "owner": "hr", "intent": {"enabled": False}, "query": {"allow_images": True}}}),
        principal=kit.principal("alice", "hr"))
    create(c, "pub")
    create(c, "pii")
    g = c.guard
    clean = models.Image(image="https://example.org/a.png", model="m")
    assert g.public_vector("upsert", "pub", g.policy("pub"), clean, point_id=1) is clean
    pii_url = models.Image(image="https://example.org/a.png?ssn=123-45-6789", model="m")
    _guard_lets_through(lambda: c.query_points("pii", query=pii_url, limit=1))
    with pytest.raises(GuardRefusal, match="whose path or URL"):
        g.public_vector("upsert", "pub", g.policy("pub"), pii_url, point_id=1)


def test_a_one_row_multivector_query_and_a_uuid_subclass_query(kit):
    # _query: a multivector's `type(value[0]) is list` (value[1] raised IndexError on one row);
    # a UUID-subclass query id as its value (`return _real_uuid(...)` -> None queried nothing).
    c = QdrantClient(":memory:", guard=kit.config({"mv": {"class": "PUBLIC"}}), principal=kit.principal("alice", "hr"))
    c.create_collection("mv", vectors_config=models.VectorParams(
        size=4, distance=models.Distance.COSINE,
        multivector_config=models.MultiVectorConfig(comparator=models.MultiVectorComparator.MAX_SIM)))
    c.upsert("mv", [models.PointStruct(id=1, vector=[[0.1, 0.2, 0.3, 0.4]]),
                    models.PointStruct(id=2, vector=[[0.4, 0.3, 0.2, 0.1], [0.1, 0.1, 0.1, 0.1]])])
    assert [p.id for p in c.query_points("mv", query=[[0.1, 0.2, 0.3, 0.4]], limit=1).points] == [1]
    # plain()'s list fast test read `value[0]` (`value[1]` raised IndexError on a one-row list).
    one_row = models.NearestQuery(nearest=[[0.1, 0.2, 0.3, 0.4]])
    assert [p.id for p in c.query_points("mv", query=one_row, limit=1).points] == [1]
    (kit.tmp / "u").mkdir()
    u = _two_uuids(make_kit(kit.tmp / "u"))  # its own audit log
    assert [p.id for p in u.query_points("docs", query=_Lying(int=REAL.int), limit=5).points] == [str(FAKE)]
    # Inside a query model the id is a dict value of the dump (_real_uuids' dict branch: `type(v)
    # is not uuid.UUID` flipped left the subclass, and local mode queried by its str(), FAKE).
    nearest = models.NearestQuery(nearest=_Lying(int=REAL.int))
    assert [p.id for p in u.query_points("docs", query=nearest, limit=5).points] == [str(FAKE)]


def test_query_forms_rebuilt_by_alias_and_unknown_ones_refused(kit):
    # _query: a query model subclass is dumped by alias (`by_alias=True` -> False dumped
    # MatchExcept's `except_`, which does not validate back, and the query was refused); a dict
    # is left for map_query to refuse (`return value` -> None made it no query at all).
    c = _owned(kit)
    rng = np.random.default_rng(15)

    class FQ(models.FormulaQuery):
        pass

    q = FQ(formula=models.SumExpression(sum=["$score", models.FieldCondition(
        key="who", match=models.MatchExcept(**{"except": ["p1"]}))]))
    got = c.query_points("docs", prefetch=models.Prefetch(query=unit(rng), limit=4), query=q, limit=4).points
    assert len(got) == 4 and min(got, key=lambda p: p.score).id == 1
    with pytest.raises(GuardRefusal, match="query is a dict, a form the guard cannot check"):
        c.query_points("docs", query={"nearest": unit(rng)})


def test_an_allowed_image_query_keeps_its_other_inputs(kit):
    # screen_inference's first `return value` (no inference input) -> None: beside an Image, a
    # recommend list's point id and vector became None; its `return value` for a Document
    # without options -> None dropped that Document. An input nested past 64 levels in a query is
    # refused QUERY_REJECTED (its raise deleted, the query went on).
    c = QdrantClient(":memory:", guard=kit.config({
        "pii": {"class": "PII", "owner": "hr", "intent": {"enabled": False}, "query": {"allow_images": True}}}),
        principal=kit.principal("alice", "hr"))
    create(c, "pii")
    g = c.guard
    vec = [0.25] * DIM
    doc = models.Document(text="a plain sentence", model="m")
    args = {"collection_name": "pii", "query": models.RecommendQuery(recommend=models.RecommendInput(
        positive=[models.Image(image="https://example.org/a.png", model="m"), 7, vec, doc]))}
    out = g._image_inputs("query_points", "pii", g.policy("pii"), args, ["query.recommend.positive[0]"])
    assert out["query"].recommend.positive[1:] == [7, vec, doc]
    deep = {"p": "w"}
    for _ in range(70):
        deep = {"p": deep}
    with pytest.raises(GuardRefusal, match="nest objects or arrays more than 64 deep") as ei:
        c.query_points("pii", query=models.Image(image="https://example.org/a.png", model="m", options=deep), limit=1)
    assert ei.value.verdict == "QUERY_REJECTED"


def test_a_query_that_does_not_validate_names_pydantics_first_error(kit):
    # _query's refusal: `exc.errors()[0]` +- 1 named the second or the last error, and
    # `hasattr(exc, "errors")` negated named only the exception's class.
    class L(list):
        pass

    c = _owned(kit)
    with pytest.raises(GuardRefusal, match=r"query is a L, which does not validate as a query \(Input should be a "
                                           r"valid number\): pass a plain list of floats") as ei:
        c.query_points("docs", query=L(["x"]))
    assert ei.value.verdict == "QUERY_REJECTED"


def test_a_multivector_query_with_a_list_subclass_row_is_rebuilt():
    # _query's multivector shortcut needs every row an exact list (`and` -> `or` passed a list
    # subclass row as it is, for pydantic and numpy to read through its own methods).
    from qdrant_guard.sentmodels import _query

    class Row(list):
        pass

    rows = [[0.5, 0.25], Row([0.25, 0.5])]
    got = _query(rows, "query")
    assert got is not rows and got == [[0.5, 0.25], [0.25, 0.5]] and all(type(r) is list for r in got)
    plain_rows = [[0.5, 0.25], [0.25, 0.5]]
    assert _query(plain_rows, "query") is plain_rows


def test_a_locator_refusal_names_the_point_of_a_write_and_none_of_a_query(kit):
    # InferenceScreen.point_ids (`point_id is None` flipped): a locator refused on a PUBLIC write
    # is audited with its point, one refused in a query with none (not [None]).
    from guardkit import audit_records

    c = QdrantClient(":memory:", guard=kit.config({
        "pub": {"class": "PUBLIC"},
        "pii": {"class": "PII", "owner": "hr", "intent": {"enabled": False}, "query": {"allow_images": True}}}),
        principal=kit.principal("alice", "hr"))
    create(c, "pub")
    create(c, "pii")
    img = models.Image(image=f"https://example.org/a.png?token={SECRET}", model="m")
    with pytest.raises(GuardRefusal, match="whose path or URL"):
        c.upsert("pub", [models.PointStruct(id=9, vector=img)])
    rec = audit_records(kit)[-1]
    assert rec["verdict"] == "SENSITIVITY_MISMATCH" and rec["point_ids"] == [9]
    with pytest.raises(GuardRefusal, match="whose path or URL"):
        c.query_points("pii", query=img, limit=1)
    rec = audit_records(kit)[-1]
    assert rec["verdict"] == "CREDENTIAL_IN_TEXT" and rec["point_ids"] == []

