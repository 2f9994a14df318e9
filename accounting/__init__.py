"""dprag.accounting — privacy math: mechanisms, events, composition, filters, collusion bounds."""
