"""The traces app's data, a module a resource: `trace` (Trace, Step, DeletedTrace), `kernel`
(Kernel and what its rows point into, KernelPurge), `tokens` (ApiToken), `audit` (AuditEntry,
the audit log) and `detail_body` (DetailBody, DetailBodyChunk: a ready detail's answers, written
once). Every name is importable from `traces.models`, as Django's migrations and the app's
modules name them."""

from traces.models.audit import AuditAction, AuditEntry, AuditIsAppendOnly, AuditSource
from traces.models.detail_body import DetailBody, DetailBodyChunk
from traces.models.kernel import (
    KERNEL_COLUMNS,
    KERNEL_ORDER,
    NO_DEVICE,
    Kernel,
    KernelContext,
    KernelName,
    KernelPurge,
    TraceKeyForeignKey,
    UnsignedIntegerField,
    name_digest,
)
from traces.models.tokens import TOKEN_PREFIX, ApiToken, TokenScope, token_digest
from traces.models.trace import (
    CURRENT_PARSER_VERSION,
    DeletedTrace,
    Step,
    Trace,
    TraceState,
    files_fingerprint,
    next_trace_key,
    next_trace_keys,
)

__all__ = [
    "CURRENT_PARSER_VERSION",
    "KERNEL_COLUMNS",
    "KERNEL_ORDER",
    "NO_DEVICE",
    "TOKEN_PREFIX",
    "ApiToken",
    "AuditAction",
    "AuditEntry",
    "AuditIsAppendOnly",
    "AuditSource",
    "DeletedTrace",
    "DetailBody",
    "DetailBodyChunk",
    "Kernel",
    "KernelContext",
    "KernelName",
    "KernelPurge",
    "Step",
    "TokenScope",
    "Trace",
    "TraceKeyForeignKey",
    "TraceState",
    "UnsignedIntegerField",
    "files_fingerprint",
    "name_digest",
    "next_trace_key",
    "next_trace_keys",
    "token_digest",
]
