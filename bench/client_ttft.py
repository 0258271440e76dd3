"""What the client adds to TTFT, per study's path, at 111, 3,000 and 10,714 prompt tokens.

Against a server that answers at once (bench/fake_vllm.py: it reads the request whole, then sends its
first chunk), the TTFT a client measures is its own cost plus the loopback's: what it spends between
starting its clock and the request leaving, and between the first chunk's bytes arriving and their
stamp. A study's TTFT is then the server's plus this figure, at any prompt length.

Each study's path, as the study calls it:
- decode and prefill: client.Endpoint.complete with a prompt of token ids;
- mtp: client.Endpoint.chat with a text of as many words;
- load: stream.batch of AsyncEndpoint.complete (token ids), one in flight;
- MMLU-Pro: stream.batch of AsyncEndpoint.chat (text), one in flight;
- and, for reference, the openai package's own streaming client with the same token ids (what decode,
  prefill and mtp went through before).
The swap study's first answer is no TTFT: it times the whole wait for a short answer from a server
that is still starting, in seconds.

    python bench/client_ttft.py              # median of 20 per path and length; the last lines are the table
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fake_vllm import MODEL, FakeServer  # noqa: E402
from sparknb.endpoint import stream  # noqa: E402
from sparknb.endpoint.client import Endpoint  # noqa: E402

LENGTHS = (111, 3000, 10714)
LIMIT_MS = 2.0  # the most the client may add at 10,714 tokens


def prompt_ids(n: int, rng: random.Random) -> list[int]:
    return [rng.randrange(4096) for _ in range(n)]


def prompt_text(n: int, rng: random.Random) -> list[dict]:
    return [{"role": "user", "content": " ".join(f"w{rng.randrange(4096)}" for _ in range(n))}]


def single(url: str, chat: bool):
    endpoint = Endpoint(url, MODEL)

    def ask(n: int, rng: random.Random) -> float:
        if chat:
            return endpoint.chat(prompt_text(n, rng), max_tokens=2).ttft_s
        return endpoint.complete(prompt_ids(n, rng), max_tokens=2).ttft_s
    return ask


def batched(url: str, chat: bool):
    endpoint = stream.AsyncEndpoint(url, MODEL)

    def ask(n: int, rng: random.Random) -> float:
        if chat:
            messages = prompt_text(n, rng)
            call = lambda ep: ep.chat(messages, max_tokens=2)  # noqa: E731
        else:
            ids = prompt_ids(n, rng)
            call = lambda ep: ep.complete(ids, max_tokens=2)  # noqa: E731
        (outcome,) = stream.batch(endpoint, [call], 1)
        if outcome.error:
            raise SystemExit(outcome.error)
        return outcome.answer.ttft_s
    return ask


def reference(url: str, chat: bool):
    """The openai package's streaming client, its clock started where its caller would start one."""
    import openai

    client = openai.OpenAI(base_url=url, api_key="none", max_retries=0)

    def ask(n: int, rng: random.Random) -> float:
        ids = prompt_ids(n, rng)
        sent = time.perf_counter()
        for chunk in client.completions.create(model=MODEL, prompt=ids, max_tokens=2, stream=True,
                                               stream_options={"include_usage": True},
                                               extra_body={"return_token_ids": True, "ignore_eos": True}):
            if chunk.choices and chunk.choices[0].text:
                return time.perf_counter() - sent
        raise SystemExit("the openai package's stream had no text")
    return ask


PATHS = [("decode, prefill", "Endpoint.complete (token ids)", single, False),
         ("mtp", "Endpoint.chat (text)", single, True),
         ("load", "stream.batch, complete (token ids)", batched, False),
         ("MMLU-Pro", "stream.batch, chat (text)", batched, True),
         ("(reference)", "openai package, complete", reference, False)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=20, help="requests per path and length (the median is shown)")
    parser.add_argument("--no-reference", action="store_true", help="leave out the openai package's client")
    args = parser.parse_args()
    rng = random.Random(0)
    rows = []
    with FakeServer() as server:
        for study, path, make, chat in PATHS:
            if args.no_reference and study == "(reference)":
                continue
            ask = make(server.url, chat)
            ask(16, rng)  # warm: imports, first connection
            medians = [1000 * statistics.median(ask(n, rng) for _ in range(args.repeat)) for n in LENGTHS]
            rows.append((study, path, medians))
            print(f"{study:16} {path:36} " + " ".join(f"{m:9.2f}" for m in medians), flush=True)
    print(f"\nTTFT the client adds, ms (median of {args.repeat}), against a server that answers at once:")
    print(f"{'study':16} {'path':36} " + " ".join(f"{n:>9,}" for n in LENGTHS))
    for study, path, medians in rows:
        print(f"{study:16} {path:36} " + " ".join(f"{m:9.2f}" for m in medians))
    worst = max(medians[-1] for study, _, medians in rows if study != "(reference)")
    print(f"worst study path at {LENGTHS[-1]:,} tokens: {worst:.2f} ms "
          f"({'within' if worst <= LIMIT_MS else 'BEYOND'} the {LIMIT_MS:g} ms limit)")


if __name__ == "__main__":
    main()
