"""The operators' admin: find a trace, see why it failed, look at its kernels, act.

Traces and kernels come from S3, so both are read-only here; what an operator can do is
re-ingest a trace (the poller's own code path), mark it failed, or delete it. A trace can
hold a million kernels: nothing here loads them all, counts them all on every page, or
lets Django's delete confirmation collect them one by one.

`trace` and `kernel` hold the two ModelAdmins, `tokens` the API tokens', `audit` the audit
log's (read-only); `display` how values look, `filters` the list filters, `paginators` the
estimated count, `chart` the trace page's chart geometry; `analysis_pages` the kernel mix, steps, calibration and compare pages' reads and rows,
and `analysis_charts` their charts' geometry. The simulations' admin is `simulations.admin`.
The database reads behind the pages are in `traces.selectors`.
"""

from django.contrib import admin
from django.core.exceptions import ImproperlyConfigured

from traces.admin.audit import AuditEntryAdmin
from traces.admin.kernel import KernelAdmin
from traces.admin.tokens import ApiTokenAdmin
from traces.admin.trace import TraceAdmin
from traces.models import ApiToken, AuditEntry, Kernel, Trace


def register_listed_only(site: admin.AdminSite, model, admin_class) -> None:
    """Register a model whose primary key is composite, for its list alone.

    Django 5.2's `AdminSite.register` refuses such a model (ImproperlyConfigured: the admin
    cannot link to one row, and has no other way in); the kernel list links to none (read-only,
    no change page, no actions), so where `register` refuses, the admin goes into the site's
    private `_registry`, which `register` itself fills. The public way, a view of the site's own
    (`get_urls`, `get_app_list`), would restate what registering gives the list: its URL names,
    its index entry and permissions, `get_model_admin` for the pages that link to it. test_admin's
    test_django_admin_still_refuses_composite_primary_keys fails once a Django registers them
    (then `register` is enough), and the kernel list's tests once `_registry` goes.
    """
    try:
        site.register(model, admin_class)
    except ImproperlyConfigured:
        site._registry[model] = admin_class(model, site)


# The API's browsable pages, linked from the admin's header and index.
admin.site.site_url = "/api/traces"
# The trace and kernel lists need the width (ten columns and more, beside the filters): the
# sidebar only repeats the index's four links, which the breadcrumbs reach.
admin.site.enable_nav_sidebar = False

admin.site.register(Trace, TraceAdmin)
# Kernel's primary key is composite (trace, context, kernel_id): its only index (docs/decisions/0001).
register_listed_only(admin.site, Kernel, KernelAdmin)
admin.site.register(ApiToken, ApiTokenAdmin)
admin.site.register(AuditEntry, AuditEntryAdmin)
