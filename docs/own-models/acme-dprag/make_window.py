"""Create ACME's window: its corpus, the recommended policy, its own embedder and generator (by entry-point name).

python make_window.py WINDOW_DIR
"""

import sys
from importlib.metadata import entry_points

from dprag.audit.protocol.policy import Policy
from dprag.audit.provider.models import load_embedder
from dprag.audit.provider.service import ProviderService

docs = {f"rx-{i}": f"record {i}: asthma patients receive zorvatin" for i in range(40)}  # your corpus, your own ids
docs |= {f"gt-{i}": f"record {i}: gout patients receive pellumab" for i in range(40)}
generator = entry_points(group="dprag.generators")["acme-keywords"].load()()
svc = ProviderService.create(
    sys.argv[1],
    policy=Policy.recommended("acme-1", mechanism="dp-ksa", voters=20, tau_cosine=0.3),
    embedder=load_embedder("acme-trigram"),
    generator=generator,
    tenants={"clinic": docs},
    accounts={},  # accounts join by `dprag provider account add`
)
print(svc.origin)
svc.close()
