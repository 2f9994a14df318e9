"""How a ``Prompt`` (question, contexts, history) becomes chat messages and then model text.

The wording is fixed here, byte for byte (spec/adapters.md repeats it; an audit commitment C_emb will bind
it). Rendering to text is the model's own chat template (SmolLM2: ChatML); the tiny test tokenizer uses the
same ChatML layout.

Messages for ``Prompt(question, contexts, history)``:

    system:    SYSTEM_PROMPT
    user:      "Question: {q_1}"            } one pair per history entry (already released answers;
    assistant: "{a_1}"                      } their contexts are not repeated)
    ...
    user:      USER_WITH_CONTEXT.format(contexts="\\n\\n".join(contexts), question=question)   if contexts
               USER_NO_CONTEXT.format(question=question)                                     otherwise

The system prompt is the same with and without contexts, so the voters of DPVoteRAG and the no-context
prompt of DPSparseVoteRAG share the longest possible token prefix.
"""

from __future__ import annotations

from dataclasses import dataclass

from dprag.accounting.protocols import Prompt
from dprag.errors import InvalidParameterError

SYSTEM_PROMPT = (
    "You are a helpful assistant. Answer the question with a short phrase. "
    "If a context is given, answer from the context."
)
USER_WITH_CONTEXT = "Context:\n{contexts}\n\nQuestion: {question}"
USER_NO_CONTEXT = "Question: {question}"
HISTORY_USER = "Question: {question}"


@dataclass(frozen=True)
class PromptFormat:
    """The fixed wording (defaults above). Override only for experiments; the audit commits to it."""

    system: str = SYSTEM_PROMPT
    with_context: str = USER_WITH_CONTEXT
    no_context: str = USER_NO_CONTEXT
    history_user: str = HISTORY_USER

    def messages(self, prompt: Prompt, contexts: tuple[str, ...] | None = None) -> list[dict[str, str]]:
        """Chat messages of ``prompt``; ``contexts`` overrides ``prompt.contexts`` (e.g. truncated ones)."""
        if not isinstance(prompt, Prompt):
            raise InvalidParameterError("prompt", "must be an accounting.protocols.Prompt", type(prompt).__name__)
        if not isinstance(prompt.question, str) or not prompt.question.strip():
            raise InvalidParameterError("prompt.question", "must be a non-empty string", prompt.question)
        ctx = prompt.contexts if contexts is None else contexts
        for i, c in enumerate(ctx):
            if not isinstance(c, str):
                raise InvalidParameterError("prompt.contexts", f"item {i} must be a string", type(c).__name__)
        msgs = [{"role": "system", "content": self.system}]
        for i, pair in enumerate(prompt.history):
            if len(pair) != 2 or not all(isinstance(x, str) for x in pair):
                raise InvalidParameterError("prompt.history", f"item {i} must be a (question, answer) pair of strings")
            msgs.append({"role": "user", "content": self.history_user.format(question=pair[0])})
            msgs.append({"role": "assistant", "content": pair[1]})
        if ctx:
            user = self.with_context.format(contexts="\n\n".join(ctx), question=prompt.question)
        else:
            user = self.no_context.format(question=prompt.question)
        msgs.append({"role": "user", "content": user})
        return msgs


def chatml(messages: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
    """ChatML text (SmolLM2's template when a system message is present)."""
    out = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
    return out + ("<|im_start|>assistant\n" if add_generation_prompt else "")
