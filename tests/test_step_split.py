"""Each decode step split into the bytes' time at the box's bandwidth and the rest, and what follows from it, on
the figures of a lent H100 (llama-server, random F16 GGUFs): an MoE in Qwen3-30B-A3B's shape cut to 24 layers read
3,365,834,752 B a token and took 2.942 ms, a dense Qwen3-4B shape 8,045,328,384 B and 4.438 ms, at the probe's
3,022 GB/s. Bytes alone predicted a dense/MoE ratio of 0.418; 0.663 was measured; with the rest counted, 0.65."""

import math
import types

import pandas as pd
import pytest
from test_compare import decode_run, fingerprint, headline_of, row
from test_decode import _measured

from sparknb.roofline import bandwidth
from sparknb.studies import decode

MOE, DENSE = 3_365_834_752, 8_045_328_384
H100, H200 = 3022e9, 4297e9  # the probes' own figures, GB/s


def _study(weights: float, bandwidth_bytes_s: float):
    limit = bandwidth.Limit(weights, bandwidth_bytes_s, "a census by hand", measured_gbs=bandwidth_bytes_s / 1e9,
                            divides_by="measured")
    return types.SimpleNamespace(limit=limit, model=types.SimpleNamespace(speculative=None))


def _table(ms: float, study, lengths=(111, 4096)):
    """Seven requests a length around `ms` per token (one in 400 apart), summarized as the decode notebook does."""
    speeds = [1000 / ms * (1 + k / 400) for k in range(-3, 4)]
    df = _measured([(n, 149 / v, 149 / v, None) for n in lengths for v in speeds])
    return df, decode.summarize(df, study)


def test_the_table_and_the_findings_split_each_step_into_reading_and_the_rest():
    study = _study(MOE, H100)
    df, table = _table(2.942, study)
    r = table.loc[111]
    assert r["read ms"] == pytest.approx(1000 * MOE / H100) == pytest.approx(1.114, abs=5e-4)
    assert r["rest ms"] == pytest.approx(2.942 - 1.114, abs=1e-3) and r["step ms"] == pytest.approx(2.942, abs=1e-6)
    assert r["rest 95% low"] < r["rest ms"] < r["rest 95% high"]  # the median's interval, carried to the rest
    assert r["read ms"] / r["step ms"] == pytest.approx(r["% of limit"] / 100)  # the share keeps its meaning
    text = "\n".join(map(str, decode.findings(df, table, study.limit, "h100-sxm")))
    assert "at 111 tokens 1.83 ms of each 2.94 ms step is not reading memory (95%: " in text
    assert "and 1.11 ms is reading" in text and "3,022 GB/s measured" in text
    assert "NOT BANDWIDTH-BOUND" not in text  # 38% of the limit: above the one-third line


def test_under_a_third_of_the_limit_the_label_says_what_a_faster_memory_would_and_would_not_change():
    """The same MoE on an H200's measured bandwidth: 1.83 ms of rest and 0.78 ms of reading, 30% of the limit. The
    label once said a faster memory would change nothing; twice the bandwidth makes this step 18% faster."""
    study = _study(MOE, H200)
    df, table = _table(1000 * MOE / H200 + 1.828, study)
    assert table.loc[111, "% of limit"] < 100 / 3
    (label,) = [n for n in decode.findings(df, table, study.limit, "h200") if "NOT BANDWIDTH-BOUND" in n.text]
    assert "would not make" not in label.text and "1.83 ms of each 2.61 ms step is not reading memory" in label.text
    doubled = 1.828 + 1000 * MOE / H200 / 2
    assert f"twice the bandwidth: {doubled:.2f} ms a step, {(1.828 + 1000 * MOE / H200) / doubled - 1:.0%} faster" \
        in label.text and "leaves the 1.83 ms as it is" in label.text


def _run(tmp_path, name, weights, ms, seed):
    _, table = _table(ms, _study(weights, H100), lengths=(111,))
    return decode_run(tmp_path, name, 1000 / ms, fingerprint(), seed=seed, lengths=(111,), reps=7, spread=0.002,
                      table=table.reset_index().to_dict(orient="records"))


def test_the_comparison_predicts_the_ratio_with_the_rest_counted_in_whole_sentences(tmp_path):
    moe, dense = _run(tmp_path, "moe", MOE, 2.942, 1), _run(tmp_path, "dense", DENSE, 4.438, 2)
    _, h = headline_of(tmp_path, moe, dense)
    by_bytes = row(h, "speed ratio at 111 tokens predicted by the byte curves")
    assert by_bytes.values["dense"] == pytest.approx(MOE / DENSE) == pytest.approx(0.418, abs=1e-3)
    assert "dense: predicted 0.42x, measured 0.66x, 58% beyond it: the base's step is held by more than reading " \
           "memory." == by_bytes.note
    rested = row(h, "speed ratio at 111 tokens predicted with each step's rest counted")
    rest = (2.942 - 1000 * MOE / H100 + 4.438 - 1000 * DENSE / H100) / 2
    assert rested.values["dense"] == pytest.approx((1000 * MOE / H100 + rest) / (1000 * DENSE / H100 + rest))
    assert abs(rested.values["dense"] / (2.942 / 4.438) - 1) < 0.05  # within 5% of the measured ratio
    assert rested.note.startswith("dense: bytes alone predict 0.42x; with 1.80 ms a step besides reading")
    assert "they predict 0.65x, and 0.66x was measured. A cost per step that both models pay" in rested.note
    assert rested.note.endswith(".") and not math.isnan(rested.values["moe"])


def test_a_rest_one_step_has_beyond_the_other_is_named_as_what_moves_the_ratio(tmp_path):
    moe, dense = _run(tmp_path, "moe", MOE, 4.0, 1), _run(tmp_path, "dense", DENSE, 4.438, 2)
    _, h = headline_of(tmp_path, moe, dense)
    note = row(h, "speed ratio at 111 tokens predicted with each step's rest counted").note
    assert "The rests differ: moe's step holds 1.11 ms more than dense's besides reading memory" in note


def test_prefills_floor_for_an_moe_counts_the_experts_a_prompt_touches_and_each_micro_batch():
    """The MoE's census by hand: 24 layers of 128 experts (gate, up, down of 2048 x 768, F16), 8 routed a token, an
    untied head of Qwen's 151,936 x 2048. Decode's 8 of 128 called a 111-token prompt 8% of its floor."""
    from sparknb.engines.llamacpp import LLAMACPP

    experts = 24 * 128 * 3 * 2048 * 768 * 2
    head = 151_936 * 2048 * 2
    other = MOE - experts * 8 / 128 - head  # attention, norms, routers, one embedding row
    batch = LLAMACPP.micro_batch(LLAMACPP.settings(["llama-server", "-m", "moe.gguf", "--cache-ram", "0"]))
    assert batch == 512 and LLAMACPP.micro_batch(LLAMACPP.settings(["llama-server", "-ub", "256"])) == 256
    assert LLAMACPP.micro_batch({"unknown": "not on this machine"}) is None
    limit = bandwidth.Limit(MOE, H100, "by hand", experts={"bytes": experts, "used": 8, "of": 128}, head_bytes=head,
                            micro_batch=batch)
    assert limit.prefill_bytes(1) == pytest.approx(MOE)  # one token reads what a decode step reads
    touched = 1 - (1 - 8 / 128) ** 111
    assert touched > 0.999 and limit.prefill_bytes(111) == pytest.approx(head + other + experts * touched)
    two = 2 * other + experts * (1 - (1 - 8 / 128) ** 512 + 1 - (1 - 8 / 128) ** 88)
    assert limit.prefill_bytes(600) == pytest.approx(head + two)  # 512 + 88: the weights read again
    one_pass = bandwidth.Limit(MOE, H100, "by hand", experts={"bytes": experts, "used": 8, "of": 128}, head_bytes=head)
    assert one_pass.prefill_bytes(600) < limit.prefill_bytes(600)  # no micro-batch said: one pass, the least
    from sparknb.studies.prefill.tables import floor

    ms = 1000 * limit.prefill_bytes(111) / H100
    assert floor(limit, 111, 0.013)["% of floor"] == pytest.approx(100 * ms / 13) and 70 < 100 * ms / 13 < 85


@pytest.mark.server
def test_llama_bench_beside_the_server_measures_the_engine_alone_and_splits_the_rest(tiny_dense_llama, dense_key):
    """The pinned build makes llama-bench beside llama-server: on the served GGUF, at each prompt length as its
    depth, it gives the engine's own ms per token; the step less it is the server's own."""
    from sparknb.endpoint.client import Endpoint
    from sparknb.roofline import census, checkpoint
    from sparknb.serving import gguf_models

    ep = Endpoint(tiny_dense_llama.url, "tiny-dense", api_key=dense_key)
    try:
        ep.info()  # names its engine, as a study's start does
        study = types.SimpleNamespace(endpoint=ep, census=census.count(checkpoint.read(gguf_models.gguf_file(
            "tiny-dense"))))
        plan = types.SimpleNamespace(output_tokens=8, prompt_lengths=[64, 256])
        alone, how = decode.engine_alone(study, plan)
    finally:
        ep.close()
    assert sorted(alone) == [64, 256] and all(0 < ms < 1000 for ms in alone.values()), how
    assert "llama-bench on tiny-dense" in how and "tg8 at each length" in how
    df, _ = _table(2 * alone[64], _study(1e6, 1e12), lengths=(64,))
    table = decode.summarize(df, _study(1e6, 1e12), None, (alone, how))
    assert table.loc[64, "engine ms"] == alone[64]
    assert table.loc[64, "server's own ms"] == pytest.approx(table.loc[64, "step ms"] - alone[64])
    text = "\n".join(map(str, decode.findings(df, table, _study(1e6, 1e12).limit, "cpu-host")))
    assert f"llama-bench, the engine alone, took {alone[64]:.2f} ms a token" in text


def test_without_llama_cpp_the_engine_alone_is_not_measured_and_says_why():
    from sparknb.engines import ENGINES

    study = types.SimpleNamespace(endpoint=types.SimpleNamespace(engine=ENGINES["vllm"], url="http://127.0.0.1:1/v1"),
                                  census=None)
    alone, how = decode.engine_alone(study, types.SimpleNamespace(output_tokens=8, prompt_lengths=[64]))
    assert alone == {} and "only where llama.cpp's llama-server serves" in how


def test_a_ratio_the_bytes_predict_only_by_chance_is_not_called_bandwidth_bound(tmp_path):
    """Two steps of 1.2 and 1.6 ms with microseconds of reading: the bytes' 0.75x lands near the measured 0.75x by
    chance, and reading memory sets neither step."""
    moe, dense = _run(tmp_path, "moe", 3e6, 1.2, 1), _run(tmp_path, "dense", 4e6, 1.6, 2)
    _, h = headline_of(tmp_path, moe, dense)
    note = row(h, "speed ratio at 111 tokens predicted with each step's rest counted").note
    assert "reading memory sets both steps" not in note and "The rests differ" in note


def test_an_engine_alone_slower_than_the_server_is_not_used_to_split_the_rest():
    """Seen on a loaded CPU: llama-bench took 13.8 ms a token where llama-server's step was 5.4 ms."""
    study = _study(MOE, H100)
    df, _ = _table(5.4, study, lengths=(256,))
    table = decode.summarize(df, study, None, ({256: 13.8}, "llama-bench"))
    text = "\n".join(map(str, decode.findings(df, table, study.limit, "h100-sxm")))
    assert "took 13.80 ms a token, longer than the server's step" in text and "ms the server's own" not in text
    assert table.loc[256, "engine ms"] == 13.8 and pd.isna(table.loc[256, "server's own ms"])
