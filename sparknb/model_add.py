"""`sparknb model add NAME --endpoint URL`: a model's params written from what its server says and the byte
census of the checkpoint it serves, so that nobody types a parameter count.

From the server: the served name (the only one, or --served-name), its engine, whether it speculates, the file
or folder it serves (its own path, or a hub id found in the local Hugging Face cache). From the checkpoint: the
census (what a token reads, the KV cache per token), kept in the file so a box that cannot read the checkpoint
still draws the limit. A hand-written `weights:` added later wins, and every limit says so. Nothing is
overwritten; a checkpoint that cannot be read is an error naming --checkpoint.
"""

from __future__ import annotations

import datetime
import os
import tempfile
from pathlib import Path
from urllib.parse import urlsplit

import yaml

from .endpoint.client import Endpoint
from .errors import EndpointError, ParamsError
from .machine import fingerprint
from .roofline import census, checkpoint
from .runs.params import load_hardware, load_model, project_root
from .runs.redaction import redact


def add(name: str, endpoint: str, *, checkpoint_path: str | None = None, served_name: str | None = None,
        hardware: str | None = None, api_key_env: str | None = None, folder: Path | None = None) -> Path:
    """Write params/models/NAME.yaml (or NAME.yaml in `folder`); returns its path."""
    target = (folder or project_root() / "params" / "models") / f"{name}.yaml"
    if target.exists():
        raise ParamsError(f"{target} exists and is never overwritten: choose another NAME, or delete it first")
    if urlsplit(endpoint).username or urlsplit(endpoint).password:
        raise ParamsError(f"{redact(endpoint)} holds a user:password, which would be written into {target.name} "
                          "and sent in place of an API key: give the URL without it, and the key through "
                          "--api-key-env NAME (export NAME=<the key>)")
    key = os.environ.get(api_key_env) if api_key_env else None
    served = served_name or _only_model(endpoint, key)
    ep = Endpoint(endpoint, served, api_key=key)
    try:
        info, text = ep.info(), ep.metrics_text()  # one scrape for both: the cache's dtype and the draft counters
        cache = ep.engine.kv_cache_dtype(text)
        drafts = bool(ep.snapshot(text).speculates(info.facts.get("speculative")))
    finally:
        ep.close()
    path = _checkpoint(checkpoint_path, info.root)
    counted = census.count(checkpoint.read(path), *(cache or (None, "")))
    params = _params(name, endpoint, served, info, counted, path, hardware or _hardware(), api_key_env, drafts)
    return _write(target, params, counted)


def _only_model(endpoint: str, key: str | None) -> str:
    import openai

    try:
        ids = [m.id for m in openai.OpenAI(base_url=endpoint, api_key=key or "none", timeout=30,
                                           max_retries=0).models.list().data]
    except openai.APIStatusError as e:
        raise EndpointError(f"{endpoint} answered {e.status_code} to GET /models: an OpenAI API's base URL ends in "
                            "/v1, and a server behind a key needs --api-key-env") from None
    except openai.APIError as e:
        raise EndpointError(f"cannot ask {endpoint} which models it serves ({e}): is the server running there?") \
            from None
    if len(ids) != 1:
        raise ParamsError(f"{endpoint} serves {', '.join(ids) or 'nothing'}: say which with --served-name")
    return ids[0]


def _checkpoint(given: str | None, root: str | None) -> Path:
    """The checkpoint as given, else the server's own path or hub id where this box can read it."""
    found = census.readable((given,) if given else (root, census.from_hub(root)))
    if found is not None:
        return found.resolve()
    what = f"--checkpoint {given}" if given else f"the server's path {root!r}" if root else "the server (it names none)"
    raise ParamsError(f"cannot read the checkpoint from {what} on this box: pass --checkpoint PATH, the GGUF file or "
                      "the folder of config.json and *.safetensors the server serves")


def _hardware() -> str:
    """The hardware params for this box's first GPU (by its NVML name); cpu-host where there is none."""
    gpu = fingerprint.nvml()
    names = [d.get("name", "") for d in gpu.get("devices") or []] if gpu.get("available") else []
    return hardware_for(names[0]) if names else "cpu-host"


def hardware_for(gpu: str) -> str:
    """The params/hardware/ file whose accelerator is in the GPU's NVML name; of several, the one naming it most
    closely ("NVIDIA H200 NVL" over "NVIDIA H200"). Two that fit equally, or none, is an error naming the fix."""
    files = {f.stem: load_hardware(f.stem).accelerator for f in (project_root() / "params" / "hardware").glob("*.yaml")}
    fits = {stem: a for stem, a in files.items() if a.lower() in gpu.lower()}
    closest = [stem for stem, a in fits.items() if not any(a.lower() in b.lower() and a != b for b in fits.values())]
    if len(closest) == 1:
        return closest[0]
    which = f"{', '.join(sorted(closest))} all name" if closest else "no params/hardware/ file names"
    raise ParamsError(f"{which} this box's {gpu}: pass --hardware NAME (or write a file for it: copy h100-sxm.yaml, "
                      "with its datasheet's memory bandwidth as the source)")


def _params(name, endpoint, served, info, counted, path, hardware, api_key_env, drafts) -> dict:
    speculative = info.facts.get("speculative")
    return {"name": name, "served_model_name": served, "endpoint": endpoint,
            **({"api_key_env": api_key_env} if api_key_env else {}), "hardware": hardware,
            "architecture": "moe" if counted.experts["of"] else "dense", "engine": info.engine,
            **({"speculative": "draft" if speculative else "yes (the server counts drafts)"}
               if speculative or drafts else {}),
            **({"tokenizer": str(path)} if "/tokenize" in info.not_available and path.is_dir() else {}),
            "checkpoint": str(path), "census": counted.as_dict(),
            "notes": (f"written by sparknb model add on {datetime.date.today()} from {info.url} ({info.engine} "
                      f"{info.version}, context {info.max_model_len}, dtype {info.facts.get('dtype', 'not stated')}, "
                      f"quantization {info.facts.get('quantization', 'not stated')})")}


def _write(target: Path, params: dict, counted: census.Census) -> Path:
    head = "".join(f"# {line}\n" for line in ["Written by `sparknb model add`: what one token reads is the census below,",
                                              "counted from the checkpoint. A hand-written `weights:` block wins over",
                                              "it (and every limit says so).", *counted.lines()])
    text = head + yaml.safe_dump(params, sort_keys=False, width=120)
    with tempfile.TemporaryDirectory() as tmp:  # checked as a params file before it lands among them
        (Path(tmp) / target.name).write_text(text)
        load_model(str(Path(tmp) / target.name))
    target.parent.mkdir(parents=True, exist_ok=True)
    with target.open("x") as f:  # never over a file made meanwhile
        f.write(text)
    return target
