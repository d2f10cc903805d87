"""The exclusion's ``must_not`` conditions as built before h-lperf (one ``must [source] must_not
[its admitted ids]`` filter per exhausted source), kept as the reference that
:meth:`qdrant_guard.sourcefilters.Exclusion.conditions` must agree with point for point
(tests/test_exclusion_shape.py) and as the baseline of bench/exclusion_local_ab.py."""
from __future__ import annotations

from typing import Any

from qdrant_client.http import models

from qdrant_guard.sourcefilters import Exclusion, _point_ids, _source_condition


def old_conditions(exclusion: Exclusion) -> list[Any]:
    out: list[Any] = []
    for source, admitted in sorted(exclusion.sources.items()):
        named = _source_condition(exclusion.source_field, source)
        out.append(named if not admitted else models.Filter(
            must=[named], must_not=[models.HasIdCondition(has_id=_point_ids(admitted))]))
    if exclusion.ids:
        out.append(models.HasIdCondition(has_id=_point_ids(exclusion.ids)))
    return out
