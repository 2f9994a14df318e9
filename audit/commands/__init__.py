"""Sub-commands of the dprag CLI that live on the audit floor or below."""
