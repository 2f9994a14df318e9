"""The batched, KV-cached decoding sessions of ``generator.CausalLMGenerator`` (spec/adapters.md §1).

``CausalLMGenerator.start(prompts)`` returns a ``BatchedSession``: the voters of one DP-RAG step (003 Algorithm 2
lines 7-9: every voter i computes LLM_t(x, D_x^i, y_<t)) are *one* batch, decoded in lock-step (each step appends
the same released token y_t to every sequence), so one forward pass per step serves all voters. How:

1. **Rows independent of one another.** Every row's logits are a function of its own tokens, its row index and
   the session's public shape (batch size, prompt capacity, new-token budget) only -- never of another row's
   tokens or length (tested bit for bit). Prefill runs one row at a time (batch 1); only a *public* prefix (the
   chat template's system turn, ``CausalLMGenerator.public_prefix``: computed from placeholder prompts, never
   from the rows) is computed once and its KV cache reused by the rows that start with it.
2. **KV buffers preallocated at the public worst case.** Every layer's keys and values live in one buffer of
   ``capacity + max_new_tokens`` positions per row, allocated (and zero-filled, so the memory is committed) when
   the session starts: ``capacity`` is the generator's public ``prompt_capacity`` (the most tokens any voter prompt
   of this question, history and number of documents may have) and ``max_new_tokens`` the mechanism's public token
   budget. The rows are right-aligned at ``capacity``; nothing is ever reallocated, so no allocation depends on a
   document's length. A session refuses more than ``max_new_tokens`` appended tokens (``InvalidParameterError``,
   a public count: the deadline of a local generator is counted in forward passes, never on a clock).
3. **Decoding.** ``advance(token)`` feeds one token per sequence at position ``len_i + t``: one (B, 1) forward pass
   per step whose matrix products have the public shape (B, ·) and whose attention is one SDPA call per row over
   that row's own keys (the ``dprag_rows`` attention registered with transformers; plain SDPA otherwise).
4. ``PaddedBatchedSession`` keeps the earlier coupled design (left padding to the longest row, one masked SDPA
   over the batch) as the benchmarks' reference for the KV-cached decode limit only.

Only the last position's logits are computed (``logits_to_keep=1``). ``logits()`` returns numpy (batch, vocab) in
the model's dtype (float32 for SmolLM2).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from dprag.errors import InvalidParameterError

from .common import require

if TYPE_CHECKING:
    from .generator import CausalLMGenerator

__all__ = [
    "BatchedSession",
    "PaddedBatchedSession",
    "ROWS_ATTENTION",
    "common_prefix_len",
    "new_cache",
    "register_rows_attention",
]

#: the attention implementation name of the row-wise decode attention
ROWS_ATTENTION = "dprag_rows"


def common_prefix_len(seqs: list[list[int]]) -> int:
    """The length of the longest token prefix every sequence of ``seqs`` starts with."""
    first = seqs[0]
    n = min(len(s) for s in seqs)
    for j in range(n):
        t = first[j]
        if any(s[j] != t for s in seqs):
            return j
    return n


# ----------------------------------------------------------------------------------------------------------
# KV cache layer: one buffer, allocated once at a capacity fixed in advance
# ----------------------------------------------------------------------------------------------------------
def _fixed_layer_class():
    from transformers.cache_utils import DynamicLayer

    class FixedLayer(DynamicLayer):
        """A DynamicLayer whose keys/values are written into one buffer of ``capacity`` positions, allocated
        (zero-filled) at the first write and never reallocated; ``keys``/``values`` are views of the filled part.
        A write past the capacity raises ``InvalidParameterError`` (the capacity is public: the caller's)."""

        capacity = 1

        def lazy_initialization(self, key_states, value_states) -> None:
            self.dtype, self.device = key_states.dtype, key_states.device
            k, v = key_states, value_states
            self._kbuf = k.new_zeros(k.shape[0], k.shape[1], self.capacity, k.shape[3])
            self._vbuf = v.new_zeros(v.shape[0], v.shape[1], self.capacity, v.shape[3])
            self._n = 0
            self.is_initialized = True

        def update(self, key_states, value_states, *args, **kwargs):
            if not self.is_initialized:
                self.lazy_initialization(key_states, value_states)
            need = self._n + key_states.shape[-2]
            if need > self._kbuf.shape[2] or key_states.shape[0] != self._kbuf.shape[0]:
                raise InvalidParameterError(
                    "session", f"the KV cache's preallocated capacity of {self._kbuf.shape[2]} positions is full"
                )
            self._kbuf[:, :, self._n : need] = key_states
            self._vbuf[:, :, self._n : need] = value_states
            self._n = need
            self.keys = self._kbuf[:, :, :need]
            self.values = self._vbuf[:, :, :need]
            return self.keys, self.values

        def get_seq_length(self) -> int:
            return self._n if self.is_initialized else 0

        def adopt(self, kbuf, vbuf, n: int) -> None:
            """Take ``kbuf``/``vbuf`` (batch, heads, capacity, dim) with the first ``n`` positions filled."""
            self.dtype, self.device = kbuf.dtype, kbuf.device
            self._kbuf, self._vbuf, self._n = kbuf, vbuf, int(n)
            self.capacity = int(kbuf.shape[2])
            self.keys, self.values = kbuf[:, :, :n], vbuf[:, :, :n]
            self.is_initialized = True

        def batch_repeat_interleave(self, repeats: int) -> None:
            if self.get_seq_length() > 0:
                self._kbuf = self._kbuf.repeat_interleave(repeats, dim=0)
                self._vbuf = self._vbuf.repeat_interleave(repeats, dim=0)
                self.keys, self.values = self._kbuf[:, :, : self._n], self._vbuf[:, :, : self._n]

    return FixedLayer


class _LazyLayer:
    cls = None

    def __call__(self):
        if _LazyLayer.cls is None:
            _LazyLayer.cls = _fixed_layer_class()
        return _LazyLayer.cls()


_FixedLayer = _LazyLayer()


def new_cache(model, capacity: int):
    """A transformers ``Cache`` of ``FixedLayer``s, one per decoder layer of ``model``, each of ``capacity``
    positions."""
    from transformers.cache_utils import Cache

    n_layers = model.config.get_text_config(decoder=True).num_hidden_layers
    layers = [_FixedLayer() for _ in range(n_layers)]
    for layer in layers:
        layer.capacity = max(1, int(capacity))
    return Cache(layers=layers)


# ----------------------------------------------------------------------------------------------------------
# row-wise attention
# ----------------------------------------------------------------------------------------------------------
def register_rows_attention() -> None:
    """Register the row-wise attention with transformers (once): ``dprag_rows=[start_0, start_1, ...]`` in the
    forward kwargs makes every batch row attend to its own keys ``key[i, :, start_i:]`` in a separate SDPA call
    (shapes that depend on row i only); without that kwarg it is transformers' SDPA unchanged."""
    from transformers import AttentionInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

    if ROWS_ATTENTION in AttentionInterface._global_mapping:
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

    AttentionInterface.register(ROWS_ATTENTION, rows_attention)
    ALL_MASK_ATTENTION_FUNCTIONS.register(ROWS_ATTENTION, sdpa_mask)


# ----------------------------------------------------------------------------------------------------------
# the sessions
# ----------------------------------------------------------------------------------------------------------
class BatchedSession:
    """Lock-step decoding of a batch of token sequences (``accounting.protocols.DecodingSession``) in which
    every row is a function of its own inputs and the session's public shape only (spec/adapters.md §1).

    - **Prefill, one row at a time.** Row i runs alone (batch 1, its own length, a cache of ``capacity``
      positions): ``public_prefix`` (tokens the caller declares public, e.g. the chat template's system turn; never
      derived from the rows) is run once and its KV cache copied into every row whose tokens start with it; the
      rest of row i is one forward pass over its own suffix. Nothing in it depends on another row's tokens or
      length. Row i's keys are then copied into the session's buffer, right-aligned at ``capacity``.
    - **Decode, batched with row-wise attention.** One (B, 1) forward per step, in which every matrix product
      has the public shape (B, ·) and attention is a separate SDPA call per row over its own slice
      ``[capacity - len_i, capacity + steps]`` (``dprag_rows``), so no row's arithmetic depends on another row's
      values or length. B, the row order, ``capacity``, ``max_new_tokens`` and the public prefix are the caller's
      (public) choices.
    - **Preallocated.** The buffer has ``capacity + max_new_tokens`` positions per row and layer from the start
      (``kv_positions``); it never grows, and a session refuses a token past ``max_new_tokens``.

    Attributes: ``batch_size``; ``prefix_length`` (public prefix tokens, computed once); ``capacity``;
    ``max_new_tokens``; ``kv_positions``; ``lengths`` (current token count of every sequence); ``steps`` (tokens
    appended so far); ``forward_passes`` (model calls so far: the prefix, one per row, one per step).
    """

    def __init__(
        self,
        generator: CausalLMGenerator,
        seqs: list[list[int]],
        *,
        public_prefix: Sequence[int] = (),
        headroom: int = 64,
        capacity: int | None = None,
    ):
        torch = require("torch", "the generator")
        self._g = generator
        self._torch = torch
        self.batch_size = B = len(seqs)
        lens = [len(s) for s in seqs]
        cap = max(lens) if capacity is None else int(capacity)
        if max(lens) > cap:
            raise InvalidParameterError("seqs", f"every sequence must fit the capacity of {cap} tokens", max(lens))
        pp = [int(t) for t in public_prefix]
        P = len(pp)
        self.prefix_length = P
        self.capacity = cap
        self.max_new_tokens = T = max(1, int(headroom))
        self.kv_positions = cap + T
        self.steps = 0
        self.forward_passes = 0
        self._closed = False
        model = generator.model
        self._dtype = model.dtype
        with torch.inference_mode():
            prefix_kv = None
            if P > 0:
                c = new_cache(model, P)
                self._forward(
                    input_ids=torch.tensor([pp], dtype=torch.long), position_ids=torch.arange(P)[None, :], c=c
                )
                prefix_kv = [(layer.keys, layer.values) for layer in c.layers]
            cache = new_cache(model, self.kv_positions)
            bufs: list[tuple[Any, Any]] = []
            rows_logits = []
            for i, s in enumerate(seqs):
                c = new_cache(model, cap)
                start = 0
                if prefix_kv is not None and len(s) > P and s[:P] == pp:
                    for layer, (k, v) in zip(c.layers, prefix_kv, strict=False):
                        layer.update(k, v)
                    start = P
                out = self._forward(
                    input_ids=torch.tensor([s[start:]], dtype=torch.long),
                    position_ids=torch.arange(start, len(s))[None, :],
                    c=c,
                )
                rows_logits.append(out.logits[0, -1, :])
                for j, layer in enumerate(c.layers):
                    k, v = layer.keys, layer.values
                    if len(bufs) == j:  # the first row fixes the heads and head size (public: the model's)
                        bufs.append(
                            (
                                k.new_zeros(B, k.shape[1], self.kv_positions, k.shape[3]),
                                v.new_zeros(B, v.shape[1], self.kv_positions, v.shape[3]),
                            )
                        )
                    bufs[j][0][i, :, cap - lens[i] : cap] = k[0]
                    bufs[j][1][i, :, cap - lens[i] : cap] = v[0]
                del c
            for layer, (kb, vb) in zip(cache.layers, bufs, strict=True):
                layer.adopt(kb, vb, cap)
        self._cache = cache
        self._starts = [cap - n for n in lens]
        self._next_pos = torch.tensor(lens, dtype=torch.long)
        self._set_logits(torch.stack(rows_logits))

    def _forward(self, *, input_ids, position_ids, c, **kw):
        self.forward_passes += 1
        return self._g.model(
            input_ids=input_ids, position_ids=position_ids, past_key_values=c, use_cache=True, logits_to_keep=1, **kw
        )

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
        if self.steps >= self.max_new_tokens:
            raise InvalidParameterError(
                "session", f"has appended its max_new_tokens = {self.max_new_tokens} tokens (its KV buffer is full)"
            )

    def _step(self, toks: list[int]) -> None:
        torch = self._torch
        self._check_open()
        with torch.inference_mode():
            n = self._cache.get_seq_length() + 1
            unused = torch.zeros(self.batch_size, 1, 1, n, dtype=self._dtype)  # 4-D: transformers builds none
            out = self._forward(
                input_ids=torch.tensor(toks, dtype=torch.long)[:, None],
                position_ids=self._next_pos[:, None],
                c=self._cache,
                attention_mask=unused,
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
        torch = require("torch", "the generator")
        self._g = generator
        self._torch = torch
        self.batch_size = B = len(seqs)
        lens = [len(s) for s in seqs]
        P = min(common_prefix_len(seqs), min(lens) - 1)
        self.prefix_length = P
        self.capacity = max(lens)
        self.max_new_tokens = max(1, int(headroom))
        self.kv_positions = self.capacity + self.max_new_tokens
        self.steps = 0
        self.forward_passes = 0
        self._closed = False
        model = generator.model
        self._dtype = model.dtype
        self._min = torch.finfo(self._dtype).min
        with torch.inference_mode():
            cache = new_cache(model, self.kv_positions)
            if P > 0:
                causal = torch.ones(P, P, dtype=torch.bool).tril_()
                self._forward(
                    input_ids=torch.tensor([seqs[0][:P]], dtype=torch.long),
                    position_ids=torch.arange(P, dtype=torch.long)[None, :],
                    c=cache,
                    attention_mask=self._additive(causal[None, None]),
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
            out = self._forward(
                input_ids=ids, position_ids=pos, c=cache, attention_mask=self._additive(allowed[:, None])
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
            out = self._forward(
                input_ids=torch.tensor(toks, dtype=torch.long)[:, None],
                position_ids=self._next_pos[:, None],
                c=self._cache,
                attention_mask=self._additive(valid[:, None, None, :]),
            )
        self._valid = valid
        self._next_pos = self._next_pos + 1
        self.steps += 1
        self._set_logits(out.logits[:, -1, :])
