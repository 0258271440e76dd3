"""The steps of test_cluster's two-box campaign, run inside a network namespace of its own (see the test).

    python tests/cluster_scenario.py TMP REPORT.json

A two-node Ray cluster on 127.0.0.1 (ray.cluster_utils.Cluster), each node carrying its box's
resource and its own outputs/, run lock and API key, as two real boxes would. Then, through the
real command line: a campaign of decode and prefill over both boxes, with one folder altered in
transit (the test hook) and spark-b killed after its first cell; spark-b rejoins and --resume
finishes the campaign; a second campaign is stopped with Ctrl-C while both boxes run cells. What
it saw is written to REPORT.json; the test checks it, and the files, from outside.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import ray
from ray.cluster_utils import Cluster

from sparknb.runs.run import read_records

TMP, REPORT = Path(sys.argv[1]), Path(sys.argv[2])
OUTPUTS = TMP / "outputs"
# The tiny model on llama-server: each box starts its own server for its cells, in about a second where vLLM's
# took a minute a start (six starts: the campaign, its resume and the Ctrl-C campaign on two boxes each)
MODEL = "tiny-dense-llamacpp"
CAMPAIGN = f"""
name: two-boxes
question: Does the same tiny model run alike on two boxes?
models: [{MODEL}]
studies:
  decode: {{prompt_lengths: [64], output_tokens: 16, warmup: 0, repetitions: 2}}
  prefill: {{prompt_lengths: [100, 300], warmup: 0, repetitions: 2}}
boxes:
  spark-a: {{models: {{{MODEL}: {{notes: measured on spark-a}}}}}}
  spark-b: {{hardware: gb10}}
"""
# The Ctrl-C campaign: cells long enough to be stopped while they measure (a minute a cell and more).
LONG = CAMPAIGN.replace("name: two-boxes", "name: long").replace(
    "decode: {prompt_lengths: [64], output_tokens: 16, warmup: 0, repetitions: 2}",
    "decode: {prompt_lengths: [64], output_tokens: 256, warmup: 0, repetitions: 400}")
WAIT_S = 900


def box(name: str) -> dict:
    """A node's arguments: its box resource, and the environment its own machine would give it."""
    key = f"sk-{name}-7f3e91c2"  # each box's own API key: the driver never has it
    return {"resources": {f"box:{name}": 1}, "num_cpus": 1, "labels": {"sparknb-box": name},
            "env_vars": {"SPARKNB_OUTPUTS": str(TMP / f"box-{name}"), "SPARKNB_LOCK_FILE": str(TMP / f"lock-{name}"),
                         "SPARKNB_API_KEY": key, "SPARKNB_BOX": name}}


def campaign(*args: str, env: dict | None = None, file: str = "two-boxes.yaml") -> subprocess.Popen:
    command = [sys.executable, "-m", "sparknb", "campaign", "run", str(TMP / file), "--cluster",
               cluster.address, "--outputs", str(OUTPUTS), *args]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=os.environ | (env or {}), preexec_fn=ctrl_c_enabled)


def ctrl_c_enabled() -> None:
    """A shell starts background jobs with Ctrl-C ignored, and Python keeps it so: give the child the default back."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def wait_for(what: str, check, proc: subprocess.Popen):
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        if proc.poll() is not None:
            raise SystemExit(f"the campaign ended before {what}:\n{proc.stdout.read()}")
        time.sleep(0.2)
    raise SystemExit(f"no {what} in {WAIT_S} s")


def newest_campaign(before: set) -> Path | None:
    found = set((OUTPUTS / "campaigns").glob("*")) - before if (OUTPUTS / "campaigns").exists() else set()
    return next(iter(found), None)


def servers(box_name: str | None = None) -> list[int]:
    """Live servers started from here (by their environment), on one box or any."""
    found = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
            command = Path(f"/proc/{entry}/cmdline").read_bytes()
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        mine = f"SPARKNB_TEST_MARK={os.environ['SPARKNB_TEST_MARK']}".encode() in environ
        on_box = box_name is None or f"SPARKNB_BOX={box_name}".encode() in environ
        if mine and on_box and state != "Z" and b"llama-server" in command.lower():
            found.append(int(entry))
    return found


def finish(proc: subprocess.Popen) -> tuple[int, str]:
    out, _ = proc.communicate(timeout=WAIT_S)
    return proc.returncode, out


def join(name: str):
    """A node for the box; Ray gives a raylet 30 s to register, which a loaded 2-core machine can miss: 3 tries."""
    for attempt in (1, 2, 3):
        try:
            return cluster.add_node(**box(name))
        except Exception as e:  # Ray raises a bare Exception for it
            if attempt == 3 or "timed out during startup" not in str(e):
                raise
            print(f"{name}: {e}; again", flush=True)


(TMP / "two-boxes.yaml").write_text(CAMPAIGN)
(TMP / "long.yaml").write_text(LONG)
report: dict = {"model": MODEL}
cluster = Cluster()
join("spark-a")
node_b = join("spark-b")
ray.init(address=cluster.address, log_to_driver=False)
try:
    ids = {n["Labels"].get("sparknb-box"): n["NodeID"] for n in ray.nodes() if n["Alive"]}
    report["nodes"] = {"spark-a": ids["spark-a"], "spark-b": ids["spark-b"]}

    # 1. One folder altered in transit; spark-b killed once its first cell is in.
    proc = campaign(env={"SPARKNB_TEST_ALTER_IN_TRANSIT": f"decode/{MODEL}/1@spark-a"})
    first = wait_for("campaign folder", lambda: newest_campaign(set()), proc)
    wait_for("a finished cell on spark-b", lambda: any(
        r.get("box") == "spark-b" and r.get("status") for r in read_records(first)), proc)
    cluster.remove_node(node_b)
    deadline = time.monotonic() + 30
    while servers("spark-b") and time.monotonic() < deadline:
        time.sleep(0.5)
    left_on_b = servers("spark-b")
    rc, out = finish(proc)
    status = subprocess.run([sys.executable, "-m", "sparknb", "cluster", "status", "--cluster", cluster.address],
                            capture_output=True, text=True, timeout=300)
    report["first"] = {"id": first.name, "rc": rc, "out": out, "left_on_b_after_kill": left_on_b,
                       "status": status.stdout + status.stderr, "sealed": (first / "manifest.json").exists()}

    # 2. spark-b rejoins; --resume finishes only what is missing.
    join("spark-b")
    ids = {n["Labels"].get("sparknb-box"): n["NodeID"] for n in ray.nodes() if n["Alive"]}
    report["nodes"]["spark-b-again"] = ids["spark-b"]
    rc, out = finish(campaign("--resume", first.name))
    report["resume"] = {"rc": rc, "out": out}

    # 3. Ctrl-C while both boxes measure.
    before = set((OUTPUTS / "campaigns").glob("*"))
    measured = set(TMP.glob("box-*/decode/*/records.jsonl"))
    proc = campaign(file="long.yaml")
    third = wait_for("second campaign folder", lambda: newest_campaign(before), proc)
    both = {"box-spark-a", "box-spark-b"}
    wait_for("a first request measured on each box", lambda: {  # records.jsonl begins with the first request
        p.parts[-4] for p in set(TMP.glob("box-*/decode/*/records.jsonl")) - measured} == both, proc)
    proc.send_signal(signal.SIGINT)
    rc, out = finish(proc)
    report["interrupt"] = {"id": third.name, "rc": rc, "out": out, "servers_left": servers()}
finally:
    ray.shutdown()
    cluster.shutdown()
    REPORT.write_text(json.dumps(report, indent=2))
