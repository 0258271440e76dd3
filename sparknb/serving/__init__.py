"""Starting, stopping and reading servers: process groups, model lifecycles, start-up logs and the tiny test bed."""
