"""Policy: pydantic models of the guard configuration and the TOML loader.

A policy is a TOML file (see ``docs/policy.md`` for every key) or a :class:`GuardConfig` built in
code. Unknown keys are rejected; every error names the file, the key path, the bad value and the
allowed values.

The code is in modules of its own, whose public names import from here too:
:mod:`qdrant_guard.policy_base` (the strict base model, :class:`SensitivityClass`),
:mod:`qdrant_guard.policy_sections` (:class:`NoisePolicy`, :class:`QueryRules`,
:class:`DiversityPolicy`, :class:`IntentPolicy`, :class:`UtilityPolicy`),
:mod:`qdrant_guard.collection_policy` (:class:`CollectionPolicy`), :mod:`qdrant_guard.guard_config`
(:class:`GuardConfig`, :class:`BoundaryConfig`, :class:`ReceiptTrust`) and
:mod:`qdrant_guard.policy_loader` (:func:`load_policy`, :func:`config_from_dict`).
"""
from __future__ import annotations

from .collection_policy import CollectionPolicy as CollectionPolicy
from .guard_config import (DEFAULT_CEILINGS as DEFAULT_CEILINGS, BoundaryConfig as BoundaryConfig,
                           GuardConfig as GuardConfig, ReceiptTrust as ReceiptTrust)
from .names import toml_key as toml_key, toml_str as toml_str
from .policy_base import Mode as Mode, SensitivityClass as SensitivityClass
from .policy_loader import config_from_dict as config_from_dict, load_policy as load_policy
from .policy_sections import (DiversityPolicy as DiversityPolicy, IntentPolicy as IntentPolicy,
                              NoisePolicy as NoisePolicy, QueryRules as QueryRules, UtilityPolicy as UtilityPolicy)

__all__ = [
    "SensitivityClass",
    "NoisePolicy",
    "QueryRules",
    "DiversityPolicy",
    "IntentPolicy",
    "UtilityPolicy",
    "CollectionPolicy",
    "BoundaryConfig",
    "ReceiptTrust",
    "GuardConfig",
    "load_policy",
]
