"""The Redis budget store refuses a server that lets clients without credentials write its keys
(whoever can delete them resets what each principal was given), against real redis-servers: one
with no password (started here), one whose default user has none while the guard logs in as a
user of its own, and the session's ``--requirepass`` server (``redis_url``)."""
from __future__ import annotations

import os
import shutil
import uuid

import numpy as np
import pytest

from guardkit import DIM, create, make_kit, models, unit
from qdrant_guard import GuardRefusal, QdrantClient
from qdrant_guard.errors import ConfigError
from qdrant_guard.budget import BudgetStoreError, RedisBudgetStore, make_store
from qdrant_guard.policy import config_from_dict
from tests.redis_server import INSTALL_HINT, free_port, start_server, stop_server

redis = pytest.importorskip("redis")


@pytest.fixture(scope="module")
def open_server(tmp_path_factory):
    """A redis-server whose default user has no password: ``(url, admin client)``."""
    exe = shutil.which("redis-server")
    if exe is None:
        if os.environ.get("CI") == "true":
            pytest.fail(INSTALL_HINT)
        pytest.skip(INSTALL_HINT)
    workdir = tmp_path_factory.mktemp("redis-open")
    for _attempt in range(3):
        port = free_port()
        started = start_server(exe, workdir, port, timeout_s=10)
        if started is not None:
            break
    else:
        pytest.fail(f"redis-server did not start on 3 ports; see the logs in {workdir}")
    proc, log, admin = started
    try:
        yield f"redis://127.0.0.1:{port}/0", admin
    finally:
        admin.close()
        stop_server(proc, log)


@pytest.fixture()
def guard_user(open_server):
    """A user with a password on the open server: ``(url with its credentials, password)``."""
    url, admin = open_server
    user, password = f"guard-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    admin.acl_setuser(user, enabled=True, passwords=["+" + password], keys=["*"], categories=["+@all"])
    yield url.replace("redis://", f"redis://{user}:{password}@"), password
    admin.acl_deluser(user)


def _prefix() -> str:
    return f"qg:access:{uuid.uuid4().hex}:"


def test_a_server_without_password_is_refused_naming_it_the_reason_and_the_fixes(open_server):
    url, admin = open_server
    store = RedisBudgetStore(url, prefix=_prefix())
    with pytest.raises(BudgetStoreError) as ei:
        store.admit("src|bob|c|s", ["1", "2"], cap=1, window_s=60, now=100.0)
    message = str(ei.value)
    assert f"budget_store {url!r} lets a client that sends no password write its keys" in message
    assert "read past the extraction budget's caps" in message
    assert "requirepass" in message and "redis://guard:PASSWORD@host:6379/0" in message
    assert "budget_store_allow_unauthenticated = true" in message
    assert admin.exists(store.prefix + "src|bob|c|s") == 0  # nothing was counted


def test_every_way_in_is_refused_not_only_admissions(open_server):
    url, admin = open_server
    store = RedisBudgetStore(url, prefix=_prefix())
    for use in (lambda: store.seen("k|s", window_s=60, now=0.0),
                lambda: store.entries_by_prefix("k|", window_s=60, now=0.0),
                lambda: store.rebuild_index(),
                lambda: store.reset()):
        with pytest.raises(BudgetStoreError, match="lets a client that sends no password"):
            use()


def test_a_refused_store_does_not_ask_the_server_again(open_server):
    url, admin = open_server
    store = RedisBudgetStore(url, prefix=_prefix())
    with pytest.raises(BudgetStoreError, match="no password"):
        store.admit("k|s", ["1"], cap=1, window_s=60, now=0.0)
    before = admin.info("stats")["total_connections_received"]
    for _ in range(3):
        with pytest.raises(BudgetStoreError, match="no password"):
            store.admit("k|s", ["1"], cap=1, window_s=60, now=0.0)
    assert admin.info("stats")["total_connections_received"] == before


def test_a_guard_user_with_a_password_does_not_help_while_the_default_user_has_none(guard_user):
    # The guard authenticates, yet anyone else connects as the default user: still refused, and
    # the message shows the URL without the password.
    url, password = guard_user
    store = RedisBudgetStore(url, prefix=_prefix())
    with pytest.raises(BudgetStoreError, match="lets a client that sends no password") as ei:
        store.admit("k|s", ["1"], cap=1, window_s=60, now=0.0)
    assert password not in str(ei.value)
    assert "budget_store 'redis://127.0.0.1:" in str(ei.value)


def test_the_refusal_follows_what_the_default_user_may_write(open_server, guard_user, own_admin):
    # Refused while the default user (no password) may write the prefix; accepted once it is kept
    # off the prefix, or turned off, the guard logging in as its own user throughout.
    admin = own_admin
    guard_url, _ = guard_user
    with pytest.raises(BudgetStoreError, match="lets a client that sends no password"):
        RedisBudgetStore(guard_url, prefix=_prefix()).admit("k|s", ["1"], cap=1, window_s=60, now=0.0)
    for rule in (("on", "nopass", "resetkeys", "~other:*", "-@dangerous", "-@admin"), ("off",)):
        admin.execute_command("ACL", "SETUSER", "default", *rule)
        try:
            store = RedisBudgetStore(guard_url, prefix=_prefix())
            assert store.admit("k|s", ["1", "2"], cap=1, window_s=60, now=0.0) == (["1"], ["2"])
            store.reset()
        finally:
            admin.execute_command("ACL", "SETUSER", "default", "on", "nopass", "resetkeys", "~*")


@pytest.fixture()
def own_admin(open_server):
    """A client of its own user with a password: the module's admin is the default user, whose
    rights these tests take away."""
    url, admin = open_server
    password = uuid.uuid4().hex
    admin.acl_setuser("qg-admin", enabled=True, passwords=["+" + password], keys=["*"], categories=["+@all"])
    own = redis.Redis.from_url(url.replace("redis://", f"redis://qg-admin:{password}@"))
    yield own
    own.execute_command("ACL", "SETUSER", "default", "reset", "on", "nopass", "~*", "&*", "+@all")
    own.acl_deluser("qg-admin")
    own.close()


def _refusal_under(admin, guard_url, *rule):
    """The refusal of a store while the default user (no password) has ``rule``; None if used."""
    admin.execute_command("ACL", "SETUSER", "default", "reset", "on", "nopass", *rule)
    try:
        store = RedisBudgetStore(guard_url, prefix=_prefix())
        try:
            store.admit("k|s", ["1"], cap=1, window_s=60, now=0.0)
        except BudgetStoreError as exc:
            return str(exc)
        store.reset()
        return None
    finally:
        admin.execute_command("ACL", "SETUSER", "default", "reset", "on", "nopass", "~*", "&*", "+@all")


def test_a_default_user_kept_off_the_prefix_may_still_empty_the_database(own_admin, guard_user):
    # Key patterns do not limit keyless commands: `~other:*` with the rest of +@all may FLUSHALL,
    # SWAPDB, REPLICAOF (every budget gone). Review 53: the DEL-only probe accepted this.
    admin = own_admin
    guard_url, _ = guard_user
    why = _refusal_under(admin, guard_url, "~other:*", "+@all")
    assert why is not None and "may queue `FLUSHALL`)" in why and "keyless" in why
    for denied, named in (("-flushall", "FLUSHDB"), ("-@keyspace", "REPLICAOF 127.0.0.1 1"),
                          ("-@admin", "FLUSHALL")):
        why = _refusal_under(admin, guard_url, "~other:*", "+@all", denied)
        assert why is not None and f"may queue `{named}`" in why, (denied, why)
    assert _refusal_under(admin, guard_url, "~other:*", "+@all", "-@dangerous", "-@admin") is None


def test_a_default_user_denied_del_may_still_remove_or_rescore_entries(own_admin, guard_user):
    # Whoever may ZREMRANGEBYSCORE, ZADD (an old score falls out of the window), EXPIRE or
    # overwrite the set resets the budget as surely as DEL does.
    admin = own_admin
    guard_url, _ = guard_user
    for allowed, named in (("+zremrangebyscore", "ZREMRANGEBYSCORE KEY -inf +inf"), ("+zadd", "ZADD KEY 0 m"),
                           ("+expire", "EXPIRE KEY 1"), ("+set", "SET KEY v"), ("+unlink", "UNLINK KEY"),
                           ("+zunionstore", "ZUNIONSTORE KEY 1 KEY")):
        why = _refusal_under(admin, guard_url, "~*", "+multi", allowed)
        assert why is not None and f"may queue `{named}`, KEY a key under prefix" in why, (allowed, why)
    # Reads, and writes kept to other keys, are not a reason to refuse.
    assert _refusal_under(admin, guard_url, "~*", "+multi", "+@read", "-sort_ro") is None
    assert _refusal_under(admin, guard_url, "~other:*", "+multi", "+@write", "-@keyspace", "-@dangerous") is None


def test_the_probe_runs_nothing_it_queues(open_server):
    # The probe queues FLUSHALL, SET, ACL SETUSER... in a transaction it never executes: a key of
    # another application, and the default user's rights, survive a refusal.
    url, admin = open_server
    admin.set("someone-else", "kept")
    keys = admin.dbsize()
    with pytest.raises(BudgetStoreError, match="no password"):
        RedisBudgetStore(url, prefix=_prefix()).admit("k|s", ["1"], cap=1, window_s=60, now=0.0)
    assert admin.get("someone-else") == b"kept"
    assert admin.dbsize() == keys and admin.config_get("maxmemory-policy")["maxmemory-policy"] != "allkeys-random"
    assert admin.info("replication")["role"] == "master"
    admin.delete("someone-else")


def test_a_default_user_without_multi_cannot_be_judged_and_fails_closed(own_admin, guard_user):
    # Without MULTI the probe could only ask by running the commands; it sends nothing after the
    # refused MULTI (which would run FLUSHALL) and fails the use, asking again at the next.
    admin = own_admin
    guard_url, _ = guard_user
    admin.set("someone-else", "kept")
    why = _refusal_under(admin, guard_url, "~*", "+@all", "-multi")
    assert why is not None and "cannot tell whether clients without credentials may write it" in why
    assert "ACL SETUSER default +multi +select" in why and "'multi'" in why
    assert admin.get("someone-else") == b"kept"
    admin.delete("someone-else")


def test_the_same_budget_is_refused_without_a_password_and_used_with_one(open_server, redis_url):
    with pytest.raises(BudgetStoreError, match="lets a client that sends no password"):
        RedisBudgetStore(open_server[0], prefix=_prefix()).admit("k|s", ["1", "2"], cap=1, window_s=60, now=0.0)
    store = RedisBudgetStore(redis_url, prefix=_prefix())  # --requirepass, the password in the URL
    assert store.admit("k|s", ["1", "2"], cap=1, window_s=60, now=0.0) == (["1"], ["2"])
    store.reset()


def test_the_opt_out_uses_an_open_server_and_make_store_passes_it(open_server):
    url, admin = open_server
    store = RedisBudgetStore(url, prefix=_prefix(), allow_unauthenticated=True)
    assert store.admit("k|s", ["1", "2"], cap=1, window_s=60, now=0.0) == (["1"], ["2"])
    store.reset()
    assert make_store(url, allow_unauthenticated=True).seen("qg-absent|s", window_s=60, now=0.0) == 0
    with pytest.raises(BudgetStoreError, match="no password"):
        make_store(url).seen("qg-absent|s", window_s=60, now=0.0)


@pytest.mark.parametrize("value", ["true", 1, None])
def test_the_opt_out_must_be_a_bool(value):
    with pytest.raises(TypeError, match=r"allow_unauthenticated must be bool, not"):
        RedisBudgetStore(f"redis://127.0.0.1:{free_port()}/0", allow_unauthenticated=value)


def test_a_server_that_cannot_be_asked_fails_closed_and_is_asked_again():
    store = RedisBudgetStore(f"redis://127.0.0.1:{free_port()}/0", prefix=_prefix())
    for _ in range(2):
        with pytest.raises(BudgetStoreError, match="cannot tell whether clients without credentials may write it"):
            store.admit("k|s", ["1"], cap=1, window_s=60, now=0.0)


def test_the_policy_knob_needs_a_redis_store(tmp_path):
    data = make_kit(tmp_path).config({}).model_dump(by_alias=True, exclude={"source_path"})
    data["budget_store_allow_unauthenticated"] = True
    with pytest.raises(ValueError, match="budget_store_allow_unauthenticated = true .* budget_store is 'memory'"):
        config_from_dict(data)
    data["budget_store"] = "redis://127.0.0.1:6379/0"
    assert config_from_dict(data).budget_store_allow_unauthenticated is True


def _bob_on(tmp_path, **policy):
    """Bob's client (boundary support) over a PII collection of 4 points of source "s", read under
    a coverage cap of half, with ``policy`` (the budget store) in the guard's policy."""
    kit = make_kit(tmp_path)
    cfg = kit.config({"pii": {"class": "PII", "owner": "hr", "raw_in_boundary": True, "readers": ["support"],
                              "intent": {"enabled": False}, "diversity": {"max_source_coverage": 0.5}}}, **policy)
    owner = QdrantClient(":memory:", guard=cfg, principal=kit.principal("alice", "hr"))
    create(owner, "pii")
    rng = np.random.default_rng(0)
    owner.upsert("pii", [models.PointStruct(id=i, vector=unit(rng), payload={"source": "s"}) for i in range(4)])
    return owner.with_principal(kit.principal("bob", "support"))


def test_a_guarded_read_on_an_open_server_is_refused_without_showing_the_password(tmp_path, guard_user):
    url, password = guard_user
    bob = _bob_on(tmp_path, budget_store=url)
    with pytest.raises(GuardRefusal) as ei:
        bob.query_points("pii", query=[0.1] * DIM)
    assert ei.value.verdict == "FAIL_CLOSED"
    assert "lets a client that sends no password" in str(ei.value) and password not in str(ei.value)
    log = (tmp_path / "audit.jsonl").read_text()
    assert "lets a client that sends no password" in log and password not in log


def test_the_policy_opt_out_lets_guarded_reads_use_an_open_server(tmp_path, open_server):
    # The guard's store (budgetops.budget_for) takes the knob; without it this read fails closed.
    url, admin = open_server
    bob = _bob_on(tmp_path, budget_store=url, budget_store_allow_unauthenticated=True)
    assert bob.query_points("pii", query=[0.1] * DIM, limit=4).points
    assert admin.zcard("qg:budget:src|bob@support|pii|s") >= 1  # counted in Redis
    for name in admin.scan_iter(match="qg:budget:*"):
        admin.delete(name)


def test_the_bench_scratch_copy_drops_the_redis_knob_and_shows_no_password(tmp_path):
    # qdrant-guard bench replaces a Redis store by memory; the Redis-only opt-out must go with it,
    # and its note must not show a password (given in the URL's user part or its query string).
    from qdrant_guard.overhead_setup import scratch_config
    cfg = config_from_dict({"budget_store": "redis://guard:s3cr3t-a@127.0.0.1:1/0?password=s3cr3t-b",
                            "budget_store_allow_unauthenticated": True,
                            "collections": {"c": {"class": "PUBLIC"}}})
    copy, notes = scratch_config(cfg, tmp_path, "c", "c", cfg.collections["c"])
    assert copy.budget_store == "memory" and copy.budget_store_allow_unauthenticated is False
    type(copy).model_validate(copy.model_dump())  # the copy is a valid config
    shown = "\n".join(notes)
    assert "replaced by 'memory'" in shown and "127.0.0.1:1" in shown and "s3cr3t" not in shown


@pytest.mark.parametrize("spec", ["REDIS://:s3kr1t-pw@h:6379/0", "redis:/guard:s3kr1t-pw@h/0",
                                  "rediss//guard:s3kr1t-pw@h/0", "redis:/h/0?password=s3kr1t-pw"])
def test_a_mistyped_store_url_is_refused_without_echoing_its_password(spec):
    # Review 53: the policy error quoted the whole value twice, password included, into whatever
    # log keeps the start-up error.
    with pytest.raises(ConfigError) as ei:
        config_from_dict({"budget_store": spec})
    assert "s3kr1t-pw" not in str(ei.value)
    assert "is not 'memory', 'sqlite:///path.db' or 'redis://host:port/db'" in str(ei.value)
    with pytest.raises(ConfigError) as ei:
        config_from_dict({"budget_store": spec, "budget_store_allow_unauthenticated": True})
    assert "s3kr1t-pw" not in str(ei.value)


def test_every_node_of_a_cluster_is_asked_not_only_the_default_one(tmp_path):
    # Review 53: each node keeps its own users (ACLs are not shared). Node A requires a password,
    # node B's default user has none (nopass takes any password, so the guard logs in to both):
    # half the budget keys sit on B, open to anyone. The default-node-only probe accepted it.
    from redis.cluster import RedisCluster
    from redis.crc import key_slot

    from qdrant_guard.budget_redis_access import PROBE_KEY

    exe = shutil.which("redis-server")
    if exe is None:
        pytest.skip(INSTALL_HINT)
    password = uuid.uuid4().hex
    nodes = []
    try:
        for extra in (("--requirepass", password), ()):
            for _attempt in range(3):
                port = free_port()
                started = start_server(exe, tmp_path, port, "--cluster-enabled", "yes", "--cluster-config-file",
                                       str(tmp_path / f"nodes-{port}.conf"), *extra,
                                       password=password if extra else None, timeout_s=20)
                if started is not None:
                    nodes.append((port, *started))
                    break
            else:
                pytest.fail(f"redis-server --cluster-enabled did not start on 3 ports; see the logs in {tmp_path}")
        (port_a, _, _, a), (port_b, _, _, b) = nodes
        a.execute_command("CLUSTER", "ADDSLOTSRANGE", 0, 8191)
        b.execute_command("CLUSTER", "ADDSLOTSRANGE", 8192, 16383)
        a.execute_command("CLUSTER", "MEET", "127.0.0.1", port_b)
        import time
        deadline = time.monotonic() + 30
        while not all(b"cluster_state:ok" in n.execute_command("CLUSTER", "INFO") for n in (a, b)):
            assert time.monotonic() < deadline, "the two-node cluster never reached cluster_state:ok"
            time.sleep(0.05)
        client = RedisCluster.from_url(f"redis://:{password}@127.0.0.1:{port_a}/0")
        assert client.get_default_node().port == port_a
        # The probe key's slot on A: B answers its keyed commands MOVED, which its ACL passed first
        # (redis-py's cluster parser raises MovedError, whose text lacks the word MOVED).
        prefix = next(p for p in (_prefix() for _ in range(100)) if key_slot((p + PROBE_KEY).encode()) < 8192)
        with pytest.raises(BudgetStoreError, match="lets a client that sends no password") as ei:
            RedisBudgetStore(client, prefix=prefix).admit("k|s", ["1"], cap=1, window_s=60, now=0.0)
        assert f"may queue `DEL KEY` on node `127.0.0.1:{port_b}`" in str(ei.value) and password not in str(ei.value)
        b.execute_command("CONFIG", "SET", "requirepass", password)
        store = RedisBudgetStore(client, prefix=_prefix())
        assert store.admit("k|s", ["1", "2"], cap=1, window_s=60, now=0.0) == (["1"], ["2"])
        client.close()
    finally:
        for _port, proc, log, admin in nodes:
            admin.close()
            stop_server(proc, log)


@pytest.mark.parametrize("spec", ["REDIS://:s3cr3t-c@127.0.0.1:1/0", "redis:/guard:s3cr3t-c@h/0",
                                  "rediss//u:s3cr3t-c@h:6379/0", "redi://h/0?password=s3cr3t-c"])
def test_make_store_does_not_echo_the_password_of_a_mistyped_url(spec):
    # The policy path masks these (guard_config); the programmatic path did not.
    with pytest.raises(Exception) as ei:
        make_store(spec)
    assert "unknown budget store spec" in str(ei.value) and "s3cr3t" not in str(ei.value), str(ei.value)
