"""Redaction: keys, URL passwords, secret query values and secret-named fields never reach a file."""

from __future__ import annotations

import pytest

from sparknb.runs.redaction import redact


def test_url_password_and_secret_query_values_are_masked() -> None:
    assert redact("http://bench:hunter22@spark.local:8000/v1") == "http://bench:***@spark.local:8000/v1"
    assert redact("see https://h.example/x?api_key=abc123&max_tokens=5&token=zz9#access_token=qq then") == \
        "see https://h.example/x?api_key=***&max_tokens=5&token=***#access_token=*** then"
    assert redact("http://user@host/v1?model=m") == "http://user@host/v1?model=m"


def test_secret_named_fields_are_masked_and_variable_names_kept() -> None:
    record = {"api_key": "sk-live-1", "Authorization": "Bearer abc", "apiKey": "v", "HF_TOKEN": "hf_x",
              "headers": {"X-Api-Key": "k2"}, "PGPASSWORD": "pw", "api_key_env": "OPENAI_API_KEY",
              "max_tokens": 64, "prompt_tokens": 10, "tokenizer": "t", "token": None, "use_secret": True}
    assert redact(record) == {
        "api_key": "***", "Authorization": "***", "apiKey": "***", "HF_TOKEN": "***",
        "headers": {"X-Api-Key": "***"}, "PGPASSWORD": "***", "api_key_env": "OPENAI_API_KEY",
        "max_tokens": 64, "prompt_tokens": 10, "tokenizer": "t", "token": None, "use_secret": True}


def test_secret_values_are_masked_deep_inside_a_copy() -> None:
    record = {"runs": [{"log": ["ok", ("Bearer sk-deep-0042 sent", 3)]}], "n": 1.5, "short": "abc"}
    masked = redact(record, secrets=["sk-deep-0042", "abc"])  # a secret under 4 characters is ignored
    assert masked == {"runs": [{"log": ["ok", ("Bearer *** sent", 3)]}], "n": 1.5, "short": "abc"}
    assert record["runs"][0]["log"][1][0] == "Bearer sk-deep-0042 sent"


def test_secret_command_line_flags_are_masked() -> None:
    assert redact("vllm serve m --api-key s3cr3t-xyz --max-tokens 9") == "vllm serve m --api-key *** --max-tokens 9"
    assert redact("x --hf-token=hf_abcd") == "x --hf-token=***"


def test_environment_secrets_are_masked_even_when_not_passed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARKNB_TEST_API_KEY", "env-secret-value-42")
    monkeypatch.setenv("TOKENIZERS_PARALLELISM", "false")  # not a secret, and "false" must stay readable
    monkeypatch.setenv("SPARKNB_TEST_TOKEN", "EMPTY")  # a placeholder, masking it would mask the word
    masked = redact({"cmd": "curl -H 'x: env-secret-value-42'", "flags": ["false", "EMPTY"]})
    assert masked == {"cmd": "curl -H 'x: ***'", "flags": ["false", "EMPTY"]}


@pytest.mark.parametrize("name", ["vLLM ms/token", "first_token_s", "decode_tokens", "chunk_tokens", "key_count",
                                  "j_per_generated_token", "j_per_prompt_token", "every_token", "access_token"])
def test_measurement_fields_are_not_taken_for_secrets(name):
    assert redact({name: 56.7}) == {name: 56.7}


def test_the_working_directory_is_not_taken_for_a_password(monkeypatch, tmp_path):
    monkeypatch.setenv("PWD", str(tmp_path))
    monkeypatch.setenv("DB_PWD", "hunter2-db")
    assert redact({"log": f"{tmp_path}/server.log and hunter2-db"}) == {"log": f"{tmp_path}/server.log and ***"}
