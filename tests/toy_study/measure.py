"""The toy study's measurement, table, findings and rows of the comparison."""

import pandas as pd

from sparknb.runs.report import Finding, info
from sparknb.runs.run import measured
from sparknb.verdicts.verdict import Row, Runs, caveats, median_row


def measure(study, plan) -> pd.DataFrame:
    with study.measuring():
        for rep in range(plan.repetitions):
            study.request({"rep": rep}, lambda ep: ep.chat([{"role": "user", "content": f"Say {rep}."}],
                                                           max_tokens=plan.output_tokens, ignore_eos=True))
    return table(study.records())


def table(records: list[dict]) -> pd.DataFrame:
    return pd.DataFrame([{"rep": r["rep"], "ttft_ms": 1000 * r["ttft_s"]} for r in measured(records)])


def findings(df: pd.DataFrame) -> list[Finding]:
    return [info(f"Median time to first token: {df['ttft_ms'].median():.1f} ms over {len(df)} requests.")]


def headline_rows(runs: Runs) -> list[Row]:
    from . import Plan

    mine = runs.of("toy")
    samples = {s: table(r.records)["ttft_ms"].tolist() for s, r in mine.items()}
    return [median_row("toy", "TTFT ms", samples, runs.base, better="lower", not_comparable=Plan.same(mine),
                       caveats={s: caveats(r) for s, r in mine.items()})] if samples else []
