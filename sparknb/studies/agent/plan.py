"""The agent study's parameters, and the sessions decided before any request.

Sessions are BFCL v4's multi-turn ones (studies.batch.bfcl), drawn evenly across their first involved class and
seeded, or read from a JSONL file of BFCL's shape; a session whose classes sparknb cannot run (MathAPI: mpmath) is
left out of the draw, and named where asked for. `replay_from` names a sealed live run: its sessions are then
replayed, the same messages at every step, each answer of a fixed length (the live answer's own), so that two
models' speeds compare on the same work.

`sequential: true` (batch.sequence: its `margin` and `budget`) asks the live sessions in a seeded random order, and
against `compare_with` in that run's order, stopping once the paired confidence sequence of the BFCL grades decides
(work). It asks one session at a time: the sequence decides on each session's grade before the next goes out.
A replay is never sequential: its answers are the live run's filler, not the model's, and are never graded.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Annotated, ClassVar, Literal

from pydantic import Field, model_validator

from ...errors import DataError
from ...runs import plan
from ...runs.plan import COMPARED, IGNORED, RESUMED
from ...runs.run import PastRun, read_past
from ..batch import bfcl
from ..batch.plan import Past, Temperature, resume_from
from ..batch.sequence import Sequential

NOTEBOOK = "agent"
SHAPE = ("id", "question", "initial_config", "involved_classes")  # what a session line of BFCL's must have


class Plan(Sequential):
    study: ClassVar[str] = NOTEBOOK
    unit: ClassVar[str] = "sessions"
    drawn: ClassVar[str] = "drawn_sessions"  # `sessions` is the count drawn
    # No record holds a session's answers whole: the key names the one record of its grade (work.judged), so the
    # paired difference keeps every doubt about the scores (batch.headline.identical finds no shared answer)
    key: ClassVar[str] = "graded_session"
    recorded: ClassVar = {"drawn_sessions": (IGNORED,)}
    sessions: int = Field(4, ge=1, description="sessions to run, 1 or more, drawn evenly across BFCL's classes")
    seed: Annotated[int, COMPARED] = Field(0, description="the draw's seed, and a sequential run's order's")
    session_ids: list[str] = Field([], description="BFCL ids to run instead of a draw, e.g. ['multi_turn_base_0']")
    sessions_file: Annotated[str, RESUMED] = Field(
        "", description="a JSONL file of sessions in BFCL's multi-turn shape (id, question, initial_config, "
        "involved_classes; ground_truth to be graded), or empty for BFCL's multi_turn_base")
    mode: Annotated[Literal["native", "prompt"], COMPARED, RESUMED] = Field(
        "native", description="native (OpenAI `tools`, the server parses calls) or prompt (BFCL's system prompt, the "
        "model writes [func(arg=...)])")
    max_steps: Annotated[int, COMPARED, RESUMED] = Field(5, ge=1, description="requests per user turn at most, 1 or "
                                                         "more")
    max_tokens: Annotated[int, COMPARED, RESUMED] = Field(256, ge=1, description="the longest answer of a step, 1 or "
                                                          "more")
    temperature: Temperature
    replay_from: Annotated[str, IGNORED] = Field("", description="a sealed live agent run to replay for speed: "
                                                 "its messages at every step, its answer lengths")
    in_flight: Annotated[Annotated[int, Field(ge=1)] | list[Annotated[int, Field(ge=1)]], COMPARED] = Field(
        1, description="sessions at once, 1 or more; a list (e.g. [1, 2, 4, 8]) sweeps them, replaying")
    slo_ttft_p95_ms: Annotated[float | None, COMPARED] = Field(
        None, gt=0, description="the capacity search's SLO: a step's TTFT p95 at most this (ms), or None")
    slo_decode_tok_s: Annotated[float | None, COMPARED] = Field(
        None, gt=0, description="the capacity search's SLO: a session's decode tok/s (median) at least this, or None")
    max_in_flight: Annotated[int, COMPARED] = Field(8, ge=1, description="the capacity search's highest level")
    compare_with: Annotated[plan.RunIds, IGNORED] = Field([], description="earlier agent runs: folders or run ids")
    resume_from: Past = resume_from(NOTEBOOK)

    @model_validator(mode="after")
    def _levels_replay(self) -> Plan:
        if (self.searching or isinstance(self.in_flight, list)) and not self.replay_from:
            raise ValueError("a sweep of in_flight levels or a capacity search (an SLO given) replays a sealed live "
                             "run, so that every level does the same work: give replay_from")
        if isinstance(self.in_flight, list) and not self.in_flight:
            raise ValueError("in_flight is an empty list: give the levels, e.g. [1, 2, 4, 8]")
        if self.replay_from and (self.sequential or self.resume_from):
            raise ValueError("a replay (replay_from) measures speed on the live run's own answers, which are never "
                             "graded: it is never sequential and resumes nothing. Fix: sequential=false and "
                             "resume_from empty, or run live (replay_from empty) to ask sessions sequentially")
        if self.sequential and (self.in_flight != 1 or len(self.compare_with) > 1):
            raise ValueError("a sequential run asks one session at a time, each graded before the next, against one "
                             "run: set in_flight 1 and name at most one compare_with run")
        if self.searching and self.in_flight != 1:
            raise ValueError("the capacity search (an SLO given) picks its own levels, up to max_in_flight: leave "
                             "in_flight at 1, or give no SLO to sweep the in_flight levels you name")
        return self

    @property
    def searching(self) -> bool:
        """Whether this run searches for the box's capacity (an SLO is given)."""
        return self.slo_ttft_p95_ms is not None or self.slo_decode_tok_s is not None

    @property
    def levels(self) -> list[int] | None:
        """The swept levels, in order (None: one level, as before; the search picks its own)."""
        return sorted(set(self.in_flight)) if isinstance(self.in_flight, list) else None

    def _read_past(self) -> dict[str, list[PastRun]]:
        found = super()._read_past()
        if self.replay_from:
            found["replay_from"] = read_past(self.replay_from, NOTEBOOK, what="replay_from", outputs=self.outputs)
            self._check_levels(found["replay_from"][0])
        return found

    def _check_levels(self, replayed: PastRun) -> None:
        """A level of N in flight needs N sessions (sweep's docstring says why), refused before the run starts."""
        count = sum(r.get("kind") == "session" for r in replayed.records)
        if self.levels and self.levels[-1] > count:
            raise DataError(f"in_flight {self.levels[-1]} needs as many sessions, and the replayed run "
                            f"{replayed.id} has {count}: replay a live run of at least {self.levels[-1]} sessions, "
                            f"or sweep up to {count}.")

    @property
    def replayed(self) -> PastRun | None:
        return next(iter(self._runs.get("replay_from", [])), None)


def sessions(plan: Plan) -> tuple[list[dict], str]:
    """The sessions to run and where they came from, every one checked runnable before any request."""
    entries, source = _source(plan)
    if plan.session_ids:
        by_id = {e["id"]: e for e in entries}
        missing = [i for i in plan.session_ids if i not in by_id]
        if missing:
            raise DataError(f"session_ids names sessions not in {source}: {', '.join(missing)}.")
        chosen = [by_id[i] for i in plan.session_ids]
        refused = [f"{e['id']}: {why}" for e in chosen if (why := bfcl.refusal(e["involved_classes"]))]
        if refused:
            raise DataError("Cannot run these sessions:\n  " + "\n  ".join(refused))
        return chosen, source
    return draw([e for e in entries if not bfcl.refusal(e["involved_classes"])], plan.sessions, plan.seed), source


def _source(plan: Plan) -> tuple[list[dict], str]:
    if not plan.sessions_file:
        return bfcl.entries("multi_turn_base"), f"BFCL v4 multi_turn_base ({bfcl.WHEEL['file']})"
    path = Path(plan.sessions_file).expanduser()
    if not path.is_file():
        raise DataError(f"sessions_file {path} is not a file; give a JSONL file of BFCL multi-turn sessions.")
    from ..batch.data import jsonl

    entries = [item for _, _, item in jsonl(path, path.read_text(), ", ".join(SHAPE), "id")]
    for number, entry in enumerate(entries, 1):
        _check_shape(entry, f"{path.name} session {number}")
    return entries, str(path)


def _check_shape(entry: dict, where: str) -> None:
    """A session of BFCL's multi-turn shape, else refused naming what is wrong and the shape wanted."""
    missing = [k for k in SHAPE if k not in entry]
    turns = entry.get("question")
    bad = missing or not isinstance(turns, list) or not turns or not all(
        isinstance(t, list) and all(isinstance(m, dict) and "role" in m and "content" in m for m in t) for t in turns)
    if bad or not isinstance(entry.get("involved_classes"), list):
        what = f"it lacks {', '.join(missing)}" if missing else "its question is not a list of turns of messages"
        raise DataError(f"{where} is not of BFCL's multi-turn shape ({what}): each line needs id, question (a list of "
                        "turns, each a list of {role, content} messages), initial_config and involved_classes, as in "
                        "BFCL_v4_multi_turn_base.json.")
    if "ground_truth" in entry and not _one_list_a_turn(entry["ground_truth"], len(turns)):
        raise DataError(f"{where} ({entry['id']}): its ground_truth is not one list of call strings per turn "
                        f"({len(turns)} turns), as in BFCL's possible_answer/BFCL_v4_multi_turn_base.json; fix it "
                        "or leave ground_truth out (the session is then run but not graded).")
    why = bfcl.refusal(entry["involved_classes"])
    if why:
        raise DataError(f"{where} ({entry['id']}): {why}.")


def _one_list_a_turn(truth: object, turns: int) -> bool:
    """A ground truth as BFCL's possible answers give one: a list of call strings for each turn."""
    return isinstance(truth, list) and len(truth) == turns and all(
        isinstance(t, list) and all(isinstance(c, str) for c in t) for t in truth)


def draw(entries: list[dict], n: int, seed: int) -> list[dict]:
    """`n` sessions, evenly across their first involved class (round robin over the classes, each shuffled by the
    seed), so that no one backend's sessions crowd the others out."""
    rng = random.Random(seed)
    groups: dict[str, list[dict]] = {}
    for entry in entries:
        groups.setdefault(entry["involved_classes"][0], []).append(entry)
    for group in groups.values():
        rng.shuffle(group)
    order = sorted(groups)
    chosen = [groups[c][i] for i in range(max(map(len, groups.values()), default=0)) for c in order
              if i < len(groups[c])]
    return chosen[:n]
