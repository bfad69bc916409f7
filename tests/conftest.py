"""Fixtures shared by every test: API clients with tokens, traces, the database vendor."""

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from rest_framework.test import APIClient

from traces.models import ApiToken, Trace


@pytest.fixture
def on_postgres():
    if connection.vendor != "postgresql":
        pytest.skip("needs PostgreSQL (set DATABASE_URL=postgres://...): the test checks PostgreSQL behaviour")


@pytest.fixture
def api_token(db) -> str:
    user = get_user_model().objects.create(username="api-user")
    _, token = ApiToken.issue(user)
    return token


@pytest.fixture
def client_anon() -> APIClient:
    return APIClient()


@pytest.fixture
def api(api_token) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {api_token}")
    return client


@pytest.fixture
def make_trace(db):
    def make(trace_id: str, **fields) -> Trace:
        return Trace.objects.create(id=trace_id, **fields)

    return make
