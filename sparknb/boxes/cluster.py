"""A campaign spread over several boxes on Ray: each cell on its own box, every folder verified on arrival.

Each box is a Ray node that announces a custom resource named after it (`sparknb cluster join`).
The campaign starts one actor per box (sparknb.boxes.box.Box), so that the cells of one box never
overlap, and hands each box its own cells in the local campaign's order: a model's server up, its
cells, the server down. What comes back is each sealed folder's bytes, unpacked here only if they
match the folder's own manifest. A box that drops out fails only its own cells; Ctrl-C stops the
cell and the server on every box before the campaign itself stops.
"""

from __future__ import annotations

import contextlib
import io
import os
import tarfile
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ray
from ray.exceptions import GetTimeoutError, RayError

from ..errors import RunError
from ..machine import fingerprint
from ..runs.params import CampaignParams, project_root
from ..runs.report import duration
from ..runs.run import Run, arrive, outputs_dir
from .box import STOP_S, Box, ClusterError, connect, nodes_by_box, reachable, resource
from .campaign import Cell

START_S = 180.0  # for a box's actor to start and say what it is
CLOSE_S = 120.0  # for a box to stop its server
TRANSFER_S = 600.0  # for a sealed folder's bytes to arrive
# A test hook, for the test suite only: names a cell (its key) whose folder gets one byte changed on its way here.
ALTER_IN_TRANSIT = "SPARKNB_TEST_ALTER_IN_TRANSIT"


class Boxes:
    """campaign.run's runner for a campaign file with `boxes:`: every cell on its own box, through Ray."""

    def __init__(self, address: str) -> None:
        reachable(address)  # before the campaign opens its folder
        self.address = address

    def __call__(self, campaign: CampaignParams, cells: list[Cell], record: Run, outputs: str | Path,
                 progress: Any) -> int:
        connected = connect(self.address)
        try:
            lanes = _start(campaign, cells, record, progress.log)
            return _Drive(lanes, record, Path(outputs or outputs_dir()), progress).run()
        finally:
            if connected:
                ray.shutdown()


@dataclass
class _Call:
    kind: str  # open, cell or close
    refs: list
    submitted: float
    model: str | None = None
    cell: Cell | None = None


@dataclass
class _Lane:
    """One box: its actor, the steps it has left, and the call it is on."""

    box: str
    actor: Any
    facts: dict
    steps: deque = field(default_factory=deque)
    call: _Call | None = None
    endpoint: str | None = None
    open: bool = False
    lost: str | None = None


def _start(campaign: CampaignParams, cells: list[Cell], record: Run, log) -> list[_Lane]:
    """An actor on every box that has cells to run, each checked before any cell starts; every problem named."""
    needed = list(dict.fromkeys(c.box for c in cells))
    seen = nodes_by_box()
    problems = []
    for box in needed:
        alive = [n for n in seen.get(box, []) if n.get("Alive")]
        if not alive:
            problems.append(f"{box}: no node of the cluster announces it (boxes seen: "
                            f"{', '.join(sorted(b for b in seen if b)) or 'none'}); on that box run "
                            f"`sparknb cluster join --box {box} --address HEAD:6379`")
        elif len(alive) > 1:
            problems.append(f"{box}: announced by {len(alive)} nodes; one box is one node")
    if problems:
        raise ClusterError("Cannot run on every box:\n  " + "\n  ".join(problems))
    actors = {box: Box.options(resources={resource(box): 1}, num_cpus=0, max_restarts=0, max_task_retries=0)
              .remote(box, campaign.boxes[box].model_dump()) for box in needed}
    asked = {box: actors[box].facts.remote(_models(c for c in cells if c.box == box)) for box in needed}
    ready, _ = ray.wait(list(asked.values()), num_returns=len(asked), timeout=START_S)
    lanes = []
    for box, ref in asked.items():
        if ref not in ready:
            problems.append(f"{box}: its worker did not start in {START_S:g} s; another campaign may hold the box "
                            f"(its resource {resource(box)} is taken: see `sparknb cluster status`)")
            continue
        try:
            found = ray.get(ref)
        except RayError as e:
            problems.append(f"{box}: its worker failed to start: {' '.join(str(e).split())[:400]}")
            continue
        problems += [f"{box}: {p}" for p in found.pop("problems")]
        record.record({"event": "box", **found})
        commit = found["sparknb"]
        log(f"box {box}: node {found['node_id'][:12]}, host {found['hostname']}, sparknb {commit.get('commit')}"
            f"{' (dirty)' if commit.get('dirty') else ''}")
        if found["run_lock"] is not None:  # its guard will refuse each cell while it is held
            log(f"WARNING: box {box}: another sparknb run holds its run lock ({found['run_lock'] or 'starting'})")
        lanes.append(_Lane(box, actors[box], found, _steps([c for c in cells if c.box == box], campaign.models)))
    if problems:
        for actor in actors.values():
            ray.kill(actor)
        raise ClusterError("Cannot run on every box:\n  " + "\n  ".join(problems))
    here = fingerprint.project(project_root()).get("commit")
    others = sorted({lane.facts["sparknb"].get("commit") for lane in lanes} - {here})
    if others:
        log(f"WARNING: the boxes run other sparknb code than this machine ({here}): {', '.join(map(str, others))}; "
            "each run's fingerprint says which")
    return lanes


def _models(cells) -> list[str]:
    names = []
    for cell in cells:
        names += [cell.model] if cell.model else list(cell.parameters.get("models", []))
    return list(dict.fromkeys(names))


def _steps(cells: list[Cell], models: list[str]) -> deque:
    """The local campaign's order on one box: per model (cross-model studies last) its server up, cells, down."""
    steps: deque = deque()
    for model in [*models, None]:
        mine = [c for c in cells if c.model == model]
        if mine:
            steps += [("open", model, None), *(("cell", model, c) for c in mine), ("close", model, None)]
    return steps


class _Drive:
    """The driver's loop: one call in flight per box, each answer recorded as it comes."""

    def __init__(self, lanes: list[_Lane], record: Run, outputs: Path, progress: Any) -> None:
        self.lanes, self.record, self.outputs, self.progress = lanes, record, outputs, progress
        self.stopping = False

    def run(self) -> int:
        failed = 0
        try:
            for lane in self.lanes:
                self._submit(lane)
            while any(lane.call for lane in self.lanes):
                failed += self._settle_ready()
        except KeyboardInterrupt:
            self._stop()
            raise
        finally:
            for lane in self.lanes:
                with contextlib.suppress(Exception):
                    ray.kill(lane.actor)
        return failed

    def _submit(self, lane: _Lane) -> None:
        if lane.call is not None or lane.lost or not lane.steps or self.stopping:
            return
        kind, model, cell = lane.steps.popleft()
        if kind == "open":
            refs = [lane.actor.open.remote(model)]
        elif kind == "cell":
            refs = list(lane.actor.run.remote(cell, lane.endpoint))
        else:
            refs = [lane.actor.close.remote()]
        lane.call = _Call(kind, refs, time.monotonic(), model, cell)

    def _settle_ready(self, timeout: float = 1.0) -> int:
        calls = {lane.call.refs[0]: lane for lane in self.lanes if lane.call}
        ready, _ = ray.wait(list(calls), num_returns=1, timeout=timeout)
        failed = 0
        for ref in ready:
            lane = calls[ref]
            failed += self._settle(lane)
            self._submit(lane)
        return failed

    def _settle(self, lane: _Lane) -> int:
        call, lane.call = lane.call, None
        try:
            answer = ray.get(call.refs[0])
        except RayError as e:
            return self._lose(lane, call, e)
        for note in answer["notes"]:
            if note[0] == "record":
                self.record.record(note[1] | {"box": lane.box})
            else:
                self.record.write_text(f"{lane.box}-{note[1]}", note[2])
        if call.kind == "open":
            lane.open, lane.endpoint = answer["ok"], answer.get("endpoint")
            if answer["ok"] or self.stopping:
                return 0
            mine = [step[2] for step in lane.steps if step[1] == call.model and step[0] == "cell"]
            lane.steps = deque(s for s in lane.steps if s[1] != call.model)
            for cell in mine:
                self._fail(lane, cell, answer["reason"], f"{call.model} could not be served on {lane.box}: "
                           f"{answer['reason'].splitlines()[0]}")
            return len(mine)
        if call.kind == "close":
            lane.open = False
            return 0
        return self._arrive(lane, call, answer)

    def _arrive(self, lane: _Lane, call: _Call, answer: dict) -> int:
        """The cell's folder unpacked under outputs/ if it matches its manifest; its record, with Ray's costs."""
        cell = call.cell
        row = {"cell": cell.key, "status": answer["status"], "notebook": cell.notebook, "model": cell.model,
               "box": lane.box, "node_id": lane.facts["node_id"], "host": lane.facts["hostname"],
               "seconds": answer["seconds"], "pack_s": answer["pack_s"], "bytes": answer["bytes"],
               "box_run": answer["box_run"],
               "scheduling_s": max(0.0, time.monotonic() - call.submitted - answer["call_s"]),
               "transfer_s": None, "arrival_s": None}
        reason = answer["reason"]
        if answer["bytes"]:
            t0 = time.monotonic()
            try:
                payload = ray.get(call.refs[1], timeout=TRANSFER_S)
            except (RayError, GetTimeoutError) as e:
                payload, reason = None, f"its sealed folder did not arrive from {lane.box}: {type(e).__name__}: {e}"
            row["transfer_s"] = time.monotonic() - t0
            if payload is not None:
                t0 = time.monotonic()
                try:
                    row["run"] = str(arrive(alter_in_transit(cell.key, payload), self.outputs / cell.notebook))
                except RunError as e:
                    reason = f"{e}. {lane.box} keeps its copy: {answer['box_run']}"
                row["arrival_s"] = time.monotonic() - t0
        if "run" not in row and row["status"] == "done":
            row["status"] = "failed"
        if row["status"] != "done":
            row["reason"] = reason
        self.record.record(row)
        if row["status"] == "done":
            what = (f"sealed on {lane.box} in {duration(row['seconds'])}, here after "
                    f"{row['scheduling_s'] + row['transfer_s']:.2f} s of Ray: {row['run']}")
        else:
            what = f"{row['status'].upper()} on {lane.box}: {str(reason).splitlines()[0]}"
        self.progress.step(cell, what)
        return row["status"] != "done"

    def _fail(self, lane: _Lane, cell: Cell, reason: str, line: str) -> None:
        self.record.record({"cell": cell.key, "status": "failed", "reason": reason, "seconds": 0.0, "box": lane.box,
                            "node_id": lane.facts["node_id"], "host": lane.facts["hostname"]})
        self.progress.step(cell, f"FAILED: {line}")

    def _lose(self, lane: _Lane, call: _Call, error: Exception) -> int:
        """A box that dropped out: its cell in flight and every cell it had left fail, with the reason."""
        why = " ".join(str(error).split())[:300]
        lane.lost = f"{type(error).__name__}: {why}"
        self.record.record({"event": "box lost", "box": lane.box, "node_id": lane.facts["node_id"],
                            "reason": lane.lost, "during": call.cell.key if call.cell else call.kind})
        self.progress.log(f"box {lane.box} dropped out ({type(error).__name__}); its cells fail, the others go on")
        failed = 0
        if call.cell is not None:
            self._fail(lane, call.cell, f"box {lane.box} dropped out during this cell: {lane.lost}",
                       f"box {lane.box} dropped out during this cell")
            failed += 1
        for kind, _, cell in lane.steps:
            if kind == "cell":
                self._fail(lane, cell, f"box {lane.box} dropped out before this cell: {lane.lost}",
                           f"box {lane.box} dropped out before this cell")
                failed += 1
        lane.steps.clear()
        return failed

    def _stop(self) -> None:
        """Ctrl-C: every box interrupts its cell (or its server's start), then stops its server; all bounded."""
        self.stopping = True
        live = [lane for lane in self.lanes if not lane.lost]
        self.progress.log("Ctrl-C: stopping the cell and the server on every box ...")
        for lane in live:
            if lane.call is not None:
                lane.actor.stop.remote()
        self._drain(STOP_S + 30)
        for lane in live:  # close() stops whatever server is up there, and is harmless where none is
            if not lane.lost and lane.call is None:
                lane.call = _Call("close", [lane.actor.close.remote()], time.monotonic())
        self._drain(CLOSE_S)
        for lane in live:
            if lane.call is not None:
                self.progress.log(f"box {lane.box} did not stop in time; its worker is killed, and its server "
                                  "with it")

    def _drain(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while any(lane.call for lane in self.lanes) and time.monotonic() < deadline:
            self._settle_ready()


def alter_in_transit(key: str, payload: bytes) -> bytes:
    """A test hook: where $SPARKNB_TEST_ALTER_IN_TRANSIT names this cell, one byte of its records changes on the way.

    It exists to show that a folder altered between the box and here is refused; nothing sets it but the tests.
    """
    if os.environ.get(ALTER_IN_TRANSIT) != key:
        return payload
    with tarfile.open(fileobj=io.BytesIO(payload), mode="r:") as tar:
        files = [m for m in tar.getmembers() if m.isfile() and m.size]
    member = next((m for m in files if m.name.endswith("/records.jsonl")), files[0])
    altered = bytearray(payload)
    altered[member.offset_data] ^= 0x01
    return bytes(altered)
