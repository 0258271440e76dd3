"""The swap plan: every model's params loaded and checked before any lock is taken or process started."""

from __future__ import annotations

import pytest
from support import free_port, model_yaml

from sparknb.errors import EndpointError, ParamsError
from sparknb.studies import swap

SERVES = {"start": "{python} -m http.server {port}"}


def test_a_model_without_a_lifecycle_cannot_be_swapped_and_the_error_says_what_to_add(tmp_path):
    with pytest.raises(ParamsError, match="lifecycle: {start:"):
        swap.Plan.build(models=[str(model_yaml(tmp_path, "m", {}))])


def test_clearing_a_cache_needs_to_know_where_it_is(tmp_path):
    with pytest.raises(ParamsError, match="lifecycle.compile_cache for m "):
        swap.Plan.build(models=[str(model_yaml(tmp_path, "m", SERVES))], clear_compile_cache=True)


def test_every_problem_with_the_sequence_is_named_at_once(tmp_path):
    started = model_yaml(tmp_path, "a", SERVES)
    proxied = model_yaml(tmp_path, "b", {"sidecar": True}, hardware="gb10")
    with pytest.raises(ParamsError) as e:
        swap.Plan.build(models=[str(started), str(proxied)])
    assert "Mix of sidecar and started models" in str(e.value) and "different hardware (cpu-host, gb10)" in str(e.value)


def test_bad_parameters_are_all_named_with_what_is_expected():
    with pytest.raises(ParamsError) as e:
        swap.Plan.build(models="tiny-dense", repetitions=0, clear_compile_cache="yes")
    text = str(e.value)
    assert "models: " in text and "e.g. [tiny-dense, tiny-moe, tiny-dense]" in text
    assert "repetitions: " in text and "clear_compile_cache: " in text


def test_every_visit_is_a_loaded_model_and_each_model_is_loaded_once(tmp_path):
    a, b = model_yaml(tmp_path, "first", SERVES), model_yaml(tmp_path, "second", SERVES)
    plan = swap.Plan.build(models=[str(a), str(b), str(a)], repetitions=2)
    assert plan.names == ["first", "second", "first"] and [m.name for m in plan.distinct()] == ["first", "second"]
    assert plan.visits[0] is plan.visits[2] and not plan.sidecar
    assert plan.settings() == {"models": [str(a), str(b), str(a)], "repetitions": 2, "clear_compile_cache": False}


def test_a_sidecar_that_is_not_there_is_refused_before_anything_is_timed(tmp_path):
    path = model_yaml(tmp_path, "proxied", {"sidecar": True}, port=free_port())
    with pytest.raises(EndpointError):
        swap.Plan.build(models=[str(path)])
