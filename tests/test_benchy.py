"""The rows Spark owners share, computed from per-request figures."""

import pandas as pd
import pytest

from sparknb.verdicts import benchy


def test_prompt_processing_is_prompt_tokens_over_time_to_first_token():
    ttfts = pd.DataFrame({"prompt_length": [2048, 2048, 512], "ttft_s": [0.5, 1.0, 0.25]})
    rows = {r.test: r for r in benchy.processing_rows("m", ttfts)}
    assert rows["pp2048"].tokens_per_s == pytest.approx((4096 + 2048) / 2)
    assert rows["pp2048"].std == pytest.approx(pd.Series([4096.0, 2048.0]).std())
    assert rows["pp512"].tokens_per_s == pytest.approx(2048) and rows["pp512"].std is None


def test_generation_rows_name_the_depth_and_the_markdown_reads_like_llama_bench():
    speeds = pd.DataFrame({"prompt_length": [4096, 4096], "decode_tok_s": [40.0, 42.0]})
    (row,) = benchy.generation_rows("spark-35b", speeds, 128)
    assert row.test == "tg128 @ d4096" and row.tokens_per_s == 41.0 and row.n == 2
    assert "| spark-35b | tg128 @ d4096 | 41.00 ± 1.41 |" in benchy.markdown([row])
