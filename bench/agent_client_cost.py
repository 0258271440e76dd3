"""What the agent study's client costs per step, against the step's own time, two ways, at 1 and 8 sessions in flight,
each through the study's own path (a study opened as `sparknb run agent` opens it: at 1 in flight the sessions one
after the other, in flight the asyncio client; every record written to the run folder, pushed to disk by the run's
own thread; the server's counters read around all the sessions by the study, measure.counted, not here):

- its CPU: the process's CPU time over the sessions (the session loop, the messages, serialization, reading the
  streams, the counters, the records), less the time spent executing the calls on BFCL's backends (tool time,
  counted apart in the study too);
- its time in the agent's way: each session's wall time from its first request to its last answer, less its
  requests' own times (sending to the last byte) and its tool time: what the session waited on the client.

Each per step, over the mean step time. On the real model (SmolLM2 on llama-server with sparknb's tool template),
live; or, given --url and --run, a sealed live run replayed to a server that a model's params name (as the study's
replay_from does).

The study's promise is that the time in the agent's way is under 1% of a step: the client adds nothing a user of
the agent would wait for. Its CPU overlaps the server's work (it reads the stream while the server decodes).

    python bench/agent_client_cost.py [--sessions 8] [--in-flight 1 8]
    python bench/agent_client_cost.py --url http://127.0.0.1:8093/v1 --model small-1.7b --run RUN [--in-flight 1 8]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sparknb.endpoint import stream  # noqa: E402
from sparknb.runs.run import read_past  # noqa: E402
from sparknb.runs.study import start  # noqa: E402
from sparknb.serving import testbed  # noqa: E402
from sparknb.serving.processes import free_port  # noqa: E402
from sparknb.studies.agent import plan as agent_plan  # noqa: E402
from sparknb.studies.agent.measure import many, one, replays  # noqa: E402
from sparknb.studies.agent.sessions import Replay, Session  # noqa: E402


class Timed:
    """A session whose steps note when its first request went out and when each answer came back."""

    def __init__(self, session):
        self.session, self.times = session, []

    @property
    def messages(self) -> list[dict]:
        return self.session.messages

    def steps(self):
        inner = self.session.steps()
        self.times.append(time.perf_counter())
        request = next(inner, None)
        while request is not None:
            answer = yield request
            self.times.append(time.perf_counter())
            try:
                request = inner.send(answer)
            except StopIteration:
                request = None


def cost(model: str, url: str, sessions, in_flight: int) -> dict:
    """Run the sessions (`sessions(record)` makes them afresh) in a study of their own, unsealed, in a folder that
    goes with it; the client's CPU and its time in the sessions' way per step (tool time out), and the step time."""
    with tempfile.TemporaryDirectory() as outputs:
        study = start("agent", model=model, endpoint=url, outputs=outputs, seal=False,
                      settings={"bench": "agent_client_cost", "in_flight": in_flight})
        spent = {"scrape": Spent(), "record": Spent()}
        study.endpoint.metrics = spent["scrape"].around(study.endpoint.metrics)
        study.run.record = spent["record"].around(study.run.record)  # every step's and every session's
        runs = [Timed(s) for s in sessions(study.run.record)]
        cpu0, wall0 = time.process_time(), time.perf_counter()
        if in_flight == 1:
            for session in runs:
                one(study, session)
        else:
            stream.run(lambda: many(study.streaming(), runs, in_flight, study.run.record))
        cpu, wall = time.process_time() - cpu0, time.perf_counter() - wall0
        records = study.records()
        study.finish({})
    steps = [r for r in records if r.get("kind") == "step" and "error" not in r]
    tool_s = sum(r["tool_s"] for r in records if r.get("kind") == "tools")
    waited = sum(s.times[-1] - s.times[0] for s in runs) - sum(r["total_s"] for r in steps) - tool_s
    step_s = sum(r["total_s"] for r in steps) / len(steps)
    return {"in_flight": in_flight, "sessions": len(runs), "steps": len(steps), "wall_s": wall,
            "step_ms": 1000 * step_s, "cpu_ms": 1000 * (cpu - tool_s) / len(steps),
            "waited_ms": 1000 * waited / len(steps),
            **{f"{k}_ms": 1000 * v.seconds / len(steps) for k, v in spent.items()},
            **{f"{k}s": v.calls / len(steps) for k, v in spent.items()}}


class Spent:
    """The time spent in one of the client's own calls on the session's path, and how many."""

    def __init__(self):
        self.seconds, self.calls = 0.0, 0

    def around(self, call):
        def timed(*args, **kwargs):
            t0 = time.perf_counter()
            try:
                return call(*args, **kwargs)
            finally:
                self.seconds, self.calls = self.seconds + time.perf_counter() - t0, self.calls + 1
        return timed


def replayed(run, count: int):
    """The live run's sessions replayed (measure.replays), as many as `count` (at least all of them): beyond the
    run's own, its sessions again from the first (the client's work per step does not depend on what the server's
    cache holds)."""
    plan = types.SimpleNamespace(replayed=run)  # all that replays reads of a plan

    def sessions(record) -> list[Replay]:
        made = replays(plan, {"temperature": 0.0}, record)
        own = len(made)
        while len(made) < count:
            made += replays(plan, {"temperature": 0.0}, record)
        return made[:max(count, own)]
    return sessions


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=8, help="sessions drawn from BFCL's multi_turn_base")
    parser.add_argument("--in-flight", type=int, nargs="+", default=[1, 8], help="sessions at once")
    parser.add_argument("--max-tokens", type=int, default=96, help="the longest answer of a step")
    parser.add_argument("--sessions-file", default="", help="a JSONL of sessions in BFCL's shape instead of a draw")
    parser.add_argument("--url", default="", help="a running server's /v1 root, to replay --run to")
    parser.add_argument("--model", default="smollm2-tools-llamacpp", help="the model's params (params/models/)")
    parser.add_argument("--run", default="", help="a sealed live agent run (folder or id) to replay")
    parser.add_argument("--outputs", default="", help="the outputs folder that holds --run")
    args = parser.parse_args()
    if args.url:
        run = read_past(args.run, "agent", what="--run", outputs=args.outputs)[0]
        rows = [cost(args.model, args.url, replayed(run, n), n) for n in args.in_flight]
    else:
        rows = live(args)
    print(f"{'in flight':>9} {'sessions':>8} {'steps':>6} {'wall s':>7} {'step ms':>8} {'client CPU ms/step':>18} "
          f"{'share':>7} "
          f"{'waited on client ms/step':>24} {'share':>7}")
    for r in rows:
        print(f"{r['in_flight']:>9} {r['sessions']:>8} {r['steps']:>6} {r['wall_s']:>7.1f} {r['step_ms']:>8.1f} "
              f"{r['cpu_ms']:>18.2f} {100 * r['cpu_ms'] / r['step_ms']:>6.2f}% {r['waited_ms']:>24.2f} "
              f"{100 * r['waited_ms'] / r['step_ms']:>6.2f}%")
    print("of the time waited on the client, per step: the server's counters read (/metrics, where anything on the "
          "sessions' path reads them) and the records taken (at 1 in flight held and written while the next request "
          "is out: Run.holding; the push to disk is off the path: runs.push.Pusher)")
    for r in rows:
        print(f"{r['in_flight']:>9} in flight: {r['scrapes']:.2f} scrapes {r['scrape_ms']:.2f} ms, "
              f"{r['records']:.2f} records {r['record_ms']:.2f} ms, the rest "
              f"{r['waited_ms'] - r['scrape_ms'] - r['record_ms']:.2f} ms")


def live(args) -> list[dict]:
    """Live sessions of the real model on a llama-server of its own, 8 slots."""
    entries = agent_plan.sessions(agent_plan.Plan.build(sessions=args.sessions, sessions_file=args.sessions_file))[0]
    fields = {"max_tokens": args.max_tokens, "temperature": 0.0}
    with tempfile.TemporaryDirectory() as out, testbed.start(
            "smollm2-tools", free_port(), engine="llama.cpp", timeout=120, log_path=Path(out) / "server.log",
            extra_args=("--parallel", "8", "--ctx-size", str(8 * 8192))) as server:
        return [cost("smollm2-tools-llamacpp", server.url,
                     lambda record: [Session(e, "native", 3, fields, record) for e in entries], n)
                for n in args.in_flight]


if __name__ == "__main__":
    main()
