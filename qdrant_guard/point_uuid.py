"""The value of a ``uuid.UUID`` point id, read from the slot ``UUID.__init__`` sets.

A subclass can override ``__str__``, ``__format__``, ``int`` or ``hex``; pydantic, so
qdrant-client's REST transport, sends the 128-bit value, while local mode and f-strings read the
overrides. Every place that checks, counts or signs a UUID id reads it through :func:`real_uuid`,
so they all see the id that is sent.
"""

from __future__ import annotations

import uuid
from typing import Callable

from .errors import GuardArgumentValueError

# The 128-bit value's slot, whatever a subclass puts over it. typeshed types UUID.int as an
# instance's int, so mypy sees no slot descriptor on the class.
_UUID_INT: Callable[[uuid.UUID], int] = uuid.UUID.int.__get__  # type: ignore[misc, attr-defined]


def real_uuid(value: uuid.UUID) -> uuid.UUID:
    """A ``uuid.UUID`` (or subclass) as a plain UUID of its 128-bit value: what pydantic, so
    qdrant-client's REST transport, sends for it, whatever a subclass's ``__str__``/``__format__``
    show (local mode and f-strings read those).

    Raises:
        GuardArgumentValueError: the value was never set (built without ``UUID.__init__``).
    """
    try:
        return uuid.UUID(int=_UUID_INT(value))
    except (AttributeError, TypeError, ValueError):  # unset, or a subclass keeping its bits elsewhere
        raise GuardArgumentValueError(f"point id is a {type(value).__name__} without a UUID value; pass a plain "
                                      "uuid.UUID or its str") from None
