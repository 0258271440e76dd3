"""One running program seen from outside: its source fed in, its output (capped), its report pipe, and the clock."""

from __future__ import annotations

import json
import os
import secrets
import selectors
import subprocess
import time

from .result import EXITED, OUTPUT, PASSED, STATUSES, TIMEOUT, Limits, Result, ended


class Watch:
    """Reads a program's pipes and answers its report until it ends, passes its output cap, or runs out of time."""

    def __init__(self, proc: subprocess.Popen, report: int, nonce: int, source: bytes, limits: Limits):
        self.proc, self.report_fd, self.nonce_fd, self.source = proc, report, nonce, source
        self.cap, self.tail, self.printed = limits.output_kb * 1024, bytearray(), 0
        self.report, self.nonce = b"", secrets.token_hex(16).encode() + b"\n"
        self.timed_out = self.over_cap = False
        self.wall_s = limits.wall_s

    def follow(self, deadline: float) -> None:
        """Feed the program, read its pipes and answer its report until the launcher ends, the output
        passes its cap, or the deadline; then take what is left in the pipes without waiting on anyone."""
        exited = os.pidfd_open(self.proc.pid)  # readable once the launcher has ended; it is not reaped here
        sel = selectors.DefaultSelector()
        sel.register(self.proc.stdin, selectors.EVENT_WRITE, "in")
        sel.register(self.proc.stdout, selectors.EVENT_READ, "out")
        sel.register(self.report_fd, selectors.EVENT_READ, "report")
        sel.register(exited, selectors.EVENT_READ, "exit")
        os.set_blocking(self.proc.stdin.fileno(), False)
        try:
            while not self.over_cap:
                left = deadline - time.perf_counter()
                if left <= 0:
                    self.timed_out = True
                    return
                events = sel.select(left)
                if any(key.data == "exit" for key, _ in events):
                    break
                for key, _ in events:
                    self._step(sel, key)
            self._drain(sel)
        finally:
            sel.close()
            os.close(exited)

    def _drain(self, sel: selectors.BaseSelector) -> None:
        for key in list(sel.get_map().values()):
            if key.data in ("out", "report"):
                os.set_blocking(key.fd, False)
                while key.fd in sel.get_map() and not self.over_cap:
                    try:
                        self._step(sel, key)
                    except BlockingIOError:
                        break

    def _step(self, sel: selectors.BaseSelector, key: selectors.SelectorKey) -> None:
        if key.data == "in":
            try:
                self.source = self.source[os.write(key.fd, self.source[:65536]):]
            except BrokenPipeError:  # the program will not read its source: it has ended
                self.source = b""
            if not self.source:
                sel.unregister(key.fileobj)
                _close(self.proc.stdin)
            return
        data = os.read(key.fd, 65536)
        if not data:
            sel.unregister(key.fileobj)
        elif key.data == "out":
            self.printed += len(data)
            self.tail = (self.tail + data)[-4000:]
            self.over_cap = self.printed > self.cap
        else:
            self.report += data
            self._answer()

    def _answer(self) -> None:
        """Send the nonce once the report says the checks returned; anything else on the report pipe
        closes the nonce pipe unanswered, so a harness waiting on it ends at once instead of at the timeout."""
        if self.nonce_fd is None:
            return
        if self.report == b"checked\n":
            try:
                os.write(self.nonce_fd, self.nonce)
            except BrokenPipeError:
                pass
        elif b"checked\n".startswith(self.report):
            return
        os.close(self.nonce_fd)
        self.nonce_fd = None

    def close(self) -> None:
        for fd in (self.report_fd, self.nonce_fd):
            if fd is not None:
                os.close(fd)
        self.proc.stdout.close()
        _close(self.proc.stdin)

    def result(self, wall: float, cpu: float | None, setup: dict) -> Result:
        out = self.tail.decode(errors="replace")
        told = _json(self.report) if setup.get("checks") else None
        if isinstance(told, dict) and told.get("status") == PASSED:  # the judge's word: the program cannot write it
            suspect = None if told.get("returns") else "the checks passed without the function ever returning"
            return Result(PASSED, str(told.get("detail")), out, wall, cpu, tuple(told.get("returned", ())), suspect)
        if not setup.get("checks") and self.report == b"checked\n" + self.nonce:
            return Result(PASSED, "the program ran to its end (its own word)", out, wall, cpu)
        if self.over_cap:
            return Result(OUTPUT, f"printed more than {self.cap // 1024} KB; killed", out, wall, cpu)
        if self.timed_out:
            return Result(TIMEOUT, f"still running after {self.wall_s:g} s (wall clock); killed", out, wall, cpu)
        told = _json(self.report.split(b"\n", 1)[0])
        if isinstance(told, dict) and told.get("status") in STATUSES and told["status"] != PASSED:
            return Result(told["status"], str(told.get("detail", "")), out, wall, cpu)
        if isinstance(told, dict) and isinstance(told.get("code"), int):
            return Result(*ended(told["code"]), out, wall, cpu)
        if self.report.startswith(b"checked\n"):
            return Result(EXITED, "the report pipe did not carry the proof (something else wrote on it)", out, wall, cpu)
        return Result(*ended(self.proc.returncode), out, wall, cpu)


def _json(data: bytes):
    try:
        return json.loads(data)
    except ValueError:
        return None


def _close(pipe) -> None:
    try:
        pipe.close()
    except BrokenPipeError:
        pass
