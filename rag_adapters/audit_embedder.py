"""The real models as the audit commits to them: C_emb's embedder descriptor (spec/protocol.md §3, R1 of
002 §5.3) and the text embedder the provider service calls.

``embedder_descriptor(...)`` builds ``audit.protocol.commitments.EmbedderDescriptor`` for a served model pair:

- ``model``: the embedder's name (``sentence-transformers/all-MiniLM-L6-v2`` for ``MiniLMEmbedder``);
- ``weights_sha256``: ``directory_sha256(model_dir)`` -- the SHA-256 of spec/protocol.md §3 over the
  embedder's **model files**: every regular file under the model directory, recursively, except dot-files
  and ``README.md`` (documentation), each as ``u32be(len(path)) || path || u64be(len(file)) || file`` with
  ``path`` its POSIX path relative to the directory, sorted by path (byte order of the UTF-8 path). For
  MiniLM that is the weights (``model.safetensors``), the transformer and pooling configs, the
  sentence-transformers module list and the tokenizer files: everything that determines an embedding.
- ``tokenizer_sha256``: the same digest restricted to the tokenizer files (``TOKENIZER_FILES`` present in
  the directory).
- ``dimension``, ``embedding_scale`` (2^10 by default), ``schema`` ({tenant: n_docs}).
- ``prompt_template``: ``prompt_template_text(generator)`` -- the canonical JSON text (audit/protocol/encoding.py)
  of the generator's exact prompt: its chat template text (the tokenizer's Jinja template for SmolLM2;
  the literal ChatML layout for the byte-tokenizer test models), the fixed wording of
  ``rag_adapters.prompting.PromptFormat`` (system prompt, user turn with / without context, history turn),
  the context truncation length, the generator's name and the SHA-256 of its model files (same rule as
  above; ``None`` for models built in memory). The descriptor has no generator field of its own (protocol
  version 1), so the generator is bound through the prompt template it is served with.

The model side (``MiniLMEmbedder``, its descriptor ``minilm_descriptor`` and the corpus-caching wrapper the
provider service calls) lives in ``rag_adapters.embedder``, which builds on this module.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from dprag.audit.protocol.commitments import DEFAULT_EMBEDDING_SCALE, EmbedderDescriptor
from dprag.audit.protocol.encoding import encode
from dprag.errors import InvalidParameterError

from .prompting import PromptFormat

#: files of a Hugging Face / sentence-transformers model directory that define its tokenizer
TOKENIZER_FILES = (
    "special_tokens_map.json",
    "tokenizer.json",
    "tokenizer_config.json",
    "vocab.txt",
    "merges.txt",
    "chat_template.jinja",
)
#: file names never hashed: documentation, and dprag's own conversion marker (it records a local path)
EXCLUDED_FILES = ("README.md", "dprag-complete.json")

CHATML_LAYOUT = (
    "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}"
    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def model_files(model_dir: str | os.PathLike, only: Sequence[str] | None = None) -> list[tuple[str, Path]]:
    """(relative POSIX path, absolute path) of the hashed files of ``model_dir``, sorted by UTF-8 path bytes."""
    root = Path(model_dir)
    if not root.is_dir():
        raise InvalidParameterError("model_dir", "is not a directory", str(root))
    out = []
    for p in root.rglob("*"):
        rel = p.relative_to(root)
        if not p.is_file() or any(part.startswith(".") for part in rel.parts) or p.name in EXCLUDED_FILES:
            continue
        if only is not None and p.name not in only:
            continue
        out.append((rel.as_posix(), p))
    if not out:
        raise InvalidParameterError("model_dir", "holds no model files to hash", str(root))
    return sorted(out, key=lambda x: x[0].encode("utf-8"))


def directory_sha256(model_dir: str | os.PathLike, only: Sequence[str] | None = None, chunk: int = 1 << 22) -> str:
    """``audit.protocol.commitments.files_sha256`` over the files of ``model_dir`` (see the module docstring),
    streamed: a 0.5 GB checkpoint is never held in memory."""
    h = hashlib.sha256()
    for rel, path in model_files(model_dir, only):
        p = rel.encode("utf-8")
        size = path.stat().st_size
        h.update(len(p).to_bytes(4, "big") + p + size.to_bytes(8, "big"))
        seen = 0
        with open(path, "rb") as f:
            while True:
                b = f.read(chunk)
                if not b:
                    break
                h.update(b)
                seen += len(b)
        if seen != size:
            raise InvalidParameterError("model_dir", f"file {rel} changed while it was hashed", str(model_dir))
    return h.hexdigest()


def chat_template_text(generator) -> str:
    """The generator's chat template: the tokenizer's own Jinja text, else the ChatML layout that
    ``prompting.chatml`` renders (byte-tokenizer models), else the toy model's name."""
    tok = getattr(generator, "tokenizer", None)
    inner = getattr(tok, "_tok", None)
    tmpl = getattr(inner, "chat_template", None)
    if isinstance(tmpl, str) and tmpl:
        return tmpl
    if tok is not None and hasattr(tok, "render"):
        return CHATML_LAYOUT
    return f"{type(generator).__module__}.{type(generator).__qualname__} (no chat template)"


def prompt_template_text(
    generator, *, generator_dir: str | os.PathLike | None = None, generator_sha256: str | None = None
) -> str:
    """The exact prompt the generator is served with, as canonical JSON text (module docstring)."""
    if generator_sha256 is None and generator_dir is not None:
        generator_sha256 = directory_sha256(generator_dir)
    pf = getattr(generator, "prompt_format", None) or PromptFormat()
    mct = getattr(generator, "max_context_tokens", None)
    return encode(
        {
            "chat_template": chat_template_text(generator),
            "system": pf.system,
            "user_with_context": pf.with_context,
            "user_no_context": pf.no_context,
            "history_user": pf.history_user,
            "context_separator": "\n\n",
            "max_context_tokens": None if mct is None else int(mct),
            "generator": str(getattr(generator, "name", type(generator).__name__)),
            "generator_sha256": generator_sha256,
        }
    ).decode("utf-8")


def embedder_descriptor(
    *,
    model: str,
    model_dir: str | os.PathLike,
    dimension: int,
    prompt_template: str,
    schema: Mapping[str, int],
    embedding_scale: int = DEFAULT_EMBEDDING_SCALE,
    weights_sha256: str | None = None,
    entry_point: str | None = None,
) -> EmbedderDescriptor:
    """The descriptor C_emb binds, for an embedder whose files live in ``model_dir``."""
    present = [name for name in TOKENIZER_FILES if any(Path(model_dir).rglob(name))]
    if not present:
        raise InvalidParameterError("model_dir", "has no tokenizer files", str(model_dir))
    return EmbedderDescriptor(
        model=model,
        weights_sha256=weights_sha256 or directory_sha256(model_dir),
        dimension=int(dimension),
        prompt_template=prompt_template,
        tokenizer_sha256=directory_sha256(model_dir, only=present),
        schema=dict(schema),
        embedding_scale=int(embedding_scale),
        entry_point=entry_point,
    )
