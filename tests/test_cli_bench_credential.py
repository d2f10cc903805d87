"""``qdrant-guard bench --credential VALUE`` with a malformed token: the error says that the token is
malformed, what is wrong with it, and how to get a valid one (``credential issue``), never the
verifier's advice to a library caller to pass a file's contents rather than its path, and never
the token itself (a bearer secret). Before, a malformed token given as text got that advice
("open(path).read().strip(), not the path"), and one of another prefix was read as a missing
file."""
from __future__ import annotations

from pathlib import Path

import pytest

from qdrant_guard.cli import main
from qdrant_guard.cli_args import _credential_from


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    try:
        rc = main(argv)
    except SystemExit as exc:  # argparse's usage errors
        rc = int(exc.code or 0)
    out, err = capsys.readouterr()
    return rc, out, err


@pytest.fixture()
def setup(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[Path, str]:
    """A policy whose boundary hr trusts hr.key, and a valid token of hr."""
    for name in ("guard.key", "hr.key"):
        assert _run(["keys", "new", "--out", str(tmp_path / name)], capsys)[0] == 0
    policy = tmp_path / "policy.toml"
    policy.write_text(f'signing_key = "{tmp_path / "guard.key"}"\n'
                      f'[boundaries.hr]\nauthority_keys = ["{tmp_path / "hr.key.pub"}"]\n'
                      '[collections.docs]\nclass = "PII"\nowner = "hr"\nraw_in_boundary = true\n')
    rc, token, _ = _run(["credential", "issue", "--authority", str(tmp_path / "hr.key"), "--agent", "a",
                         "--boundary", "hr"], capsys)
    assert rc == 0 and token.startswith("qgc1.")
    return policy, token.strip()


def _bench(policy: Path, value: str, capsys: pytest.CaptureFixture[str]) -> str:
    rc, out, err = _run(["bench", "--policy", str(policy), "--collection", "docs", "--credential", value,
                         "--dim", "4", "--points", "20", "--queries", "2", "--rounds", "1", "--no-progress"], capsys)
    assert rc == 2 and out == "", (rc, out, err)
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in err, err
    assert "open(path)" not in err and "not the path" not in err
    assert "qdrant-guard credential issue --authority" in err
    return err


# (how the valid token is spoilt, what the error must say is wrong)
SPOILT = [
    (lambda t: "qgc1.garbage", "has 2 dot-separated part(s)"),
    (lambda t: t.rsplit(".", 1)[0], "has 2 dot-separated part(s)"),
    (lambda t: t + "." + t, "has 6 dot-separated part(s)"),
    (lambda t: t[:-6], "signature has 60 bytes"),
    (lambda t: t + "x", "signature is not"),
    (lambda t: "qgc1.e30." + t.rsplit(".", 1)[1], "claims part is invalid"),
    (lambda t: "qgc1.%%%." + t.rsplit(".", 1)[1], "claims part is invalid"),
    (lambda t: "qgc2." + t.split(".", 1)[1], "does not start with 'qgc1.'"),
]


IDS = ["two-parts", "no-signature", "pasted-twice", "short-signature", "signature-plus-a-char", "empty-claims",
       "claims-not-base64", "other-prefix"]


@pytest.mark.parametrize("spoil,why", SPOILT, ids=IDS)
def test_a_malformed_token_given_as_text_is_called_malformed(setup, capsys, spoil, why) -> None:
    policy, token = setup
    value = spoil(token)
    err = _bench(policy, value, capsys)
    assert "--credential was given a malformed credential token as text" in err, err
    assert why in err, err
    assert value not in err and token.split(".")[2] not in err  # the secret is not echoed


@pytest.mark.parametrize("spoil,why", SPOILT[:-1], ids=IDS[:-1])
def test_a_file_holding_a_malformed_token_is_named_with_what_is_wrong(setup, capsys, tmp_path, spoil, why) -> None:
    policy, token = setup
    cred = tmp_path / "agent.cred"
    cred.write_text(spoil(token) + "\n")
    err = _bench(policy, str(cred), capsys)
    assert f"--credential file {str(cred)!r} holds a malformed credential token" in err, err
    assert why in err, err


def test_a_missing_file_with_dots_in_its_name_is_still_a_missing_file(setup, capsys, tmp_path) -> None:
    # The check for a token of another prefix must not take a mistyped file name for one.
    policy, _ = setup
    missing = "agent.v1.cred"
    rc, out, err = _run(["bench", "--policy", str(policy), "--collection", "docs", "--credential", missing,
                         "--dim", "4", "--points", "20", "--queries", "2", "--rounds", "1", "--no-progress"], capsys)
    assert rc == 2 and "neither a credential token (qgc1....) nor a readable file" in err, err


def test_a_valid_token_passes_as_text_and_as_a_file(setup, tmp_path) -> None:
    _, token = setup
    cred = tmp_path / "agent.cred"
    cred.write_text(token + "\n")
    assert _credential_from(token, "--credential") == token
    assert _credential_from(str(cred), "--credential") == token
