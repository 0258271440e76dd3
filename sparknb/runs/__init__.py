"""A run from its parameters to its seal: the model's params, a study's plan and schedule, executing a notebook, the
sealed folder, its signed manifest, strict JSON, redaction, resume and Ctrl-C, the report."""
