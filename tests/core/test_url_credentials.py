"""secrets.without_credentials, the one rule for URLs seatplan prints or stores (issue 48): a web URL loses its
whole user:password@, a database DSN its password; the rest of the text is left as it was."""

from __future__ import annotations

import string

from seatplan.secrets import redact_dsn, without_credentials

# What a userinfo may hold, '@' and '%'-escapes included (a password with an unescaped '@' too).
USERINFO_CHARS = string.ascii_letters + string.digits + "-._~!$&'()*+,;=:%@"


def _word(rng, alphabet: str, low: int, high: int) -> str:
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(low, high)))


def test_a_web_url_in_any_text_keeps_neither_user_nor_password(rng):
    for _ in range(500):
        scheme = rng.choice(["http", "https", "HTTP", "wss", "ws"])
        user = "U" + _word(rng, string.ascii_letters + string.digits + "-._~", 3, 20)
        password = "P" + _word(rng, USERINFO_CHARS.replace("'", ""), 6, 30).replace("/", "")
        userinfo = rng.choice([f"{user}:{password}", user, f"{user}:"])
        host = rng.choice(["127.0.0.1", "hub.example", "[::1]", "h"]) + rng.choice(["", ":8080"])
        path = rng.choice(["", "/", "/api/models/a/b", "/x?y=1@2"])
        before, after = rng.choice(["", "for url '", "error: ", "(\""]), rng.choice(["", "'", "\")", " and more"])
        text = f"{before}{scheme}://{userinfo}@{host}{path}{after}"
        shown = without_credentials(text)
        assert user not in shown and password not in shown, (text, shown)
        assert shown == f"{before}{scheme}://{host}{path}{after}", (text, shown)
        assert redact_dsn(text) == shown


def test_a_dsn_keeps_its_user_and_loses_its_password(rng):
    for _ in range(200):
        user, password = _word(rng, string.ascii_lowercase, 2, 12), "P" + _word(rng, string.ascii_letters + string.digits, 6, 20)
        dsn = f"postgresql://{user}:{password}@db:5432/litellm"
        assert without_credentials(dsn) == f"postgresql://{user}:***@db:5432/litellm"
        assert without_credentials(f"postgresql://{user}@db/litellm") == f"postgresql://{user}@db/litellm"


def test_text_without_a_url_is_left_alone(rng):
    for _ in range(200):
        text = _word(rng, string.printable, 0, 80)
        if "://" not in text:
            assert without_credentials(text) == text
