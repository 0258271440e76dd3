"""The fingerprint is what makes a number comparable later, and what must never leak a key."""

from __future__ import annotations

import json
import os
import platform
import re
import subprocess
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path

import pytest

from sparknb.machine import fingerprint

SERVER = {"version": "0.32.0", "model": "tiny-dense", "root": None, "max_model_len": 2048}


def _nvml_initialises() -> bool:
    try:
        import pynvml
        pynvml.nvmlInit()
    except Exception:
        return False
    pynvml.nvmlShutdown()
    return True


HAS_GPU = _nvml_initialises()


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout


@pytest.fixture
def git_repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    _git(repo, "config", "user.email", "test@example.com")
    _git(repo, "config", "user.name", "test")
    (repo / "a.txt").write_text("one\n")
    _git(repo, "add", "a.txt")
    _git(repo, "commit", "-q", "-m", "first")
    return repo


def test_take_has_every_section_with_this_machines_values(git_repo: Path, monkeypatch) -> None:
    monkeypatch.delenv(fingerprint.BOX_ENV, raising=False)
    fp = fingerprint.take(server=SERVER, params={"max_tokens": 64, "api_key_env": "OPENAI_API_KEY"},
                          project_dir=git_repo, packages=["pytest", "surely-not-a-real-dist-xyz"])
    assert set(fp) == {"taken_at", "host", "box", "python", "packages", "project", "gpu", "server", "params"}
    assert fp["box"] == {"name": None, "ray_node_id": None}  # not one of a campaign's named boxes
    json.dumps(fp)  # must be storable as is

    taken = datetime.fromisoformat(fp["taken_at"])
    assert taken.utcoffset().total_seconds() == 0
    assert abs((datetime.now(timezone.utc) - taken).total_seconds()) < 60

    host = fp["host"]
    assert host["architecture"] == platform.machine()
    assert host["kernel"] == platform.release()
    assert host["hostname"] == platform.node()
    assert host["cpu_count"] == os.cpu_count()
    assert isinstance(host["memory_total_bytes"], int) and host["memory_total_bytes"] > 2**26
    assert host["cpu_model"] and host["cpu_model"] != "not readable"
    if Path("/etc/os-release").exists():
        assert host["os"]["name"] == platform.freedesktop_os_release()["NAME"]

    assert fp["python"] == {"implementation": platform.python_implementation(),
                            "version": platform.python_version()}
    assert fp["packages"] == {"pytest": metadata.version("pytest"), "surely-not-a-real-dist-xyz": "not installed"}
    assert fp["project"] == {"commit": _git(git_repo, "rev-parse", "HEAD").strip(), "dirty": False}
    assert re.fullmatch(r"[0-9a-f]{40}", fp["project"]["commit"])
    assert fp["gpu"]["available"] is HAS_GPU
    assert fp["server"]["model"] == "tiny-dense" and fp["server"]["max_model_len"] == 2048
    assert fp["params"] == {"max_tokens": 64, "api_key_env": "OPENAI_API_KEY"}


def test_default_packages_are_all_reported() -> None:
    fp = fingerprint.take(server=SERVER, params={}, project_dir=Path.cwd())
    assert list(fp["packages"]) == list(fingerprint.DEFAULT_PACKAGES)
    for name, version in fp["packages"].items():
        try:
            assert version == metadata.version(name)
        except metadata.PackageNotFoundError:
            assert version == "not installed"


def test_dirty_tree_and_not_a_checkout(git_repo: Path, tmp_path: Path) -> None:
    (git_repo / "a.txt").write_text("changed\n")
    project = fingerprint.take(server=SERVER, params={}, project_dir=git_repo, packages=())["project"]
    assert project["dirty"] is True

    plain = tmp_path / "plain"
    plain.mkdir()
    project = fingerprint.take(server=SERVER, params={}, project_dir=plain, packages=())["project"]
    assert project["commit"] == "not a git checkout"
    assert project["dirty"] is None and project["reason"]


def test_a_project_copy_inside_another_repository_records_no_commit_of_that_one(git_repo: Path) -> None:
    """A copy of the project without .git, unpacked inside some other checkout: its commit is not ours."""
    copy = git_repo / "vendor" / "sparknb-copy"
    copy.mkdir(parents=True)
    project = fingerprint.take(server=SERVER, params={}, project_dir=copy, packages=())["project"]
    assert project["commit"] == "not a git checkout" and "not the top of a git checkout" in project["reason"]


@pytest.mark.skipif(HAS_GPU, reason="an NVIDIA GPU is present here")
def test_nvml_without_a_gpu_says_why() -> None:
    result = fingerprint.nvml()
    assert result["available"] is False
    assert set(result) == {"available", "reason"}
    assert "nvmlInit" in result["reason"] or "pynvml" in result["reason"]


@pytest.mark.skipif(not HAS_GPU, reason="no NVIDIA GPU here")
def test_nvml_with_a_gpu_reports_each_device() -> None:
    result = fingerprint.nvml()
    assert result["available"] is True
    assert re.fullmatch(r"\d+\.\d+", result["cuda_driver_version"])
    assert result["devices"]
    for device in result["devices"]:
        assert re.fullmatch(r"\d+\.\d+", device["compute_capability"])
        assert device["uuid"].startswith(("GPU-", "MIG-"))
        assert isinstance(device["processes"], list) or device["processes"] == "not supported"


def test_weights_config_gives_dtype_and_quantization(tmp_path: Path) -> None:
    quantized = tmp_path / "quantized"
    quantized.mkdir()
    (quantized / "config.json").write_text(json.dumps(
        {"torch_dtype": "bfloat16", "quantization_config": {"quant_method": "fp8", "bits": 8}}))
    server = fingerprint.take(server={**SERVER, "root": str(quantized)}, params={}, project_dir=tmp_path,
                              packages=())["server"]
    assert (server["dtype"], server["quantization"]) == ("bfloat16", "fp8")
    assert server["root"] == str(quantized)

    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "config.json").write_text(json.dumps({"dtype": "float16"}))
    server = fingerprint.take(server={**SERVER, "root": str(plain)}, params={}, project_dir=tmp_path,
                              packages=())["server"]
    assert (server["dtype"], server["quantization"]) == ("float16", "none")


@pytest.mark.parametrize("root", [None, "org/hub-model-id", "missing-folder"])
def test_unreadable_weights_are_said_so(tmp_path: Path, root: str | None) -> None:
    root = str(tmp_path / root) if root == "missing-folder" else root
    server = fingerprint.take(server={**SERVER, "root": root}, params={}, project_dir=tmp_path, packages=())["server"]
    assert (server["dtype"], server["quantization"]) == ("not readable", "not readable")


def test_take_redacts_everything_it_returns(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SPARKNB_TEST_SECRET", "from-the-env-777")
    fp = fingerprint.take(
        server={**SERVER, "args": "--api-key cli-key-555", "url": "http://u:pw9999@h:8000/v1"},
        params={"endpoint": "http://h/v1?token=tok-123", "note": "uses sk-given-1 and from-the-env-777",
                "api_key_env": "SPARKNB_TEST_SECRET"},
        project_dir=tmp_path, packages=(), secrets=["sk-given-1"])
    text = json.dumps(fp)
    for leaked in ("cli-key-555", "pw9999", "tok-123", "sk-given-1", "from-the-env-777"):
        assert leaked not in text
    assert fp["params"]["api_key_env"] == "SPARKNB_TEST_SECRET"


def test_a_named_box_is_in_the_fingerprint_and_its_table(git_repo: Path, monkeypatch) -> None:
    monkeypatch.setenv(fingerprint.BOX_ENV, "spark-b")
    monkeypatch.setenv(fingerprint.NODE_ENV, "9a1e")
    fp = fingerprint.take(server=SERVER | {"url": "http://127.0.0.1:8101/v1"}, params={}, project_dir=git_repo,
                          packages=[])
    assert fp["box"] == {"name": "spark-b", "ray_node_id": "9a1e"}
    assert fingerprint.table(fp).iloc[0].tolist()[-1] == "spark-b (Ray node 9a1e)"


def test_fingerprint_differences_name_hardware_driver_and_server_version():
    fp = {"host": {"hostname": "spark", "cpu_model": "Grace", "cpu_count": 20, "memory_total_bytes": 1},
          "gpu": {"devices": [{"name": "GB10", "memory_total_bytes": None}], "driver_version": "580",
                  "cuda_driver_version": 13000}, "server": {"version": "0.32.0"}}
    assert fingerprint.differences(fp, json.loads(json.dumps(fp))) == {}
    other = json.loads(json.dumps(fp))
    other["gpu"]["driver_version"] = "575"
    other["server"]["version"] = "0.31.0"
    other["gpu"]["devices"][0]["name"] = "H200"
    found = fingerprint.differences(fp, other)
    assert set(found) == {"hardware", "driver", "server version"}
    assert "'GB10" in found["hardware"][-1] and "H200" in found["hardware"][-1]
    assert found["driver"] == ["driver '580' vs '575'"] and found["server version"] == ["server '0.32.0' vs '0.31.0'"]
