"""Privacy–utility experiments (``dprag experiment privacy-utility``).

``methods``: how a total ε becomes per-query parameters for each DP-RAG method; ``runner``: question
selection, dev tuning, evaluation; ``plots``: CSV / JSON / PNG output; ``cli``: the click command.
Importing this package does not import torch (the CLI loads models only when a run needs them).
"""
