"""Loads a policy from a TOML file or a dict into a :class:`GuardConfig`, turning pydantic's
validation errors into messages that name the file, the key path, the bad value and the fix.
"""
from __future__ import annotations

import json
import os
import stat
import tomllib
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from .budget import store_kind
from .dirmodes import foreign_owner, replacement_refusal
from .group_writers import file_writer
from .errors import ConfigError, GuardArgumentTypeError
from .guard_config import GuardConfig, _mask_tokens


def _format_loc(loc: tuple[Any, ...]) -> str:
    # "[key]" is pydantic's mark for a table key (not its value) that failed: the path ends at the key.
    return ".".join(str(p) for p in loc
                    if not (isinstance(p, str) and (p.startswith("function-") or p == "[key]")))


def _value_at(data: Any, loc: tuple[Any, ...]) -> Any:
    cur = data
    for p in loc:
        if isinstance(cur, dict) and p in cur:
            cur = cur[p]
        elif isinstance(cur, (list, tuple)) and isinstance(p, int) and p < len(cur):
            cur = cur[p]
        else:
            return None
    return cur


def _key_hint(key: str) -> str:
    """A hint for an unknown key: the section it belongs in, or the key it is probably a typo of."""
    import difflib

    from .policy_doc import SECTIONS  # the reference's sections (it imports this module)

    where: dict[str, list[str]] = {}
    spelled: dict[str, str] = {}
    for title, model, _ in SECTIONS:
        section = "the top level" if title == "Top level" else title
        for name, field in model.model_fields.items():
            if not field.exclude:
                where.setdefault(field.alias or name, []).append(section)
                if field.alias:
                    spelled[name] = field.alias
    if key in spelled and key not in where:
        return f"the key is spelled {spelled[key]!r} in a policy; "
    if key in where:
        return f"{key!r} is a key of {' and '.join(where[key])}, not of this section; "
    # A singular for a plural table name ([boundary.hr] for [boundaries.hr]) is below the cutoff.
    plural = key[:-1] + "ies" if key.endswith("y") else key + "s"
    close = [plural] if plural in where else difflib.get_close_matches(key, list(where), n=1, cutoff=0.8)
    if close:
        return f"did you mean {close[0]!r} (a key of {' and '.join(where[close[0]])})? "
    return "check the spelling — "


def config_from_dict(data: dict[str, Any], *, source: str = "<dict>") -> GuardConfig:
    """Validate a policy given as a dict (as parsed from TOML).

    Raises:
        ConfigError: naming the source, key path, bad value and what is allowed.
    """
    try:
        cfg = GuardConfig.model_validate(data)
    except ValidationError as exc:
        lines = []
        for err in exc.errors():
            loc = _format_loc(tuple(err["loc"]))
            value = _mask_tokens(_value_at(data, tuple(err["loc"])))
            if err["type"] == "extra_forbidden":
                shown = repr(value)
                shown = shown if len(shown) <= 80 else shown[:76] + " ..."  # a whole mistyped section
                hint = _key_hint(str(err["loc"][-1]))
                if len(err["loc"]) == 1 and isinstance(value, dict) and "class" in value:
                    # [kb] written for [collections.kb]: the table holds a collection's keys.
                    hint = f"a collection's section is [collections.{err['loc'][0]}]; "
                lines.append(f"{source}: unknown key {loc!r} (value {shown}); {hint}see docs/policy.md")
            else:
                msg = err["msg"].removeprefix("Value error, ")
                if err["type"] in ("tuple_type", "list_type") and err["loc"]:
                    # pydantic's "a valid tuple" names a Python type; a TOML author writes an array.
                    example = json.dumps([value] if isinstance(value, str) else ["..."])
                    msg = f"expected a list (a TOML array), e.g. {err['loc'][-1]} = {example}"
                elif err["type"] in ("model_type", "dict_type") and err["loc"]:
                    # "a valid dictionary or instance of NoisePolicy": the TOML form is a table.
                    msg = f"expected a table: a [{loc}] section (or an inline table {{ ... }}) holding its keys"
                elif err["type"] == "too_short" and err["loc"][-1] == "authority_keys":
                    msg = ("a boundary needs at least one authority key: the .pub file `qdrant-guard keys new` "
                           "writes beside the authority's private key, or its 'ed25519:...' text")
                elif err["type"] == "missing" and len(err["loc"]) > 1:
                    section = _format_loc(tuple(err["loc"][:-1]))
                    msg = f"required key missing: add {err['loc'][-1]} to [{section}] (docs/policy.md)"
                ctx = err.get("ctx") or {}
                allowed = ""
                if "expected" in ctx and str(ctx["expected"]) not in msg:
                    allowed = f"; allowed: {ctx['expected']}"
                shown = "" if value is None or not err["loc"] else f" = {value!r}"
                # A check across keys has no location of its own, and its message names the keys.
                where = f"{loc}{shown}: " if loc else ""
                lines.append(f"{source}: {where}{msg}{allowed}")
        raise ConfigError("invalid qdrant_guard policy:\n  " + "\n  ".join(lines)) from None
    return cfg.model_copy(update={"source_path": source})


def load_policy(path: str | os.PathLike[str]) -> GuardConfig:
    """Load and validate a TOML policy file.

    Relative paths inside the file (keys, audit log, utility records, a ``sqlite:///`` budget store)
    are resolved against the file's directory.

    Raises:
        GuardArgumentTypeError: ``path`` is not a str or an os.PathLike of one.
        ConfigError: the file is missing, writable by every user or by a group (or named ACL
            entry) that someone other than this process's uid and root may be in (``chmod go-w
            FILE``, ``setfacl -x``; :mod:`qdrant_guard.group_writers`), owned by a uid that is
            neither this process's nor root (``chown``) or below a directory anyone may write
            without the sticky bit (``chmod o-w DIR``), that another uid owns, or that a group or
            ACL entry lets others write (``chmod g-w DIR``, ``setfacl -x``), is not valid TOML, or
            fails validation.
    """
    if not isinstance(path, (str, os.PathLike)) or not isinstance(os.fspath(path), str):
        raise GuardArgumentTypeError(
            f"load_policy() path must be a str or os.PathLike[str] naming a TOML policy file, not "
            f"{type(path).__name__}; e.g. load_policy(\"policy.toml\")")
    if os.fspath(path) == "":
        raise ConfigError("the policy path is empty; give the path of a TOML policy file")
    p = Path(path)
    try:
        with open(p, "rb") as fh:
            raw = fh.read()
            st = os.fstat(fh.fileno())
    except OSError as exc:
        hint = ""
        if isinstance(exc, FileNotFoundError):
            # A relative path is read from the working directory, which is not always the one meant.
            where = f" (that is {str(p.absolute())!r})" if not p.is_absolute() else ""
            hint = (f"{where}; fix the path, or start from docs/policy.example.toml (every key) or the "
                    "README's quick-start policy")
        raise ConfigError(f"cannot read policy file {str(p)!r}: {exc.strerror}{hint}") from None
    try:
        writer = file_writer(p, st) if stat.S_ISREG(st.st_mode) else None
    except OSError as exc:  # an ACL it cannot read: not taken for none
        raise ConfigError(f"policy file {str(p)!r}: {exc.strerror}") from exc
    if writer is not None:
        # As for the keys it names: whoever can write the policy chooses whom the guard trusts.
        raise ConfigError(
            f"policy file {str(p)!r} is writable by other users (mode {stat.S_IMODE(st.st_mode):o}{writer.note}): "
            "whoever can write it sets every rule the guard enforces (the boundaries' authority keys, who reads and "
            f"writes each collection); run `{writer.fix}` and retry")
    uid = foreign_owner(st) if stat.S_ISREG(st.st_mode) else None
    if uid is not None:
        raise ConfigError(
            f"policy file {str(p)!r} is owned by uid {uid}, neither this process's uid ({os.geteuid()}) nor root "
            f"(mode {stat.S_IMODE(st.st_mode):o}): its owner can change its mode and write every rule the guard "
            f"enforces; run `chown {os.geteuid()} {p}` (as root) and retry")
    try:
        why = replacement_refusal(p, "policy file", "policy") if stat.S_ISREG(st.st_mode) else None
    except OSError as exc:  # a directory on its path cannot be examined: not taken for safe
        raise ConfigError(f"policy file {str(p)!r}: {exc.strerror}") from exc
    if why is not None:
        raise ConfigError(why)
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        head = raw.lstrip()[:16]
        what = ("a PEM key file" if head.startswith(b"-----BEGIN") else
                "a JSON file (an audit log, a utility record?)" if head.startswith((b"{", b"[{")) else "")
        hint = (f"; it looks like {what}, not a policy: give the TOML policy file (start from "
                "docs/policy.example.toml), which names keys and logs by path") if what else ""
        if not what and isinstance(exc, tomllib.TOMLDecodeError):
            # tomllib names the line of the second occurrence only; say what to do with the two.
            if str(exc).startswith("Cannot declare"):
                hint = ("; a [section] may appear once in a file: merge the keys of both sections of that "
                        "name into the first one and delete the second header")
            elif str(exc).startswith("Cannot overwrite a value"):
                hint = ("; a key is set twice in one section (or a [section] reuses the name of a key set "
                        "above): keep one of the two")
        raise ConfigError(f"{p}: not valid TOML: {exc}{hint}") from None
    base = p.resolve().parent

    def resolved(path: Any) -> Any:
        # An empty path stays empty, for the loader to refuse: base / "" would be the directory itself.
        return str(base / path) if isinstance(path, str) and path else path

    def keys_resolved(keys: list[Any]) -> list[Any]:
        return [k if isinstance(k, str) and k.startswith("ed25519:") else resolved(k) for k in keys]

    for key in ("signing_key", "audit_log"):
        if key in data:
            data[key] = resolved(data[key])
    store = data.get("budget_store")
    if isinstance(store, str) and store_kind(store) == "sqlite" and not store[len("sqlite:///"):].startswith("/"):
        data["budget_store"] = "sqlite:///" + str(base / store[len("sqlite:///"):])
    for coll in [data.get("default"), *(data.get("collections") or {}).values()]:
        util = coll.get("utility") if isinstance(coll, dict) else None
        if isinstance(util, dict) and "record" in util:
            util["record"] = resolved(util["record"])
        if isinstance(util, dict) and isinstance(util.get("records"), dict):
            util["records"] = {name: resolved(path) for name, path in util["records"].items()}
        if isinstance(coll, dict) and isinstance(coll.get("receipt_keys"), list):
            coll["receipt_keys"] = keys_resolved(coll["receipt_keys"])
    for b in (data.get("boundaries") or {}).values():
        if isinstance(b, dict) and isinstance(b.get("authority_keys"), list):
            b["authority_keys"] = keys_resolved(b["authority_keys"])
    if isinstance(data.get("audit_trusted_keys"), list):
        data["audit_trusted_keys"] = keys_resolved(data["audit_trusted_keys"])
    rec = data.get("receipts")
    for knob in ("trusted_keys", "retired_keys"):
        if isinstance(rec, dict) and isinstance(rec.get(knob), list):
            rec[knob] = keys_resolved(rec[knob])
    return config_from_dict(data, source=str(p))
