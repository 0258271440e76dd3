"""One agent session as a conversation that grows step by step: a user turn, then requests with the tools until an
answer without a call (or the step cap), each call executed on the session's own BFCL backends and its result sent
back as a `tool` message; then the next user turn.

`Session.steps` is a generator: it yields each request (its record's tag and the request's fields) and is sent the
record of the answer back, so the same loop runs one session at a time (study.request, the server's counters
around every request), several in flight (the asyncio client), or replays a sealed live run (`Replay`: the live
run's messages at every step and its answer lengths, nothing executed). Everything the grader needs is recorded:
each step's calls as executed and the backends' results, and each turn's final backend state. The records, by kind:
- `session`: id, mode, involved_classes, turns, tools (the OpenAI tools as one JSON text, in their order), system,
  and, for a session of one's own that carries BFCL's ground truth, its initial_config and ground_truth;
- `step`: session, turn, step, sent (the messages added since the last request), and the answer
  (endpoint.completion.Completion's fields: text, tool_calls, cached_tokens, timings) with the server's view;
- `tools`: session, turn, step, calls (each call string as executed; none where one of the answer's calls did not
  decode), results (as the model was sent them), tool_s, parse_error, assistant (the message sent back for it);
- `turn`: session, turn, stopped (answer, step cap, error, or UNDECODED), steps, state (each backend's public
  attributes).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator

from ...endpoint.tools import ToolCall, prompted
from ..batch import bfcl

GRADED = ("initial_config", "ground_truth")  # kept where a session of one's own carries its ground truth
Request = tuple[dict, dict]  # (the record's tag, the chat request's fields besides the messages)
UNDECODED = "a call did not decode"  # a turn's end as BFCL's loop ends it (none of the answer's calls ran); prompt
# mode's text that is not calls is the model's answer, as problems reads it


class Session:
    """A live session of one BFCL entry: its backends, its messages, its tools (native) or system prompt (prompt)."""

    def __init__(self, entry: dict, mode: str, max_steps: int, fields: dict, record: Callable[[dict], None]):
        self.entry, self.mode, self.max_steps, self.record = entry, mode, max_steps, record
        docs = bfcl.functions(entry["involved_classes"])
        self.tools = bfcl.openai_tools(docs) if mode == "native" else None
        self.system = bfcl.system_prompt(docs) if mode == "prompt" else None
        self.fields = fields | ({"tools": self.tools} if self.tools else {})
        self.messages: list[dict] = [{"role": "system", "content": self.system}] if self.system else []
        self.sent: list[list[dict]] = []  # the messages of each request, as sent

    @property
    def id(self) -> str:
        return self.entry["id"]

    def opening(self) -> dict:
        # The tools as one JSON text: records are written with sorted keys, and a template renders a tool's keys
        # in the order given (replayed sorted, every prompt was 7 tokens shorter than the live one)
        return {"kind": "session", "session": self.id, "mode": self.mode, "involved_classes":
                self.entry["involved_classes"], "turns": len(self.entry["question"]),
                "tools": json.dumps(self.tools) if self.tools else None, "system": self.system,
                **({k: self.entry[k] for k in GRADED} if "ground_truth" in self.entry else {})}

    def steps(self) -> Iterator[Request]:
        """Each request of the session in order; sent each answer's record back."""
        self.instances = bfcl.backends(self.entry)
        self.record(self.opening())
        for turn, asked in enumerate(self.entry["question"]):
            pending, stopped = list(asked), "step cap"
            for step in range(self.max_steps):
                self.messages += pending
                self.sent.append(list(self.messages))
                answer = yield self.tag(turn, step, pending), self.fields
                pending, ended = self.after(turn, step, answer)
                if ended:
                    stopped = ended
                    break
            self.record({"kind": "turn", "session": self.id, "turn": turn, "stopped": stopped,
                         "steps": step + 1, "state": state(self.instances)})

    def tag(self, turn: int, step: int, sent: list[dict]) -> dict:
        return {"kind": "step", "session": self.id, "turn": turn, "step": step, "sent": sent}

    def after(self, turn: int, step: int, answer: dict) -> tuple[list[dict], str | None]:
        """The answer taken in: its calls executed (recorded), and the tool messages to send next, or why the turn
        ends (an answer without a call, one whose calls did not all decode, or a request that failed). As
        BFCL's own loop (base_handler: "Failed to decode the model response. Proceed to next turn."), an answer
        with a call that does not decode runs none of its calls; its message still goes back as the model wrote
        it, and a server that cannot render it refuses the next turn's request, as it would refuse BFCL's."""
        calls, problem = read_calls(answer, self.mode)
        self.messages.append(assistant(answer, calls, self.mode))
        ran = [] if problem else calls
        t0 = time.perf_counter()
        executed = [c.as_call() for c in ran]
        results = [bfcl.execute(call, self.instances) for call in executed]
        self.record({"kind": "tools", "session": self.id, "turn": turn, "step": step, "calls": executed,
                     "results": results, "tool_s": time.perf_counter() - t0, "parse_error": problem,
                     "assistant": self.messages[-1]})
        ended = "error" if "error" in answer else UNDECODED if problem and calls else None if ran else "answer"
        return [reply(c, r, self.mode) for c, r in zip(ran, results)] if not ended else [], ended


def read_calls(answer: dict, mode: str) -> tuple[list[ToolCall], str | None]:
    """An answer's calls, and why what looked like calls did not parse (None where nothing failed): native calls
    from `tool_calls` (their arguments must be a JSON object), prompt-mode calls from the text."""
    if mode == "native":
        calls = [ToolCall(**c) for c in answer.get("tool_calls") or ()]
        bad = [c.name for c in calls if not parses(c)]
        return calls, (f"the arguments of {', '.join(bad)} are not a JSON object" if bad else None)
    text = answer.get("text") or ""
    try:
        return prompted(text) if text.strip() else [], None
    except ValueError as e:
        return [], str(e)


def parses(call: ToolCall) -> bool:
    try:
        call.parsed()
        return True
    except ValueError:
        return False


def assistant(answer: dict, calls: list[ToolCall], mode: str) -> dict:
    """The assistant's message as it goes back to the model: its text, and (native) its calls with their ids."""
    message = {"role": "assistant", "content": answer.get("text") or ""}
    if mode == "native" and calls:
        message["tool_calls"] = [{"id": c.id or f"call_{i}", "type": "function",
                                  "function": {"name": c.name, "arguments": c.arguments}} for i, c in enumerate(calls)]
    return message


def reply(call: ToolCall, result: str, mode: str) -> dict:
    """A call's result as a `tool` message (native: answering the call's id)."""
    message = {"role": "tool", "content": result}
    return message | ({"tool_call_id": call.id} if mode == "native" and call.id else {"name": call.name})


def state(instances: dict[str, object]) -> dict:
    """Each backend's public attributes as JSON (what BFCL's state check compares), a value JSON cannot hold as str."""
    return {name: json.loads(json.dumps({k: v for k, v in vars(obj).items() if not k.startswith("_")}, default=str))
            for name, obj in instances.items()}


class Replay:
    """A sealed live session replayed for speed: the same messages at every step (its own answers, not the
    replaying model's), each answer exactly as long as the live one (ignore_eos and max_tokens)."""

    def __init__(self, opening: dict, records: list[dict], fields: dict, record: Callable[[dict], None]):
        self.opening_record, self.records, self.record = opening, records, record
        self.id, self.sent = opening["session"], []
        self.fields = fields | ({"tools": json.loads(opening["tools"])} if opening.get("tools") else {})

    def steps(self) -> Iterator[Request]:
        self.record({**self.opening_record, "replayed": True})
        system = self.opening_record.get("system")
        messages = self.messages = [{"role": "system", "content": system}] if system else []
        tools = {(r["turn"], r["step"]): r for r in self.records if r.get("kind") == "tools"}
        for step in (r for r in self.records if r.get("kind") == "step" and "error" not in r):
            messages += step["sent"]
            self.sent.append(list(messages))
            length = max(1, step.get("completion_tokens") or 1)
            yield ({**{k: step[k] for k in ("kind", "session", "turn", "step", "sent")}, "answer_tokens": length},
                   self.fields | {"max_tokens": length, "ignore_eos": True})
            messages.append(tools[step["turn"], step["step"]]["assistant"])
