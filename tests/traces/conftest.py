"""Fixtures for the admin's tests: kernels in bulk, users of each kind."""

import pytest
from django.contrib.auth import get_user_model
from django.db import transaction
from django.test import Client

from tests.helpers import kernel_row
from traces import kernel_store
from traces.models import Kernel, Trace


@pytest.fixture
def make_kernels(db):
    """`make_kernels(trace, [insts, ...], ctx=...)`: one kernel per value, ids from `first`."""

    def make(trace: Trace, insts: list[int | None], *, ctx: str | None = "0x6165bdd7ec90", first: int = 1):
        with transaction.atomic():
            kernel_store.kernels_append(
                trace.pk,
                (
                    kernel_row(
                        first + n,
                        ctx=ctx,
                        name=f"_Z6kernel{first + n}Pdi",
                        insts=value,
                        traced=(first + n) % 2 == 1,
                    )
                    for n, value in enumerate(insts)
                ),
            )
        count = Kernel.objects.filter(trace=trace).count()
        Trace.objects.filter(pk=trace.pk).update(kernel_count=count)
        trace.kernel_count = count

    return make


@pytest.fixture
def staff_client(admin_user) -> Client:
    """A superuser's session: staff with every permission."""
    client = Client()
    client.force_login(admin_user)
    return client


@pytest.fixture
def make_viewer(db):
    """`make_viewer(*codenames)`: the session of staff who hold only these `traces` permissions."""
    from django.contrib.auth.models import Permission

    def make(*codenames: str) -> Client:
        user = get_user_model().objects.create_user("viewer", password="viewer-pass-123", is_staff=True)
        user.user_permissions.set(
            Permission.objects.filter(content_type__app_label="traces", codename__in=codenames)
        )
        client = Client()
        client.force_login(user)
        return client

    return make


@pytest.fixture
def viewer_client(make_viewer) -> Client:
    """Staff who may only look at traces and kernels."""
    return make_viewer("view_trace", "view_kernel")


@pytest.fixture
def openapi(client_anon, db) -> dict:
    """The API's OpenAPI schema, as /api/schema serves it."""
    response = client_anon.get("/api/schema", HTTP_ACCEPT="application/json")
    assert response.status_code == 200
    return response.json()


# --- the admin in headless Chromium (tests/traces/test_*_browser.py) ---------------------------


@pytest.fixture
def browser():
    from tests.traces.browser import chromium

    with chromium(implicit_wait=5) as driver:
        yield driver


@pytest.fixture
def operator(transactional_db):
    from tests.traces.browser import OPERATOR

    username, password = OPERATOR
    return get_user_model().objects.create_superuser(username, password=password)
