"""A real redis-server for the session (the ``redis_url`` fixture, registered in conftest.py).

It requires a password (``--requirepass``), which ``redis_url`` carries: RedisBudgetStore refuses
a server that lets clients without credentials write (tests/test_redis_store_access.py).
"""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
import uuid
from typing import IO, Any

import pytest

INSTALL_HINT = "redis-server is not on PATH; install it with: apt-get install -y redis-server"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="session")
def redis_url(tmp_path_factory):
    exe = shutil.which("redis-server")
    missing = INSTALL_HINT if exe is None else None
    try:
        import redis  # noqa: F401  (start_server needs it)
    except ImportError:
        missing = missing or "the redis package is missing; install it with: pip install 'redis>=5'"
    if missing:
        if os.environ.get("CI") == "true":
            pytest.fail(missing)
        pytest.skip(missing)
    workdir = tmp_path_factory.mktemp("redis")
    password = uuid.uuid4().hex
    for _attempt in range(3):
        port = free_port()
        started = start_server(exe, workdir, port, "--requirepass", password, password=password, timeout_s=10)
        if started is None:
            continue  # port taken between probe and bind, or slow start: try another port
        proc, log, client = started
        try:
            yield f"redis://:{password}@127.0.0.1:{port}/0"
        finally:
            client.close()
            stop_server(proc, log)
        return
    pytest.fail(f"redis-server did not answer PING on 3 ports; see logs in {workdir}")


def stop_server(proc: "subprocess.Popen[Any]", log: IO[Any]) -> None:
    """Stop a redis-server started by a fixture (kill it if SIGTERM is not enough) and close its log."""
    proc.terminate()
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    log.close()


def start_server(exe: str, workdir: Any, port: int, *extra: str, timeout_s: float, password: str | None = None) -> Any:
    """Start redis-server on ``port`` (``extra``: more server options) and wait until it answers
    PING: ``(proc, log, client)``, or None if it did not within ``timeout_s`` (stopped again).
    ``password``: the one ``extra`` sets with ``--requirepass``, for the PING and the client."""
    import redis

    log = open(workdir / f"redis-{port}.log", "wb")
    proc = subprocess.Popen(
        [exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", *extra,
         "--dir", str(workdir)],
        stdout=log, stderr=subprocess.STDOUT,
    )
    client = redis.Redis(host="127.0.0.1", port=port, password=password, socket_timeout=2)
    deadline = time.monotonic() + timeout_s
    while proc.poll() is None and time.monotonic() < deadline:
        try:
            if client.ping():
                return proc, log, client
        except redis.ConnectionError:
            time.sleep(0.05)
    client.close()
    proc.kill()
    proc.wait()
    log.close()
    return None
