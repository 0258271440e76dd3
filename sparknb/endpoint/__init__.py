"""Talking to a server: one streamed request and its timing, many at once, the server's own counters, and prompts of an
exact length."""
