"""Every model error reads like a sentence, names what went wrong and what to do."""

from __future__ import annotations

import pickle

import pytest

from cortex_jupyter.models import errors
from cortex_jupyter.runtime import CortexError, CortexRuntimeError

E = "http://127.0.0.1:8000"

CASES: list[tuple[errors.ModelError, str]] = [
    (errors.MissingAPIKey("m"), "set the OPENAI_API_KEY environment variable"),
    (errors.AuthenticationFailed("m", E, "bad key"), "Check OPENAI_API_KEY"),
    (errors.PermissionDenied("m", E), "Use a model the key's project"),
    (errors.UnknownModel("m", E), "Check the model name"),
    (errors.BadRequest("m", E, 422, "field x"), "Change what its message names"),
    (errors.GrammarRefused("m", E, 400, "field x"), "llama.cpp takes constrain='gbnf'"),
    (errors.RateLimited("m", E, 3, None), "It gave no retry delay. Wait and run it again"),
    (errors.RateLimited("m", E, 1, 2.5), "after 1 try. It asked to wait 2.5 s"),
    (errors.ServerError("m", E, 502, 3), "failed (HTTP 502) after 3 tries"),
    (errors.ServerError("m", E, None, code="server_error"), "middle of the reply (server_error)"),
    (errors.ReplyRejected("m", E, "too long", "400"), "asking again unchanged will not fix"),
    (errors.ContextTooLong("m", E, "too long"), "Start afresh with %cortex reset"),
    (errors.CannotConnect("m", "127.0.0.1:8000", "refused"), "Check the server is running"),
    (errors.ModelTimeout("m", E, 30.0), "did not answer within 30 s"),
    (errors.BadCertificates("m", "SSL_CERT_FILE", "/ca.pem", "missing"), "unset it"),
    (errors.StreamDropped("m", E, 4, 120), "after 4 chunks (120 characters)"),
    (errors.UnexpectedReply("m", E, "no events"), "is the API root"),
    (errors.ScriptExhausted(2, 1), "it has only 1 turn"),
    (errors.NoReplyScripted("s", ["a"]), "add a section starting with a line '--- reply to s"),
    (errors.NoScriptForPrompt("what is the capital?", 2), "its mapping holds 2 prompts"),
]


@pytest.mark.parametrize(("error", "says"), CASES, ids=lambda v: type(v).__name__)
def test_messages_read_like_sentences_and_say_what_to_do(
    error: errors.ModelError, says: str
) -> None:
    message = str(error)
    assert says in message
    assert message[0].isupper()
    assert message.rstrip().endswith((".", "bad key", "field x", "too long"))


def test_every_error_class_is_covered_and_exported() -> None:
    classes = {type(error) for error, _ in CASES}
    exported = {getattr(errors, name) for name in errors.__all__} - {errors.ModelError}
    assert classes == exported
    assert all(issubclass(cls, errors.ModelError) for cls in exported)


@pytest.mark.parametrize(("error", "says"), CASES, ids=lambda v: type(v).__name__)
def test_an_error_survives_pickling_with_its_message_and_fields(
    error: errors.ModelError, says: str
) -> None:
    # A model error raised in a worker process reaches the kernel whole.
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is type(error)
    assert str(back) == str(error)
    assert vars(back) == vars(error)
    assert back.continuable == error.continuable


def test_model_and_runtime_errors_share_one_base() -> None:
    # One `except CortexError` catches a model's failure and the runtime's alike.
    assert issubclass(errors.RateLimited, CortexError)
    assert issubclass(CortexRuntimeError, CortexError)
    with pytest.raises(CortexError, match="HTTP 429"):
        raise errors.RateLimited("m", E, 2, quota=True)
