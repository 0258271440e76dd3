"""Campaigns across boxes: the boxes of a campaign file, a run travelling between boxes, and a real Ray cluster.

The Ray tests run inside a network namespace of their own (unshare -rn, only lo up): Ray dials the
machine's interface address otherwise, and test traffic stays on loopback. Everything they start
(Ray's processes, the tiny vLLM servers, the kernels) carries a mark in its environment, so that
the process table can be searched for anything left running, independently of the code under test.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import tarfile
import tempfile
import time
import uuid
from pathlib import Path

import pytest

from sparknb.boxes import campaign
from sparknb.errors import ParamsError, RunError
from sparknb.machine.guard import RunLock, lock_holder
from sparknb.runs.params import load_campaign, project_root
from sparknb.runs.run import Run, arrive, pack, read_records, verify

ray = pytest.importorskip("ray", reason="Ray is not installed: pip install -e '.[cluster]'")
from sparknb.boxes import cluster  # noqa: E402  (needs Ray)

SCENARIO = Path(__file__).with_name("cluster_scenario.py")
MARK = "SPARKNB_TEST_MARK"


def _file(tmp_path, text: str) -> str:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    return str(path)


# --- the campaign file --------------------------------------------------------------------------------------

def test_every_cell_runs_on_every_box_and_its_key_names_the_box(tmp_path):
    path = _file(tmp_path, """
name: two-boxes
models: [tiny-dense, tiny-moe]
studies: {decode: {}, swap: {}}
boxes:
  spark-a: {}
  spark-b: {hardware: gb10, models: {tiny-moe: {endpoint: "http://10.0.0.2:8000/v1"}}}
""")
    cells = campaign.plan(load_campaign(path))
    assert [c.key for c in cells] == ["decode/tiny-dense/1@spark-a", "decode/tiny-moe/1@spark-a",
                                      "swap/all models/1@spark-a", "decode/tiny-dense/1@spark-b",
                                      "decode/tiny-moe/1@spark-b", "swap/all models/1@spark-b"]
    steps = cluster._steps([c for c in cells if c.box == "spark-b"], ["tiny-dense", "tiny-moe"])
    assert [(kind, model) for kind, model, _ in steps] == [
        ("open", "tiny-dense"), ("cell", "tiny-dense"), ("close", "tiny-dense"),
        ("open", "tiny-moe"), ("cell", "tiny-moe"), ("close", "tiny-moe"),
        ("open", None), ("cell", None), ("close", None)]  # the local campaign's order, on each box
    assert cluster._models(cells) == ["tiny-dense", "tiny-moe"]


def test_a_model_on_a_box_gets_the_boxs_hardware_and_overrides_and_nothing_else(tmp_path):
    from sparknb.runs.params import load_model, on_box

    boxes = load_campaign(_file(tmp_path, """
name: x
models: [tiny-dense]
studies: {decode: {}}
boxes:
  a: {}
  b: {hardware: gb10, models: {tiny-dense: {endpoint: "http://10.0.0.2:8000/v1"}}}
""")).boxes
    own = load_model("tiny-dense")
    assert on_box(own, boxes["a"]) is own
    there = on_box(own, boxes["b"])
    assert (there.hardware, there.endpoint) == ("gb10", "http://10.0.0.2:8000/v1")
    assert there.model_dump() | {"hardware": own.hardware, "endpoint": own.endpoint} == own.model_dump()


def test_bad_boxes_are_named_before_anything_starts(tmp_path):
    with pytest.raises(ParamsError) as e:  # what is wrong with a box itself: all at once
        load_campaign(_file(tmp_path, """
name: bad
models: [tiny-dense]
studies: {decode: {}}
boxes:
  "spark a": {}
  b: {hardware: no-such-hardware}
  e: {models: {tiny-dense: {name: other}}}
  f: {models: {tiny-dense: {endpoint: "http://user:hunter2@10.0.0.9:8000/v1"}}}
"""))
    text = str(e.value)
    assert "boxes.spark a" in text and "should match pattern" in text
    assert "boxes.b.hardware: No hardware params" in text
    assert "boxes.e: models.tiny-dense sets ['name']: a model keeps its name on every box" in text
    assert "boxes.f: models.tiny-dense holds a secret" in text and "hunter2" not in text
    with pytest.raises(ParamsError) as e:  # and, once each box is well formed, what does not fit the campaign
        load_campaign(_file(tmp_path, """
name: bad
models: [tiny-dense]
studies: {decode: {}}
boxes:
  c: {models: {tiny-moe: {endpoint: "http://x:1/v1"}}}
  d: {models: {tiny-dense: {endpoint: "ftp://x"}}}
"""))
    text = str(e.value)
    assert "boxes.c.models.tiny-moe: not one of the campaign's models" in text
    assert "boxes.d.models.tiny-dense: tiny-dense with this box's overrides is invalid: endpoint" in text


def test_boxes_need_a_cluster_and_a_cluster_needs_boxes_before_any_folder_is_made(tmp_path):
    outputs = tmp_path / "outputs"
    with_boxes = _file(tmp_path, "name: x\nmodels: [tiny-dense]\nstudies: {decode: {}}\nboxes: {a: {}}\n")
    with pytest.raises(ParamsError, match="names boxes \\(a\\): run it with --cluster"):
        campaign.run(with_boxes, outputs=outputs)
    (tmp_path / "plain.yaml").write_text("name: y\nmodels: [tiny-dense]\nstudies: {decode: {}}\n")
    with socket.create_server(("127.0.0.1", 0)) as head:  # something answers there; no Ray is needed to refuse
        boxes = cluster.Boxes(f"127.0.0.1:{head.getsockname()[1]}")
    with pytest.raises(ParamsError, match="names no boxes"):
        campaign.run(str(tmp_path / "plain.yaml"), outputs=outputs, on=boxes)
    with pytest.raises(cluster.ClusterError, match="Nothing answers at '127.0.0.1:1'"):
        cluster.Boxes("127.0.0.1:1")  # Ray itself would retry for ever
    assert not outputs.exists()


# --- a run travelling between boxes -------------------------------------------------------------------------

def _sealed(tmp_path, records=3) -> Run:
    run = Run.create("decode", {"notebook": "decode"}, outputs=tmp_path / "box", label="tiny-dense")
    for n in range(records):
        run.record({"n": n, "decode_tok_s": 100.0 + n})
    (run.path / "plots").mkdir()
    run.write_text("plots/a.txt", "x")
    run.seal()
    return run


def _leftovers(folder: Path) -> list[str]:
    return [p.name for p in folder.iterdir() if p.name.startswith(".arriving")] if folder.exists() else []


def test_a_travelled_run_arrives_as_sealed_and_read_only(tmp_path):
    run = _sealed(tmp_path)
    here = tmp_path / "here" / "decode"
    arrived = arrive(pack(run.path), here)
    assert arrived == here / run.id and verify(arrived) == []
    assert read_records(arrived) == read_records(run.path)
    writable = stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH
    assert all(not p.stat().st_mode & writable for p in [arrived, *arrived.rglob("*")])
    assert arrive(pack(run.path), here) == arrived  # the same run again (the box writes here itself): that one
    assert arrive(pack(run.path), run.path.parent) == run.path
    assert _leftovers(here) == []


def test_a_run_altered_in_transit_is_refused_and_nothing_of_it_stays(tmp_path, monkeypatch):
    run = _sealed(tmp_path)
    payload = pack(run.path)
    monkeypatch.setenv(cluster.ALTER_IN_TRANSIT, "decode/tiny-dense/1@b")
    assert cluster.alter_in_transit("decode/tiny-dense/2@b", payload) == payload  # only the cell it names
    altered = cluster.alter_in_transit("decode/tiny-dense/1@b", payload)
    assert len(altered) == len(payload) and sum(x != y for x, y in zip(altered, payload)) == 1
    here = tmp_path / "here" / "decode"
    with pytest.raises(RunError, match="refused on arrival.*changed: records.jsonl"):
        arrive(altered, here)
    assert list(here.iterdir()) == []


def _tar(entries: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, data in entries.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def test_what_is_not_one_sealed_run_is_refused_and_no_run_is_overwritten(tmp_path):
    here = tmp_path / "here" / "decode"
    with pytest.raises(RunError, match="one folder"):
        arrive(_tar({"a/x": b"1", "b/y": b"2"}), here)
    with pytest.raises(RunError, match="refused on arrival"):
        arrive(_tar({"../escape/x": b"1"}), here)
    assert not (tmp_path / "here" / "escape").exists()
    with pytest.raises(RunError, match="never sealed"):
        arrive(_tar({"r1/params.json": b"{}"}), here)
    with pytest.raises(RunError, match="not a sealed run"):
        arrive(b"not a tar at all" * 100, here)
    run = _sealed(tmp_path)
    shutil.copytree(run.path, here / run.id)  # another folder under the same id, holding something else
    (here / run.id / "records.jsonl").chmod(0o644)
    (here / run.id / "records.jsonl").write_text("{}\n")
    with pytest.raises(RunError, match="exists and is another run"):
        arrive(pack(run.path), here)
    assert (here / run.id / "records.jsonl").read_text() == "{}\n"
    assert _leftovers(here) == []


def test_the_run_lock_holder_is_readable_without_taking_the_lock(tmp_path):
    path = tmp_path / "lock"
    assert lock_holder(path) is None
    with RunLock({"notebook": "decode", "model": "tiny-dense"}, path):
        held = lock_holder(path)
        assert held["notebook"] == "decode" and held["pid"] == os.getpid()
    assert lock_holder(path) is None


# --- a real Ray cluster, in a network namespace of its own --------------------------------------------------

def _namespace_works() -> str | None:
    if shutil.which("unshare") is None or shutil.which("ip") is None:
        return "unshare or ip is missing"
    done = subprocess.run(["unshare", "-rn", "sh", "-c", "ip link set lo up"], capture_output=True, text=True)
    return None if done.returncode == 0 else f"unshare -rn is not permitted here: {done.stderr.strip()}"


def in_namespace(argv: list[str], env: dict, timeout: float) -> subprocess.CompletedProcess:
    """argv in a network namespace where only lo exists, up."""
    reason = _namespace_works()
    if reason:
        pytest.skip(f"a Ray test needs a network namespace of its own: {reason}")
    return subprocess.run(["unshare", "-rn", "sh", "-c", 'ip link set lo up && exec "$@"', "sh", *argv],
                          env=env, cwd=project_root(), capture_output=True, text=True, timeout=timeout)


def marked(mark: str, wait_s: float = 0.0) -> list[str]:
    """Live processes whose environment carries the mark: whatever a test started and left running.

    `wait_s` gives what is on its way out (a box's watchdog, a second after its actor) time to go.
    """
    deadline = time.monotonic() + wait_s
    while (found := _marked(mark)) and time.monotonic() < deadline:
        time.sleep(0.5)
    return found


def _marked(mark: str) -> list[str]:
    found = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            if f"{MARK}={mark}".encode() not in Path(f"/proc/{entry}/environ").read_bytes().split(b"\0"):
                continue
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
            if state != "Z":
                command = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ")[:120]
                found.append(f"{entry}: {command.decode(errors='replace')}")
        except OSError:
            continue
    return found


def _env(tmp_path: Path, **extra) -> tuple[dict, str]:
    mark = uuid.uuid4().hex
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")} | {MARK: mark, "PYTHONPATH": str(project_root()), "RAY_USAGE_STATS_ENABLED": "0",
                              "RAY_TMPDIR": tempfile.mkdtemp(prefix="rt", dir="/tmp")}  # short: socket paths
    env.pop(cluster.ALTER_IN_TRANSIT, None)
    return env | extra, mark


def test_join_and_status_on_a_real_cluster_show_the_box_and_its_run_lock(tmp_path):
    lock, token = tmp_path / "lock", tmp_path / "auth_token"
    token.write_text(uuid.uuid4().hex * 2)  # as `ray get-auth-token --generate` makes one: the cluster then needs it
    env, mark = _env(tmp_path, SPARKNB_LOCK_FILE=str(lock), RAY_AUTH_TOKEN_PATH=str(token))
    script = f"""
import subprocess, sys
from pathlib import Path
from sparknb.machine.guard import RunLock
{KILL_RAY}
def sparknb(*args, show=True):
    done = subprocess.run([sys.executable, "-m", "sparknb", *args], capture_output=True, text=True, timeout=300)
    if show:
        print(f"== {{' '.join(args)}} -> {{done.returncode}}\\n{{done.stdout}}{{done.stderr}}", flush=True)
    return done
join = ("cluster", "join", "--box", "spark-t", "--head", "--port", "6391", "--", "--num-cpus", "1")
for attempt in range(3):  # Ray gives a raylet 30 s to register, which a loaded 2-core machine can miss
    done = sparknb(*join, show=False)
    if "timed out during startup" not in done.stderr or attempt == 2:
        break
    kill_ray({mark!r})
print(f"== {{' '.join(join)}} -> {{done.returncode}}\\n{{done.stdout}}{{done.stderr}}", flush=True)
sparknb("cluster", "status", "--cluster", "127.0.0.1:6391")
with RunLock({{"notebook": "decode", "model": "tiny-dense"}}, Path({str(lock)!r})):
    sparknb("cluster", "status")
"""
    try:
        done = in_namespace([sys.executable, "-c", script], env, timeout=600)
    finally:
        _end(env)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    join, free, held = out.split("== ")[1:]
    assert join.startswith("cluster join --box spark-t --head --port 6391 --") and "-> 0" in join, join
    assert '"box:spark-t": 1' in join and "sparknb-box=spark-t" in join, join  # the ray start it ran, printed
    assert "spark-t: node " in free and "1 CPUs" in free and "run lock free" in free, free
    assert "run lock HELD by notebook decode, model tiny-dense" in held, held  # `auto` found the same cluster
    assert "RAY_AUTH_MODE" not in env  # sparknb itself chose to send the token, for join and for status


# For inside the namespace: the Ray processes of a start that timed out, found by the test's mark.
KILL_RAY = """
def kill_ray(mark):
    import os, signal
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            command = open(f"/proc/{pid}/cmdline", "rb").read()
            if f"SPARKNB_TEST_MARK={mark}".encode() in open(f"/proc/{pid}/environ", "rb").read().split(b"\\0") and (
                    b"/ray/" in command or b"raylet" in command):
                os.kill(int(pid), signal.SIGKILL)
        except OSError:
            pass
"""


def _end(env: dict) -> None:
    """Stop what a test left running, by pid (never `ray stop`: it stops every Ray of the machine)."""
    for line in marked(env[MARK]):
        try:
            os.kill(int(line.split(":")[0]), 9)
        except OSError:
            pass
    shutil.rmtree(env["RAY_TMPDIR"], ignore_errors=True)


@pytest.mark.server
@pytest.mark.llamacpp
def test_a_campaign_over_two_boxes_runs_each_cell_on_its_box_and_survives_a_box_dropping_out(tmp_path):
    """Two Ray nodes (spark-a, spark-b), one tiny llama-server on each; see cluster_scenario.py for the steps."""
    env, mark = _env(tmp_path)
    env.pop("SPARKNB_API_KEY", None)  # each box has its own key; this machine (the driver) has none
    report_path = tmp_path / "report.json"
    try:
        done = in_namespace([sys.executable, str(SCENARIO), str(tmp_path), str(report_path)], env, timeout=2400)
    finally:
        left = marked(mark, wait_s=30)
        _end(env)
    log = done.stdout[-6000:] + done.stderr[-6000:]
    assert done.returncode == 0, log
    assert left == [], f"left running: {left}"
    report = json.loads(report_path.read_text())
    outputs = tmp_path / "outputs"
    nodes, model = report["nodes"], report["model"]

    # 1. The first campaign: one folder altered in transit, spark-b killed after its first cell.
    first = outputs / "campaigns" / report["first"]["id"]
    rows: dict[str, dict] = {}
    for r in read_records(first):  # each cell's first record: what the first campaign did (the resume adds more)
        if r.get("cell"):
            rows.setdefault(r["cell"], r)
    assert "2 cell(s) failed" in report["first"]["out"], report["first"]["out"]
    assert rows[f"decode/{model}/1@spark-a"]["status"] == "failed"
    assert "refused on arrival" in rows[f"decode/{model}/1@spark-a"]["reason"]
    assert "changed: records.jsonl" in rows[f"decode/{model}/1@spark-a"]["reason"]
    assert "run" not in rows[f"decode/{model}/1@spark-a"]  # nothing of it was placed here
    assert rows[f"prefill/{model}/1@spark-a"]["status"] == "done"
    assert rows[f"decode/{model}/1@spark-b"]["status"] == "done"
    assert rows[f"prefill/{model}/1@spark-b"]["status"] == "failed"
    assert "box spark-b dropped out" in rows[f"prefill/{model}/1@spark-b"]["reason"]
    assert [e["box"] for e in read_records(first) if e.get("event") == "box lost"] == ["spark-b"]
    assert report["first"]["left_on_b_after_kill"] == []  # its server went down with the node
    assert "spark-a: node " in report["first"]["status"] and "spark-b: GONE" in report["first"]["status"]
    assert report["first"]["sealed"] is False  # cells failed: it stays open for --resume

    # 2. spark-b rejoins; --resume reruns only the two missing cells, each on its own box again.
    assert report["resume"]["rc"] == 0, report["resume"]["out"]
    assert "4 cells, 2 already done" in report["resume"]["out"]
    done_rows = [r for r in read_records(first) if r.get("status") == "done"]
    assert {r["cell"] for r in done_rows[2:]} == {f"decode/{model}/1@spark-a", f"prefill/{model}/1@spark-b"}
    assert len(done_rows) == 4
    assert verify(first) == []  # every cell done: the campaign is sealed
    for row in done_rows:
        box = row["box"]
        expected = nodes["spark-b-again"] if row["cell"] == f"prefill/{model}/1@spark-b" else nodes[box]
        assert row["node_id"] == expected  # ran on its box's node
        folder = Path(row["run"])
        assert folder.parent == outputs / row["notebook"] and verify(folder) == []
        fp = json.loads((folder / "fingerprint.json").read_text())
        assert fp["box"] == {"name": box, "ray_node_id": row["node_id"]}  # the run itself says where it ran
        assert verify(row["box_run"]) == [] and Path(row["box_run"]).parent.parent == tmp_path / f"box-{box}"
        params = json.loads((folder / "params.json").read_text())
        assert params["hardware"]["name"] == {"spark-a": "cpu-host", "spark-b": "gb10"}[box]  # the box's hardware
        assert (params["model"]["notes"] == "measured on spark-a") == (box == "spark-a")  # and its own override
        for cost in ("scheduling_s", "transfer_s", "arrival_s", "pack_s"):
            assert 0 <= row[cost] < 60, (cost, row)
        assert row["bytes"] == len(pack(folder))
    ups = [e for e in read_records(first) if e.get("event") == "server up"]
    assert sorted(e["box"] for e in ups) == ["spark-a", "spark-a", "spark-b", "spark-b"]
    for key in ("sk-spark-a-7f3e91c2", "sk-spark-b-7f3e91c2"):  # each box's own key, read there: in no file
        assert key not in "".join(p.read_text(errors="replace") for p in outputs.rglob("*") if p.is_file())
    # The comparison of that campaign: one model on two boxes, so the boxes are what it sets side by side.
    from sparknb.cli import main

    assert main(["run", "compare", "-p", "campaign", first.name, "-p", "interactive", "false",
                 "--outputs", str(outputs)]) == 0
    (compared,) = (outputs / "compare").iterdir()
    (headline,) = json.loads((compared / "summary.json").read_text())["headlines"]
    assert headline["subjects"] == ["spark-a", "spark-b"] and headline["title"] == f"{model} on each box"
    figures = {r["figure"] for r in headline["rows"]}
    assert "tok/s at 64 tokens" in figures and {"TTFT ms at 100 tokens", "TTFT ms at 300 tokens"} <= figures
    assert all(set(r["values"]) == {"spark-a", "spark-b"} for r in headline["rows"] if r["study"] != "decode"
               or r["figure"].startswith("tok/s"))

    # 3. Ctrl-C: every box's cell stops, sealed, and its server goes down there; the campaign can resume.
    third = outputs / "campaigns" / report["interrupt"]["id"]
    assert report["interrupt"]["rc"] == 130, report["interrupt"]["out"]
    assert "--resume" in report["interrupt"]["out"] and "--cluster" in report["interrupt"]["out"]
    events = read_records(third)
    assert [e["event"] for e in events if e.get("event") == "interrupted"] == ["interrupted"]
    downs = [e for e in events if e.get("event") == "server down"]
    assert sorted(e["box"] for e in downs) == ["spark-a", "spark-b"], events
    assert all("LEFT RUNNING" not in e["how"] for e in downs)
    assert report["interrupt"]["servers_left"] == []  # checked while the cluster was still up
    stopped = [r for r in events if r.get("status") == "interrupted"]
    # A box whose cell had sent its last request when Ctrl-C came finishes its analysis and is recorded done,
    # sealed whole (the run keeps a complete measurement); every other box's cell stopped while it measured.
    finished = [r for r in events if r.get("status") == "done" and r.get("cell") not in {e.get("cell") for e in stopped}
                and r.get("box") not in {e["box"] for e in stopped}]
    assert stopped and sorted({r["box"] for r in stopped + finished}) == ["spark-a", "spark-b"], events
    for row in stopped:  # each stopped while it measured: sealed there, with what it took, and brought here
        assert verify(row["run"]) == [] and verify(row["box_run"]) == []
        assert json.loads((Path(row["run"]) / "failure.json").read_text())["failed_halfway"] is True
        assert read_records(row["run"]), "the records it took are kept"
