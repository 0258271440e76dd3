"""What MMLU-Pro's batch costs the client: wall time, tok/s, the client's CPU and the share of request time
that vLLM's own clock does not cover, on the tiny dense test bed at a few concurrencies.

A client that cannot keep up shows here as CPU share and as request time outside the server's clock
(answers waiting for the client, not for the model).

    python bench/mmlu_batch.py --dataset FOLDER    # MMLU-Pro's two parquet files; "hub" downloads them
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sparknb.runs.study import start  # noqa: E402
from sparknb.serving import testbed  # noqa: E402
from sparknb.serving.processes import free_port  # noqa: E402
from sparknb.studies import mmlu_pro  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", default="hub", help="a folder holding MMLU-Pro's parquet files, or hub")
    parser.add_argument("--per-category", type=int, default=3, help="questions drawn from each category")
    parser.add_argument("--max-tokens", type=int, default=128, help="the longest answer")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 8], help="requests in flight")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as out:
        server = testbed.start("tiny-dense", free_port(), log_path=Path(out) / "server.log")
        try:
            rows = [measure(server.url, out, args, c) for c in args.concurrency]
        finally:
            server.stop()
    print(f"{'in flight':>9} {'answers':>7} {'wall s':>7} {'tok/s':>7} {'client CPU s':>12} {'CPU share':>9} "
          f"{'outside vLLM':>12}")
    for c, b in zip(args.concurrency, rows):
        outside = "unknown" if b.outside_server_share is None else f"{b.outside_server_share:.1%}"
        print(f"{c:>9} {b.asked:>7} {b.wall_s:>7.1f} {b.tokens_per_s:>7.0f} {b.client_cpu_s:>12.2f} "
              f"{b.client_cpu_share:>9.1%} {outside:>12}")


def measure(url: str, out: str, args, concurrency: int) -> mmlu_pro.Batch:
    plan = mmlu_pro.Plan.build(dataset=args.dataset, per_category=args.per_category, max_tokens=args.max_tokens,
                               concurrency=concurrency, outputs=out)
    work = mmlu_pro.prepare(plan, "tiny-dense")
    study = start(mmlu_pro.NOTEBOOK, model="tiny-dense", endpoint=url, settings=work.settings(), outputs=out,
                  validate=work.check_server)
    batch = mmlu_pro.ask(study, work, log=lambda _: None)
    study.finish({})
    return batch


if __name__ == "__main__":
    main()
