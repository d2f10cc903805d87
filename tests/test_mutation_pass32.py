"""Mutation pass 32 (docs/security-testing.md): tests that kill the survivors of the write-path
modules no earlier pass had mutated (field_screen.py's walk, rawstored.py, writepoints.py). Real
local-mode Qdrant through the guard's client, real keys and receipts; nothing mocked."""
from __future__ import annotations

import copy

import numpy as np
import pytest
from guardkit import create, make_kit, unit
from qdrant_client import QdrantClient as RawClient
from qdrant_client.http import models

from qdrant_guard import GuardRefusal, QdrantClient
from qdrant_guard.errors import QdrantGuardError
from qdrant_guard.receipts import RECEIPT_KEY, receipts_for_payload

# --------------------------------------------------------------------------- field_screen.py


def _screen_guard(tmp_path, **over):
    """alice@hr's guard on a PII collection ``c`` (payload_fields as ``over`` says) and a PUBLIC ``pub``."""
    kit = make_kit(tmp_path)
    pii = {"class": "PII", "owner": "hr", "noise_on_write": True, "text_field": "text", "intent": {"enabled": False},
           **over}
    cfg = kit.config({"c": pii, "pub": {"class": "PUBLIC", "text_field": "text"}})
    client = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    create(client, "c")
    create(client, "pub")
    return client


def _screen(client, col, payload, **kw):
    guard = client.guard
    return guard.screen_payload_fields("upsert", col, guard.policy(col), payload, point_id=9, **kw)


@pytest.mark.parametrize("pair", [("NAME", "VALUE"), ("ParameterKey", "ParameterValue"),
                                  ("OutputKey", "OutputValue"), ("name", "value")])
def test_a_password_in_an_upper_case_or_cloudformation_name_value_pair_is_refused(tmp_path, pair):
    # The value is read under its sibling name. Killed: each of "VALUE", "ParameterValue" and
    # "OutputValue" negated in the test that looks for sibling names (the value was then read under
    # its own key only, and the password stored).
    client = _screen_guard(tmp_path)
    name, value = pair
    payload = {"env": [{name: "DB_PASSWORD", value: "hunter2hunter2x"}]}
    with pytest.raises(GuardRefusal, match="read under the password name 'DB_PASSWORD'"):
        client.upsert("c", [models.PointStruct(id=1, vector=unit(np.random.default_rng(1)), payload=payload)])
    assert client.count("c").count == 0


def test_a_float_with_a_fraction_is_no_card_number_and_an_integral_one_is(tmp_path):
    # JSON stores 4111111111111111.5 with its fraction, which the detector reads as no card. Killed:
    # `value.is_integer() and ...` as `or` (the float was screened as its integer part, a card).
    client = _screen_guard(tmp_path)
    assert _screen(client, "pub", {"price": 4111111111111111.5}) == {"price": 4111111111111111.5}
    with pytest.raises(GuardRefusal, match="CREDIT_CARD"):
        _screen(client, "pub", {"price": 4111111111111111.0})


def test_a_clean_payload_comes_back_as_the_same_object(tmp_path):
    # screen_payload_fields' contract ("the same object when nothing changed"). Killed: obj()'s
    # `changed = False` as True (a copy was returned for every object) and, for the text field's list,
    # `sent is v` negated (a copy of the list); the receipt key's `k is not given` negated (a copy) or
    # its `or` as `and` (a bytes receipt key returned as given).
    client = _screen_guard(tmp_path)
    payload = {"source": "doc7", "meta": {"lang": "en", "n": [1, 2]}, "text": ["hello", "world"], RECEIPT_KEY: {}}
    assert _screen(client, "c", payload) is payload
    # The receipt container is passed as it is stored: a bytes key as its text.
    assert list(_screen(client, "c", {RECEIPT_KEY.encode(): {}})) == [RECEIPT_KEY]


def test_a_payload_refusal_says_stored_names_the_point_and_offers_the_payload_fields_knob(tmp_path):
    # Killed: _FieldScreen's `inference = False` as True (the refusal then spoke of what is "sent to
    # inference", without the payload_fields fix), `point_ids` swapped (no point named) and the
    # field's path negated (".api_key" at the top level, "api_key" below "meta").
    client = _screen_guard(tmp_path)
    with pytest.raises(GuardRefusal) as err:
        _screen(client, "c", {"api_key": "a8f3k2j9x0q7w1e5r4t6"})
    assert "credentials are never stored" in str(err.value) and "[points: 9]" in str(err.value)
    assert "payload field 'api_key'" in str(err.value)
    with pytest.raises(GuardRefusal, match="payload field 'meta.api_key'"):
        _screen(client, "c", {"meta": {"api_key": "a8f3k2j9x0q7w1e5r4t6"}})
    with pytest.raises(GuardRefusal) as err:
        _screen(client, "pub", {"note": "alice@example.com"})
    assert '(or payload_fields = "text_field" to store fields besides the text field as given)' in str(err.value)
    assert "[points: 9]" in str(err.value)
    # Collection metadata has no point: none is named.
    guard = client.guard
    with pytest.raises(GuardRefusal) as err:
        guard.screen_collection_metadata("update_collection", "c", guard.policy("c"),
                                         {"api_key": "a8f3k2j9x0q7w1e5r4t6"})
    assert "points:" not in str(err.value) and "collection metadata field 'api_key'" in str(err.value)


def test_a_str_subclass_key_that_poses_as_a_remembered_key_is_screened_as_stored(tmp_path):
    # The remembered-clean fast path takes exact str keys only: a str subclass hashing and comparing
    # as the clean key "note" but stored as "api_key" must not reach it. Killed: `type(k) is str`
    # negated (the pair ("note", value) remembered clean let the secret through under "api_key").
    class Posing(str):
        def __hash__(self):
            return hash("note")

        def __eq__(self, other):
            return other == "note" or str.__eq__(self, other)

    client = _screen_guard(tmp_path)
    secret = "a8f3k2j9x0q7w1e5r4t6"  # a finding only as the value of a secret-like key
    assert _screen(client, "c", {"note": secret}) == {"note": secret}
    assert ("note", secret) in client.guard.clean_values("c")
    with pytest.raises(GuardRefusal, match="payload field 'api_key' contains credentials"):
        _screen(client, "c", {Posing("api_key"): secret})



@pytest.mark.parametrize("parent, key", [("auth", "pass"), ("card", "pin")])
def test_a_remembered_bare_pass_is_still_read_under_its_owner(tmp_path, parent, key):
    # {"pass": "1234"} at the top level is data, remembered clean; under "auth" it is auth.pass, a
    # password. Killed: the fast path's `parent is not None` and `k in _BARE_EXACT` each negated
    # (the remembered pair let the password through under its owner).
    client = _screen_guard(tmp_path)
    assert _screen(client, "c", {key: "1234"}) == {key: "1234"}
    assert (key, "1234") in client.guard.clean_values("c")
    with pytest.raises(GuardRefusal, match=f"payload field '{parent}.{key}' contains credentials"):
        _screen(client, "c", {parent: {key: "1234"}})



@pytest.mark.parametrize("pair", [{b"name": "DB_PASSWORD", "value": "hunter2hunter2x"},
                                  {"name": "DB_PASSWORD", b"value": "hunter2hunter2x"}])
def test_a_name_or_value_field_given_as_bytes_is_that_field_once_stored(tmp_path, pair):
    # b"name" and b"value" are stored as "name" and "value": found only as stored, the value is read
    # under the name after the walk ("late"). Killed: `late or k in _NAME_FIELDS or k in _VALUE_FIELDS`
    # as `and`s, and either `in` negated.
    client = _screen_guard(tmp_path)
    with pytest.raises(GuardRefusal, match="payload field 'env\\[0\\].value' contains credentials"):
        _screen(client, "c", {"env": [pair]})


STRIPE = "sk_live_4eC39HqLyjWDarjtT1zdp7dc"


def test_the_keys_of_an_object_in_a_text_field_list_are_screened(tmp_path):
    # The text field's strings are the text rules' (_text_leaves, after this screen), its keys are
    # not: the payload screen reads objects in a text list. Killed: `isinstance(x, str)` negated
    # (the object was passed unscreened, the key stored) and, under "redact", `sent is v and all(...)`
    # as `or` (the list as given returned, the redacted key dropped).
    client = _screen_guard(tmp_path)
    with pytest.raises(GuardRefusal, match=r"payload key 'text\[1\]\.\[STRIPE_KEY\]' contains credentials"):
        _screen(client, "c", {"text": ["hi", {STRIPE: "x"}]})
    (tmp_path / "r").mkdir()
    redacting = _screen_guard(tmp_path / "r", credentials_in_text="redact")
    assert _screen(redacting, "c", {"text": ["hi", {STRIPE: "x"}]}) == {"text": ["hi", {"[STRIPE_KEY]": "x"}]}



WEAK = "hunter2hunter2x"  # a finding only under a password name


def test_a_value_is_remembered_clean_only_once_every_name_found_it_clean(tmp_path):
    # The clean-values memory may hold a value read under "value" only when its sibling names found
    # nothing: what a name finds is a secret, and none stays in memory past its call. Killed:
    # remember_pair deleted, `self.found == found` negated or as `or`, `type(v) is str` negated, the
    # `False` that stops remembering while "value" is read as True, and (b"name", found only after
    # the walk) the discard of the pair remembered too early deleted or its isinstance negated.
    client = _screen_guard(tmp_path)
    memory = client.guard.clean_values("c")
    assert _screen(client, "c", {"env": [{"name": "LOG_LEVEL", "value": "debug"}]})
    assert ("value", "debug") in memory
    for pair in ({"name": "DB_PASSWORD", "value": WEAK}, {b"name": "DB_PASSWORD", "value": WEAK}):
        with pytest.raises(GuardRefusal):
            _screen(client, "c", {"env": [pair]})
        assert ("value", WEAK) not in memory, pair
    (tmp_path / "r").mkdir()
    redacting = _screen_guard(tmp_path / "r", credentials_in_text="redact")
    assert _screen(redacting, "c", {"env": [{"name": "DB_PASSWORD", "value": WEAK}]}) == {
        "env": [{"name": "DB_PASSWORD", "value": "[GENERIC_SECRET]"}]}
    assert ("value", WEAK) not in redacting.guard.clean_values("c")
    # The late reading under redaction, which goes on to the other value fields. Killed besides:
    # `extra and f in out` as `or` (out["Value"], absent: a KeyError).
    assert _screen(redacting, "c", {"env": [{b"name": "DB_PASSWORD", "value": WEAK}]}) == {
        "env": [{"name": "DB_PASSWORD", "value": "[GENERIC_SECRET]"}]}


def test_two_keys_that_redact_to_one_are_refused_not_merged(tmp_path):
    # Killed: the raise deleted (the clean "[GITHUB_TOKEN]" overwrote the redacted token's value).
    client = _screen_guard(tmp_path, credentials_in_text="redact")
    ghp = "ghp_16C7e42F292c6912E7710c838347Ae178B4a"
    with pytest.raises(QdrantGuardError, match="would both be stored as '\\[GITHUB_TOKEN\\]'"):
        _screen(client, "c", {ghp: 1, "[GITHUB_TOKEN]": 2})


def test_an_object_under_a_password_name_has_its_value_read_as_the_password(tmp_path):
    # Killed: node()'s `isinstance(key, str)` negated (the object was walked with no password name:
    # {"value": p} read under "value" only).
    client = _screen_guard(tmp_path)
    with pytest.raises(GuardRefusal, match="read under the password name 'db_password'"):
        _screen(client, "c", {"db_password": {"value": WEAK}})



@pytest.mark.parametrize("value", ['"a8f3k2j9x0q7w1e5r4t6', '"\\a8f3k2j9x0q7w1e5r4t6'])
def test_a_secret_behind_a_quote_is_found_as_in_the_json_stored(tmp_path, value):
    # The bug this pass found: a value with a double quote is screened bare ('api_key: "a8f3...'),
    # where the detector reads a quoted value never closed and finds no secret, though it finds one
    # in the JSON Qdrant stores. Before the fix the write below stored the secret; now the value is
    # also read quoted, its quotes and backslashes as apostrophes and slashes. The redaction covers
    # the value exactly (the quoted head's length ±1 left a character or took one).
    import json

    from qdrant_guard import detect

    assert detect.find_sensitive(json.dumps({"api_key": value}))
    client = _screen_guard(tmp_path)
    with pytest.raises(GuardRefusal, match="payload field 'api_key' contains credentials"):
        client.upsert("c", [models.PointStruct(id=1, vector=unit(np.random.default_rng(1)), payload={"api_key": value})])
    assert client.count("c").count == 0
    (tmp_path / "r").mkdir()
    redacting = _screen_guard(tmp_path / "r", credentials_in_text="redact")
    assert _screen(redacting, "c", {"api_key": value}) == {"api_key": "[GENERIC_SECRET]"}
    # Quotes with nothing secret in them stay data.
    assert _screen(client, "c", {"note": 'say "hi" to 123'}) == {"note": 'say "hi" to 123'}



@pytest.mark.parametrize("value", ["'a8f3k2j9x0q7w1e5r4t6", "`a8f3k2j9x0q7w1e5r4t6"])
def test_a_value_without_double_quotes_is_read_quoted(tmp_path, value):
    # Read bare ('api_key: \'a8f3...'), an apostrophe or backtick opens a quote never closed and
    # the detector finds nothing; read as JSON assigns it ('api_key: "\'a8f3..."') it finds the
    # secret. Killed: the quote test's `"\\" in value` negated, `'"' in value` negated, the whole
    # test negated (each read such a value bare).
    client = _screen_guard(tmp_path)
    with pytest.raises(GuardRefusal, match="payload field 'api_key' contains credentials"):
        _screen(client, "c", {"api_key": value})


@pytest.mark.parametrize("value", ['a8f3k2j9x0q7w1e5r4t6 "', '"a8f3k2j9x0q7w1e5r4t6"'])
def test_a_value_with_a_double_quote_is_read_bare(tmp_path, value):
    # Quoted as given ('api_key: "a8f3... ""'), its own quote would close the value early and the
    # detector finds nothing. Killed: `'"' in value or "\\" in value` as `and`.
    client = _screen_guard(tmp_path)
    with pytest.raises(GuardRefusal, match="payload field 'api_key' contains credentials"):
        _screen(client, "c", {"api_key": value})


@pytest.mark.parametrize("parent, key", [("auth", "pass1"), ("auth", "PASS2"), ("card", "_pin")])
def test_a_bare_pass_spelled_otherwise_is_not_remembered_and_is_read_under_its_owner(tmp_path, parent, key):
    # Killed: key()'s `len(key) <= ... and (...)` as `or` (the spelling was remembered, then read as
    # no bare pass) and obj()'s `k not in clean_keys` negated.
    client = _screen_guard(tmp_path)
    with pytest.raises(GuardRefusal, match=f"payload field '{parent}.{key}' contains credentials"):
        _screen(client, "c", {parent: {key: "1234"}})
    assert key not in client.guard.clean_keys("c")


def test_what_is_found_in_a_key_is_not_charged_to_its_value_and_a_redaction_keeps_the_rest(tmp_path):
    # Killed: `f.end > h and f.start < h + n` as `or` (the key's finding clipped into the value) and
    # `min(f.end - h, n)` as `f.end + h` (the redaction ran to the value's end).
    # A value is read under a sibling name holding a token: the token is the name's, not the value's.
    client = _screen_guard(tmp_path, payload_fields="all", credentials_in_text="redact")
    ghp = "ghp_16C7e42F292c6912E7710c838347Ae178B4a"
    for v in ("v", 'say "v"'):  # the second read quoted as well (its quotes as apostrophes)
        assert _screen(client, "c", {"env": [{"name": ghp, "value": v}]}) == {
            "env": [{"name": "[GITHUB_TOKEN]", "value": v}]}
    assert _screen(client, "c", {"note": "call 123-45-6789 now"}) == {"note": "call [SSN] now"}


# --------------------------------------------------------------------------- rawstored.py

def _left_behind(kit, *, named=(), **noise):
    """alice@hr's client on a PII collection ``pii`` (Euclid, dim 16; ``named``: those vectors)
    whose policy has raw_in_boundary off and noise_queries on, and bob@support's view."""
    from test_leftovers37 import Recorder

    base = {"mechanism": "gaussian", "epsilon": 1.0, "radius": 0.01, "delta": 1e-6, **noise}
    cfg = kit.config({"pii": {"class": "PII", "owner": "hr", "writers": ["support"], "readers": ["support"],
                              "noise_on_write": True, "raw_in_boundary": False, "noise_queries": True,
                              "intent": {"enabled": False}, "diversity": {"enabled": False}, "noise": base}})
    owner = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"), embedder=Recorder())
    create(owner, "pii", distance=models.Distance.EUCLID, named=named)
    return owner, owner.with_principal(kit.principal("bob", "support"))


def _forged(kit, pid, signed_at=0.5, **params):
    """A point whose receipt (signed at epsilon ``signed_at``; 0.5 is stronger than the policy's 1.0) has
    ``params`` changed after signing: the count reads fields, not signatures."""
    from test_leftovers37 import _noised_point

    point = _noised_point(kit, pid, np.random.default_rng(pid), epsilon=signed_at)
    payload = copy.deepcopy(point.payload)
    payload[RECEIPT_KEY]["vectors"][""]["params"].update(params)
    return models.PointStruct(id=pid, vector=point.vector, payload=payload)


@pytest.mark.parametrize("params", [{"epsilon": [0.5]}, {"dim": None}, {"dim": "16"}])
def test_a_receipt_whose_parameters_are_not_numbers_is_counted_not_learnt(tmp_path, params):
    # receipt_params_of keeps only numbers (and an int dim) a filter can match again; Qdrant
    # matches a range on a list by any element, so [0.5] reaches it. Killed: its `and`s as `or`
    # (float([0.5]) raised, the count failed as a Qdrant error) and `type(dim) is int` as `or`
    # (a None dim made a MatchValue(None): the same failure).
    kit = make_kit(tmp_path)
    owner, bob = _left_behind(kit)
    RawClient.upsert(owner, "pii", [_forged(kit, 1, **params)])
    with pytest.raises(GuardRefusal) as err:
        bob.query_points("pii", query=1, limit=5)
    assert "still holds 1 point(s)" in str(err.value) and "beyond_param_cap" not in err.value.details
    assert owner.guard.shared["receipt_params"]["pii"] == set()


@pytest.mark.parametrize("point", ["weaker", "no lattice"])
def test_only_receipts_a_read_could_accept_are_looked_up_or_counted_past_the_cap(tmp_path, point):
    # unseen_params_filter asks for receipts of noise no weaker than the policy's, with a positive
    # lattice step: only those could be held to their own calibration. With the cap at 0, a weaker
    # receipt (epsilon 2 > 1) or one without a lattice step is left behind, not "beyond the cap"
    # (whose refusal says their receipts state stronger noise). Killed: `noise_bounds` defaulting
    # to False or negated, and the lattice_step condition deleted.
    from test_leftovers37 import _noised_point

    kit = make_kit(tmp_path)
    owner, bob = _left_behind(kit, max_receipt_param_sets=0)
    pt = (_noised_point(kit, 1, np.random.default_rng(1), epsilon=2.0) if point == "weaker"
          else _forged(kit, 1, lattice_step=0.0))
    RawClient.upsert(owner, "pii", [pt])
    with pytest.raises(GuardRefusal) as err:
        bob.query_points("pii", query=1, limit=5)
    assert "still holds 1 point(s)" in str(err.value)
    assert "beyond_param_cap" not in err.value.details and "counted unchecked" not in str(err.value)


def test_a_stale_receipt_of_a_vector_the_point_lacks_is_not_counted_past_the_cap(tmp_path):
    # Point 2 holds vector "b" raw and, for vector "a" it does not have (deleted without the guard),
    # a receipt of stronger noise. Only the raw "b" is left behind; nothing is past the cap. Killed:
    # unseen_params_filter's HasVectorCondition deleted (or inserted at 1 / -1, behind the
    # receipt's conditions, which is the same; so these two are equivalent once it is there).
    from test_leftovers37 import _noised_point

    kit = make_kit(tmp_path)
    owner, bob = _left_behind(kit, named=("a", "b"), max_receipt_param_sets=0)
    _, rec = _noised_point(kit, 2, np.random.default_rng(2), epsilon=0.5, vname="a")
    RawClient.upsert(owner, "pii", [models.PointStruct(id=2, vector={"b": unit(np.random.default_rng(3))},
                                                       payload={RECEIPT_KEY: receipts_for_payload({"a": rec})})])
    with pytest.raises(GuardRefusal) as err:
        bob.query_points("pii", query=1, using="b", limit=5)
    assert "still holds 1 point(s)" in str(err.value) and "beyond_param_cap" not in err.value.details


@pytest.mark.parametrize("clip", [-1.0, 0.0, "1.0"])
def test_a_receipt_with_a_clip_norm_a_read_refuses_is_counted(tmp_path, clip):
    # The policy sets no clip_norm: a receipt's must be null or a positive number, as check_release
    # reads it. Killed: that condition deleted (the forged receipt was taken as a release and the
    # query compared its vector). The same receipt with its clip_norm as signed is accepted.
    kit = make_kit(tmp_path)
    owner, bob = _left_behind(kit, clip_norm=None)
    assert owner.guard.policy("pii").noise.clip_norm is None
    RawClient.upsert(owner, "pii", [_forged(kit, 1, signed_at=1.0, clip_norm=clip)])
    with pytest.raises(GuardRefusal, match=r"still holds 1 point\(s\)"):
        bob.query_points("pii", query=1, limit=5)
    RawClient.upsert(owner, "pii", [_forged(kit, 1, signed_at=1.0), _forged(kit, 2, signed_at=1.0)])
    assert [p.id for p in bob.query_points("pii", query=1, limit=5).points] == [2]


def _unnamed_shape():
    from qdrant_guard.vectors import CollectionShape, VectorSpec

    return CollectionShape(dense={"": VectorSpec("", 16, "Euclid", False)}, sparse=frozenset(), unnamed=True)


def test_a_known_set_of_weaker_noise_is_still_counted(tmp_path):
    # _accepted_receipt holds a known set to its own calibration only if its noise is no weaker than
    # the policy's (the count learns no other, so this is called directly). Killed: the `and`s of
    # that test as `or` (epsilon 2 > 1 with the policy's radius and delta passed).
    from test_leftovers37 import _noised_point

    from qdrant_guard.rawstored import left_behind_filter

    kit = make_kit(tmp_path)
    owner, _ = _left_behind(kit)
    RawClient.upsert(owner, "pii", [_noised_point(kit, 1, np.random.default_rng(1), epsilon=2.0),
                                    _noised_point(kit, 2, np.random.default_rng(2))])
    pol = owner.guard.policy("pii")
    for seen in ((), [(2.0, 1e-6, 0.01, 16)]):
        flt = left_behind_filter(_unnamed_shape(), pol, seen)
        assert [p.id for p in RawClient.scroll(owner, "pii", scroll_filter=flt)[0]] == [1], seen


def test_without_a_calibration_no_receipt_is_accepted(tmp_path):
    # _accepted_receipt's documented edge: no calibration known, no receipt accepted (an empty
    # `should` would match every point on some Qdrant versions). Killed: `len(bounded) == 1` as `== 0`
    # (bounded[0] of an empty list).
    from test_leftovers37 import _noised_point

    from qdrant_guard.rawstored import _accepted_receipt, left_behind_filter

    kit = make_kit(tmp_path)
    owner, _ = _left_behind(kit)
    RawClient.upsert(owner, "pii", [_noised_point(kit, 1, np.random.default_rng(1))])
    pol = owner.guard.policy("pii")
    at = f'{RECEIPT_KEY}.vectors.""'
    assert RawClient.count(owner, "pii", count_filter=models.Filter(must=[_accepted_receipt(at, "", pol)])).count == 0
    assert RawClient.count(owner, "pii", count_filter=left_behind_filter(_unnamed_shape(), pol)).count == 0


def test_a_vector_name_no_payload_path_can_hold_counts_every_point_having_it(tmp_path):
    # Qdrant (and local mode) now refuse such names, so this is called directly: a name with `"` or
    # `\` alone is no path either. Killed: `'"' in vname or "\\" in vname` as `and` in both filters.
    from qdrant_guard.rawstored import left_behind_filter, unseen_params_filter
    from qdrant_guard.vectors import CollectionShape, VectorSpec

    kit = make_kit(tmp_path)
    owner, _ = _left_behind(kit)
    pol = owner.guard.policy("pii")
    for name in ('a"b', "c\\d"):
        shape = CollectionShape(dense={name: VectorSpec(name, 16, "Euclid", False)}, sparse=frozenset(), unnamed=False)
        assert left_behind_filter(shape, pol) == models.Filter(should=[
            models.Filter(must=[models.HasVectorCondition(has_vector=name)])])
        assert unseen_params_filter(shape, pol, ()) is None


def test_an_mmr_refusal_under_raw_in_boundary_names_the_owner_boundary_as_the_way_out(tmp_path):
    # Killed: raw_stored_way_out's raw_in_boundary return as None (the refusal ended in "None").
    kit = make_kit(tmp_path)
    cfg = kit.config({"pii": {"class": "PII", "owner": "hr", "readers": ["support"], "raw_in_boundary": True,
                              "noise_queries": True, "intent": {"enabled": False}, "diversity": {"enabled": False}}})
    owner = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    create(owner, "pii")
    owner.upsert("pii", [models.PointStruct(id=i, vector=unit(np.random.default_rng(i))) for i in range(3)])
    bob = owner.with_principal(kit.principal("bob", "support"))
    mmr = models.NearestQuery(nearest=unit(np.random.default_rng(9)), mmr=models.Mmr(diversity=0.5))
    with pytest.raises(GuardRefusal) as err:
        bob.query_points("pii", query=mmr, limit=2)
    assert "keeps raw vectors for the owner boundary 'hr' (raw_in_boundary)" in str(err.value)
    assert "diversify the results yourself, or query from the owner boundary 'hr'" in str(err.value)


# --------------------------------------------------------------------------- writepoints.py

def _named_writer(tmp_path):
    """alice@hr's client on a PII collection ``c`` (noise on write) with vectors "a" and "b"."""
    kit = make_kit(tmp_path)
    cfg = kit.config({"c": {"class": "PII", "owner": "hr", "noise_on_write": True, "intent": {"enabled": False}}})
    client = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    create(client, "c", named=("a", "b"))
    return client


def _ab(rng):
    return {"a": unit(rng), "b": unit(rng)}


def _stored_ids(client):
    return sorted(p.id for p in RawClient.scroll(client, "c", limit=100)[0])


def test_points_given_as_dicts_and_records_are_written_and_a_record_without_vectors_is_refused(tmp_path):
    # Killed: the dict branch negated or its append deleted, the Record branch negated or its append
    # deleted, `p.vector is None` negated, the Record refusal deleted, the final TypeError deleted,
    # _from_dict's return as None, its raise deleted, its `loc[0]` as [1] or [-1] or its test negated,
    # and _kind's return as None or its test negated.
    from qdrant_guard.errors import GuardArgumentTypeError, UnsupportedWriteError

    client = _named_writer(tmp_path)
    rng = np.random.default_rng(0)
    client.upsert("c", [{"id": 1, "vector": _ab(rng), "payload": {"s": 1}}])
    rec = client.retrieve("c", [1], with_vectors=True)[0]
    client.upsert("c", [models.Record(id=2, vector=rec.vector, payload={"s": 2})])
    assert _stored_ids(client) == [1, 2]
    with pytest.raises(UnsupportedWriteError, match="models.Record 3 has no vector"):
        client.upsert("c", [models.Record(id=3, vector=None, payload={"s": 3})])
    with pytest.raises(GuardArgumentTypeError, match="points must be models.PointStruct .*; got tuple"):
        client.upsert("c", [(4, _ab(rng))])
    with pytest.raises(GuardArgumentTypeError, match=r"points\[0\] is a dict that is not a models.PointStruct "
                                                     r"\(invalid: vector, vectr\)"):
        client.upsert("c", [{"id": 5, "vectr": _ab(rng)}])
    # An error deeper in a field is named by the field (loc[0]), not by where in it.
    with pytest.raises(GuardArgumentTypeError, match=r"\(invalid: vector\); give its fields"):
        client.upsert("c", [{"id": 5, "vector": {"a": "not a vector"}}])
    assert _stored_ids(client) == [1, 2]


def test_a_batch_row_that_does_not_validate_names_each_column_entry_at_fault(tmp_path):
    # Killed: the ids' place deleted, the probe point's id 0 as -1 (no vector then validated: both
    # names were listed); id 0 as 1 is equivalent (any valid id).
    from qdrant_guard.errors import GuardArgumentValueError

    client = _named_writer(tmp_path)
    rng = np.random.default_rng(1)
    bad = models.Batch.model_construct(ids=[1, None], vectors={"a": [unit(rng), unit(rng)], "b": [unit(rng), "x"]},
                                       payloads=[{"s": 1}, "not a dict"])
    with pytest.raises(GuardArgumentValueError) as err:
        client.upsert("c", bad)
    assert str(err.value).startswith("points.ids[1], points.vectors['b'][1], points.payloads[1] of the models.Batch "
                                     "do not validate as a point's id, payload, vector (")
    assert _stored_ids(client) == []


def test_update_vectors_takes_a_list_of_point_vectors_or_their_dicts_and_nothing_else(tmp_path):
    # Killed: the not-a-list raise deleted, the dict test negated, the not-PointVectors raise deleted.
    from qdrant_guard.errors import GuardArgumentTypeError

    client = _named_writer(tmp_path)
    rng = np.random.default_rng(2)
    client.upsert("c", [models.PointStruct(id=1, vector=_ab(rng))])
    before = RawClient.retrieve(client, "c", [1], with_vectors=True)[0].vector["a"]
    client.update_vectors("c", points=[{"id": 1, "vector": {"a": unit(rng)}}])
    assert RawClient.retrieve(client, "c", [1], with_vectors=True)[0].vector["a"] != before
    with pytest.raises(GuardArgumentTypeError, match="must be a list of models.PointVectors, not qdrant_client"):
        client.update_vectors("c", points=models.PointVectors(id=1, vector={"a": unit(rng)}))
    with pytest.raises(GuardArgumentTypeError, match="update_vectors points must be models.PointVectors; got tuple"):
        client.update_vectors("c", points=[(1, {"a": unit(rng)})])


def test_upload_collection_of_named_columns_writes_one_point_per_row(tmp_path):
    # Killed: `vectors[names[0]]` as names[1] (one name: an IndexError), `if names` negated (no row
    # read: nothing written), the uneven-names test's `> 1` as `>= 1` or `> 0` (every named upload
    # refused), the append deleted, the three-lengths raise deleted (zip wrote 2 of 3 ids), `ids is not
    # None` negated (the ids given replaced by UUIDs) and the return as None.
    from qdrant_guard.errors import GuardArgumentValueError

    client = _named_writer(tmp_path)
    rng = np.random.default_rng(3)
    client.upload_collection("c", vectors={"a": [unit(rng) for _ in range(3)]}, ids=[10, 11, 12], wait=True)
    assert _stored_ids(client) == [10, 11, 12]
    # numpy rows, named or not, are sent as lists. Killed: _plain's two returns as None.
    client.upload_collection("c", vectors={"a": np.asarray([unit(rng), unit(rng)], dtype=np.float32)}, ids=[13, 14],
                             wait=True)
    client.upload_collection("c", vectors=[{"b": np.asarray(unit(rng), dtype=np.float32)}], ids=[15], wait=True)
    assert _stored_ids(client) == [10, 11, 12, 13, 14, 15]
    client.upload_collection("c", vectors={}, wait=True)  # no names, no rows (n = 0 as 1: one empty point)
    with pytest.raises(GuardArgumentValueError, match="2 vectors, 2 payloads and 3 ids"):
        client.upload_collection("c", vectors={"a": [unit(rng) for _ in range(2)]}, ids=[20, 21, 22], wait=True)
    assert _stored_ids(client) == [10, 11, 12, 13, 14, 15]
