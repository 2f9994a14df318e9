"""The provider's models as the service takes them: an embedder (a ``dprag.embedders`` name, an object with
``embed(texts)`` or a callable) and a generator checked against the policy's mechanism (spec/provider.md).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from importlib.metadata import entry_points
from typing import Protocol, TypeGuard

import numpy as np
import numpy.typing as npt

from dprag.accounting.protocols import Generator
from dprag.accounting.rag.ksa import TextGenerator, as_text_generator
from dprag.errors import InvalidParameterError

from ..protocol.commitments import EmbedderDescriptor
from ..protocol.policy import Policy


class TextEmbedder(Protocol):
    def embed(self, texts: Sequence[str]) -> npt.ArrayLike:
        """Float embeddings, shape (len(texts), d)."""
        ...


class DescribedEmbedder(TextEmbedder, Protocol):
    """An embedder that builds what C_emb commits to (``dprag.embedders`` entry points give one)."""

    def descriptor(self, schema: Mapping[str, int], *, prompt_template: str) -> EmbedderDescriptor: ...


def describes_itself(embedder: TextEmbedder) -> TypeGuard[DescribedEmbedder]:
    """Whether ``embedder`` has ``descriptor(schema, prompt_template)``."""
    return callable(getattr(embedder, "descriptor", None))


class _CallableEmbedder:
    """Wraps a plain callable ``texts -> (n, d) float vectors`` as a TextEmbedder."""

    def __init__(self, fn: Callable[[list[str]], object]):
        self.fn = fn

    def embed(self, texts: Sequence[str]) -> npt.NDArray[np.float64]:
        return np.asarray(self.fn(list(texts)), dtype=np.float64)


EMBEDDER_GROUP = "dprag.embedders"


def embedder_loader(name: str) -> Callable[[], TextEmbedder]:
    """The loader registered under the ``dprag.embedders`` entry points for ``name`` (not called: nothing is
    loaded). ``"sentence-transformers/all-MiniLM-L6-v2"`` and ``"all-MiniLM-L6-v2"`` name the same model.
    Unknown names raise ``InvalidParameterError`` naming ``embedder`` and listing the installed names."""
    if not isinstance(name, str) or not name:
        raise InvalidParameterError("embedder", "must be a non-empty name", name)
    eps = {ep.name: ep for ep in entry_points(group=EMBEDDER_GROUP)}
    key = name if name in eps else name.split("/", 1)[-1]
    if key not in eps:
        known = ", ".join(sorted(eps)) or "none installed"
        raise InvalidParameterError(
            "embedder", f"names no installed embedder ({EMBEDDER_GROUP} entry points: {known})", name
        )
    loader: Callable[[], TextEmbedder] = eps[key].load()  # what the entry-point group promises
    return loader


def load_embedder(name: str) -> TextEmbedder:
    """An embedder by name (``embedder_loader(name)()``): e.g. ``"all-MiniLM-L6-v2"`` (sentence-transformers,
    offline, from ``dprag.rag_adapters``). The object has ``embed(texts)``, ``dim`` and
    ``descriptor(schema, prompt_template)`` (what C_emb commits to)."""
    return embedder_loader(name)()


def _has_embed(embedder: object) -> TypeGuard[TextEmbedder]:
    return hasattr(embedder, "embed")


def as_embedder(embedder: object) -> TextEmbedder:
    """The provider's own embedder: a name (``load_embedder``), an object with ``embed(texts)``, or any callable
    returning float vectors."""
    if isinstance(embedder, str):
        return load_embedder(embedder)
    if _has_embed(embedder):
        return embedder
    if callable(embedder):
        return _CallableEmbedder(embedder)
    raise InvalidParameterError(
        "embedder", "must have embed(texts) or be a callable texts -> float vectors", type(embedder).__name__
    )


_LOGIT_METHODS = ("start", "encode", "decode")


def _missing_logit_methods(generator: object) -> list[str]:
    return [m for m in _LOGIT_METHODS if not callable(getattr(generator, m, None))]


def _votes_on_logits(generator: object) -> TypeGuard[Generator]:
    """Whether ``generator`` has what ``pure-dp-rag`` runs on (``start``, ``encode``, ``decode``) and is isolated
    from other requests: it declares its public worst case (``worst_case_bytes``, reserved before the charge,
    spec/provider.md §3.6) or failure-free sessions."""
    isolated = callable(getattr(generator, "worst_case_bytes", None)) or declares_failure_free_sessions(generator)
    return not _missing_logit_methods(generator) and isolated


def serving_generator(policy: Policy, generator: object) -> Generator | TextGenerator:
    """The generator the policy's mechanism can run on. ``pure-dp-rag`` votes on next-token logits: it needs an
    ``accounting.protocols.Generator`` (``start``/``encode``/``decode``). ``dp-ksa`` and ``answer-vote`` need only
    text: an object with ``generate``/``generate_many``, a LangChain runnable (``invoke``) or a callable
    ``prompt_text -> str`` (``accounting.rag.ksa.as_text_generator``)."""
    mech = policy.generation.mechanism
    if mech == "pure-dp-rag":
        if _votes_on_logits(generator):
            return generator
        missing = _missing_logit_methods(generator)
        if missing:
            raise InvalidParameterError(
                "generator",
                f"mechanism 'pure-dp-rag' votes on next-token logits, but the "
                f"generator has no {', '.join(missing)}(); a generator that only "
                f"returns text needs mechanism 'dp-ksa'",
                type(generator).__name__,
            )
        raise InvalidParameterError(
            "generator",
            "mechanism 'pure-dp-rag' (000 Alg. 5) contains one voter's failure, not one that depends on other "
            "requests: it is served only by a generator whose memory the service can reserve before the charge, "
            "one that declares worst_case_bytes(question, n_contexts, batch, max_new_tokens), or that declares "
            "failure_free_sessions = True (spec/provider.md §3.5); serve 'answer-vote' or 'dp-ksa' instead",
            type(generator).__name__,
        )
    return as_text_generator(generator)


def declares_failure_free_sessions(generator: object) -> bool:
    """Whether ``generator`` declares ``failure_free_sessions = True`` (``accounting.protocols.Generator``): its
    ``start``, ``logits`` and ``advance`` never raise for a batch of at most the mechanism's m prompts within the
    public prompt bounds the service checks before the charge, whatever the documents. Only ``True`` itself counts
    (not a truthy value), so a generator that merely has an attribute of that name does not qualify."""
    return getattr(generator, "failure_free_sessions", False) is True


def prompt_template_of(generator: object) -> str:
    """What C_emb binds for the generator's prompt when the descriptor is built here."""
    t = getattr(generator, "prompt_template", None)
    return t if isinstance(t, str) and t else f"{type(generator).__module__}.{type(generator).__qualname__}"
