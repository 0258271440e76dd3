"""What the agent study's client costs per step, against the step's own time: the process's CPU time over the
sessions (the session loop, the messages, serialization, reading the streams), less the time spent executing the
calls on BFCL's backends (tool time, counted apart in the study too), per step, over the mean step time, at 1 and 8
sessions in flight, on the real model (SmolLM2 on llama-server with sparknb's tool template).

The study's promise is that this is under 1% of a step: the client adds nothing a user of the agent would wait for.

    python bench/agent_client_cost.py [--sessions 8] [--in-flight 1 8]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sparknb.endpoint import stream  # noqa: E402
from sparknb.endpoint.client import Endpoint  # noqa: E402
from sparknb.serving import testbed  # noqa: E402
from sparknb.serving.processes import free_port  # noqa: E402
from sparknb.studies.agent import plan as agent_plan  # noqa: E402
from sparknb.studies.agent.measure import many  # noqa: E402
from sparknb.studies.agent.sessions import Session  # noqa: E402


def cost(url: str, entries: list[dict], in_flight: int, max_tokens: int) -> dict:
    """Run the sessions; the client's CPU per step (tool time out) and the mean step time."""
    records: list[dict] = []
    ep = Endpoint(url, "smollm2", timeout=600)
    ep.info()
    runs = [Session(e, "native", 3, {"max_tokens": max_tokens, "temperature": 0.0}, records.append) for e in entries]
    cpu0, wall0 = time.process_time(), time.perf_counter()
    stream.run(lambda: many(stream.AsyncEndpoint(url, "smollm2", engine=ep.engine), runs, in_flight, records.append))
    cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
    steps = [r for r in records if r.get("kind") == "step" and "error" not in r]
    tool_s = sum(r["tool_s"] for r in records if r.get("kind") == "tools")
    per_step = (cpu - tool_s) / len(steps)
    step_s = sum(r["total_s"] for r in steps) / len(steps)
    return {"in_flight": in_flight, "steps": len(steps), "wall_s": wall, "client_cpu_ms_per_step": 1000 * per_step,
            "step_ms": 1000 * step_s, "share": per_step / step_s}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=8, help="sessions drawn from BFCL's multi_turn_base")
    parser.add_argument("--in-flight", type=int, nargs="+", default=[1, 8], help="sessions at once")
    parser.add_argument("--max-tokens", type=int, default=96, help="the longest answer of a step")
    parser.add_argument("--sessions-file", default="", help="a JSONL of sessions in BFCL's shape instead of a draw")
    args = parser.parse_args()
    entries = agent_plan.sessions(agent_plan.Plan.build(sessions=args.sessions, sessions_file=args.sessions_file))[0]
    with tempfile.TemporaryDirectory() as out, testbed.start(
            "smollm2-tools", free_port(), engine="llama.cpp", timeout=120, log_path=Path(out) / "server.log",
            extra_args=("--parallel", "8", "--ctx-size", str(8 * 8192))) as server:
        rows = [cost(server.url, entries, n, args.max_tokens) for n in args.in_flight]
    print(f"{'in flight':>9} {'steps':>6} {'wall s':>7} {'step ms':>8} {'client CPU ms/step':>18} {'share':>7}")
    for r in rows:
        print(f"{r['in_flight']:>9} {r['steps']:>6} {r['wall_s']:>7.1f} {r['step_ms']:>8.0f} "
              f"{r['client_cpu_ms_per_step']:>18.2f} {100 * r['share']:>6.2f}%")


if __name__ == "__main__":
    main()
