"""Starting, stopping and reading servers: process groups and ports, targets, the one Server class, start-up logs, and the tiny test-bed models."""
