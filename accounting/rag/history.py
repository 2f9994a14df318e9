"""Answer-history reuse (000 §6): earlier released answers as auxiliary context, at no cost to the corpus.

An answer already released to an account is public to that account: feeding it back into a later prompt
is post-processing of a DP output and spends nothing. Reuse is scoped: by default only within the same
account (sharing one account's history with another would show one user's questions to another); a tenant
may opt in to tenant-wide reuse. The relevant pairs are chosen by word overlap of the *questions* — public
to the scope — never by anything computed from the private corpus.
"""

from __future__ import annotations

import re
from collections import defaultdict

from dprag.errors import InvalidParameterError

from ..errors import check_positive_int

_WORD = re.compile(r"[a-z0-9]+")
_STOP = frozenset(
    "a an the of to in on for and or is are was were what which who whom how when where why "
    "does do did with by at from as be this that it its".split()
)


def _words(text: str) -> frozenset[str]:
    return frozenset(w for w in _WORD.findall(text.lower()) if w not in _STOP)


class AnswerHistory:
    """Released (question, answer) pairs, kept per scope (an account, or a tenant that opted in)."""

    def __init__(self, max_pairs: int = 3, min_overlap: int = 1):
        self.max_pairs = check_positive_int("max_pairs", max_pairs)
        self.min_overlap = check_positive_int("min_overlap", min_overlap)
        self._pairs: dict[str, list[tuple[str, str]]] = defaultdict(list)

    @staticmethod
    def scope(account: str, tenant: str | None = None, tenant_opt_in: bool = False) -> str:
        if not account:
            raise InvalidParameterError("account", "must be a non-empty string")
        return f"tenant:{tenant}" if tenant_opt_in and tenant else f"account:{account}"

    def record(self, scope: str, question: str, answer: str) -> None:
        if answer and answer.strip():
            self._pairs[scope].append((question, answer.strip()))

    def relevant(self, scope: str, question: str) -> tuple[tuple[str, str], ...]:
        """Up to ``max_pairs`` earlier pairs of this scope, most word overlap with ``question`` first.

        Words that occur in more than half of the scope's recorded questions (a question template, e.g.
        "what medication does the clinic's protocol start patients with ... on") do not count once the
        scope holds 4 or more questions: overlap must be on the entity, or reuse answers about another one.
        """
        pairs = self._pairs.get(scope, [])
        qwords = [_words(q) for q, _ in pairs]
        common: frozenset[str] = frozenset()
        if len(pairs) >= 4:
            df: dict[str, int] = defaultdict(int)
            for ws in qwords:
                for x in ws:
                    df[x] += 1
            common = frozenset(x for x, c in df.items() if 2 * c > len(pairs))
        w = _words(question) - common
        scored = [(len(w & (qw - common)), -i, p) for i, (p, qw) in enumerate(zip(pairs, qwords, strict=False))]
        scored = [s for s in scored if s[0] >= self.min_overlap]
        scored.sort(reverse=True)
        return tuple(p for _, _, p in scored[: self.max_pairs])
