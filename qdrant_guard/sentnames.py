"""Names as qdrant-client sends them: a str subclass among the arguments the guard decides on is
made a plain str (:func:`plain_names`), so the name the guard looked up is the one every transport
sends.
"""
from __future__ import annotations

from typing import Any

# The str arguments the guard decides on: the policy is looked up by collection_name (and by a
# str with_lookup), delete_vector_name drops receipts by vector_name, facet's key must be the
# source field on a budgeted collection, facet values and group ids of the kept text field are
# redacted for other boundaries by the top-level key that key and group_by start at, and
# set_payload's key path decides whether the payload claims a restricted source.
# collection_name and vector_name go into the REST URL with str(), the others into request
# bodies, where pydantic makes them plain str.
_NAME_ARGS = ("collection_name", "vector_name", "key", "group_by", "with_lookup")


def sent_name(value: Any) -> Any:
    """A name as qdrant-client sends it: a str subclass as its characters (what pydantic, gRPC and,
    once :func:`plain_names` has made it a str, the REST URL carry), whatever its ``__str__``,
    ``__hash__`` or ``__eq__`` would show a look-up; anything else as it is."""
    return str.__str__(value) if isinstance(value, str) and type(value) is not str else value


def plain_names(method: str, args: dict[str, Any]) -> dict[str, Any]:
    """``args`` with each str argument above, and each of migrate's ``collection_names``, a plain
    str (:func:`sent_name`).

    A str subclass could show the guard one name and Qdrant another: the guard's look-ups and
    comparisons use its ``__hash__``, ``__eq__`` or ``__getitem__`` (a policy missed is the
    unlisted one, PUBLIC under ``unlisted = "public"``; a facet key "equal" to the source field; a
    key path that seems not to start at the text field), while REST sends ``str(name)``, its
    ``__str__``, and pydantic and gRPC its characters. Sent as its characters, the name the guard
    decided on is the one every transport sends.
    """
    changed: dict[str, Any] = {}
    for key in _NAME_ARGS:
        value = args.get(key)
        if isinstance(value, str) and type(value) is not str:
            changed[key] = sent_name(value)
    names = args.get("collection_names")
    if method == "migrate" and names is not None and not isinstance(names, str):
        # A list, read once: a generator would be used up by the guard's check, and qdrant-client
        # would then migrate nothing.
        changed["collection_names"] = [sent_name(n) for n in names]
    return {**args, **changed} if changed else args

