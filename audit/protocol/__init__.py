"""dprag.audit.protocol: what every party of the audit computes alike (spec/protocol.md).

The canonical encoding (``encoding``), commitments (``commitments``), the committed-seed retrieval (``retrieval``),
the account's signed request (``request``), receipts and refusals (``receipts``), the policy and what it certifies
(``policy``, ``policy_parts``, ``recommended``, ``certify``, ``charges``), the answer replay (``replay``), one
history per corpus (``chain``), the bundle as read (``bundle``, ``bundlefs``), the HTTP wire formats (``wire``), the
wire's errors (``errors``), the noise-then-select circuit and its checks (``zk_attest``) and the append-only log
(``ledger/``). The provider, the account's client and the verifier stand on this package and never on each other.
"""
