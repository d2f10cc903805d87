"""Review 47 (2026-12-07): the trust boundary and the cross-collection surface.

A collection name that, read as a path, leads to another collection's directory: qdrant-client's
local mode deletes ``collection/<name>`` by the name it is given, so a principal allowed to
delete a name the policy does not protect (any principal under ``unlisted = "public"``, even one
without a credential) deleted another boundary's collection by naming ``pub/../payroll``.

Real local Qdrant (``path=`` stores), real Ed25519 keys; no mocks. The refusal tests fail on the
code before the fix (checked by restoring qdrant_guard/pipeline.py)."""
from __future__ import annotations

import asyncio
import os

import numpy as np
import pytest
from guardkit import DIM, audit_records, create, make_kit, unit
from qdrant_client.http import models

from qdrant_guard import AsyncQdrantClient, GuardRefusal, QdrantClient
from qdrant_guard.names import folded_name, path_segment_name

_PAYROLL = {"class": "PII", "owner": "hr", "diversity": {"enabled": False}, "intent": {"enabled": False}}

# Each reaches collection/payroll when joined to the store's collection folder.
_ESCAPES = ["pub/../payroll", "./payroll", "payroll/.", "payroll/", "pub//../payroll", "pub/./../payroll"]


def _store(tmp_path):
    """hr's payroll (5 points) and a PUBLIC pub in a path= store; unlisted names are PUBLIC."""
    kit = make_kit(tmp_path)
    cfg = kit.config({"payroll": _PAYROLL}, unlisted="public")
    store = str(tmp_path / "store")
    hr = QdrantClient(path=store, guard=cfg, principal=kit.principal("alice", "hr"))
    create(hr, "payroll")
    create(hr, "pub")
    rng = np.random.default_rng(7)
    hr.upsert("payroll", [models.PointStruct(id=i, vector=unit(rng), payload={"salary": 1000 + i})
                          for i in range(5)])
    return kit, cfg, store, hr


def _payroll_points_after_reopen(kit, cfg, store):
    hr = QdrantClient(path=store, guard=cfg, principal=kit.principal("alice", "hr"))
    try:
        return hr.count("payroll").count
    finally:
        hr.close()


@pytest.mark.parametrize("name", _ESCAPES)
def test_a_dot_segment_name_cannot_delete_another_boundarys_collection(tmp_path, name):
    kit, cfg, store, hr = _store(tmp_path)
    bob = hr.with_principal(kit.principal("bob", "support"))
    with pytest.raises(GuardRefusal):
        bob.delete_collection("payroll")  # by its own name: refused, as always
    # Before the fix this was decided as an unlisted (PUBLIC) name and local mode removed
    # collection/payroll: after a reopen hr's payroll had no points.
    with pytest.raises(GuardRefusal) as err:
        bob.delete_collection(name)
    assert err.value.verdict == "REFUSED_CROSS_BOUNDARY"
    assert "path segment" in str(err.value) and "own name" in str(err.value)
    assert sorted(os.listdir(os.path.join(store, "collection"))) == ["payroll", "pub"]
    hr.close()
    assert _payroll_points_after_reopen(kit, cfg, store) == 5


def test_a_client_without_principal_cannot_either_and_the_refusal_is_audited(tmp_path):
    kit, cfg, store, hr = _store(tmp_path)
    anon = hr.with_principal(None)
    with pytest.raises(GuardRefusal):
        anon.delete_collection("pub/../payroll")
    hr.close()
    assert _payroll_points_after_reopen(kit, cfg, store) == 5
    refused = [r for r in audit_records(kit) if r.get("op") == "delete_collection"
               and r.get("collection") == "pub/../payroll"]
    assert refused and refused[-1]["verdict"] == "REFUSED_CROSS_BOUNDARY"
    assert refused[-1]["details"]["reason"] == "path_segment"


def test_the_async_client_refuses_it_too(tmp_path):
    kit, cfg, store, hr = _store(tmp_path)
    hr.close()

    async def attempt():
        bob = AsyncQdrantClient(path=store, guard=cfg, principal=kit.principal("bob", "support"))
        try:
            with pytest.raises(GuardRefusal):
                await bob.delete_collection("pub/../payroll")
        finally:
            await bob.close()

    asyncio.run(attempt())
    assert _payroll_points_after_reopen(kit, cfg, store) == 5


def test_every_call_refuses_such_a_name_and_ordinary_names_still_work(tmp_path):
    kit, cfg, store, hr = _store(tmp_path)
    bob = hr.with_principal(kit.principal("bob", "support"))
    for call in (lambda: bob.count("./payroll"), lambda: bob.scroll("payroll/."),
                 lambda: bob.get_collection("pub/../payroll"), lambda: bob.collection_exists("payroll/")):
        with pytest.raises(GuardRefusal, match="path segment"):
            call()
    assert bob.count("pub").count == 0
    assert bob.delete_collection("pub") is True
    assert sorted(os.listdir(os.path.join(store, "collection"))) == ["payroll"]
    hr.close()


def test_which_names_count_as_path_escapes():
    for name in [*_ESCAPES, ".", "..", "/payroll", "a//b", "pub\\..\\payroll", "payroll\\"]:
        assert path_segment_name(name), name
    for name in ["payroll", "a/b", "a.b", "..x", "x..", "...", "a/b/c", "", "my docs", "a\\b"]:
        assert not path_segment_name(name), name


def test_a_plain_client_is_unchanged(tmp_path):
    # No guard= policy: qdrant-client's own behaviour, whatever it is, is not the guard's to change.
    c = QdrantClient(path=str(tmp_path / "plain"))
    c.create_collection("pub", vectors_config=models.VectorParams(size=DIM, distance=models.Distance.COSINE))
    assert c.delete_collection("pub/../nothing") is False
    c.close()


# ------------------------------------------------ names that one file system directory would share
# On a file system that ignores case (macOS's default APFS, Windows) and Unicode normalisation
# (APFS), local mode keeps PAYROLL in payroll's directory: a create opens the points it finds there
# under the new name's policy, a delete removes them. Linux file systems here are case-sensitive, so
# these tests check the refusal, not the sharing (docs/threat-model.md, *Names that are paths*).

@pytest.mark.parametrize("call", ["create", "recreate", "delete"])
@pytest.mark.parametrize("variant", ["PAYROLL", "Payroll", "pAyRoLl"])
def test_a_case_variant_of_a_listed_name_is_not_created_or_deleted_under_another_policy(tmp_path, variant, call):
    kit, cfg, store, hr = _store(tmp_path)
    bob = hr.with_principal(kit.principal("bob", "support"))
    params = models.VectorParams(size=DIM, distance=models.Distance.COSINE)
    act = {"create": lambda: bob.create_collection(variant, vectors_config=params),
           "recreate": lambda: bob.recreate_collection(variant, vectors_config=params),
           "delete": lambda: bob.delete_collection(variant)}[call]
    with pytest.raises(GuardRefusal) as err:
        act()
    assert err.value.verdict == "REFUSED_CROSS_BOUNDARY"
    assert "'payroll'" in str(err.value) and "case or Unicode normalisation" in str(err.value)
    assert sorted(os.listdir(os.path.join(store, "collection"))) == ["payroll", "pub"]
    rec = [r for r in audit_records(kit) if r.get("op") == f"{call}_collection"][-1]
    assert rec["verdict"] == "REFUSED_CROSS_BOUNDARY" and rec["details"]["same_folded_as"] == "payroll"
    hr.close()


def test_a_decomposed_spelling_of_a_listed_name_is_refused_too(tmp_path):
    kit = make_kit(tmp_path)
    cfg = kit.config({"caf\u00e9": _PAYROLL}, unlisted="public")
    bob = QdrantClient(path=str(tmp_path / "store"), guard=cfg, principal=kit.principal("bob", "support"))
    with pytest.raises(GuardRefusal, match="case or Unicode normalisation"):
        create(bob, "cafe\u0301")
    with pytest.raises(GuardRefusal, match="case or Unicode normalisation"):
        create(bob, "CAF\u00c9")
    create(bob, "cafes")  # another name
    bob.close()


def test_a_variant_listed_with_the_same_policy_and_unrelated_names_pass(tmp_path):
    kit = make_kit(tmp_path)
    cfg = kit.config({"payroll": _PAYROLL, "PAYROLL": dict(_PAYROLL)}, unlisted="public")
    hr = QdrantClient(path=str(tmp_path / "store"), guard=cfg, principal=kit.principal("alice", "hr"))
    create(hr, "payroll")
    bob = hr.with_principal(kit.principal("bob", "support"))
    with pytest.raises(GuardRefusal, match="may not administer"):  # PAYROLL's own policy decides
        create(bob, "PAYROLL")
    create(bob, "payroll-notes")
    assert bob.delete_collection("payroll-notes") is True
    hr.close()


def test_a_hidden_listed_name_is_not_told_in_the_refusal(tmp_path):
    kit = make_kit(tmp_path)
    cfg = kit.config({"payroll": _PAYROLL}, unlisted="public", names_visible="accessible")
    bob = QdrantClient(path=str(tmp_path / "store"), guard=cfg, principal=kit.principal("bob", "support"))
    with pytest.raises(GuardRefusal) as err:
        create(bob, "PAYROLL")
    assert "'payroll'" not in str(err.value) and "a collection the policy lists" in str(err.value)
    rec = [r for r in audit_records(kit) if r.get("op") == "create_collection"][-1]
    assert rec["details"]["same_folded_as"] == "payroll"  # the operator's log names it
    bob.close()


def test_what_folds_alike():
    assert folded_name("PAYROLL") == folded_name("payroll") == folded_name("Payroll")
    assert folded_name("caf\u00e9") == folded_name("cafe\u0301") == folded_name("CAF\u00c9")
    assert folded_name("payroll") != folded_name("payrol1")
    assert folded_name("payroll") != folded_name("pay roll")
