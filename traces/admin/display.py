"""How the admin shows a trace's values: state badges, cut text, kernel names, sizes, compact
dates, notices, links."""

from collections.abc import Iterable

from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.http import urlencode
from django.utils.text import Truncator

from traces.demangle import demangle_all
from traces.models import KernelName, Trace, TraceState, name_digest

STATE_COLOURS = {
    TraceState.UPLOADING: "#5b6b7a",
    TraceState.PARSING: "#b7791f",
    TraceState.READY: "#2f855a",
    TraceState.FAILED: "#c53030",
}
# An uploading trace's notice names at most this many of the files it waits for.
WAITING_KEYS_SHOWN = 10


def kernel_changelist_url(trace_id: str, **filters) -> str:
    """The kernel list narrowed to one trace (and `filters`: ctx, q for a name)."""
    return f"{reverse('admin:traces_kernel_changelist')}?{urlencode({'trace': trace_id, **filters})}"


def state_badge(state: str):
    return format_html(
        '<span class="state-badge state-{}" style="display:inline-block;padding:1px 8px;'
        'border-radius:9px;color:#fff;background:{};font-weight:600;">{}</span>',
        state,
        STATE_COLOURS.get(state, "#5b6b7a"),
        state,
    )


def truncated(value: str | None, length: int):
    """`value` cut to `length` characters, the whole of it in a tooltip."""
    if value is None:
        return None
    return format_html('<span title="{}">{}</span>', value, Truncator(value).chars(length))


def size_text(count: int | None) -> str:
    """Bytes in the units `cascade pull` prints: B, then KiB, MiB, GiB of 1,024, one decimal."""
    if count is None:
        return "-"
    if abs(count) < 1024:
        return f"{count} B"
    value = count / 1024
    for unit in ("KiB", "MiB"):
        if abs(value) < 1024:
            return f"{value:.1f} {unit}"
        value /= 1024
    return f"{value:.1f} GiB"


def size_html(count: int | None):
    """A size that never wraps, its exact byte count on hover."""
    if count is None:
        return "-"
    return format_html('<span class="nowrap" title="{} bytes">{}</span>', f"{count:,}", size_text(count))


def shown_names(names: Iterable[str]) -> dict[str, str]:
    """Kernel names as a page shows them: demangled as ingest stored them (one query by
    digest), the rest within a request's budget (`traces.demangle.demangle_all`)."""
    names = list(dict.fromkeys(names))
    stored = dict(
        KernelName.objects.filter(digest__in=[name_digest(name) for name in names]).values_list(
            "name", "demangled"
        )
    )
    return demangle_all(names, stored=stored)


def kernel_name(symbol: str, demangled: str):
    """A kernel name whole: demangled, wrapping anywhere (templates' arguments break nowhere
    else), in a box of a few lines that scrolls for the longest; the symbol on hover."""
    return format_html('<code class="kernel-name-text" title="{}">{}</code>', symbol, demangled)


def compact_datetime(value):
    """Like "2026-11-29 17:26", for the list's date columns: they wrap between date and time only."""
    if value is None:
        return None
    local = timezone.localtime(value)
    return format_html(
        '<span class="nowrap" title="{}">{}</span> <span class="nowrap">{}</span>',
        local.isoformat(timespec="seconds"),
        local.strftime("%Y-%m-%d"),
        local.strftime("%H:%M"),
    )


def upload_notice(trace: Trace) -> str | None:
    """What an uploading trace waits for, for its page; None when it waits for nothing known."""
    if trace.state != TraceState.UPLOADING:
        return None
    if trace.metadata_json is None:
        return "No metadata.json yet: the upload is still in progress."
    missing = trace.waiting_for
    if not missing:
        return None
    shown = ", ".join(missing[:WAITING_KEYS_SHOWN])
    if len(missing) > WAITING_KEYS_SHOWN:
        shown += f" and {len(missing) - WAITING_KEYS_SHOWN} more"
    return (
        f"Waiting for {len(missing)} file(s) listed in metadata.json: {shown} "
        "(fails CASCADE_UPLOAD_TIMEOUT after the last new file)"
    )


def nothing_to_parse(trace: Trace) -> str:
    """Why an uploading trace cannot be re-ingested yet."""
    if trace.metadata_json is None:
        return "still uploading, metadata.json has not landed: nothing to parse yet"
    return "still uploading, files listed in metadata.json are missing: nothing to parse yet"
