"""``Secrets``: what is redacted, and that only exact values are."""

from __future__ import annotations

from cortex_jupyter.runtime.secrets import REDACTED, Secrets

ENV = {
    "OPENAI_API_KEY": "sk-proj-abcdefgh12345678",
    "GITHUB_TOKEN": "ghp_0123456789abcdef",
    "DB_PASSWORD": "hunter2hunter2",
    "SHORT_KEY": "none",  # a placeholder, not a secret
    "HOME": "/root",
    "MY_SECRET_NAME": "sk-proj-abcdefgh12345678-extended",
}


def test_credential_looking_environment_values_and_added_keys_are_redacted() -> None:
    secrets = Secrets(ENV)
    secrets.add("explicit-key-0000")
    text = (
        "key sk-proj-abcdefgh12345678, token ghp_0123456789abcdef, pw hunter2hunter2, "
        "ext sk-proj-abcdefgh12345678-extended, placeholder none, home /root, "
        "explicit explicit-key-0000, sklearn sk-learn"
    )
    assert secrets.redact(text) == (
        f"key {REDACTED}, token {REDACTED}, pw {REDACTED}, ext {REDACTED}, placeholder none, "
        f"home /root, explicit {REDACTED}, sklearn sk-learn"
    )


def test_values_are_read_afresh_so_a_key_set_later_is_covered() -> None:
    env: dict[str, str] = {}
    secrets = Secrets(env)
    assert secrets.redact("abc-very-secret-1") == "abc-very-secret-1"
    env["LATE_TOKEN"] = "abc-very-secret-1"
    assert secrets.redact("abc-very-secret-1") == REDACTED


def test_redact_value_walks_json_like_values_and_leaves_the_original_alone() -> None:
    secrets = Secrets(ENV)
    original = {"a": ["hunter2hunter2", 3, None], "hunter2hunter2": ("x", "hunter2hunter2")}
    assert secrets.redact_value(original) == {
        "a": [REDACTED, 3, None],
        REDACTED: ("x", REDACTED),
    }
    assert original["a"][0] == "hunter2hunter2"
