"""A study: one notebook's run from checks to seal, the same for every notebook.

The order is the point: params, endpoint and the caller's own checks all fail before the lock is
taken or a folder made; the guard runs before the first request; every request is recorded as it
ends, together with what the server's own counters say about it; a run that fails halfway is
sealed with the reason, keeping every record taken.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import pandas as pd

from ..endpoint import metrics, stream
from ..endpoint.client import Endpoint, ServerInfo
from ..endpoint.completion import Completion
from ..errors import ParamsError, RunError
from ..machine import energy, fingerprint, guard, probe, telemetry
from ..roofline import bandwidth, census
from ..verdicts.stats import drift
from . import interrupt, manifest, signing
from .params import HardwareParams, ModelParams, load_hardware, load_model, project_root
from .redaction import redact
from .report import Finding, info, warning
from .run import CLAIM, FAILURE, Run, read_records
from .strict_json import read_object

ENV_PREFIX = "env:"  # an endpoint given as env:NAME is read from that variable, so no password is a parameter

_open: list[Study] = []  # studies of this process not yet finished; a rerun in the same kernel ends them


@dataclass
class Study:
    notebook: str
    models: tuple[ModelParams, ...]
    hardware: HardwareParams
    run: Run
    guard: guard.GuardReport
    fingerprint: dict
    lock: guard.RunLock
    seal: bool = True
    endpoint: Endpoint | None = None  # None where the study starts its own servers (swap)
    server: ServerInfo | None = None
    sampler: telemetry.Sampler | None = None  # GPU telemetry, sampled while the run is open
    windows: list[energy.Window] = field(default_factory=list)  # GPU energy over each measured window
    census: census.Census | None = None  # what one decode step reads, counted from the checkpoint (census.py)

    @property
    def model(self) -> ModelParams:
        return self.models[0]

    @property
    def limit(self) -> bandwidth.Limit:
        server = self.fingerprint.get("server") or {}
        batch = self.endpoint.engine.micro_batch(server.get("settings")) if self.endpoint is not None else None
        return bandwidth.limit(self.model, self.hardware, self.census, self.fingerprint.get("bandwidth_probe"), batch)

    @property
    def speculative(self) -> bool | None:
        """Whether the server speculates, as read when the run opened (its engine's word, else its counters)."""
        return ((self.fingerprint.get("server") or {}).get("speculative") or {}).get("server_counts_drafts")

    def streaming(self, on_chunk: Callable[[], None] | None = None) -> stream.AsyncEndpoint:
        """The same server and model for many requests at once (stream.batch), with what info() found of it."""
        ep = self.endpoint
        decode = None if ep.engine.token_prompts or not ep.tokenizer else ep.local_tokenizer().decode
        return stream.AsyncEndpoint(ep.url, ep.model, self.model.api_key(), on_chunk=on_chunk, engine=ep.engine,
                                    decode=decode, key_env=self.model.api_key_env, stall_s=self.model.stall_timeout_s)

    def request(self, tag: dict, call: Callable[[Endpoint], Completion], *, settle_s: float = 5.0) -> dict:
        """Send one request, read the server's counters around it, and record both at once.

        The counters tell whether anything else ran meanwhile: the record is marked if the server
        finished more than this one request or generated more tokens than it returned.
        """
        before = self.endpoint.metrics()
        try:
            done = call(self.endpoint)
        except Exception as e:
            self.run.record({**tag, "error": f"{type(e).__name__}: {e}"})
            raise
        delta = metrics.settled(self.endpoint.metrics, before, 1, settle_s, done.completion_tokens)
        # The server's view: its counters around the request, and its own timings of it where it gives them.
        rec = {**tag, **done.as_dict(), "server": server_view(delta, done.server)}
        rec["interference"] = metrics.interference(delta, 1, done.completion_tokens)
        self.run.record(rec)
        return rec

    def records(self) -> list[dict]:
        return read_records(self.run.path)

    @contextlib.contextmanager
    def measuring(self) -> Iterator[None]:
        """Around the requests: a failure (Ctrl-C too) seals what was taken, with the reason, then goes on up.
        The GPU energy over the requests taken here is one window of the run (energy.py)."""
        before, taken = energy.read(), len(self.records())
        try:
            yield
        except BaseException as e:
            self.fail(e)
            raise
        interrupt.measured()  # every request is recorded: a Ctrl-C from here on lets the analysis finish
        records = self.records()[taken:]
        if records:
            self.windows.append(energy.window(f"{self.notebook} requests", before, energy.read(), records,
                                              energy.COUNTS.get(self.notebook, "generated")))

    def fail(self, error: BaseException | str) -> None:
        """Mark the run as failed halfway, let go of the lock and seal it; every record stays."""
        if self.run.sealed or (self.run.path / FAILURE).exists():
            return
        reason = (error if isinstance(error, str) else interrupt.REASON if isinstance(error, KeyboardInterrupt)
                  else f"{type(error).__name__}: {error}")
        records = self.records()
        resumable = "resume_from" in (read_object(self.run.path / CLAIM) or {}).get("settings", {})
        print(f"FAILED HALFWAY: {redact(reason)}\nThe {len(records)} record(s) taken are kept in {self.run.path}."
              + (f" To finish it once the cause is fixed, run {self.notebook} again with resume_from="
                 f"{self.run.id!r}: only what it did not finish is measured." if resumable else ""), flush=True)
        try:
            self.run.write_json(FAILURE, {"failed_halfway": True, "reason": reason, "records": len(records),
                                          "errors": sum("error" in r for r in records)})
        except RunError as e:  # the disk is full even now: `sparknb run` seals it, or its message says how
            print(f"Could not mark it failed: {e}", flush=True)
            self.seal = False
        self._close()

    def finish(self, summary: dict) -> None:
        """Write the summary, let go of the lock and, unless an outer runner will, seal the run.

        The GPU telemetry over the run goes into the summary, and its findings (clocks that dropped,
        throttling) are printed under the study's own, so every report says whether the box held steady.
        """
        if self.sampler is not None:
            self.sampler.stop()
            watched = self.sampler.summary()
            summary = summary | {"telemetry": watched.as_dict()}
            print("\n".join(map(str, watched.findings())), flush=True)
        if self.windows:
            summary = summary | {"energy": [w.as_dict() for w in self.windows]}
            summary["findings"] = list(summary.get("findings") or []) + [w.finding().as_dict() for w in self.windows]
            print("\n".join(str(w.finding()) for w in self.windows), flush=True)
        self.run.write_json("summary.json", summary)
        self._close()
        print(f"run folder: {self.run.path}")

    def _close(self) -> None:
        if self.sampler is not None:
            self.sampler.stop()
        self.lock.release()
        if self.endpoint is not None:
            self.endpoint.close()
        if self.seal:
            self.run.seal()
        if self in _open:
            _open.remove(self)

    def fingerprint_table(self) -> pd.DataFrame:
        return fingerprint.table(self.fingerprint)


def rep_label(rep: int) -> str:
    """A request's repetition as progress lines print it: the record's own `rep` (0 for the first measured one, as
    every table shows it), or warmup."""
    return "warmup" if rep < 0 else f"rep {rep}"


def named(rows: pd.DataFrame) -> str:
    """Requests by their place in the records (seq, prompt length, rep, as the tables show them), for a finding
    that leaves them out of a figure: none is dropped without being named."""
    return "; ".join(f"seq {int(r['seq'])} ({int(r['prompt_length']):,} tokens, {rep_label(int(r['rep']))})"
                     for _, r in rows.iterrows())


def left_out(df: pd.DataFrame, figure: str, lacking: str, why: str) -> list[Finding]:
    """Requests left out of every figure, each counted and named: those another client disturbed, and those
    without `figure` (a column: a decode speed, a first-token time), which lack `lacking` because `why`."""
    notes = []
    if dropped := df["interference"].notna().sum():
        notes.append(warning(f"{dropped} request(s) were left out because another client used the server "
                             "meanwhile; see the 'interference' column of the records."))
    missing = df[df["interference"].isna() & df[figure].isna()]
    if len(missing):
        notes.append(warning(f"{len(missing)} request(s) have no {lacking} and are left out of every figure: "
                             f"{named(missing)}. {why}", tuple(sorted({int(n) for n in missing["prompt_length"]}))))
    return notes


def capped(df: pd.DataFrame, stopped: dict[int, str], client: str, server: str, what: str) -> list[Finding]:
    """Lengths where repetitions auto hit its cap before its precision target: context, not a doubt (the row's own
    interval already says how precise its median is; a busy box, drift or outliers are their own findings), with
    the spread put where the server's own timings put it: in the server, or outside it (transport, client, box)."""
    lengths = [n for n, why in stopped.items() if why.startswith("stopped at the cap")]
    if not lengths:
        return []
    where = "; ".join(f"{n:,} tokens: {spread_source(df[df['prompt_length'] == n], client, server)}" for n in lengths)
    return [info(f"repetitions auto stopped at its cap before reaching its target at "
                 f"{', '.join(f'{n:,}' for n in lengths)} tokens ({stopped[lengths[0]]}). A target is for precision, "
                 f"not a test: the median's own interval says how precise it is, and decides with it. Where the "
                 f"{what} spread: {where}.", tuple(lengths))]


def spread_source(df: pd.DataFrame, client: str, server: str) -> str:
    """Whose time the spread of the client's figure is, by the server's own timings of the same requests."""
    timed = df[df["interference"].isna()][[client, server]].dropna() if server in df else df.iloc[:0]
    if len(timed) < 2:
        return "the server gave no timings of its own, so whether the server or the box spread cannot be told"
    inside = 1000 * (timed[server].max() - timed[server].min())
    outside = 1000 * (timed[client] - timed[server])
    span = float(outside.max() - outside.min())
    who = ("the server's own time" if inside >= span else
           "the time outside the server (the transport, the client or the machine)")
    return (f"{who} (the server's own ranged over {inside:,.1f} ms; outside it, {outside.min():,.1f} to "
            f"{outside.max():,.1f} ms)")


def drifts(df: pd.DataFrame, column: str, what: str, fmt: Callable[[float], str] = "{:.1f}".format,
           by: str = "prompt_length") -> list[Finding]:
    """A box that warms up or slows down during the sweep: first against last request at each length (`by`: or
    of each kind of prompt, mtp's sweep), in the order sent (`seq`)."""
    clean = df[df["interference"].isna() & df["seq"].notna()].sort_values("seq")
    moved, at = [], []
    for key, g in clean.groupby(by):
        d = drift(g[column].dropna().tolist())
        if d is not None and d.beyond_spread:
            at.append(int(key) if by == "prompt_length" else key)
            moved.append(f"{f'{key:,} tokens' if by == 'prompt_length' else key}: {fmt(d.first)} first, "
                         f"{fmt(d.last)} last ({100 * d.change:+.0f}%, the {d.n - 2} between spread over "
                         f"{fmt(d.spread)})")
    if not moved:
        return []
    same = "length" if by == "prompt_length" else "kind of prompt"
    return [warning(f"The machine drifted during the sweep: the first and last {what} at the same {same} differ "
                    f"beyond the spread of the requests between them ({'; '.join(moved)}). Medians hide this; "
                    "measure again on a quiet, warmed-up box.", tuple(at))]


def server_first_s(df: pd.DataFrame) -> pd.Series:
    """The server's own time to the first token where it gives one; else its prompt time (a server that times
    only the prompt)."""
    return df["server_ttft_s"].fillna(df["server_prefill_s"])


def outside_server(df: pd.DataFrame) -> tuple[list[float], list[int | None]]:
    """Each clean request's time outside the server before its first token (ms), in the order sent, and the
    prompt length sent just before it (None for the first): a stall that grows with the previous prompt is the
    server saving that prompt, not this one's cost."""
    ordered = df.sort_values("seq")
    before = ordered["prompt_length"].shift(1)
    ordered = ordered.assign(before=before)
    ordered = ordered[ordered["interference"].isna() & ordered["ttft_s"].notna()]
    server_first = server_first_s(ordered)
    keep = server_first.notna()
    outside = (1000 * (ordered["ttft_s"] - server_first))[keep]
    return [float(v) for v in outside], [None if pd.isna(b) else int(b) for b in ordered["before"][keep]]


# The burst rule, the same for decode and mtp: where the server timed the request itself (its own decode time, from
# its counters or its per-request timings) and the client's first-to-last token time differs from it by more than
# BURST, the answer reached the client in bursts or stalls, so the client's clock measured the delivery, not the
# decoding. Such a request is counted at the server's time (`timed_by` says which clock counted), never left to
# pose as a speed the client could not have seen. Where the server gives no time of its own, nothing can be checked.
BURST = 0.10  # client against server decode time: beyond this the client's clock timed the delivery


def timing(record: dict) -> dict:
    """One request's decode speed by the burst rule: the figure counted, which clock counted it, and why."""
    tokens, client_s = record.get("decode_tokens"), record.get("decode_s")
    server_s = (record.get("server") or {}).get("decode_s")
    burst = bool(server_s and client_s is not None and abs(client_s - server_s) > BURST * server_s)
    seconds = server_s if burst else client_s
    return {"client_tok_s": record.get("decode_tokens_per_s"), "server_decode_s": server_s, "burst": burst,
            "timed_by": "server" if burst else "client",
            "decode_tok_s": tokens / seconds if tokens and seconds else None}


def seen_by_client(tok_s: float | None) -> str:
    """What the client's clock made of an answer that came in a burst."""
    if tok_s is None:  # first and last token in one read: no time between them at all
        return "the client saw every token at once, a delivery, not a decoding speed"
    return f"the client saw {tok_s:.1f} tok/s, a delivery, not a decoding speed"


def resolve_endpoint(value: str) -> str:
    """An endpoint as given, or read from the environment for env:NAME (how `sparknb run` passes a URL
    that holds a password: the notebook then never sees it)."""
    if not value.startswith(ENV_PREFIX):
        return value
    name = value.removeprefix(ENV_PREFIX)
    url = os.environ.get(name)
    if not url:
        raise ParamsError(f"endpoint {value!r} names the environment variable {name}, which is not set. "
                          f"Export {name}=http://host:port/v1 first.")
    return url


def start(notebook: str, *, settings: dict, model: str = "", models: Sequence[str] = (), endpoint: str = "",
          force: bool = False, run_id: str = "", outputs: str = "", seal: bool = True,
          validate: Callable[[ServerInfo, Endpoint], None] | None = None) -> Study:
    """Check everything, then open the run. `settings` are the notebook's parameters, recorded as given.

    `model` is measured through its endpoint; `models` (the swap study) are started by the study
    itself, so there is no server to ask yet. `validate(server, endpoint)` is the plan's own check
    against the server (context length, the prompts' real token counts), before the lock is taken.
    """
    for old in list(_open):  # a rerun of the notebook in the same kernel
        old.lock.release()
        _open.remove(old)
    loaded = tuple(load_model(m) for m in (models or [model]))
    hardware_names = sorted({m.hardware for m in loaded})
    if len(hardware_names) > 1:
        raise ParamsError(f"The models name different hardware ({', '.join(hardware_names)}); one run happens on "
                          "one box, so give them the same `hardware`.")
    hardware = load_hardware(loaded[0].hardware)
    keys = tuple(k for k in (m.api_key() for m in loaded) if k)
    ep = server = None
    if not models:
        ep = Endpoint(resolve_endpoint(endpoint or loaded[0].endpoint), loaded[0].served_model_name,
                      api_key=loaded[0].api_key(), tokenizer=loaded[0].tokenizer, engine=loaded[0].engine,
                      key_env=loaded[0].api_key_env, stall_s=loaded[0].stall_timeout_s)
        server = ep.info()
        if validate:
            validate(server, ep)
    names = [m.name for m in loaded]
    lock = guard.RunLock({"notebook": notebook, "model": ", ".join(dict.fromkeys(names)), "run_id": run_id or "(new)"})
    lock.acquire(force=force)
    try:
        text = ep.metrics_text() if ep else None  # one scrape: the guard's load, the draft counters, the KV cache type
        report = guard.check(server_load=ep.snapshot(text).load() if ep else None, endpoint=ep, force=force,
                             **({"server_process": ep.engine.process_name} if ep else {}))
        all_params = {"notebook": notebook, "settings": settings, "hardware": hardware.model_dump(),
                      "guard": report.as_dict() | {"lock_forced_over": lock.forced_over}}
        if models:
            all_params["models"] = {m.name: m.model_dump() for m in loaded}
            server_facts = {"url": "per step", "version": "per step", "model": ", ".join(dict.fromkeys(names)),
                            "root": None, "max_model_len": None}
        else:
            all_params |= {"model": loaded[0].model_dump(), "endpoint": ep.url}
            scrape = ep.snapshot(text)
            drafts = scrape.speculates(server.facts.get("speculative"))
            server_facts = server.as_dict() | {"speculative": {"declared": loaded[0].speculative,
                                                               "server_counts_drafts": drafts}}
        run = Run.create(notebook, all_params, run_id=run_id, outputs=outputs,
                         label="-".join(dict.fromkeys(names)), secrets=keys)
        box = probe.measure(hardware, fingerprint.nvml())
        print(box.finding(), flush=True)
        if signing.absent():
            print(signing.absent(), flush=True)
        fp = fingerprint.take(server=server_facts, params=all_params, project_dir=project_root(), secrets=keys,
                              probe=box.as_dict())
        run.write_json("fingerprint.json", fp)
        counted = census.seal(run, loaded[0], server.root, ep.engine.kv_cache_dtype(text)) if ep else None
        sampler = telemetry.Sampler(run).start()
    except BaseException:
        lock.release()
        raise
    study = Study(notebook, loaded, hardware, run, report, fp, lock, seal, ep, server, sampler, census=counted)
    _open.append(study)
    where = f"at {redact(ep.url)} (server {server.version})" if ep else "started by this study"
    print(f"run {run.id}: {', '.join(dict.fromkeys(names))} {where}; writing {run.path}", flush=True)
    for line in manifest.said(settings.get("inputs") or []):  # another box's key, or a run not trusted
        print(line, flush=True)
    return study


def server_view(d: metrics.Delta, per_request: dict | None = None) -> dict:
    """What the server says about one request, in the client's units; None wherever it does not say.

    Its counters around the request first; where they cannot give a figure (llama-server counts seconds
    but not requests, so no mean), the request's own timings give it (`per_request`, kept whole too).
    """
    own = per_request or {}
    view = {"requests": d.requests(), "generated_tokens": d[metrics.GENERATED],
            "prefix_cache_queries": d.prefix_queries(), "prefix_cache_hits": d[metrics.PREFIX_HITS],
            "counter_resets": d.reset}
    for name, hist in (("ttft_s", metrics.TTFT), ("prefill_s", metrics.PREFILL), ("decode_s", metrics.DECODE),
                       ("queue_s", metrics.QUEUE), ("e2e_s", metrics.E2E)):
        view[name] = d.mean(hist)
        if view[name] is None:
            view[name] = own.get(name)
    if own.get("cached_tokens") is not None:  # llama-server's cache_n: this request's own prefix-cache hit
        view["prefix_cache_hits"] = own["cached_tokens"]
        view["prefix_cache_queries"] = own["cached_tokens"] + (own.get("prompt_tokens") or 0)
    spec = d.spec_decode()
    if spec["drafts"] is None and own.get("spec_decode") and own["spec_decode"].get("draft_tokens") is not None:
        drafted, accepted = own["spec_decode"]["draft_tokens"], own["spec_decode"].get("accepted_tokens")
        spec = spec | {"draft_tokens": drafted, "accepted_tokens": accepted,
                       "acceptance_rate": accepted / drafted if drafted and accepted is not None else None}
    pairs = ((metrics.PREFIX_HITS, "prefix_cache_hits"), (metrics.DECODE + "_sum", "decode_s"))
    known = [name for name, figure in pairs if view[figure] is not None]
    return view | {"spec_decode": spec, "unchecked": metrics.unchecked(d, known), "per_request": per_request}
