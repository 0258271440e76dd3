"""The comparison sets the speed ratio two models' byte curves predict beside the ratio measured, per length."""

import pytest
from test_compare import decode_run, fingerprint, headline_of, row


def _table(speed: float, mb: dict) -> list[dict]:
    return [{"prompt tokens": n, "decode tok/s (median)": speed * (1 - n / 100000), "MB read/step": b,
             "limit tok/s": None, "tokens/step": 1.0} for n, b in mb.items()]


def test_the_byte_curves_predict_a_ratio_and_the_gap_to_the_measured_one_is_named(tmp_path):
    # a: 3 GB a step plus its KV; b: 30.6 GB (seed 000's shape of the question: "4.5x predicted, 2.9x observed")
    a = decode_run(tmp_path, "moe-35b", 26.0, fingerprint(), seed=1, table=_table(26.0, {111: 6000, 5378: 6800}))
    b = decode_run(tmp_path, "dense-27b", 8.9, fingerprint(), seed=2, table=_table(8.9, {111: 30600, 5378: 31400}))
    _, h = headline_of(tmp_path, a, b)
    r = row(h, "speed ratio at 111 tokens predicted by the byte curves")
    assert r.role == "context" and r.values["dense-27b"] == pytest.approx(6000 / 30600)
    assert "predicted 0.20x, measured 0.34x" in r.note and "beyond it" in r.note  # 8.9 / 26 against 0.196
    at_long = row(h, "speed ratio at 5,378 tokens predicted by the byte curves")
    assert at_long.values["dense-27b"] == pytest.approx(6800 / 31400)
    # Limits on both sides (the box's bandwidth known): the ratio of the limits is the prediction.
    table = _table(8.9, {111: 30600, 5378: 31400})
    for t in table:
        t["limit tok/s"] = 273e3 / t["MB read/step"]
    c = decode_run(tmp_path, "dense-27b-limit", 8.9, fingerprint(), seed=3, table=table)
    table = _table(8.7, {111: 30600, 5378: 31400})
    for t in table:
        t["limit tok/s"] = 273e3 / t["MB read/step"]
    d = decode_run(tmp_path, "dense-27b-again", 8.7, fingerprint(), seed=4, table=table)
    _, h = headline_of(tmp_path, c, d)
    same = row(h, "speed ratio at 111 tokens predicted by the byte curves")
    assert same.values["dense-27b-again"] == pytest.approx(1.0) and "beyond" not in same.note
