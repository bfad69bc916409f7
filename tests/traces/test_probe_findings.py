"""The web tier's findings of a security probe, each as its contract.

3: a token's rate the throttle cannot read made every request with that token a 500.
10: a kernel name of a few hundred bytes demangled to hundreds of megabytes.
12: behind the documented proxy, five wrong passwords from anywhere locked `admin` out for all.
14: NUL in admin filters and compare ids answered 500; `?by=` was echoed back whole.
15: any user who could log in at /api-auth/login/ read every trace.
"""

import io
import itertools
import logging

import pytest
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Permission
from django.core.management import CommandError, call_command
from django.test import Client
from rest_framework.test import APIClient

from tests.traces.support import hostile
from traces.models import ApiToken

pytestmark = pytest.mark.django_db


def bearer(token: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    return client


# --- a token's rate ------------------------------------------------------------


@pytest.fixture
def token_record(db) -> tuple[ApiToken, str]:
    user = get_user_model().objects.create(username="script")
    return ApiToken.issue(user, name="script")


def change_rate(admin_client, record: ApiToken, rate: str):
    return admin_client.post(
        f"/admin/traces/apitoken/{record.pk}/change/",
        {"name": record.name, "expires_at_0": "", "expires_at_1": "", "rate": rate},
    )


@pytest.mark.parametrize(
    "rate", ["lots", "100", "100/fortnight", "/minute", "-5/minute", "0/minute", "1e3/s"]
)
def test_the_admin_refuses_a_rate_the_throttle_cannot_read(admin_client, token_record, rate):
    record, _ = token_record
    response = change_rate(admin_client, record, rate)
    assert response.status_code == 200, "the form again, with the error"
    assert "A rate reads like 100/minute" in response.content.decode()
    record.refresh_from_db()
    assert record.rate == ""


@pytest.mark.parametrize("rate", ["2/min", "2/m", "2/minute", "2/h", "2/day", "2/s"])
def test_the_admin_takes_drf_rates_and_the_token_is_throttled_by_them(admin_client, token_record, rate):
    record, token = token_record
    assert change_rate(admin_client, record, rate).status_code == 302
    record.refresh_from_db()
    assert record.rate == rate
    client = bearer(token)
    assert [client.get("/api/traces").status_code for _ in range(3)] == [200, 200, 429]


@pytest.mark.parametrize("rate", ["lots", "100/min?", "0/minute"])
def test_create_token_refuses_a_rate_the_throttle_cannot_read(rate):
    with pytest.raises(CommandError, match="a rate reads like 100/minute"):
        call_command("create_token", "x", "--rate", rate, stdout=io.StringIO(), stderr=io.StringIO())


def test_create_token_takes_drf_rates():
    out = io.StringIO()
    call_command("create_token", "x", "--rate", "1/min", stdout=out, stderr=io.StringIO())
    client = bearer(out.getvalue().splitlines()[-1])
    assert [client.get("/api/traces").status_code for _ in range(2)] == [200, 429]


@pytest.mark.parametrize("stored", ["lots", "100/min?", "1.5/minute", "x/y/z"])
def test_a_bad_rate_already_stored_gets_the_default_rate_and_a_warning(
    token_record, settings, caplog, monkeypatch, stored
):
    from traces.throttling import TokenRateThrottle

    monkeypatch.setattr(TokenRateThrottle, "warned", set())  # token keys come back between tests
    settings.CASCADE_API_RATE = "3/minute"
    record, token = token_record
    ApiToken.objects.filter(pk=record.pk).update(rate=stored)
    client = bearer(token)
    with caplog.at_level(logging.WARNING, logger="traces.throttling"):
        answers = [client.get("/api/traces").status_code for _ in range(4)]
    assert answers == [200, 200, 200, 429], "CASCADE_API_RATE, never a 500"
    warnings = [r.getMessage() for r in caplog.records if r.name == "traces.throttling"]
    assert len(warnings) == 1, "one warning, not one per request"
    assert "'script'" in warnings[0] and repr(stored) in warnings[0] and "CASCADE_API_RATE" in warnings[0]


def test_check_refuses_an_unreadable_default_rate(settings):
    from traces.throttling import check_api_rate

    settings.CASCADE_API_RATE = "100/min"
    assert check_api_rate(None) == []
    settings.CASCADE_API_RATE = "lots"
    assert [error.id for error in check_api_rate(None)] == ["cascade.E001"]


# --- the client's address behind the proxy ------------------------------------

PASSWORD = "correct horse battery staple"


@pytest.fixture
def operator(django_user_model):
    return django_user_model.objects.create_user("admin", password=PASSWORD, is_staff=True)


def log_in(
    address: str, password: str, *, forwarded_for: str | None = None, form: str = "/admin/login/"
) -> int:
    """A login as a client at `address`; behind the proxy, REMOTE_ADDR is the proxy's own."""
    headers = {"REMOTE_ADDR": "10.0.0.2" if forwarded_for is not None else address}
    if forwarded_for is not None:
        headers["HTTP_X_FORWARDED_FOR"] = forwarded_for
    return Client().post(form, {"username": "admin", "password": password}, **headers).status_code


def five_wrong_passwords(address: str, **kwargs) -> list[int]:
    return [log_in(address, f"guess {n}", **kwargs) for n in range(5)]


PROXY = "10.0.0.2"


@pytest.mark.parametrize("form", ["/admin/login/", "/api-auth/login/"])
def test_behind_the_proxy_a_lockout_falls_on_the_attackers_address_alone(operator, settings, form):
    settings.AXES_FAILURE_LIMIT = 5
    settings.CASCADE_TRUSTED_PROXIES = f"{PROXY}/32"
    # The proxy appends the address it saw; what the attacker sends itself comes first.
    attacker = "203.0.113.9"
    assert five_wrong_passwords(attacker, forwarded_for=attacker, form=form)[-1] == 429
    assert log_in(attacker, PASSWORD, forwarded_for=f"198.51.100.7, {attacker}", form=form) == 429, (
        "a forged X-Forwarded-For entry does not lift the attacker's lockout"
    )
    assert log_in("198.51.100.7", PASSWORD, forwarded_for="198.51.100.7", form=form) == 302, (
        "another client still logs in as admin"
    )


def test_behind_two_trusted_proxies_the_client_is_the_first_untrusted_entry_from_the_right(
    operator, settings
):
    settings.AXES_FAILURE_LIMIT = 5
    settings.CASCADE_TRUSTED_PROXIES = "10.0.0.0/24"
    five_wrong_passwords("203.0.113.9", forwarded_for="203.0.113.9, 10.0.0.1")
    assert log_in("x", PASSWORD, forwarded_for="203.0.113.9, 10.0.0.1") == 429
    assert log_in("x", PASSWORD, forwarded_for="198.51.100.7, 10.0.0.1") == 302


def forged_login(n: int, password: str, *, peer: str = "203.0.113.9") -> int:
    """A login straight to gunicorn from `peer`, with a made-up X-Forwarded-For."""
    return (
        Client()
        .post(
            "/admin/login/",
            {"username": "admin", "password": password},
            REMOTE_ADDR=peer,
            HTTP_X_FORWARDED_FOR=f"192.0.2.{n}",
        )
        .status_code
    )


@pytest.mark.parametrize("trusted", ["", f"{PROXY}/32"])
def test_rotating_forged_addresses_from_an_untrusted_peer_are_locked_out(operator, settings, trusted):
    """Twelve wrong passwords, each with another forged X-Forwarded-For, sent
    straight to gunicorn (a peer that is not a trusted proxy) are one address, and locked out."""
    settings.AXES_FAILURE_LIMIT = 5
    settings.CASCADE_TRUSTED_PROXIES = trusted
    answers = [forged_login(n, f"guess {n}") for n in range(12)]
    assert answers[:4] == [200] * 4 and set(answers[5:]) == {429}
    assert forged_login(99, PASSWORD) == 429, "a new forged address does not lift the lockout"
    # The real admin, at the address the attacker forged, is not locked out.
    assert log_in("192.0.2.3", PASSWORD) == 302


def test_forged_addresses_never_lock_the_real_admin_out(operator, settings):
    """Six wrong passwords forging the real admin's address, from elsewhere: the admin still logs in."""
    settings.AXES_FAILURE_LIMIT = 5
    settings.CASCADE_TRUSTED_PROXIES = f"{PROXY}/32"
    admin_address = "198.51.100.7"
    for n in range(6):
        Client().post(
            "/admin/login/",
            {"username": "admin", "password": f"guess {n}"},
            REMOTE_ADDR="203.0.113.9",
            HTTP_X_FORWARDED_FOR=admin_address,
        )
    assert log_in(admin_address, PASSWORD) == 302  # straight from the admin's address
    assert log_in(admin_address, PASSWORD, forwarded_for=admin_address) == 302  # through the proxy


def test_the_deployment_settings_trust_no_proxy_unless_told(monkeypatch):
    """CASCADE_TRUSTED_PROXIES: empty by default, a bad network refused at start, and the old
    CASCADE_PROXY_COUNT (which believed whoever reached gunicorn) refused, not silently ignored."""
    import importlib

    from django.core.exceptions import ImproperlyConfigured

    import cascade.settings

    try:
        monkeypatch.setenv("DJANGO_HTTPS", "1")
        monkeypatch.delenv("CASCADE_TRUSTED_PROXIES", raising=False)
        monkeypatch.delenv("CASCADE_PROXY_COUNT", raising=False)
        assert importlib.reload(cascade.settings).CASCADE_TRUSTED_PROXIES == ""
        monkeypatch.setenv("CASCADE_TRUSTED_PROXIES", "127.0.0.1/32, 10.0.0.0/8, ::1")
        assert importlib.reload(cascade.settings).CASCADE_TRUSTED_PROXIES == "127.0.0.1/32, 10.0.0.0/8, ::1"
        monkeypatch.setenv("CASCADE_TRUSTED_PROXIES", "127.0.0.1, nginx")
        with pytest.raises(ImproperlyConfigured, match="'nginx' is not an IP address or CIDR network"):
            importlib.reload(cascade.settings)
        monkeypatch.setenv("CASCADE_TRUSTED_PROXIES", "")
        monkeypatch.setenv("CASCADE_PROXY_COUNT", "1")
        with pytest.raises(ImproperlyConfigured, match="CASCADE_PROXY_COUNT is no longer read"):
            importlib.reload(cascade.settings)
    finally:
        monkeypatch.undo()
        importlib.reload(cascade.settings)


# --- API reads by a password login ------------------------------------------------

READS = ["/api/traces", "/api/traces/demo", "/api/traces/demo/summary", "/api/traces/demo/compare/demo"]


def logged_in(
    django_user_model, *, staff: bool, perms: tuple[str, ...] = (), superuser: bool = False
) -> Client:
    user = django_user_model.objects.create_user(
        "person", password=PASSWORD, is_staff=staff, is_superuser=superuser
    )
    user.user_permissions.set(Permission.objects.filter(content_type__app_label="traces", codename__in=perms))
    client = Client()
    response = client.post("/api-auth/login/", {"username": "person", "password": PASSWORD})
    assert response.status_code == 302, "the browsable API's login form"
    return client


@pytest.fixture
def demo(make_trace):
    return make_trace("demo", state="ready")


@pytest.mark.parametrize(
    "staff, perms",
    [
        (False, ()),
        (False, ("view_trace", "view_kernel")),
        (True, ()),
        (True, ("view_kernel", "view_apitoken")),
    ],
    ids=[
        "no staff, no permission",
        "permission without staff",
        "staff without permission",
        "other permissions",
    ],
)
@pytest.mark.parametrize("path", READS)
def test_a_login_that_may_not_view_traces_in_the_admin_reads_none_through_the_api(
    django_user_model, demo, staff, perms, path
):
    client = logged_in(django_user_model, staff=staff, perms=perms)
    for accept in ("application/json", "text/html"):
        response = client.get(path, HTTP_ACCEPT=accept)
        assert response.status_code == 403, accept
    body = client.get(path, HTTP_ACCEPT="application/json").json()
    assert set(body) == {"detail"} and "view trace permission" in body["detail"]


@pytest.mark.parametrize(
    "superuser, perms", [(False, ("view_trace",)), (True, ())], ids=["viewer", "superuser"]
)
@pytest.mark.parametrize("path", READS)
def test_staff_who_may_view_traces_read_them_through_the_api(django_user_model, demo, superuser, perms, path):
    client = logged_in(django_user_model, staff=True, perms=perms, superuser=superuser)
    assert client.get(path, HTTP_ACCEPT="application/json").status_code == 200


def test_a_bearer_token_reads_as_before_whoever_holds_it(demo, token_record):
    record, token = token_record
    assert not record.user.is_staff and not record.user.has_perm("traces.view_trace")
    for path in READS:
        assert bearer(token).get(path).status_code == 200, path


# --- NUL (which PostgreSQL cannot store) in ids and filters -----------------------

NUL = "%00"


@pytest.fixture
def other(make_trace):
    return make_trace("other", state="ready")


@pytest.mark.parametrize(
    "path, missing",
    [
        (f"/api/traces/{NUL}", "\x00"),
        (f"/api/traces/a{NUL}b", "a\x00b"),
        (f"/api/traces/{NUL}/summary", "\x00"),
        (f"/api/traces/{NUL}/compare/demo", "\x00"),
        (f"/api/traces/demo/compare/{NUL}", "\x00"),
        (f"/api/traces/other/compare/x{NUL}", "x\x00"),
    ],
)
def test_an_api_id_with_nul_is_a_trace_not_found_and_named(api, demo, other, path, missing):
    response = api.get(path)
    assert response.status_code == 404
    assert response.json() == {"detail": f"trace {missing} not found"}


def test_a_detail_asked_conditionally_or_by_head_with_nul_is_not_found(api, demo):
    assert api.get(f"/api/traces/{NUL}", HTTP_IF_NONE_MATCH='"x"').status_code == 404
    assert api.head(f"/api/traces/{NUL}").status_code == 404


@pytest.mark.parametrize(
    "name", ["state", "model", "source_gpu", "trace_gpu_arch", "sample", "created_after", "created_before"]
)
def test_an_api_filter_with_nul_is_a_400_that_names_it(api, demo, name):
    response = api.get(f"/api/traces?{name}=x{NUL}")
    assert response.status_code == 400
    assert response.json()["detail"].startswith(f"{name} accepts ")


@pytest.mark.parametrize("by", ["x" * 10_000, NUL, "name" + NUL])
def test_compare_by_is_echoed_cut_short(api, demo, by):
    response = api.get(f"/api/traces/demo/compare/demo?by={by}")
    assert response.status_code == 400
    detail = response.json()["detail"]
    # Over-long text and NUL are refused before the route reads `by` (traces.params).
    assert detail.startswith("by ")
    assert len(detail) < 200


ADMIN_QUERIES = [
    "/admin/traces/trace/?state__exact=%00",
    "/admin/traces/trace/?sample__exact=%00",
    "/admin/traces/trace/?trace_gpu_arch__exact=%00",
    "/admin/traces/trace/?id__exact=%00",
    "/admin/traces/trace/?q=%00",
    "/admin/traces/trace/?parser=%00",
    "/admin/traces/trace/?o=%00",
    "/admin/traces/trace/?state__exact=ready&q=a%00",
    "/admin/traces/kernel/?trace=%00",
    "/admin/traces/kernel/?trace=demo&ctx=%00",
    "/admin/traces/kernel/?ctx=%00",
    "/admin/traces/kernel/?q=%00",
    "/admin/traces/kernel/?traced__exact=%00",
    "/admin/traces/apitoken/?q=%00",
    "/admin/traces/apitoken/?expires_at__gte=%00",
]


@pytest.mark.parametrize("path", ADMIN_QUERIES)
def test_an_admin_list_filtered_by_nul_is_a_400(staff_client, demo, path):
    response = staff_client.get(path)
    assert response.status_code == 400
    assert "NUL" in response.content.decode()


@pytest.mark.parametrize("query", ["a=%00&b=demo", "a=demo&b=%00", "a=demo&b=other%00"])
def test_the_admin_compare_page_with_a_nul_id_is_not_found(staff_client, demo, other, query):
    assert staff_client.get(f"/admin/traces/trace/compare/?{query}").status_code == 404


@pytest.mark.parametrize("view", ["change", "delete", "history"])
@pytest.mark.parametrize("quoted", ["%00", "_00", "demo_00"])
def test_an_admin_trace_page_with_a_nul_id_is_not_found(staff_client, demo, view, quoted):
    response = staff_client.get(f"/admin/traces/trace/{quoted}/{view}/")
    # Django's admin answers an id that names no object with a redirect and a message.
    assert response.status_code in (302, 404)


# --- names whose demangled form doubles at each nesting level ----------------------


def test_the_hostile_names_double_at_each_level():
    import cxxfilt

    assert hostile(2) == "_Z1f1A1BIS_S_ES0_IS1_S1_E", "the probe's name"
    assert (
        cxxfilt.demangle(hostile(3))
        == "f(A, B<A, A>, B<B<A, A>, B<A, A> >, B<B<B<A, A>, B<A, A> >, B<B<A, A>, B<A, A> > >)"
    )
    lengths = [len(cxxfilt.demangle(hostile(levels))) for levels in range(8, 13)]
    assert all(2 * shorter < longer for shorter, longer in itertools.pairwise(lengths)), lengths
    assert 260 <= len(hostile(24)) <= 280, "the probe's 218 MB name"


@pytest.mark.parametrize("levels", [17, 24, 40])
def test_a_hostile_name_demangles_to_a_bounded_text(levels):
    from traces.demangle import DEMANGLED_MAX_CHARS, demangle

    name = hostile(levels)
    shown = demangle(name)
    assert len(shown) <= DEMANGLED_MAX_CHARS + 100
    if shown != name:  # demangled, then cut where it passed the bound, and it says so
        assert shown.startswith("f(A, B<A, A>, B<B<A, A>, B<A, A> >")
        assert "… [cut: " in shown and " characters, #" in shown


def test_real_names_are_demangled_whole():
    import cxxfilt

    from tests.traces.support import FLASH
    from traces.demangle import demangle

    # From the H100 sample's stats files: 458 bytes, 5,081 characters demangled.
    distribution = (
        "_ZN2at6native54_GLOBAL__N__0d993ca2_21_DistributionNormal_cu_0c5b6e8543distribution_elemen"
        "twise_grid_stride_kernelIfLi4EZNS0_9templates4cuda20normal_and_transformIN3c104HalfEfPNS_1"
        "7CUDAGeneratorImplEZZZNS4_13normal_kernelIS9_EEvRKNS_10TensorBaseEddT_ENKUlvE_clEvENKUlvE1"
        "_clEvEUlfE_EEvRNS_18TensorIteratorBaseET1_T2_EUlP24curandStatePhilox4_32_10E0_ZNS1_27distr"
        "ibution_nullary_kernelIS7_f6float4S9_SO_SH_EEvSJ_SL_RKT3_T4_EUlifE_EEviNS_15PhiloxCudaStat"
        "eESK_SL_"
    )
    for name in (FLASH, distribution, "_Z6vecAddPdS_S_i"):
        assert demangle(name) == cxxfilt.demangle(name)
    assert demangle("sm90_xmma_gemm_f16f16") == "sm90_xmma_gemm_f16f16"


def test_names_that_share_their_first_characters_stay_apart_once_cut():
    from traces.demangle import demangle_all

    names = [hostile(17, "f"), f"{hostile(17, 'f')}S0_IS1_S1_E"]
    first, second = demangle_all(names).values()
    assert first != second


def test_the_demangle_cache_is_bounded_by_bytes(monkeypatch):
    from traces import demangle

    monkeypatch.setattr(demangle, "cache", demangle.ByteBoundedCache(256 * 1024))
    names = [hostile(17, f"f{n}") for n in range(60)]
    # A budget whose clock stands still never runs out: the bound on the cache is what is tested here.
    demangle.demangle_all(names, budget=demangle.Budget(1, clock=lambda: 0.0))
    assert 0 < demangle.cache.size <= 256 * 1024
    assert demangle.cache.size == sum(len(key) + len(value) for key, value in demangle.cache.entries.items())


@pytest.fixture
def hostile_traces(make_trace):
    from tests.helpers import store_kernels
    from tests.traces.support import launch

    name = hostile(17)
    for trace_id in ("a-run", "b-run"):
        make_trace(trace_id, state="ready", kernel_count=40)
        store_kernels(
            trace_id,
            [
                launch(n, name if n % 2 else "_Z6vecAddPdS_S_i", 1000 * n, traced=True, duration_ns=500 * n)
                for n in range(1, 41)
            ],
        )
    return name


ANSWER_MAX = 64 * 1024


def test_summary_of_a_trace_with_a_hostile_name_is_bounded(api, hostile_traces):
    response = api.get("/api/traces/a-run/summary")
    assert response.status_code == 200
    assert len(response.content) < ANSWER_MAX


@pytest.mark.parametrize("by", ["name", "demangled"])
def test_compare_of_traces_with_a_hostile_name_is_bounded(api, hostile_traces, by):
    response = api.get(f"/api/traces/a-run/compare/b-run?by={by}")
    assert response.status_code == 200
    assert len(response.content) < ANSWER_MAX
    assert len(response.json()["kernels"]) == 2


def test_the_admin_pages_of_traces_with_a_hostile_name_are_bounded(staff_client, hostile_traces):
    page = staff_client.get("/admin/traces/trace/a-run/change/")
    assert page.status_code == 200
    assert len(page.content) < 1024 * 1024
    assert page.content.decode().count("B<B<B<B<B<B<A, A>") < 10, "the long name once or so, not per launch"
    for by in ("name", "demangled"):
        compare = staff_client.get(f"/admin/traces/trace/compare/?a=a-run&b=b-run&by={by}")
        assert compare.status_code == 200
        assert len(compare.content) < 1024 * 1024
