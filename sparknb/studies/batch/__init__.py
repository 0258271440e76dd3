"""The graded question batch that every graded study shares (MMLU-Pro, HumanEval, the next one).

A graded study keeps only what is its own: its data, its prompt and its grading rule. Everything else is here,
once: asking in flight (ask), the traps of cut answers (traps), the paired comparison with another run
(compare), the batch's speed beside the other run's (tables, findings).
"""
