"""Password logins are throttled on both forms; production settings pass `check --deploy`.

86 wrong admin passwords in 40 s met no throttle or lockout, and
`/api-auth/login/` was a second unthrottled form.
"""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FORMS = ["/admin/login/", "/api-auth/login/"]


@pytest.fixture
def operator(django_user_model):
    return django_user_model.objects.create_user(
        "operator", password="correct horse battery staple", is_staff=True
    )


@pytest.mark.parametrize("form", FORMS)
def test_wrong_passwords_lock_the_login_out(client, operator, settings, form):
    settings.AXES_FAILURE_LIMIT = 5
    answers = [
        client.post(form, {"username": "operator", "password": f"guess {n}"}).status_code for n in range(5)
    ]
    assert answers == [200, 200, 200, 200, 429], "the form again four times, then locked out"
    locked = client.post(form, {"username": "operator", "password": "correct horse battery staple"})
    assert locked.status_code == 429, "even the right password, once locked out"


@pytest.mark.parametrize("form", FORMS)
def test_the_right_password_logs_in_and_clears_the_count(client, operator, form):
    for n in range(3):
        client.post(form, {"username": "operator", "password": f"guess {n}"})
    response = client.post(form, {"username": "operator", "password": "correct horse battery staple"})
    assert response.status_code == 302


@pytest.mark.slow  # starts manage.py
def test_production_settings_pass_check_deploy(tmp_path):
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("DJANGO_", "CASCADE_"))},
        "DJANGO_HTTPS": "1",
        # Behind the documented nginx on this host (without it, check --deploy warns: cascade.W001).
        "CASCADE_TRUSTED_PROXIES": "127.0.0.1/32",
        "DJANGO_SECRET_KEY": "x" * 20 + "-production-secret-key-with-enough-entropy-0123456789",
        "DJANGO_ALLOWED_HOSTS": "cascade.example.org",
        "CASCADE_VAR_DIR": str(tmp_path),
        "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}",
    }
    result = subprocess.run(
        [sys.executable, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues" in result.stdout
