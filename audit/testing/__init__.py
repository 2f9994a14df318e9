"""dprag.audit.testing: the cheating-provider suite (spec/threat-model.md).

``ATTACKS`` maps each attack of spec/threat-model.md §3 to a function that performs it on a provider's own
service directory — with the provider's own keys and state, as a dishonest provider would — and returns
the bundle and the receipts its accounts would hand over, together with the check of spec/protocol.md §8
that must name it. ``run_attacks(make_service)`` runs them all against a deployment of your own and reports
which ones the verifier caught. The toy window in ``dprag.audit.testing.window`` is the default target.
"""

from .attacks import ATTACKS, Attack, AttackResult, run_attacks

__all__ = ["ATTACKS", "Attack", "AttackResult", "run_attacks"]
