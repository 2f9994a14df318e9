"""dprag.audit.client: the account's side (spec/protocol.md §5.1, §5.4): ``AccountClient`` (``account``) and the
HTTP client of a provider's service, for accounts and the auditor (``remote``: ``RemoteService``, ``fetch_bundle``)."""
