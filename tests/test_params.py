"""Params files: every shipped file loads, and a bad one names the field."""

from pathlib import Path

import pytest

from sparknb.runs.params import ParamsError, load_hardware, load_model, project_root

MODELS = sorted(p.stem for p in (project_root() / "params" / "models").glob("*.yaml"))


def test_the_models_of_the_reference_studies_are_shipped():
    assert {"qwen3.6-35b-a3b", "qwen3.6-27b-fp8", "qwen3.8-27b", "flash-next", "tiny-dense", "tiny-moe"} <= set(MODELS)


@pytest.mark.parametrize("name", MODELS)
def test_every_shipped_model_loads_with_its_hardware(name):
    model = load_model(name)
    assert model.name == name
    assert load_hardware(model.hardware).name == model.hardware


def test_gb10_is_the_spark():
    gb10 = load_hardware("gb10")
    assert (gb10.memory_bandwidth_gbs, gb10.memory_gb, gb10.unified_memory) == (273, 121, True)


def test_unknown_model_lists_the_known_ones():
    with pytest.raises(ParamsError) as e:
        load_model("no-such-model")
    assert "no-such-model" in str(e.value) and "flash-next" in str(e.value)


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "m.yaml"
    path.write_text(text)
    return path


GOOD = """
name: mine
served_model_name: org/mine
endpoint: http://127.0.0.1:8000/v1
hardware: gb10
architecture: dense
weights: {dense_params: 8.0e9, bytes_per_param: 2, source: config.json}
"""


def test_a_users_own_file_loads_by_path(tmp_path):
    assert load_model(str(_write(tmp_path, GOOD))).served_model_name == "org/mine"


@pytest.mark.parametrize("change, field", [
    (("bytes_per_param: 2", "bytes_per_param: -1"), "weights.bytes_per_param"),
    (("endpoint: http://", "endpoint: ftp://"), "endpoint"),
    (("architecture: dense", "architecture: sparse"), "architecture"),
    (("hardware: gb10", "hardwere: gb10"), "hardwere"),
    (("name: mine", "name: mine\napi_key_env: sk-123 456"), "api_key_env"),
])
def test_an_invalid_field_is_named(tmp_path, change, field):
    with pytest.raises(ParamsError) as e:
        load_model(str(_write(tmp_path, GOOD.replace(*change))))
    assert field in str(e.value)


def test_a_moe_without_active_experts_is_refused(tmp_path):
    with pytest.raises(ParamsError, match="active_expert_params"):
        load_model(str(_write(tmp_path, GOOD.replace("architecture: dense", "architecture: moe"))))


def test_yaml_that_does_not_parse_says_so(tmp_path):
    with pytest.raises(ParamsError, match="not valid YAML"):
        load_model(str(_write(tmp_path, "name: [unclosed")))


def test_the_key_is_read_from_the_environment_never_stored(tmp_path, monkeypatch):
    model = load_model(str(_write(tmp_path, GOOD + "api_key_env: MY_KEY\n")))
    monkeypatch.setenv("MY_KEY", "sk-live-abc")
    assert model.api_key() == "sk-live-abc"
    assert "sk-live-abc" not in model.model_dump_json()


@pytest.mark.parametrize("name", ["tiny-dense", "tiny-moe"])
def test_the_tiny_models_params_match_their_checkpoints(name):
    from sparknb.serving import tiny_models

    counts = tiny_models.parameter_counts(name)
    w = load_model(name).weights
    assert (w.dense_params, w.active_expert_params) == (counts["dense"], counts["active_experts"])
