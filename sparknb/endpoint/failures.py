"""What went wrong with a request, in the same words for both clients (client.Endpoint and stream.AsyncEndpoint,
through wire.exchange and its asyncio twin)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import EndpointError

if TYPE_CHECKING:
    from .wire import Sink


def unreachable(shown: str, e: Exception) -> EndpointError:
    return EndpointError(f"Cannot reach the endpoint at {shown} ({type(e).__name__}: {e}). Is the server running? "
                         "Start a tiny one with `sparknb serve tiny-dense`, or fix `endpoint` in the model's params "
                         "file.")


def lost(shown: str, e: Exception, sink: Sink) -> EndpointError:
    return EndpointError(f"Lost the connection to {shown} ({type(e).__name__}: {e}); the answer so far had "
                         f"{sink.chunks} chunks.")


def late(shown: str, timeout: float, sink: Sink) -> EndpointError:
    return EndpointError(f"{shown} gave no complete answer within {timeout:g} s; the answer so far had "
                         f"{sink.chunks} chunks.")


def stalled(shown: str, stall: float, sink: Sink) -> EndpointError:
    """A stream that sent nothing for `stall` seconds: once it held a run 600 s a request, in silence."""
    return EndpointError(f"{shown} sent nothing for {stall:g} s (stall_timeout_s in the model's params); the answer "
                         f"so far had {sink.chunks} chunks. The server stalled or is overloaded: check it, or raise "
                         "stall_timeout_s where a long prompt's prefill takes longer than that before its first token.")


def garbled(shown: str, e: Exception) -> EndpointError:
    return EndpointError(f"{shown} answered something that is not HTTP with JSON events ({e}).")
