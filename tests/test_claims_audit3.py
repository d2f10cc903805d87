"""Claims audit 3 (2026-12-05): docs/server.md, docs/integrations.md and bench/README.md, the docs
the first two claims audits did not cover, checked against the code after this session's changes
(get_collection's counts for readers only, cluster_telemetry / get_optimizations /
list_full_snapshots guarded).

No Qdrant server runs here, but qdrant-client's REST transport does: a client built with ``url=``
a closed local port runs the server code path up to the connection, which is where server.md's
"a server that cannot be reached" claim lives. Everything else runs on real local mode.
"""
from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from qdrant_client import QdrantClient as RawClient
from qdrant_client.http.exceptions import ResponseHandlingException

from qdrant_guard import GuardRefusal
from qdrant_guard.errors import GuardArgumentTypeError
from tests.guardkit import QdrantClient, audit_records, closed_port, create, hr_policy, make_kit, models, snapshot, unit

ROOT = Path(__file__).resolve().parent.parent


# server.md, "A server that cannot be reached": qdrant-client's error comes through unchanged,
# except a budgeted read, which must first resolve aliases: GuardRefusal FAIL_CLOSED, audited,
# chained to qdrant-client's error.
def test_server_md_an_unreachable_server_fails_closed_on_a_budgeted_read_only(tmp_path):
    kit = make_kit(tmp_path)
    cfg = kit.config({"hr": hr_policy({"max_source_coverage": 0.5}), "pub": {"class": "PUBLIC"}})
    bob = QdrantClient(url=f"http://127.0.0.1:{closed_port()}", timeout=2, check_compatibility=False, guard=cfg,
                       principal=kit.principal("bob", "support"))
    with pytest.raises(GuardRefusal) as exc:
        bob.query_points("hr", query=[0.25] * 16, limit=3)
    assert exc.value.verdict == "FAIL_CLOSED"
    assert "resolving aliases (get_aliases) failed" in str(exc.value) and "Check that Qdrant is reachable" in str(exc.value)
    assert isinstance(exc.value.__cause__, ResponseHandlingException)
    assert [r["verdict"] for r in audit_records(kit) if r["collection"] == "hr"] == ["FAIL_CLOSED"]
    for call in (lambda: bob.query_points("pub", query=[0.25] * 16, limit=3), lambda: bob.get_collection("pub")):
        with pytest.raises(ResponseHandlingException):
            call()


# server.md, "Snapshots": recovery, peer removal/recovery and full-snapshot deletion are refused
# under a policy, before qdrant-client is asked (local mode would answer differently).
@pytest.mark.parametrize("method,args", [
    ("recover_snapshot", ("hr", "file:///s")), ("recover_shard_snapshot", ("hr", 0, "file:///s")),
    ("remove_peer", (1,)), ("recover_current_peer", ()), ("delete_full_snapshot", ("s",)),
])
def test_server_md_operator_only_methods_are_refused(tmp_path, method, args):
    kit = make_kit(tmp_path)
    alice = QdrantClient(":memory:", guard=kit.config({"hr": hr_policy({})}), principal=kit.principal("alice", "hr"))
    create(alice, "hr")
    with pytest.raises(GuardRefusal, match="constructed without guard="):
        getattr(alice, method)(*args)


# server.md, "Clusters" (added by this audit): shard-key administration and collection_cluster_info
# are the owner's; get_optimizations (server only) needs read access, decided before the backend
# (local mode's NotImplementedError is never reached for a principal who may not read).
def test_server_md_cluster_methods_are_decided_before_the_backend(tmp_path):
    kit = make_kit(tmp_path)
    cfg = kit.config({"hr": hr_policy({}), "closed": {"class": "PII", "owner": "hr"}})
    alice = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    create(alice, "hr")
    create(alice, "closed")
    bob = alice.with_principal(kit.principal("bob", "support"))
    for call in (lambda: bob.list_shard_keys("hr"), lambda: bob.collection_cluster_info("hr"),
                 lambda: bob.get_optimizations("closed")):
        with pytest.raises(GuardRefusal, match="REFUSED_CROSS_BOUNDARY"):
            call()
    with pytest.raises(NotImplementedError):  # a reader reaches the backend, which local mode lacks
        bob.get_optimizations("hr")
    assert bob.list_full_snapshots() == []
    entry = [r for r in audit_records(kit) if r["op"] == "list_full_snapshots"][-1]
    assert entry["details"] == {"hidden": ["size"]}  # bob may not read "closed"


# server.md, "Points as dicts": an invalid dict point is a TypeError naming the fields at fault, in
# every mode (on a PUBLIC collection too), and nothing is written.
@pytest.mark.parametrize("name", ["hr", "pub"])
def test_server_md_an_invalid_dict_point_is_a_type_error_naming_the_fields(tmp_path, name):
    kit = make_kit(tmp_path)
    alice = QdrantClient(":memory:", guard=kit.config({"hr": hr_policy({}), "pub": {"class": "PUBLIC"}}),
                         principal=kit.principal("alice", "hr"))
    create(alice, name)
    rng = np.random.default_rng(0)
    with pytest.raises(TypeError, match=r"invalid: id, idd") as exc:
        alice.upsert(name, [{"idd": 1, "vector": unit(rng)}])
    assert isinstance(exc.value, GuardArgumentTypeError)
    alice.upsert(name, [{"id": 1, "vector": unit(rng), "payload": {"source": "a"}}])  # a valid one is stored
    assert [p[0] for p in snapshot(alice, name)] == [1]


# server.md, "with_payload as a dict": where the guard projects the selector itself (a reader's
# source-capped scroll), {"include": [...]} selects those fields as a server would, where raw
# local mode reads the dict as a list of its keys; a dict the REST client refuses is refused.
def test_server_md_with_payload_dict_reads_as_the_rest_client_does(tmp_path):
    kit = make_kit(tmp_path)
    cfg = kit.config({"hr": hr_policy({"max_source_coverage": 1.0, "max_source_fraction": 1.0,
                                       "min_unique_sources": 1})})
    alice = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    create(alice, "hr")
    rng = np.random.default_rng(1)
    alice.upsert("hr", [models.PointStruct(id=i, vector=unit(rng), payload={"source": "s", "x": i, "y": "k"})
                        for i in range(4)])
    bob = alice.with_principal(kit.principal("bob", "support"))
    pts, _ = bob.scroll("hr", with_payload={"include": ["x"]}, limit=10)
    assert sorted(p.payload["x"] for p in pts) == [0, 1, 2, 3] and all(set(p.payload) == {"x"} for p in pts)
    raw, _ = RawClient.scroll(alice, "hr", with_payload={"include": ["x"]}, limit=10)
    assert all(p.payload == {} for p in raw)  # what raw local mode returns instead
    with pytest.raises(Exception, match="validation error"):
        bob.scroll("hr", with_payload={"foo": ["x"]}, limit=10)


# integrations.md: the frameworks also call get_collection (langchain's constructor validates the
# vector config through it). Since get_collection withholds counts from a principal who may not
# read, that principal still builds the store (config is shown to all), and its search is refused
# with GuardRefusal, not turned into an empty result.
def test_integrations_md_a_non_reader_builds_a_langchain_store_and_is_refused(tmp_path):
    pytest.importorskip("langchain_qdrant")
    from langchain_qdrant import QdrantVectorStore

    from tests.integration_embeddings import DIM, LCHashingEmbeddings

    kit = make_kit(tmp_path)
    cfg = kit.config({"closed": {"class": "PII", "owner": "hr", "text_field": "page_content"}})
    alice = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    alice.create_collection("closed", vectors_config=models.VectorParams(size=DIM, distance=models.Distance.COSINE))
    emb = LCHashingEmbeddings()
    QdrantVectorStore(client=alice, collection_name="closed", embedding=emb).add_texts(["a note"])
    bob = alice.with_principal(kit.principal("bob", "support"))
    info = bob.get_collection("closed")
    assert info.points_count is None and info.config.params.vectors.size == DIM
    store = QdrantVectorStore(client=bob, collection_name="closed", embedding=emb)
    with pytest.raises(GuardRefusal, match="REFUSED_CROSS_BOUNDARY"):
        store.similarity_search("a note", k=1)


# bench/README.md's file table named bench_noise/scan/detect/intent as the pytest suites; run.py
# runs every bench/bench_*.py that defines tests (bench_receipts.py too), and read_ab.py /
# read_equiv.py were not listed. Every program in bench/ is named in the README.
def test_bench_readme_names_every_bench_program():
    text = (ROOT / "bench" / "README.md").read_text(encoding="utf-8")
    files = sorted(p.name for p in (ROOT / "bench").iterdir() if p.suffix in (".py", ".c"))
    missing = [f for f in files if f not in text]
    assert missing == []


# bench/README.md's hot-spot list is the first run's (2026-12-02, fabcf1d); items 1, 2, 3 and 5
# were done since. The README says so per item, naming what replaced each.
def test_bench_readme_hot_spots_name_what_was_done():
    text = (ROOT / "bench" / "README.md").read_text(encoding="utf-8")
    hot = text.split("## Known hot spots", 1)[1]
    for done in ("stored_form_batch", "admit_many", "fast path", "binder"):
        assert done in hot, done
    assert re.search(r"fabcf1d", hot)


# server.md, "Benchmarks": the bench command it gave (`--url URL --scratch-collection NAME`) lacked
# the required --policy and --collection, so argparse refused it. Every `qdrant-guard ...` span of
# server.md parses (credential options aside, which README.md's section supplies).
def test_server_md_bench_command_parses():
    from qdrant_guard.cli import build_parser

    text = " ".join((ROOT / "docs" / "server.md").read_text(encoding="utf-8").split())
    spans = re.findall(r"`(qdrant-guard [^`]+)`", text)
    assert spans
    for span in spans:
        args = build_parser().parse_args(span.split()[1:] + ["--throwaway-credentials"])
        assert args.func.__name__ == "cmd_bench" and args.url == "URL" and args.scratch_collection == "NAME"
