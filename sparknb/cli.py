"""The command line: serve a tiny model, run a notebook into a sealed folder, verify a folder, trust a key, demo."""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path
from urllib.parse import urlsplit

import yaml

from .boxes import campaign
from .errors import ParamsError, SparknbError
from .runs import manifest
from .runs.execute import Interrupted, run_notebook, seal_interrupted
from .runs.params import TESTBED_ENGINES, load_model
from .runs.redaction import redact
from .runs.run import MANIFEST
from .runs import signing
from .runs.strict_json import read_object


def parse_parameters(pairs: list[list[str]], yaml_files: list[str]) -> dict:
    """-p NAME VALUE (VALUE read as YAML, so 5, true and [1, 2] get their types) and -f FILE."""
    params: dict = {}
    for file in yaml_files:
        params |= yaml.safe_load(Path(file).read_text()) or {}
    for name, value in pairs:
        params[name] = yaml.safe_load(value)
    return params


DEMO = "smollm2-speculation"  # the real test-bed model with and without speculation (params/campaigns/)


def demo(outputs: str | Path = "") -> tuple[Path, list[dict]]:
    """The demo campaign (the real test-bed model on llama-server, without and with n-gram speculation), then its
    comparison, which names any study that failed; returns the comparison's folder and the cells that failed."""
    record = campaign.run(DEMO, outputs=outputs)
    _saved(record, outputs)
    return run_notebook("compare", {"campaign": record.name}, outputs), campaign.failed(record.name, outputs)


def _verify(folder: str) -> int:
    """Each problem and each thing left unchecked, then the verdict; 0 only for an intact run whose signer is
    known here and that sealed itself."""
    seal = manifest.check(folder)
    for line in [*seal.problems, *seal.notes, *([seal.remedy()] if not seal.trusted and not seal.problems else [])]:
        print(line)  # the problems, what went unchecked, and the command that would make it trusted
    print(f"{folder}: {seal.verdict}")
    return 0 if seal.trusted else 1


def _saved(record: Path, outputs: str | Path) -> None:
    """Once a campaign is sealed whole: what its sequentially decided comparisons saved, where a cell ran sequential
    (the comparison that says it verifies every run of the campaign again)."""
    cells = (read_object(record / "params.json") or {}).get("cells") or []
    if (record / MANIFEST).exists() and any((c.get("parameters") or {}).get("sequential") for c in cells):
        from .studies.compare import saved
        for line in saved(record.name, outputs):
            campaign.say(line)


def _failures(failed: list[dict]) -> int:
    """A campaign with a failed cell exits non-zero, the failures as its last lines."""
    if not failed:
        return 0
    print(f"\n{len(failed)} cell(s) FAILED:", file=sys.stderr)
    for r in failed:
        print(f"  {r['cell']}: {redact(str(r.get('reason', 'no reason recorded')).splitlines()[0])}", file=sys.stderr)
    return 1


def _with_ray():
    """sparknb.boxes.cluster and sparknb.boxes.box, which need Ray: pip install 'sparknb[cluster]'."""
    try:
        from .boxes import box, cluster
    except ImportError as e:
        raise ParamsError(f"{e}: running on several boxes needs Ray; pip install 'sparknb[cluster]'") from None
    return cluster, box


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="sparknb", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    p_serve = sub.add_parser("serve", help="start a test-bed model: a tiny one on the real vLLM CPU server or "
                             "llama-server, or the real SmolLM2-135M (smollm2 and smollm2-tools on either; its "
                             "speculative servings on llama-server only)")
    p_serve.add_argument("name", choices=["tiny-dense", "tiny-moe", "smollm2", "smollm2-draft", "smollm2-ngram",
                                          "smollm2-tools"])
    p_serve.add_argument("--engine", choices=TESTBED_ENGINES, default=TESTBED_ENGINES[0],
                         help="vLLM's CPU build (default), or llama.cpp's llama-server (built once if none is found)")
    p_serve.add_argument("--port", type=int, default=None, help="default: the port its params file's endpoint names")
    p_serve.add_argument("--slots", type=int, default=None, help="llama-server's requests at once (--parallel), "
                         "each with the context one has by default")
    p_serve.add_argument("--prompt-cache", choices=["on", "off"], default="on", help="llama-server's reuse of a "
                         "slot's earlier prompt; off for repeatable greedy answers (it changed identical requests' "
                         "answers)")
    p_model = sub.add_parser("model", help="describe a served model: params/models/NAME.yaml from its server")
    p_model.add_argument("action", choices=["add"])
    p_model.add_argument("name", help="the new params file's name (params/models/NAME.yaml)")
    p_model.add_argument("--endpoint", required=True, help="the server's OpenAI API, e.g. http://127.0.0.1:8000/v1")
    p_model.add_argument("--checkpoint", default=None, help="the GGUF file or checkpoint folder it serves, where the "
                         "server's own path cannot be read on this box")
    p_model.add_argument("--served-name", default=None, help="which model, where the server serves several")
    p_model.add_argument("--hardware", default=None, help="params/hardware/ name (default: the one naming this GPU)")
    p_model.add_argument("--api-key-env", default=None, help="the environment variable that holds the API key")
    p_run = sub.add_parser("run", help="execute a notebook into a new sealed run folder")
    p_run.add_argument("notebook", help="a study (decode, prefill, ...: sparknb.studies) or a path to a notebook")
    p_run.add_argument("-p", "--parameter", nargs=2, action="append", default=[], metavar=("NAME", "VALUE"))
    p_run.add_argument("-f", "--parameters-file", action="append", default=[], metavar="YAML")
    p_run.add_argument("--outputs", default="", help="folder for run folders (default: outputs/)")
    p_verify = sub.add_parser("verify", help="check a sealed run folder against its signed manifest, and name "
                                             "who signed it")
    p_verify.add_argument("folder")
    p_trust = sub.add_parser("trust", help="trust another SSH key's seals, by name: its runs verify as intact, "
                             "signed by NAME, and every reader takes them")
    p_trust.add_argument("key", help="the public key ('ssh-ed25519 AAAA...', as `sparknb verify` prints it) or a .pub")
    p_trust.add_argument("--as", dest="name", required=True, help="whose key it is (never this box's own name)")
    p_seal = sub.add_parser("seal", help="seal a run folder whose run died before sealing it (marked failed halfway)")
    p_seal.add_argument("folder")
    p_demo = sub.add_parser("demo", help=f"run the demo campaign ({DEMO}) and its comparison report")
    p_demo.add_argument("--outputs", default="")
    p_campaign = sub.add_parser("campaign", help="run every study of a campaign file on every model")
    p_campaign.add_argument("action", choices=["run"])
    p_campaign.add_argument("file", help="params/campaigns/NAME.yaml, or NAME")
    p_campaign.add_argument("--resume", default="", metavar="ID", help="finish the cells a stopped campaign left")
    p_campaign.add_argument("--outputs", default="")
    p_campaign.add_argument("--cluster", default="", metavar="ADDRESS",
                            help="run each cell on its box (the file's boxes:) through the Ray cluster at HEAD:6379, "
                                 "or auto for the one this machine belongs to")
    p_cluster = sub.add_parser("cluster", help="boxes of a Ray cluster: join one, or see them all")
    cluster_sub = p_cluster.add_subparsers(dest="action", required=True)
    p_join = cluster_sub.add_parser("join", help="start Ray on this box (ray start), announcing it as --box NAME")
    p_join.add_argument("--box", required=True, help="the box's name, as in the campaign file's boxes:")
    p_join.add_argument("--address", default="", help="the first box's HEAD:6379")
    p_join.add_argument("--head", action="store_true", help="this is the first box: start the cluster here")
    p_join.add_argument("--port", type=int, default=6379, help="the head's port (with --head)")
    p_join.add_argument("ray_args", nargs=argparse.REMAINDER, help="after --: more options for ray start")
    p_status = cluster_sub.add_parser("status", help="the boxes Ray sees, their hardware and run locks")
    p_status.add_argument("--cluster", default="auto", metavar="ADDRESS")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # its INFO line printed every URL whole, a password too
    try:
        if args.command == "serve":
            from .serving import testbed

            model = load_model(testbed.params_name(args.name, args.engine))
            extra = testbed.serving_args(args.name, args.engine, args.slots, args.prompt_cache == "on")
            port = args.port or urlsplit(model.endpoint).port
            if port != urlsplit(model.endpoint).port:
                print(f"params/models/{model.name}.yaml names port {urlsplit(model.endpoint).port}: give the studies "
                      f"-p endpoint http://127.0.0.1:{port}/v1", flush=True)
            testbed.serve_forever(args.name, port, api_key=model.api_key(), engine=args.engine, extra_args=extra)
        elif args.command == "model":
            from .model_add import add

            written = add(args.name, args.endpoint, checkpoint_path=args.checkpoint, served_name=args.served_name,
                          hardware=args.hardware, api_key_env=args.api_key_env)
            print(f"wrote {written}\n{written.read_text().split('name:')[0]}try: sparknb run decode -p model {args.name}")
        elif args.command == "run":
            folder = run_notebook(args.notebook, parse_parameters(args.parameter, args.parameters_file), args.outputs)
            print(f"sealed run: {folder}\nreport: {folder / 'report.html'}")
        elif args.command == "verify":
            return _verify(args.folder)
        elif args.command == "trust":
            print(f"trusted {signing.trust(args.key, args.name)} as {args.name} ({signing.allowed_signers()})")
        elif args.command == "seal":
            print(f"sealed: {seal_interrupted(args.folder)}")
        elif args.command == "campaign":
            on = _with_ray()[0].Boxes(args.cluster) if args.cluster else None
            record = campaign.run(args.file, resume=args.resume, outputs=args.outputs, on=on,
                                  again=f" --cluster {args.cluster}" if args.cluster else "")
            _saved(record, args.outputs)
            return _failures(campaign.failed(record.name, args.outputs))
        elif args.command == "cluster" and args.action == "join":
            extra = args.ray_args[1:] if args.ray_args[:1] == ["--"] else args.ray_args
            return _with_ray()[1].join(args.box, address=args.address, head=args.head, port=args.port, extra=extra)
        elif args.command == "cluster":
            box = _with_ray()[1]
            box.print_status(box.status(args.cluster))
        elif args.command == "demo":
            t0 = time.monotonic()
            folder, failures = demo(args.outputs)
            print(f"comparison report: {folder / 'report.html'}\n(the demo campaign and its comparison took "
                  f"{(time.monotonic() - t0) / 60:.1f} min)")
            return _failures(failures)
    except (SparknbError, OSError) as e:  # known failures carry a message meant for the user
        print(f"sparknb {args.command}: {redact(str(e))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:
        print(f"sparknb {args.command}: {e if isinstance(e, Interrupted) else 'interrupted (Ctrl-C)'}", file=sys.stderr)
        return 130
    return 0
