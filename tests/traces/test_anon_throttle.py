"""Requests without valid credentials are throttled per client address:
CASCADE_ANON_RATE, keyed on the real client (cascade.addresses), 401s counted too."""

import pytest
from rest_framework.test import APIClient


@pytest.fixture
def three_a_minute(settings, db):
    settings.CASCADE_ANON_RATE = "3/minute"
    settings.CASCADE_TRUSTED_PROXIES = "127.0.0.1/32"


def statuses(path: str, n: int, **headers) -> list[int]:
    return [APIClient().get(path, **headers).status_code for _ in range(n)]


@pytest.mark.parametrize(
    ("path", "headers", "answer"),
    [
        ("/api/traces", {}, 401),  # no token
        ("/api/traces", {"HTTP_AUTHORIZATION": "Bearer cas_guessed"}, 401),  # a guessed token
        ("/api/traces", {"HTTP_AUTHORIZATION": "Token cas_guessed"}, 401),
        ("/api/", {}, 200),  # the public routes
        ("/api/schema", {}, 200),
    ],
)
def test_past_the_rate_an_address_without_credentials_gets_429(three_a_minute, path, headers, answer):
    assert statuses(path, 4, REMOTE_ADDR="203.0.113.9", **headers) == [answer] * 3 + [429]
    assert statuses(path, 1, REMOTE_ADDR="203.0.113.10", **headers) == [answer], "another address has its own"


def test_forged_forwarded_addresses_share_their_real_address_s_allowance(three_a_minute):
    answers = [
        APIClient()
        .get("/api/traces", REMOTE_ADDR="203.0.113.9", HTTP_X_FORWARDED_FOR=f"192.0.2.{n}")
        .status_code
        for n in range(4)
    ]
    assert answers == [401, 401, 401, 429]


def test_behind_the_trusted_proxy_each_client_has_its_own_allowance(three_a_minute):
    for client in ("198.51.100.1", "198.51.100.2"):
        assert statuses("/api/traces", 3, REMOTE_ADDR="127.0.0.1", HTTP_X_FORWARDED_FOR=client) == [401] * 3


def test_token_holders_are_not_counted_against_their_address(three_a_minute, api):
    assert {api.get("/api/traces", REMOTE_ADDR="203.0.113.9").status_code for _ in range(6)} == {200}
    assert statuses("/api/traces", 1, REMOTE_ADDR="203.0.113.9") == [401]


def test_an_empty_rate_is_unlimited(settings, db):
    settings.CASCADE_ANON_RATE = ""
    assert set(statuses("/api/traces", 10)) == {401}


def test_logged_in_operators_are_not_counted_against_their_address(three_a_minute, staff_client):
    answers = {staff_client.get("/api/traces", REMOTE_ADDR="203.0.113.9").status_code for _ in range(6)}
    assert answers == {200}
    assert statuses("/api/traces", 1, REMOTE_ADDR="203.0.113.9") == [401]
