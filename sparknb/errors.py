"""Every failure sparknb expects, under one base class, each with a message that names the problem and the fix.

One base lets the command line and the notebooks tell a known refusal (print it, exit 2) from a bug
(show the traceback). The subclasses keep the built-in type a caller may already catch.
"""

from __future__ import annotations

from pathlib import Path


class SparknbError(Exception):
    """A failure sparknb foresaw; the message is meant for the user, not for a debugger."""


class ParamsError(SparknbError, ValueError):
    """A params file or a notebook parameter is missing or invalid; the message names the field and the fix."""


class DataError(SparknbError, ValueError):
    """Questions, prompts or an earlier run cannot be used as asked."""


class EndpointError(SparknbError, RuntimeError):
    """The endpoint cannot be used as asked; the message says what was found and what to do."""


class Refused(EndpointError):
    """The server answered the request with an error status: it is up, and refused this request."""


class GuardError(SparknbError, RuntimeError):
    """The machine is not quiet enough to measure; the message lists what was found and how to override."""


class RunError(SparknbError, RuntimeError):
    """A run folder cannot be written, or does not check out."""


class CacheHitError(SparknbError, RuntimeError):
    """The server served part of a prompt from its prefix cache: that TTFT is not a prefill time."""


class FitError(SparknbError, ValueError):
    """Too few clean measurements for a fit; the message says what is missing."""


class ServerError(SparknbError, RuntimeError):
    """A server did not start, or did not get ready; the message carries the last lines of its log."""

    def __init__(self, message: str, *, pid: int | None = None, exit_code: int | None = None,
                 log_tail: str = "") -> None:
        super().__init__(message)
        self.pid = pid  # lets a caller check that nothing was left behind
        self.exit_code = exit_code
        self.log_tail = log_tail


class PortInUseError(ServerError):
    """Refused before starting anything, so a stray server is never mistaken for ours."""


class LifecycleError(SparknbError, ValueError):
    """A model's params do not say how to start it; the message names the field to add."""


class StudyError(SparknbError, RuntimeError):
    """A study stopped halfway; every record taken before is kept in its sealed run folder."""


class SandboxError(SparknbError, RuntimeError):
    """Model-written code cannot be run with the isolation asked for; nothing was run."""


class BuildError(SparknbError, RuntimeError):
    """A tool sparknb builds for itself (the test bed's llama-server) is missing and could not be built."""


class ExecuteError(SparknbError):
    """A notebook did not run through; `folder` is its sealed run folder where records were taken."""

    def __init__(self, message: str, folder: Path | None = None) -> None:
        super().__init__(message)
        self.folder = folder
