"""What running a campaign on two boxes through Ray costs and saves: the wall time of the same cells on two
boxes against one box doing them one after the other, and Ray's share of each cell (scheduling, transfer).

Both boxes are Ray nodes on this machine (ray.cluster_utils.Cluster), each with its own tiny vLLM
server, so on a small machine they share its cores: the wall time says what Ray adds and what
running side by side gives here, not what two real boxes would. The script runs itself in a network
namespace of its own (only lo), where Ray stays on loopback.

    python bench/cluster_campaign.py [--repetitions 2]
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

STUDIES = """
studies:
  decode: {prompt_lengths: [64], output_tokens: 16, warmup: 0, repetitions: 2}
  prefill: {prompt_lengths: [100, 300], warmup: 0, repetitions: 2}
"""


def in_own_namespace() -> bool:
    """Only lo here (asked of this network namespace itself: /sys/class/net shows the host's)."""
    return [name for _, name in socket.if_nameindex()] == ["lo"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repetitions", type=int, default=1, help="how often each box runs every cell")
    parser.add_argument("--boxes-first", action="store_true", help="the two boxes before the one (the second "
                        "of the two runs finds the page cache warm, and the machine's load moves)")
    args = parser.parse_args()
    if not in_own_namespace():
        os.execvp("unshare", ["unshare", "-rn", "sh", "-c", 'ip link set lo up && exec "$@"', "sh", sys.executable,
                              *sys.argv])
    os.environ["PYTHONPATH"] = str(ROOT)
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.environ.pop("SPARKNB_API_KEY", None)
    with tempfile.TemporaryDirectory(prefix="sparknb-bench-") as tmp, \
            tempfile.TemporaryDirectory(prefix="rt", dir="/tmp") as ray_tmp:  # Ray's socket paths must stay short
        os.environ["RAY_TMPDIR"] = ray_tmp
        if args.boxes_first:
            boxes_s, box_rows, ready = run_on_two_boxes(Path(tmp), args.repetitions)
        local_s, local_rows = run_locally(Path(tmp), args.repetitions)
        if not args.boxes_first:
            boxes_s, box_rows, ready = run_on_two_boxes(Path(tmp), args.repetitions)
    report(local_s, local_rows, boxes_s, box_rows, ready)


def run_locally(tmp: Path, repetitions: int) -> tuple[float, list[dict]]:
    """The cells of both boxes on this one machine, one after the other, under one start of the server."""
    from sparknb.boxes import campaign
    from sparknb.runs.run import read_records

    file = tmp / "local.yaml"
    file.write_text(f"name: local\nmodels: [tiny-dense]\nrepetitions: {2 * repetitions}\n{STUDIES}")
    os.environ["SPARKNB_LOCK_FILE"] = str(tmp / "lock-local")
    t0 = time.monotonic()
    folder = campaign.run(str(file), outputs=tmp / "local", log=lambda line: print(f"  local: {line}", flush=True))
    return time.monotonic() - t0, read_records(folder)


def run_on_two_boxes(tmp: Path, repetitions: int) -> tuple[float, list[dict], list[float]]:
    import ray
    from ray.cluster_utils import Cluster

    from sparknb.boxes import campaign, cluster
    from sparknb.runs.run import read_records

    file = tmp / "boxes.yaml"
    file.write_text(f"name: boxes\nmodels: [tiny-dense]\nrepetitions: {repetitions}\n{STUDIES}"
                    "boxes: {spark-a: {}, spark-b: {}}\n")
    nodes = Cluster()
    try:
        for box in ("spark-a", "spark-b"):
            nodes.add_node(resources={f"box:{box}": 1}, num_cpus=1, env_vars={
                "SPARKNB_OUTPUTS": str(tmp / box), "SPARKNB_LOCK_FILE": str(tmp / f"lock-{box}")})
        t0 = time.monotonic()
        folder = campaign.run(str(file), outputs=tmp / "boxes", on=cluster.Boxes(nodes.address),
                              log=lambda line: print(f"  boxes: {line}", flush=True))
        wall = time.monotonic() - t0
    finally:
        ray.shutdown()
        nodes.shutdown()
    records = read_records(folder)
    return wall, records, [r["ready_s"] for r in records if r.get("event") == "server up"]


def report(local_s: float, local_rows: list[dict], boxes_s: float, box_rows: list[dict], ready: list[float]) -> None:
    local_cells = [r for r in local_rows if r.get("status")]
    cells = [r for r in box_rows if r.get("status")]
    local_ready = [r["ready_s"] for r in local_rows if r.get("event") == "server up"]
    print(f"\n{len(local_cells)} cells, {sum(r['status'] == 'done' for r in local_cells)} done, on one box one after "
          f"the other: {local_s:.1f} s (server ready after {', '.join(f'{s:.0f}' for s in local_ready)} s)")
    print(f"{len(cells)} cells, {sum(r['status'] == 'done' for r in cells)} done, on two boxes through Ray: "
          f"{boxes_s:.1f} s (servers ready after {', '.join(f'{s:.0f}' for s in ready)} s, side by side)")
    per_box = {}
    for r in cells:
        per_box[r["box"]] = per_box.get(r["box"], 0.0) + r["seconds"]
    boxes = ", ".join(f"{box} {seconds:.1f} s" for box, seconds in per_box.items())
    print(f"two boxes / one box: {boxes_s / local_s:.2f}; the cells alone: "
          f"{sum(r['seconds'] for r in local_cells):.1f} s one after the other, {max(per_box.values()):.1f} s on the "
          f"slower box ({boxes})")
    print(f"\n{'cell':34} {'run s':>7} {'sched s':>8} {'transfer s':>10} {'pack s':>7} {'arrive s':>8} {'KB':>6}")
    for r in cells:
        print(f"{r['cell']:34} {r['seconds']:7.2f} {r['scheduling_s']:8.3f} {r['transfer_s'] or 0:10.3f} "
              f"{r['pack_s']:7.3f} {r['arrival_s'] or 0:8.3f} {r['bytes'] / 1024:6.0f}")
    ray_cost = [r["scheduling_s"] + (r["transfer_s"] or 0) for r in cells]
    print(f"\nRay's cost per cell (scheduling + transfer): median {statistics.median(ray_cost):.3f} s, "
          f"max {max(ray_cost):.3f} s; packing and verified unpacking: median "
          f"{statistics.median(r['pack_s'] + (r['arrival_s'] or 0) for r in cells):.3f} s")
    print(f"(this machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the end)")


if __name__ == "__main__":
    main()
