"""The graded question batch that every graded study shares (MMLU-Pro, HumanEval, the next one).

A graded study keeps only what is its own: its data, its prompt and its grading rule (plus the scores and plots
that are truly its own). Everything else is here, once:
- ask: asking in flight, `concurrency` requests at a time, each answer graded and on disk as it ends, the batch's
  figures with the server's counters around them; a study hands it `Questions` (what to ask, how to grade it).
- traps: the traps of cut answers (a stop string inside the thinking, max_tokens), counted from every raw answer;
  a study's `Traps` says what its cut answers lack.
- compare: the paired comparison with another run on the same questions (McNemar, Bonett-Price), and the two
  batches' speed, each from its own figures.
- findings, tables, data: the words, the batch table, and a JSONL file read line by line.

Seams left for what builds on this:
- A run's answers are recorded once, raw: every record keeps the answer's text and reasoning beside its grade,
  so any rule can grade a run again from its records alone (MMLU-Pro's `frame` does so on every read).
- The grading rule is one function a study passes in: `Questions.record` grades while asking, and a study's
  `frame(records, ...)` grades from the records; a harness-effect audit or a grading rule set swaps that
  function and compares the two gradings of the same answers, answer by answer.
- The paired comparison keeps one record per question: `compare.Pair(id, a, b)`, in this run's order
  (`Paired.per_question`), from which a sequential comparison reads the pairs as the answers came in.
"""
