"""The box under the server: what it was (the fingerprint), whether it is quiet (the guard, the bandwidth probe), and
what it did while measured (telemetry, energy)."""
