"""The sandbox for model-written code: what each isolation level allows, that it fails closed, that a pass is
proven only by the checks running to their end, and that hostile programs are contained, graded failed with
their reason, and do not stop the programs after them.

Every program here runs for real, in a child process, under bubblewrap (installed by .ci/run) and under
plain namespaces. The hostile programs are written as completions of a real HumanEval problem and graded
the way the study grades them.
"""

import json
import os
import shutil
import subprocess
import sys
import socket
import tempfile
import time
from pathlib import Path

import pytest

from sparknb import sandbox as sb
from sparknb.endpoint import metrics
from sparknb.endpoint.client import Endpoint
from sparknb.errors import SandboxError
from sparknb.sandbox import fence
from sparknb.studies import humaneval as h

ISOLATED = ("bubblewrap", "namespaces")
PROBLEM = next(p for p in h.load().problems if p.id == "HumanEval/0")
RIGHT = PROBLEM.canonical
WRONG = "    return None\n"


def opened(level: str, **limits) -> sb.Sandbox:
    """A sandbox at `level`; where the machine cannot give it the test is skipped, saying why, except in CI
    (SPARKNB_REQUIRE_SERVERS=1), which installs bubblewrap and must run every level."""
    try:
        return sb.Sandbox.open(level, limits=sb.Limits(**limits))
    except SandboxError as e:
        if os.environ.get("SPARKNB_REQUIRE_SERVERS") == "1":
            pytest.fail(f"isolation {level} is required here: {e}", pytrace=False)
        pytest.skip(f"isolation {level} cannot be had here: {e}")


@pytest.fixture(params=ISOLATED, name="box", scope="module")
def _box(request) -> sb.Sandbox:
    return opened(request.param)


def graded(box: sb.Sandbox, completion: str) -> h.Grade:
    """A completion of HumanEval/0, graded as the study grades it (completion style, no stop strings)."""
    return h.grade(PROBLEM, "completion", completion, "stop", (), box)


def attack(body: str, then: str = WRONG) -> str:
    """A completion of HumanEval/0 whose function runs `body` each time the checks call it, then `then`.
    (Indented, so no classic stop string cuts it: completion style applies them after generation.)"""
    return "".join(f"    {line}\n" for line in body.strip("\n").splitlines()) + then


def graded_chat(box: sb.Sandbox, code: str) -> h.Grade:
    """A chat answer holding `code` in a fenced block, graded as the study grades it."""
    return h.grade(PROBLEM, "chat", f"Here it is.\n```python\n{code}\n```\n", "stop", (), box)


def skip_where_own_files_show(box: sb.Sandbox) -> None:
    """Under plain namespaces a program sees the host's files with its user's rights: run as root, sparknb drops
    it to nobody, who cannot read or write root's files; run as you, it is you, and so are they."""
    if box.level == "namespaces" and os.geteuid() != 0:
        pytest.skip("namespaces runs programs as you when sparknb is not root: only bubblewrap hides your own files")


def outside(name: str) -> Path:
    """A path on the host that no level puts a tmpfs over (a root process may write in /run)."""
    return (Path("/run") if os.geteuid() == 0 else Path.home()) / name


def living(marker: str | None = None) -> set[int]:
    """Pids of the host's processes, not zombies, running `sleep marker`, or else in a cgroup this test process's
    sandboxes made (where none can be made: running as a sandbox's own uid, which other processes' sandboxes
    share). Read from /proc; nothing is signalled."""
    ours, cgroups = f"sparknb-sandbox-{os.getpid()}-", fence.cgroup_root() is not None
    found = set()
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            status, cmdline, cgroup = ((proc / name).read_bytes().decode(errors="replace")
                                       for name in ("status", "cmdline", "cgroup"))
        except OSError:
            continue
        uid = int(status.split("Uid:\t")[1].split()[0])
        mine = cmdline == f"sleep\0{marker}\0" if marker else ours in cgroup if cgroups else uid in fence.UIDS
        if mine and "State:\tZ" not in status:
            found.add(int(proc.name))
    return found


# -- the levels, and refusing what cannot be had -----------------------------------------------------


def test_each_level_gives_an_empty_environment_an_empty_folder_and_an_unprivileged_user(box):
    probe = ("import json, os\nprint(json.dumps([sorted(os.environ), os.getcwd() == os.environ['HOME'], "
             "os.listdir('.'), os.getuid(), os.getpid()]))\n")
    result = box.run(probe)
    assert result.passed, result
    names, home_is_cwd, listing, uid, pid = json.loads(result.output)
    assert set(names) <= {"HOME", "LANG", "PATH", "TMPDIR", "PWD"} and home_is_cwd and listing == []
    assert uid != 0 and pid < 10  # its own pid namespace: the host's pids are not in it
    assert box.as_dict()["uid"] != 0 and box.as_dict()["level"] == box.level


def test_a_level_that_cannot_be_had_is_refused_and_names_the_weaker_one(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # no bwrap, no unshare on this PATH
    with pytest.raises(SandboxError, match=r"needs bwrap, which is not installed.*apt-get install bubblewrap.*"
                                           r"isolation='namespaces'.*isolation='rlimits'"):
        sb.Sandbox.open("bubblewrap")
    with pytest.raises(SandboxError, match="needs unshare.*isolation='rlimits'.*NETWORK IS REACHABLE"):
        sb.Sandbox.open("namespaces")
    with pytest.raises(SandboxError, match="is not one of bubblewrap, namespaces, rlimits"):
        sb.Sandbox.open("docker")


@pytest.mark.skipif(os.geteuid() != 0, reason="only a root process drops to nobody")
def test_an_interpreter_nobody_cannot_read_is_refused_before_anything_runs(tmp_path):
    hidden = tmp_path / "private"
    hidden.mkdir(mode=0o700)
    shutil.copy2(sb.PYTHON, hidden / "python3")
    with pytest.raises(SandboxError, match="cannot be run by uid 65534 \\(nobody\\).*use /usr/bin/python3"):
        sb.Sandbox.open("bubblewrap", python=str(hidden / "python3"))


def test_the_weakest_level_is_had_only_when_asked_and_says_the_network_is_reachable():
    box = sb.Sandbox.open("rlimits")
    assert "NETWORK IS REACHABLE" in box.describe() and box.as_dict()["what"] == sb.WHAT["rlimits"]
    assert graded(box, RIGHT).passed


def test_every_level_this_machine_allows_is_named_with_why_not_for_the_others():
    allowed = sb.allowed()
    assert list(allowed) == list(sb.LEVELS)
    assert allowed["rlimits"] is None
    for level, why in allowed.items():
        assert why is None or level in why


# -- what counts as a pass ---------------------------------------------------------------------------


def test_the_right_body_passes_and_a_wrong_one_fails_with_the_assertion_named(box):
    right, wrong = graded(box, RIGHT), graded(box, WRONG)
    assert right.passed and right.reason == sb.PASSED and right.detail == "the checks ran to their end"
    assert not wrong.passed and wrong.reason == sb.ASSERTION and "line" in wrong.detail and "assert" in wrong.detail


@pytest.mark.parametrize("how", ["import sys\nsys.exit(0)", "import os\nos._exit(0)",
                                 "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)"])
def test_an_exit_with_status_0_before_the_checks_run_or_a_killed_interpreter_is_never_a_pass(box, how):
    function = PROBLEM.prompt + RIGHT  # a right answer, but the program ends before check() is called
    before = graded_chat(box, f"{how}\n{function}")
    assert not before.passed and before.reason in (sb.EXITED, sb.KILLED), before
    during = graded(box, attack(how, then=RIGHT))  # ends while check() runs
    assert not during.passed and during.reason in (sb.EXITED, sb.KILLED), during
    assert graded_chat(box, function).passed  # the same function without the exit passes


def test_printed_text_or_a_guessed_proof_on_every_pipe_is_never_a_pass(box):
    forge = ("import os\nprint('passed')\nfor fd in range(3, 64):\n    try:\n"
             "        os.write(fd, b'checked\\n' + b'0' * 32 + b'\\n')\n    except OSError:\n        pass\nos._exit(0)")
    g = graded(box, attack(forge, then=RIGHT))
    assert not g.passed and g.reason == sb.EXITED and "passed" in g.output


# The forged pass of issue 38, as a model could answer every problem: it never runs a check, writes the harness's
# "checked" line on the report descriptor named in its own argv, echoes the nonce read from the descriptor named
# there too, writes a watch record of its own and exits 0 (graded a clean pass at every level before the judge).
FORGED = """import os
argv = open('/proc/self/cmdline', 'rb').read().split(b'\\0')
report, nonce = int(argv[-5]), int(argv[-4])
os.write(report, b'checked\\n')
os.write(report, os.read(nonce, 64) + b'{"returned": [], "returns": 1, "laundered": null, "watched": true}\\n')
os._exit(0)"""
FAKE_BOOL = """import builtins
class bool:
    def __eq__(self, other):
        return True
bool.__module__ = 'builtins'
builtins.bool = bool
def has_close_elements(numbers, threshold):
    return bool()"""
FROM_THE_ASSERT = """import inspect, linecache
def has_close_elements(numbers, threshold):
    caller = inspect.stack()[1]
    line = linecache.getline(caller.filename, caller.lineno) or ''.join(caller.code_context or [])
    return 'True' in line.split('==')[-1]"""


@pytest.mark.parametrize("level", sb.LEVELS)
@pytest.mark.parametrize("answer", [FORGED, FAKE_BOOL, FROM_THE_ASSERT], ids=["forged", "fake-bool", "from-assert"])
def test_a_forged_pass_a_fake_bool_and_an_answer_read_off_the_assert_line_never_pass(level, answer):
    g = graded_chat(opened(level), answer)
    assert not g.passed, g
    assert g.reason == {FORGED: sb.ERROR, FAKE_BOOL: sb.ERROR, FROM_THE_ASSERT: sb.ASSERTION}[answer], g
    assert "OSError" in g.detail if answer == FORGED else "builtins.bool, which is not plain data" in g.detail \
        if answer == FAKE_BOOL else "line" in g.detail


@pytest.mark.parametrize("level", sb.LEVELS)
def test_the_judge_cannot_be_killed_traced_or_read_by_the_program(level):
    reach = ("import ctypes, os, signal\njudge = os.getppid()\nfor what in ('environ', 'mem', 'fd/0'):\n    try:\n"
             "        open(f'/proc/{judge}/{what}', 'rb').read(1)\n        print(what, 'read')\n"
             "    except OSError as e:\n"
             "        print(what, type(e).__name__)\nlibc = ctypes.CDLL(None, use_errno=True)\n"
             "print('ptrace', libc.ptrace(16, judge, 0, 0), ctypes.get_errno())\n"
             "try:\n    os.kill(judge, signal.SIGKILL)\n"
             "except OSError as e:  # another uid's (rlimits); its pid namespace's init is not even told\n"
             "    print('kill', type(e).__name__)\n")
    g = graded(opened(level), attack(reach, then=RIGHT))
    assert g.passed and g.suspect is None, g  # the judge lived to give the verdict
    assert " read" not in g.output and "ptrace -1 1" in g.output, g.output  # EPERM


@pytest.fixture(name="as_nobody", scope="module")
def _as_nobody():
    """Run a script with sparknb's sandbox as an unprivileged user (nobody, HOME a folder of its own holding a 0600
    file and a .bashrc), as a user would run it without root: the interpreter is the system's, the sandbox package
    a copy that user can read. Returns (run, home)."""
    if os.geteuid() != 0:
        pytest.skip("only root can run a script as another user")
    top = Path(tempfile.mkdtemp(prefix="sparknb-as-nobody-"))
    (top / "sparknb").mkdir()
    for part in ("__init__.py", "errors.py", "sandbox"):
        copy = shutil.copytree if part == "sandbox" else shutil.copy2
        copy(Path(sb.__file__).parents[1] / part, top / "sparknb" / part, **({"ignore": shutil.ignore_patterns(
            "__pycache__")} if part == "sandbox" else {}))
    home = Path(tempfile.mkdtemp(prefix="sparknb-home-", dir="/run"))  # a home outside every place a tmpfs covers
    (home / "key").write_text("the key")
    (home / ".bashrc").write_text("# as it was\n")
    (home / "key").chmod(0o600)
    subprocess.run(["chmod", "-R", "a+rX", str(top / "sparknb")], check=True)
    subprocess.run(["chown", "-R", f"{sb.NOBODY}:{sb.NOBODY}", str(home)], check=True)
    top.chmod(0o755)

    def run(script: str, *args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sb.PYTHON, "-c", script, *args], user=sb.NOBODY, group=sb.NOBODY, extra_groups=[],
                              env={"PYTHONPATH": str(top), "HOME": str(home), "PATH": "/usr/bin:/bin"}, cwd=str(home),
                              capture_output=True, text=True, timeout=120)

    yield run, home
    for folder in (top, home):
        shutil.rmtree(folder, ignore_errors=True)


CHECK = ("import json, sys\nfrom sparknb import sandbox as sb\nr = sb.Sandbox.open(sys.argv[1]).check(*sys.argv[2:])\n"
         "print(json.dumps(r.as_dict()))")


@pytest.mark.parametrize("level", [*ISOLATED, sb.AS_YOU])
def test_run_by_an_unprivileged_user_the_three_wrong_answers_fail_and_a_right_one_passes(as_nobody, level):
    run, _ = as_nobody
    checks = f"{PROBLEM.prompt}\n{PROBLEM.test}\n"
    answers = (FORGED, FAKE_BOOL, FROM_THE_ASSERT, PROBLEM.prompt + RIGHT)
    done = [run(CHECK, level, code, checks, PROBLEM.entry_point) for code in answers]
    assert all(d.returncode == 0 for d in done), [d.stderr for d in done]
    statuses = [json.loads(d.stdout)["status"] for d in done]
    assert statuses == [sb.ERROR, sb.ERROR, sb.ASSERTION, sb.PASSED], [d.stdout for d in done]
    suspect = json.loads(done[-1].stdout)["suspect"]  # beside you, no pass is clean
    assert (suspect is not None and "rlimits-as-you" in suspect) == (level == sb.AS_YOU), suspect


def test_rlimits_run_by_an_unprivileged_user_is_refused_unless_asked_for_by_its_own_name(as_nobody):
    run, _ = as_nobody
    refused = run("from sparknb import sandbox as sb\nsb.Sandbox.open('rlimits')")
    assert refused.returncode == 1 and "can kill, trace and read every process of yours" in refused.stderr
    assert f"isolation={sb.AS_YOU!r}" in refused.stderr


def test_namespaces_run_by_an_unprivileged_user_hides_its_home_and_cannot_write_its_files(as_nobody):
    run, home = as_nobody
    outputs = Path(tempfile.mkdtemp(prefix="sparknb-outputs-", dir="/run"))  # a run's folder, outside the home
    (outputs / "records.jsonl").write_text("{}\n")
    subprocess.run(["chown", "-R", f"{sb.NOBODY}:{sb.NOBODY}", str(outputs)], check=True)
    snoop = (f"import os\nhome = {str(home)!r}\nfor path, mode in ((home + '/key', 'r'), (home + '/.bashrc', 'a'), "
             f"({str(outputs / 'records.jsonl')!r}, 'a')):\n    try:\n        f = open(path, mode)\n"
             "        print(f.read() if mode == 'r' else f.write('{\"passed\": true}'))\n    except OSError as e:\n"
             "        print(type(e).__name__)")
    try:
        done = run("import sys\nfrom sparknb import sandbox as sb\n"
                   "print(sb.Sandbox.open('namespaces').run(sys.argv[1]).output)", snoop)
        records = (outputs / "records.jsonl").read_text()
    finally:
        shutil.rmtree(outputs)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:3] == ["FileNotFoundError", "16", "OSError"], done.stdout  # .bashrc: its own
    assert (home / ".bashrc").read_text() == "# as it was\n" and records == "{}\n"  # your files: read-only


# -- hostile programs: contained, graded failed with their reason, and the next one still runs --------


def test_the_api_key_in_this_process_environment_is_out_of_reach(box, monkeypatch):
    key = "sk-sandbox-test-7d2f9a61c0e84b35"
    monkeypatch.setenv("SPARKNB_API_KEY", key)
    hunt = ("import os, glob\nfound = [k for k, v in os.environ.items() if 'sk-' in v]\n"
            "for path in glob.glob('/proc/*/environ') + glob.glob('/proc/*/cmdline'):\n    try:\n"
            "        text = open(path, 'rb').read()\n    except OSError:\n        continue\n"
            "    if b'sk-sandbox-test' in text:\n        found.append(text.decode(errors='replace'))\n"
            "print(found)\nassert found, 'no key in reach'")
    g = graded(box, attack(hunt))
    assert not g.passed and g.reason == sb.ASSERTION and "no key in reach" in g.detail
    assert key not in g.output and key not in g.detail
    assert graded(box, RIGHT).passed  # the run goes on


def test_a_file_outside_the_sandbox_cannot_be_read(box):
    skip_where_own_files_show(box)
    secret = outside(f"sparknb-secret-{os.getpid()}-{box.level}")
    secret.write_text("the secret")
    secret.chmod(0o600)  # as a key file is: only its owner may read it
    try:
        g = graded(box, attack(f"print(open({str(secret)!r}).read())"))
    finally:
        secret.unlink()
    assert not g.passed and g.reason == sb.ERROR and "the secret" not in g.output
    assert ("FileNotFoundError" if box.level == "bubblewrap" else "PermissionError") in g.detail
    assert graded(box, RIGHT).passed


def test_bubblewrap_hides_even_world_readable_files():
    box = opened("bubblewrap")
    shared = Path("/tmp") / f"sparknb-readable-{os.getpid()}"
    shared.write_text("anyone may read this")
    shared.chmod(0o644)
    try:
        g = graded(box, attack(f"print(open({str(shared)!r}).read())"))
    finally:
        shared.unlink()
    assert g.reason == sb.ERROR and "FileNotFoundError" in g.detail and "anyone may" not in g.output


def test_nothing_outside_can_be_written(box, tmp_path):
    skip_where_own_files_show(box)
    anyone = Path(tempfile.mkdtemp(prefix="sparknb-anyone-", dir=outside("")))  # a folder anyone may write,
    anyone.chmod(0o1777)                                                        # outside the places a tmpfs covers
    targets = [Path(h.packaged_file()).parent / "escaped", tmp_path / "escaped", anyone / "escaped"]
    for place in ("/tmp", "/var/tmp", "/dev/shm"):  # writable by anyone on the host: each level has its own
        targets.append(Path(place) / f"sparknb-escaped-{os.getpid()}")
    write = ("import json\nwhat = []\nfor t in " + json.dumps([str(t) for t in targets]) + ":\n    try:\n"
             "        open(t, 'w').write('out')\n        what.append('wrote')\n    except OSError as e:\n"
             "        what.append(type(e).__name__)\nprint(json.dumps(what))\nraise RuntimeError('tried to write outside')")
    try:
        g = graded(box, attack(write))
        left = [t for t in targets if t.exists()]
    finally:
        shutil.rmtree(anyone)
    assert not g.passed and g.reason == sb.ERROR and "RuntimeError: tried to write outside" in g.detail, g
    inside = json.loads(g.output.splitlines()[0])
    hidden, read_only = "FileNotFoundError", "OSError"  # bubblewrap shows none of them; namespaces: / is read-only
    assert inside[:3] == ([hidden] * 3 if box.level == "bubblewrap" else [read_only, hidden, read_only]), inside
    assert inside[3:] == ["wrote"] * 3 and left == []  # its own /tmp, /var/tmp, /dev/shm
    assert graded(box, RIGHT).passed


@pytest.mark.server
def test_the_running_vllm_server_cannot_be_reached(box, tiny_dense):
    port = int(tiny_dense.url.rsplit(":", 1)[1].split("/")[0])
    ep = Endpoint(tiny_dense.url, "tiny-dense")
    try:
        before = ep.metrics()[metrics.E2E + "_count"]
        call = (f"import socket\ns = socket.create_connection(('127.0.0.1', {port}), timeout=5)\n"
                "body = b'{\"model\": \"tiny-dense\", \"prompt\": \"hi\", \"max_tokens\": 4}'\n"
                "s.sendall(b'POST /v1/completions HTTP/1.1\\r\\nHost: x\\r\\nContent-Type: application/json\\r\\n'"
                " + b'Content-Length: ' + str(len(body)).encode() + b'\\r\\n\\r\\n' + body)\nprint(s.recv(4096))")
        g = graded(box, attack(call))
        time.sleep(1)
        after = ep.metrics()[metrics.E2E + "_count"]
    finally:
        ep.close()
    assert not g.passed and g.reason == sb.ERROR
    assert ("ConnectionRefusedError" if box.level == "bubblewrap" else "Network is unreachable") in g.detail
    assert after == before  # the server finished no request it was not sent from here
    with socket.create_connection(("127.0.0.1", port), timeout=5):
        pass  # while from outside the sandbox it was there all along


def test_a_fork_bomb_is_stopped_at_the_process_limit_and_leaves_nothing_behind(box):
    before = living()
    g = graded(box, attack("import os\nwhile True:\n    os.fork()"))
    assert not g.passed and g.reason == sb.ERROR and "BlockingIOError" in g.detail, g
    assert living() <= before  # its cgroup went with it, at once
    assert graded(box, RIGHT).passed


def test_a_50_gb_allocation_fails_for_memory():
    for level in ISOLATED:
        g = graded(opened(level), attack("block = bytearray(50 * 2**30)\nblock[-1] = 1"))
        assert not g.passed and g.reason == sb.MEMORY and "MemoryError" in g.detail


def test_a_program_that_sleeps_forever_is_killed_at_the_wall_clock_timeout():
    for level in ISOLATED:
        box = opened(level, wall_s=2.0, cpu_s=2)
        t0 = time.perf_counter()
        g = graded(box, attack("import time\ntime.sleep(10**9)"))
        assert not g.passed and g.reason == sb.TIMEOUT and "2 s" in g.detail
        assert 2.0 <= time.perf_counter() - t0 < 6.0
        assert graded(box, RIGHT).passed


def test_printing_a_gigabyte_is_cut_at_the_output_cap():
    for level in ISOLATED:
        box = opened(level, output_kb=256)
        t0 = time.perf_counter()
        g = graded(box, attack("import sys\nfor _ in range(1024):\n    sys.stdout.write('x' * 2**20)"))
        assert not g.passed and g.reason == sb.OUTPUT and "256 KB" in g.detail
        assert len(g.output) <= 4000 and time.perf_counter() - t0 < 10



# -- nothing of a program outlives its grading, at any level -------------------------------------------

PLACES = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock")


def escape(marker: str) -> str:
    """Double fork and setsid (out of the process group and away from its parent), a file in every place anyone
    may write, then `sleep` under a command line carrying the marker; the program itself sleeps past its clock."""
    return (f"import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
            f"        for d in {PLACES!r} + (os.getcwd(),):\n            try:\n"
            f"                open(d + '/{marker}', 'w').write('out')\n            except OSError:\n                pass\n"
            f"        os.execv('/bin/sleep', ['sleep', '{marker}'])\n    os._exit(0)\ntime.sleep(10**9)")


@pytest.mark.parametrize("cgroup", [True, False], ids=["cgroup", "no-cgroup"])
@pytest.mark.parametrize("level", sb.LEVELS)
def test_a_double_fork_and_setsid_leave_nothing_alive_and_no_file_once_graded(level, cgroup):
    if not cgroup and level == "rlimits" and os.geteuid() != 0:
        pytest.skip("without a cgroup, only a uid of its own (sparknb as root) reaches a process in a new session")
    box = opened(level, wall_s=1.0, cpu_s=2)
    if cgroup and not box.cgroups:
        pytest.skip("no cgroup (v2) can be made here")
    box = box if cgroup else sb.Sandbox.open(level, limits=box.limits, cgroup=False)
    marker = f"{1000 + os.getpid()}.{int(time.time() * 1000) % 10**6:06d}"  # a valid argument of sleep
    g = graded(box, attack(escape(marker)))
    assert g.reason == sb.TIMEOUT, g
    assert living(marker) == set()  # not a moment later: when grade() returns
    assert [p for p in PLACES if (Path(p) / marker).exists()] == []


@pytest.mark.skipif(os.geteuid() != 0, reason="a uid of its own is given only where sparknb runs as root")
def test_kill_minus_one_at_rlimits_reaches_no_process_but_the_programs_own():
    victim = subprocess.Popen(["sleep", "30"], user=sb.NOBODY, group=sb.NOBODY, extra_groups=[])
    try:
        g = graded(opened("rlimits"), attack("import os, signal\nos.kill(-1, signal.SIGKILL)"))
        time.sleep(0.2)
        assert g.reason == sb.ASSERTION and victim.poll() is None  # nor its judge, which has a uid of its own
    finally:
        victim.kill()
        victim.wait()


@pytest.mark.parametrize("level", ISOLATED)
def test_dev_shm_and_every_writable_place_are_capped_and_dev_is_read_only(level):
    box = opened(level, file_mb=4)
    fill = ("import errno, json, os\nout = {}\nfor d in ('/dev/shm', '/tmp', '/var/tmp', 'home'):\n"
            "    try:\n        for i in range(4):\n            with open(f'{d}/f{i}'.replace('home', '.'), 'wb') as f:\n"
            "                f.write(b'x' * (2 * 2**20))\n        out[d] = 'filled 8 MB'\n"
            "    except OSError as e:\n        out[d] = errno.errorcode[e.errno]\n"
            "try:\n    open('/dev/x', 'w')\n    out['/dev'] = 'wrote'\nexcept OSError as e:\n"
            "    out['/dev'] = errno.errorcode[e.errno]\nprint(json.dumps(out))")
    result = box.run(fill)
    assert result.passed, result
    out = json.loads(result.output)
    assert out.pop("/dev") in ("EROFS", "EACCES"), out
    assert out == dict.fromkeys(("/dev/shm", "/tmp", "/var/tmp", "home"), "ENOSPC")  # 4 MB each, not half the RAM


@pytest.mark.parametrize("level", ISOLATED)
def test_the_hosts_proc_is_hidden_where_the_level_has_its_own_pids(level):
    marker = f"{2000 + os.getpid()}.5"
    host = subprocess.Popen(["sleep", marker])
    try:
        look = ("import os\nfound = []\nfor p in os.listdir('/proc'):\n    if p.isdigit():\n        try:\n"
                "            found.append(open(f'/proc/{p}/cmdline', 'rb').read())\n        except OSError:\n"
                "            pass\nprint(len(found), any(b'" + marker + "' in c for c in found), found[0][:16])")
        result = opened(level).run(look)
    finally:
        host.kill()
        host.wait()
    assert result.passed, result
    count, seen, _ = result.output.split(" ", 2)
    assert int(count) <= 3 and seen == "False", result.output  # the harness and its init, not the host's


def host_ipc(size: int) -> list[str]:
    """The host's System V shared memory segments of `size` bytes and message queues holding `size % 4096` bytes."""
    return [line for kind, held in (("shm", size), ("msg", size % 4096))
            for line in Path(f"/proc/sysvipc/{kind}").read_text().splitlines()[1:] if line.split()[3] == str(held)]


@pytest.mark.parametrize("level", sb.LEVELS)
def test_system_v_shared_memory_and_message_queues_do_not_outlive_the_program(level):
    size = 3_000_000 + os.getpid() % 1000  # a size no other segment has
    make = (f"import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nshm = libc.shmget(0, {size}, 0o1600)\n"
            f"q = libc.msgget(0, 0o1600)\nbody = ctypes.create_string_buffer(b'\\1' + bytes(7 + {size % 4096}))\n"
            f"sent = libc.msgsnd(q, body, {size % 4096}, 0x800)\nprint(shm, q, sent, ctypes.get_errno())\n")
    result = opened(level).run(make)
    shm, queue, sent, _ = map(int, result.output.split())
    assert result.passed and shm >= 0 and queue >= 0 and sent == 0, result  # made, where it ran
    assert host_ipc(size) == []


@pytest.mark.parametrize("level", ISOLATED)
def test_run_by_an_unprivileged_user_system_v_memory_does_not_outlive_the_program(as_nobody, level):
    run, _ = as_nobody
    size = 3_100_000 + os.getpid() % 1000
    make = f"import ctypes\nprint(ctypes.CDLL(None).shmget(0, {size}, 0o1600))"
    done = run("import sys\nfrom sparknb import sandbox as sb\n"
               "print(sb.Sandbox.open(sys.argv[1]).run(sys.argv[2]).output)", level, make)
    assert done.returncode == 0 and int(done.stdout.split()[0]) >= 0, (done.stdout, done.stderr)
    assert host_ipc(size) == []  # its IPC namespace went with it


@pytest.mark.parametrize("level", sb.LEVELS)
def test_no_user_namespace_of_its_own_so_no_tmpfs_past_the_caps_while_threads_and_subprocesses_still_run(level):
    nest = ("import ctypes, errno, subprocess, threading\nlibc = ctypes.CDLL(None, use_errno=True)\n"
            "made = libc.unshare(0x10000000 | 0x20000)\nwhy = errno.errorcode.get(ctypes.get_errno())\n"
            "t = threading.Thread(target=print, args=('thread',))\nt.start()\nt.join()\n"
            "print(made, why, subprocess.run(['/bin/sh', '-c', 'echo child'], capture_output=True).stdout)")
    result = opened(level).run(nest)
    assert result.passed, result
    assert result.output.split("\n")[:2] == ["thread", "-1 EPERM b'child\\n'"], result.output  # a tmpfs of half the RAM


@pytest.mark.parametrize("level", ISOLATED)
def test_each_tmpfs_holds_at_most_its_inode_cap(level):
    box = opened(level, inodes=300)
    flood = ("import errno, os\nn = 0\ntry:\n    while n < 100_000:\n"
             "        os.close(os.open(f'/tmp/{n}', os.O_CREAT | os.O_WRONLY))\n        n += 1\n"
             "except OSError as e:\n    print(n, errno.errorcode[e.errno])\nelse:\n    print(n, 'no cap')")
    result = box.run(flood)
    assert result.passed, result
    count, why = result.output.split(maxsplit=1)
    assert why.strip() == "ENOSPC" and int(count) < 300, result.output  # 100,000 went in before


# -- an answer that returns an object equal to anything, or an unexpected type -------------------------

ALWAYS_EQUAL = "    class Anything:\n        def __eq__(self, other):\n            return True\n"


def checked(box: sb.Sandbox, answer: str) -> sb.Result:
    return box.check(PROBLEM.prompt + answer, f"{PROBLEM.prompt}\n{PROBLEM.test}\n", PROBLEM.entry_point)


@pytest.mark.parametrize("answer, status, why", [
    (ALWAYS_EQUAL + "    return Anything()\n", sb.ERROR, "Anything, which is not plain data"),
    (ALWAYS_EQUAL.replace("Anything:", "Anything(int):") + "    return Anything(0)\n", sb.ASSERTION, "== True"),
    ("    import sys\n    sys.setprofile(None)\n    return True\n", sb.ASSERTION, "== False"),
])
def test_an_object_equal_to_anything_is_not_plain_data_and_a_subclass_is_its_base_value(box, answer, status, why):
    result = checked(box, answer)
    assert result.status == status and why in result.detail, result


def test_a_generator_or_a_frozenset_comes_back_as_one_and_an_endless_iterator_is_an_error(box):
    checks = ("def check(candidate):\n    assert tuple(candidate([3, 1])) == (3, 1)\n"
              "    assert candidate([3, 1]) != [3, 1]\n")  # an iterator, as in the reference harness
    made = box.check("def f(x):\n    return (v for v in x)\n", checks, "f")
    assert made.passed and made.returned == ("iterator",) and made.against(frozenset({"list"})).suspect, made
    frozen = box.check("def f(x):\n    return frozenset(x)\n", "def check(candidate):\n"
                       "    assert candidate([1]) == {1} and type(candidate([1])) is frozenset\n", "f")
    endless = box.check("import itertools\ndef f(x):\n    return itertools.count()\n", checks, "f")
    assert frozen.passed and endless.status == sb.ERROR and "more than 1,000,000 items" in endless.detail, endless


def test_the_reference_solution_passes_and_is_not_suspect_and_an_int_for_a_bool_is(box):
    result = checked(box, RIGHT).against(frozenset({"bool"}))
    assert result.passed and result.suspect is None and result.returned == ("bool",), result
    as_int = checked(box, "    return 1 if any(abs(a - b) < threshold for i, a in enumerate(numbers) "
                          "for b in numbers[i + 1:]) else 0\n").against(frozenset({"bool"}))
    assert as_int.passed and "returned int, a type the reference solution never returns (bool)" in as_int.suspect


def test_a_program_whose_grader_died_is_ended_by_the_next_sandbox_opened():
    box = opened("rlimits", wall_s=30.0)
    if not box.cgroups:
        pytest.skip("no cgroup (v2) can be made here")
    marker = f"{3000 + os.getpid()}.25"
    grader = subprocess.Popen([sys.executable, "-c", "import sys\nfrom sparknb import sandbox as sb\n"
                               "sb.Sandbox.open('rlimits').run(sys.argv[1])", f"import os\nos.execv('/bin/sleep', "
                               f"['sleep', '{marker}'])"], env=os.environ | {"PYTHONPATH": str(Path(sb.__file__).parents[2])})
    deadline = time.monotonic() + 30
    while not living(marker) and time.monotonic() < deadline:
        time.sleep(0.05)
    grader.kill()
    grader.wait()
    assert living(marker)  # the program sleeps on, its grader gone
    sb.Sandbox.open("rlimits")
    assert living(marker) == set()


def test_humaneval_fails_an_object_equal_to_anything_and_counts_an_unexpected_type_at_the_top(box):
    laundered = graded(box, ALWAYS_EQUAL + "    return Anything()\n")
    right, wrong = graded(box, RIGHT), graded(box, WRONG)
    assert not laundered.passed and laundered.reason == sb.ERROR and "Anything, which is not plain data" in \
        laundered.detail, laundered  # the judge compares only real builtins: nothing of the program's crosses
    assert right.passed and right.suspect is None and not wrong.passed and wrong.suspect is None
    as_int = graded(box, "    return int(any(abs(a - b) < threshold for i, a in enumerate(numbers) for b in numbers[i + 1:]))\n")
    assert as_int.passed and "returned int, a type the reference solution never returns (bool)" in as_int.suspect
    records = [{"problem": PROBLEM.id, "sample": i, "finish_reason": "stop", **g.as_dict()}
               for i, g in enumerate((as_int, right, wrong))]
    trap = h.traps(records)
    assert trap.counts[h.grading.SUSPECT] == 1 and "1 pass(es) went through a return value" in trap.headline()
    table = h.failures(h.frame(records))
    assert list(table["reason"]) == ["passed, SUSPECT", sb.ASSERTION] and "returned int" in table["detail"].iloc[0]
