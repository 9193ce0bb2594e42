"""seatplan.secrets.looks_secret, the one secret rule (adopt writes a reference for what it finds, the fleet loader
warns): by name (*PASS* *PWD* *SECRET* *TOKEN* *KEY* *CREDENTIAL*, the cloud and database variables) and by the
value's shape (PEM blocks, hf_…, sk-…, JWTs, AWS and Google keys, a URL with a password), over random names and
values; and what is no secret stays a plain value."""

from __future__ import annotations

import base64
import json
import string

from seatplan.secrets import looks_secret, secret_shaped

SECRET_WORDS = ["PASS", "PASSWORD", "PASSWD", "PWD", "SECRET", "TOKEN", "KEY", "CREDENTIAL", "CREDENTIALS", "PRIVATE"]
KNOWN = ["PGPASS", "PGPASSWORD", "MYSQL_PWD", "MYSQL_ROOT_PASSWORD", "POSTGRES_PASSWORD", "REDIS_PASSWORD", "AWS_SECRET_ACCESS_KEY",
         "AWS_ACCESS_KEY_ID", "AWS_SESSION_TOKEN", "AZURE_CLIENT_SECRET", "AZURE_STORAGE_CONNECTION_STRING",
         "GOOGLE_APPLICATION_CREDENTIALS", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "OPENAI_API_KEY", "VLLM_API_KEY", "SENTRY_DSN",
         "WANDB_API_KEY", "GITHUB_TOKEN", "BASIC_AUTH"]
PLAIN_NAMES = ["MODEL", "VLLM_PORT", "HF_HOME", "CUDA_VISIBLE_DEVICES", "OMP_NUM_THREADS", "VLLM_LOGGING_LEVEL", "PWD", "OLDPWD",
               "HOME", "PATH", "DATABASE_URL", "REDIS_URL", "TZ", "LANG"]


def _text(rng, alphabet: str, low: int, high: int) -> str:
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(low, high)))


def _b64url(rng, document: dict) -> str:
    return base64.urlsafe_b64encode(json.dumps(document).encode()).decode().rstrip("=")


def _shaped(rng) -> str:
    """A credential by its shape alone, as the issuers make them."""
    kind = rng.randrange(7)
    if kind == 0:
        label = rng.choice(["RSA PRIVATE KEY", "PRIVATE KEY", "EC PRIVATE KEY", "OPENSSH PRIVATE KEY", "CERTIFICATE"])
        body = "\n".join(_text(rng, string.ascii_letters + string.digits + "+/", 64, 64) for _ in range(rng.randint(1, 5)))
        block = f"-----BEGIN {label}-----\n{body}\n-----END {label}-----"
        return rng.choice([block, f"prefix\n{block}\nKEY=value", block.replace("\n", "\\n")])
    if kind == 1:
        return "hf_" + _text(rng, string.ascii_letters + string.digits, 30, 40)
    if kind == 2:
        return "sk-" + rng.choice(["", "proj-", "ant-"]) + _text(rng, string.ascii_letters + string.digits + "_-", 20, 60)
    if kind == 3:
        header = _b64url(rng, {"alg": rng.choice(["HS256", "RS256"]), "typ": "JWT"})
        payload = _b64url(rng, {"sub": _text(rng, string.ascii_lowercase, 3, 10), "iat": rng.randrange(2**31)})
        return f"{header}.{payload}.{_text(rng, string.ascii_letters + string.digits + '_-', 20, 86)}"
    if kind == 4:
        return "AKIA" + _text(rng, string.ascii_uppercase + string.digits, 16, 16)
    if kind == 5:
        return "AIza" + _text(rng, string.ascii_letters + string.digits + "_-", 35, 35)
    scheme = rng.choice(["postgresql", "mysql", "redis", "mongodb+srv", "https", "amqp"])
    return f"{scheme}://{_text(rng, string.ascii_lowercase, 1, 10)}:{_text(rng, string.ascii_letters + string.digits, 1, 20)}@db:5432/x"


def test_a_secret_by_name_whatever_else_the_name_holds(rng):
    for _ in range(1000):
        word = rng.choice(SECRET_WORDS)
        name = rng.choice(["", "APP_", "DB_", "X"]) + rng.choice([word, word.lower(), word.title()]) + rng.choice(["", "_FILE", "_1", "S"])
        if name.upper() in ("PWD", "OLDPWD"):
            continue
        value = _text(rng, string.ascii_letters + string.digits + "!@#%^&*-_", 7, 40)
        assert looks_secret(name, value), (name, value)
    for name in KNOWN:
        assert looks_secret(name, _text(rng, string.ascii_letters + string.digits, 8, 30)), name


def test_a_secret_by_its_shape_whatever_its_name(rng):
    for _ in range(1000):
        value = _shaped(rng)
        assert secret_shaped(value), value
        assert looks_secret(rng.choice(PLAIN_NAMES), value), value


def test_settings_and_plain_values_are_no_secrets(rng):
    for _ in range(1000):
        name = rng.choice(PLAIN_NAMES)
        value = rng.choice([
            str(rng.randrange(100_000)), "/" + "/".join(_text(rng, string.ascii_lowercase, 1, 8) for _ in range(rng.randint(1, 4))),
            f"{_text(rng, string.ascii_letters, 2, 10)}/{_text(rng, string.ascii_letters + string.digits + '-.', 2, 30)}",
            "postgresql://" + _text(rng, string.ascii_lowercase, 1, 10) + "@db:5432/litellm", "http://127.0.0.1:8000/v1"])
        assert not looks_secret(name, value), (name, value)
    # a switch or a small count under a secret word's name is a setting (HF_HUB_DISABLE_TOKEN=1, MAX_TOKENS=4096)
    for _ in range(200):
        name = rng.choice(SECRET_WORDS) + "_" + _text(rng, string.ascii_uppercase, 1, 6)
        assert not looks_secret(name, rng.choice(["1", "0", "true", "off", str(rng.randrange(10**6))]))
