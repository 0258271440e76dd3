"""Where a chat step's time before its first token goes, beyond the server's own prompt time: each step of a sealed
live agent run sent three ways to one llama-server, one session at a time.

- as the agent sends it: the chat messages and the tools (`/v1/chat/completions`), which the server renders through
  its template (and, given tools, readies its tool-call parsing) and tokenizes before it prefills;
- as the prompt's text (`/v1/completions` given the prompt the server's own `/apply-template` rendered), which it
  tokenizes;
- as token ids (the same, as the server's own `/tokenize` made them), where it has nothing to render or tokenize.

Each way keeps a slot of its own (llama-server's `id_slot`), so that each finds its own previous step in its cache,
as the agent's chat does. Each step's answer is as long as the live one (ignore_eos), as the study's replay asks
it. Per step: the client's time to first token less the server's own prompt time (`timings.prompt_ms`), each way,
and the time the server took to answer `/apply-template` and `/tokenize` for the step's messages. The text gap less
the ids gap is the server's tokenizing, the chat gap less the text gap its rendering and readying of tools.

Two controls tell the client's clock from the server's work on the request before its prompt clock starts:
- the step's first 16 token ids alone (a slot of their own, nothing cached): a body of a few bytes, so the gap is
  the client's clock, the loopback and the server's fixed handling of one request;
- the same 16 ids with the step's whole id list in a field the server reads past (`pad`): the same body size as the
  ids way, and nothing more to prefill. If its gap matches the ids way's, the ids gap is the server's reading of the
  request body (JSON of some 10,000 numbers), work that starts no clock of its own and that no client can remove.

    python bench/agent_ttft_control.py --url http://127.0.0.1:8093/v1 --model small-1.7b --run RUN_FOLDER
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
import types
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sparknb.endpoint.client import Endpoint  # noqa: E402
from sparknb.runs.run import read_past  # noqa: E402
from sparknb.studies.agent.measure import replays  # noqa: E402


def gap_ms(c) -> float | None:
    prefill = (c.server or {}).get("prefill_s")
    return None if c.ttft_s is None or prefill is None else 1000 * (c.ttft_s - prefill)


def one_step(ep: Endpoint, messages: list[dict], fields: dict) -> dict:
    """The step three ways, after the server's own rendering and tokenizing of it (each timed on the client)."""
    t0 = time.perf_counter()
    text = ep.engine.render_chat(ep._ask, ep.model, messages, fields.get("tools"))
    t1 = time.perf_counter()
    ids = ep.tokenize(text)
    t2 = time.perf_counter()
    answer = {"max_tokens": fields["max_tokens"], "temperature": 0.0, "ignore_eos": True}
    chat = ep.chat(messages, tools=fields.get("tools"), id_slot=0, **answer)
    plain = ep.complete(text, reuse_prompt=True, id_slot=1, **answer)
    tokens = ep.complete(ids, reuse_prompt=True, id_slot=2, **answer)
    short = {"max_tokens": 2, "temperature": 0.0, "ignore_eos": True, "id_slot": 3}
    bare = ep.complete(ids[:16], **short)
    padded = ep.complete(ids[:16], pad=ids, **short)
    return {"prompt": len(ids), "chat_prompt": chat.prompt_tokens, "text_prompt": plain.prompt_tokens,
            "render_ms": 1000 * (t1 - t0), "tokenize_ms": 1000 * (t2 - t1), "chat_gap_ms": gap_ms(chat),
            "text_gap_ms": gap_ms(plain), "tokens_gap_ms": gap_ms(tokens), "short_gap_ms": gap_ms(bare),
            "padded_gap_ms": gap_ms(padded),
            **{f"{way}_cached": (c.server or {}).get("cached_tokens")
               for way, c in (("chat", chat), ("text", plain), ("tokens", tokens))}}


def steps(ep: Endpoint, session) -> list[dict]:
    out, walk = [], session.steps()
    request = next(walk, None)
    while request is not None:
        out.append(one_step(ep, list(session.messages), request[1]))
        try:
            request = walk.send({})
        except StopIteration:
            request = None
    return out


def show(rows: list[dict]) -> None:
    print(f"{'prompt':>7} {'chat tok':>8} {'cached c/t/i':>17} {'render ms':>9} {'tokenize ms':>11} "
          f"{'chat gap ms':>11} {'text gap ms':>11} {'ids gap ms':>10} {'16 ids ms':>9} {'padded ms':>9}")
    for r in rows:
        cached = f"{r['chat_cached']}/{r['text_cached']}/{r['tokens_cached']}"
        print(f"{r['prompt']:>7} {r['chat_prompt'] or 0:>8} {cached:>17} {r['render_ms']:>9.2f} "
              f"{r['tokenize_ms']:>11.2f} {r['chat_gap_ms']:>11.2f} {r['text_gap_ms']:>11.2f} "
              f"{r['tokens_gap_ms']:>10.2f} {r['short_gap_ms']:>9.2f} {r['padded_gap_ms']:>9.2f}")
    for key in ("chat_gap_ms", "text_gap_ms", "tokens_gap_ms", "short_gap_ms", "padded_gap_ms", "render_ms",
                "tokenize_ms"):
        values = [r[key] for r in rows if r[key] is not None]
        print(f"{key}: median {statistics.median(values):.2f}, {min(values):.2f} to {max(values):.2f} "
              f"({len(values)} steps)")
    for key in ("tokens_gap_ms", "padded_gap_ms"):
        slope, intercept = np.polyfit([r["prompt"] for r in rows], [r[key] for r in rows], 1)
        print(f"{key} against the prompt's tokens: {intercept:.2f} ms + {1000 * slope:.3f} us a token")
    print(f"steps whose 16-id gap is under 1 ms: {sum(r['short_gap_ms'] < 1 for r in rows)} of {len(rows)}; "
          f"ids gap less the padded gap: median "
          f"{statistics.median(r['tokens_gap_ms'] - r['padded_gap_ms'] for r in rows):.2f} ms; "
          f"prompt tokens equal all three ways: "
          f"{sum(r['prompt'] == r['chat_prompt'] == r['text_prompt'] for r in rows)} of {len(rows)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", required=True, help="a llama-server's /v1 root")
    parser.add_argument("--model", required=True, help="the name it serves")
    parser.add_argument("--run", required=True, help="a sealed live agent run (folder or id)")
    parser.add_argument("--outputs", default="", help="the outputs folder that holds the run")
    parser.add_argument("--sessions", type=int, default=0, help="only the run's first N sessions (0: all)")
    args = parser.parse_args()
    run = read_past(args.run, "agent", what="--run", outputs=args.outputs)[0]
    ep = Endpoint(args.url, args.model, timeout=600)
    ep.info()
    plan = types.SimpleNamespace(replayed=run)  # all that replays reads of a plan
    sessions = replays(plan, {"temperature": 0.0}, lambda r: None)[:args.sessions or None]
    show([row for session in sessions for row in steps(ep, session)])


if __name__ == "__main__":
    main()
