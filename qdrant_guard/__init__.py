"""qdrant_guard: a drop-in guarded ``qdrant_client.QdrantClient``.

Replace ``from qdrant_client import QdrantClient`` with ``from qdrant_guard import QdrantClient``
and pass ``guard=`` (a policy) and ``principal=`` (who is calling).
"""
from __future__ import annotations

from ._impl import implementation
from .async_client import AsyncQdrantClient
from .boundary import Principal, issue_credential, verify_credential
from .client import QdrantClient
from .decision import Verdict
from .errors import (
    AuditError,
    AuditIntegrityError,
    AuditUnauthenticatedError,
    ConfigError,
    CredentialError,
    GuardArgumentTypeError,
    GuardArgumentValueError,
    GuardRefusal,
    InvalidVectorError,
    NativeUnavailableError,
    QdrantGuardError,
    QdrantGuardWarning,
    ReceiptError,
    UnsupportedWriteError,
    UntaggedSourceWarning,
)
from .noise_params import NoiseParams
from .policy import CollectionPolicy, GuardConfig, NoisePolicy, SensitivityClass, load_policy

__version__ = "0.1.0"

__all__ = [
    "AsyncQdrantClient",
    "AuditError",
    "AuditIntegrityError",
    "AuditUnauthenticatedError",
    "CollectionPolicy",
    "ConfigError",
    "CredentialError",
    "GuardArgumentTypeError",
    "GuardArgumentValueError",
    "GuardConfig",
    "GuardRefusal",
    "InvalidVectorError",
    "NativeUnavailableError",
    "NoiseParams",
    "NoisePolicy",
    "Principal",
    "QdrantClient",
    "QdrantGuardError",
    "QdrantGuardWarning",
    "ReceiptError",
    "SensitivityClass",
    "UnsupportedWriteError",
    "UntaggedSourceWarning",
    "Verdict",
    "implementation",
    "issue_credential",
    "load_policy",
    "verify_credential",
]
