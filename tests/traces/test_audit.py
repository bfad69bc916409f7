"""The audit log: every token created, changed or revoked and every operator's action on a trace
or a simulation is a row that names who (user, token prefix), what, which, when and from where;
rows are never changed or deleted by the application; no row ever holds a token or a secret.

The uploads' rows (`/upload`, `/complete`) are checked with the real upload in
tests/ingest/test_uploads.py; the simulation admin's delete in tests/simulations/test_admin.py.
"""

import io
import json

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.db import transaction
from django.forms.models import model_to_dict
from django.urls import reverse

from ingest.tasks import parse_trace_task
from tests.traces.support import CHANGELIST, reingest
from traces import audit
from traces.models import ApiToken, AuditAction, AuditEntry, AuditIsAppendOnly, TraceState

pytestmark = pytest.mark.django_db
AUDIT = "/admin/traces/auditentry/"


def command(*args) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def everything_in(entry: AuditEntry) -> str:
    """Every value the row holds, as text: what a leak would show up in."""
    return json.dumps(model_to_dict(entry, fields=[f.name for f in AuditEntry._meta.fields]), default=str)


def entries(action) -> list[AuditEntry]:
    return list(AuditEntry.objects.filter(action=action).order_by("id"))


# --- tokens ------------------------------------------------------------------------------


def test_create_token_is_recorded_by_its_prefix_and_never_the_token():
    token = command("create_token", "ci", "--scope", "write").strip().splitlines()[-1]
    (entry,) = entries(AuditAction.TOKEN_CREATE)
    assert entry.token_prefix == token[:12] == ApiToken.objects.get().prefix
    assert entry.source == "command" and entry.user is None and entry.address is None
    assert entry.detail["user"] == "ci" and entry.detail["scope"] == "write"
    assert token not in everything_in(entry)
    assert token[12:] not in everything_in(entry), "not even the token's secret part"


def test_revoke_token_is_recorded_for_each_token_revoked():
    first = command("create_token", "ci").splitlines()[-1]
    second = command("create_token", "ci").splitlines()[-1]
    command("revoke_token", "ci")
    revoked = entries(AuditAction.TOKEN_REVOKE)
    assert sorted(entry.token_prefix for entry in revoked) == sorted([first[:12], second[:12]])
    assert all(entry.detail["name"] == "ci" for entry in revoked)
    for entry in revoked:
        assert first not in everything_in(entry) and second not in everything_in(entry)


def test_the_admins_token_revoke_and_change_name_the_operator_and_their_address(admin_client, admin_user):
    token = command("create_token", "dashboards").splitlines()[-1]
    record = ApiToken.objects.get()
    page = f"/admin/traces/apitoken/{record.pk}/change/"
    answer = admin_client.post(
        page, {"name": "dashboards", "expires_at_0": "", "expires_at_1": "", "rate": "5/h"}
    )
    assert answer.status_code == 302
    admin_client.post("/admin/traces/apitoken/", {"action": "revoke", "_selected_action": [record.pk]})
    (changed,) = entries(AuditAction.TOKEN_CHANGE)
    (revoked,) = entries(AuditAction.TOKEN_REVOKE)
    for entry in (changed, revoked):
        assert (entry.user, entry.username, entry.source) == (admin_user, admin_user.username, "admin")
        assert entry.token_prefix == token[:12] and entry.address == "127.0.0.1"
        assert token not in everything_in(entry)
    assert changed.detail["rate"] == "5/h" and "rate" in changed.detail["changed"]


def test_deleting_a_token_on_its_page_is_a_revoke(admin_client):
    command("create_token", "old")
    record = ApiToken.objects.get()
    admin_client.post(f"/admin/traces/apitoken/{record.pk}/delete/", {"post": "yes"})
    assert not ApiToken.objects.exists()
    assert [entry.token_prefix for entry in entries(AuditAction.TOKEN_REVOKE)] == [record.prefix]


# --- operators' actions on traces ---------------------------------------------------------


@pytest.fixture
def two_traces(make_trace):
    make_trace("bert-h100", state=TraceState.READY)
    make_trace("resnet-a100", state=TraceState.FAILED, error="stats file was truncated")


def test_mark_failed_mark_sample_and_delete_are_recorded_per_trace(staff_client, admin_user, two_traces):
    staff_client.post(CHANGELIST, {"action": "mark_failed", "_selected_action": ["bert-h100"]})
    staff_client.post(CHANGELIST, {"action": "mark_sample", "_selected_action": ["bert-h100", "resnet-a100"]})
    staff_client.post(CHANGELIST, {"action": "unmark_sample", "_selected_action": ["resnet-a100"]})
    staff_client.post(
        CHANGELIST, {"action": "delete_selected", "_selected_action": ["resnet-a100"], "post": "yes"}
    )
    assert [e.trace_id for e in entries(AuditAction.MARK_FAILED)] == ["bert-h100"]
    assert sorted(e.trace_id for e in entries(AuditAction.MARK_SAMPLE)) == ["bert-h100", "resnet-a100"]
    assert [e.trace_id for e in entries(AuditAction.UNMARK_SAMPLE)] == ["resnet-a100"]
    assert [e.trace_id for e in entries(AuditAction.DELETE)] == ["resnet-a100"]
    assert {(e.username, e.source) for e in AuditEntry.objects.all()} == {(admin_user.username, "admin")}


def test_reingest_in_the_admin_is_recorded(staff_client, two_traces, settings, monkeypatch):
    settings.CASCADE_CELERY_CONFIGURED = True
    monkeypatch.setattr(parse_trace_task, "delay", lambda trace_id, reparse=False: None)
    reingest(staff_client, "bert-h100", "resnet-a100")
    assert sorted(e.trace_id for e in entries(AuditAction.REINGEST)) == ["bert-h100", "resnet-a100"]


def test_the_address_is_the_clients_behind_a_trusted_proxy(staff_client, two_traces, settings):
    settings.CASCADE_TRUSTED_PROXIES = "127.0.0.1/32"
    staff_client.post(
        CHANGELIST,
        {"action": "mark_sample", "_selected_action": ["bert-h100"]},
        HTTP_X_FORWARDED_FOR="203.0.113.9",
    )
    (entry,) = entries(AuditAction.MARK_SAMPLE)
    assert entry.address == "203.0.113.9"


# --- append-only --------------------------------------------------------------------------


def test_entries_are_never_changed_or_deleted_through_the_orm():
    entry = audit.record(AuditAction.REINGEST, trace_id="bert-h100")
    entry.trace_id = "something-else"
    with pytest.raises(AuditIsAppendOnly):
        entry.save()
    with pytest.raises(AuditIsAppendOnly):
        entry.delete()
    with pytest.raises(AuditIsAppendOnly):
        AuditEntry.objects.filter(pk=entry.pk).update(trace_id="x")
    with pytest.raises(AuditIsAppendOnly), transaction.atomic():  # bulk_update's own atomic breaks
        AuditEntry.objects.bulk_update([entry], ["trace_id"])
    with pytest.raises(AuditIsAppendOnly):
        AuditEntry.objects.all().delete()
    assert AuditEntry.objects.get().trace_id == "bert-h100"


def test_a_users_entries_outlive_the_user():
    user = get_user_model().objects.create(username="leaver")
    audit.record(AuditAction.UPLOAD, user=user, trace_id="bert-h100", simulation="accelsim")
    user.delete()
    entry = AuditEntry.objects.get()
    assert (entry.user, entry.username) == (None, "leaver")


def test_a_detail_never_keeps_a_token_or_a_signed_url():
    _, token = ApiToken.issue(get_user_model().objects.create(username="u"))
    entry = audit.record(
        AuditAction.UPLOAD,
        detail={
            "note": f"Authorization: Bearer {token}",
            "files": [{"url": "https://bucket/key?X-Amz-Signature=abcdef&X-Amz-Credential=AKIA"}],
        },
    )
    assert token not in everything_in(entry) and "AKIA" not in everything_in(entry)
    assert entry.detail["note"] == f"Authorization: Bearer {token[:12]}…"


def test_only_the_fixed_actions_are_recorded():
    with pytest.raises(ValueError):
        audit.record("rename", trace_id="bert-h100")


# --- the admin: read-only, filtered ---------------------------------------------------------


def test_the_admin_lists_entries_read_only_even_for_a_superuser(admin_client):
    command("create_token", "ci")
    entry = AuditEntry.objects.get()
    listing = admin_client.get(AUDIT)
    assert listing.status_code == 200 and entry.token_prefix in listing.content.decode()
    assert admin_client.get(f"{AUDIT}add/").status_code == 403
    assert admin_client.get(f"{AUDIT}{entry.pk}/delete/").status_code == 403
    assert admin_client.post(f"{AUDIT}{entry.pk}/change/", {"action": "delete"}).status_code == 403
    answer = admin_client.post(
        AUDIT, {"action": "delete_selected", "_selected_action": [entry.pk], "post": "yes"}
    )
    assert answer.status_code in (200, 302)
    assert AuditEntry.objects.filter(pk=entry.pk).exists()
    assert listing.context["action_form"] is None, "no action at all: not even delete_selected"


def test_the_admin_filters_by_action_user_trace_and_date(admin_client, admin_user):
    user = get_user_model().objects.create(username="uploader")
    audit.record(AuditAction.UPLOAD, user=user, trace_id="bert-h100", simulation="a")
    audit.record(AuditAction.COMPLETE, user=user, trace_id="bert-h100", simulation="a")
    audit.record(AuditAction.MARK_FAILED, user=admin_user, trace_id="resnet-a100")

    def listed(query: str) -> list[tuple[str, str]]:
        answer = admin_client.get(f"{AUDIT}?{query}")
        assert answer.status_code == 200
        return sorted((e.action, e.trace_id) for e in answer.context["cl"].result_list)

    assert listed("action=complete") == [("complete", "bert-h100")]
    assert listed(f"user__id__exact={user.pk}") == [("complete", "bert-h100"), ("upload", "bert-h100")]
    assert listed("trace=resnet-a100") == [("mark_failed", "resnet-a100")]
    entry = AuditEntry.objects.first()
    assert len(listed(f"at__year={entry.at.year}")) == 3
    page = admin_client.get(AUDIT).content.decode()
    for title in ("By action", "By user", "By trace"):
        assert title in page


def test_the_trace_filter_offers_a_trace_reached_from_elsewhere(admin_client):
    answer = admin_client.get(f"{AUDIT}?trace=never-audited")
    assert answer.status_code == 200 and list(answer.context["cl"].result_list) == []
    assert "never-audited" in answer.content.decode()


def test_an_entry_page_shows_every_field(admin_client):
    entry = audit.record(AuditAction.DELETE, trace_id="bert-h100", simulation="accelsim", detail={"why": "x"})
    page = admin_client.get(reverse("admin:traces_auditentry_change", args=[entry.pk]))
    assert page.status_code == 200
    text = page.content.decode()
    assert "bert-h100" in text and "accelsim" in text and "why" in text
