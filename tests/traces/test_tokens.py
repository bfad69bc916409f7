"""API tokens an operator can manage: named, recognisable, expiring, listed, revoked, rate-limited.

Tokens had no expiry, no last-used time, no list and no revocation but a shell.
"""

import io
from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command
from django.utils import timezone

from tests.helpers import bearer
from traces.models import ApiToken

pytestmark = pytest.mark.django_db


def command(*args) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def test_tokens_are_recognisable_by_secret_scanners():
    token = command("create_token", "ci").strip().splitlines()[-1]
    assert token.startswith("cas_") and len(token) == 4 + 43
    record = ApiToken.objects.get()
    assert (record.name, record.prefix) == ("ci", token[:12])
    assert token not in str(record.__dict__), "only the digest is stored"


def test_list_tokens_shows_names_and_uses_never_the_tokens():
    token = command("create_token", "nightly").splitlines()[-1]
    bearer(token).get("/api/traces")
    listing = command("list_tokens")
    assert listing.splitlines()[0].split() == [
        "NAME",
        "USER",
        "TOKEN",
        "SCOPE",
        "CREATED",
        "LAST",
        "USED",
        "EXPIRES",
        "RATE",
    ]
    assert "nightly" in listing and f"{token[:12]}…" in listing
    assert token not in listing
    assert ApiToken.objects.get().last_used_at is not None


def test_tokens_are_read_unless_issued_with_the_write_scope():
    read = command("create_token", "reader").splitlines()[-1]
    write = command("create_token", "uploader", "--scope", "write").splitlines()[-1]
    scopes = dict(ApiToken.objects.values_list("name", "scope"))
    assert scopes == {"reader": "read", "uploader": "write"}
    rows = {line.split()[0]: line.split() for line in command("list_tokens").splitlines()[1:]}
    assert rows["reader"][3] == "read" and rows["uploader"][3] == "write"
    # Both read what a token reads today.
    for token in (read, write):
        assert bearer(token).get("/api/traces").status_code == 200
    with pytest.raises(CommandError):
        call_command("create_token", "x", "--scope", "admin", stdout=io.StringIO(), stderr=io.StringIO())


def test_last_use_is_written_at_most_once_a_minute(django_assert_num_queries):
    token = command("create_token", "busy").splitlines()[-1]
    client = bearer(token)
    client.get("/api/traces")
    first = ApiToken.objects.get().last_used_at
    client.get("/api/traces")
    assert ApiToken.objects.get().last_used_at == first
    ApiToken.objects.update(last_used_at=timezone.now() - timedelta(minutes=2))
    client.get("/api/traces")
    assert ApiToken.objects.get().last_used_at > first


def test_revoked_tokens_stop_working_at_once():
    token = command("create_token", "laptop").splitlines()[-1]
    assert bearer(token).get("/api/traces").status_code == 200
    assert command("revoke_token", "laptop").strip() == "revoked 1 token named 'laptop'"
    response = bearer(token).get("/api/traces")
    assert response.status_code == 401
    assert response.json() == {"detail": "Invalid token."}
    with pytest.raises(CommandError, match="no API token is named 'laptop'"):
        command("revoke_token", "laptop")


def test_expired_tokens_are_refused():
    token = command("create_token", "temp", "--expires-in", "1").splitlines()[-1]
    assert bearer(token).get("/api/traces").status_code == 200
    ApiToken.objects.update(expires_at=timezone.now() - timedelta(seconds=1))
    response = bearer(token).get("/api/traces")
    assert (response.status_code, response.json()) == (401, {"detail": "Token expired."})
    assert "(expired)" in command("list_tokens")


def test_each_token_has_its_own_rate(settings):
    settings.CASCADE_API_RATE = "3/minute"
    slow = command("create_token", "slow").splitlines()[-1]
    fast = command("create_token", "fast", "--rate", "100/minute").splitlines()[-1]
    answers = [bearer(slow).get("/api/traces").status_code for _ in range(4)]
    assert answers == [200, 200, 200, 429]
    throttled = bearer(slow).get("/api/traces")
    assert throttled.json()["detail"].startswith("Request was throttled.")
    assert all(bearer(fast).get("/api/traces").status_code == 200 for _ in range(10))


def test_a_bad_rate_is_refused_with_the_form_it_takes():
    with pytest.raises(CommandError, match="a rate reads like 100/minute"):
        command("create_token", "x", "--rate", "lots")


def test_tokens_issued_before_the_prefix_still_work():
    user = get_user_model().objects.create(username="old")
    legacy = "a" * 43
    from traces.models import token_digest

    ApiToken.objects.create(user=user, name="old", digest=token_digest(legacy), prefix=legacy[:8])
    assert bearer(legacy).get("/api/traces").status_code == 200


def test_the_admin_lists_tokens_by_their_first_characters_and_revokes_them(admin_client):
    token = command("create_token", "dashboards").splitlines()[-1]
    record = ApiToken.objects.get()
    page = admin_client.get("/admin/traces/apitoken/").content.decode()
    assert "dashboards" in page and f"{token[:12]}…" in page
    assert token not in page
    assert admin_client.get("/admin/traces/apitoken/add/").status_code == 403
    response = admin_client.post(
        "/admin/traces/apitoken/", {"action": "revoke", "_selected_action": [record.pk]}, follow=True
    )
    assert "Revoked 1 token(s): dashboards" in response.content.decode()
    assert bearer(token).get("/api/traces").status_code == 401


def test_the_admin_shows_a_tokens_scope_and_never_changes_it(admin_client):
    user = get_user_model().objects.create(username="uploader")
    record, _ = ApiToken.issue(user, name="uploader", scope="write")
    listing = admin_client.get("/admin/traces/apitoken/").content.decode()
    assert "uploader" in listing and ">write<" in listing
    page = f"/admin/traces/apitoken/{record.pk}/change/"
    assert "write" in admin_client.get(page).content.decode()
    answer = admin_client.post(
        page, {"name": "uploader", "expires_at_0": "", "expires_at_1": "", "scope": "read"}
    )
    assert answer.status_code == 302
    record.refresh_from_db()
    assert record.scope == "write"
