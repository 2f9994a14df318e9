"""dprag.audit.provider: the provider's side (spec/provider.md): the service (``service``), its request checks
(``admission``), the reopening check (``recovery``), the bundle export
(``export``), group commit and the release clock, the models it serves (``models``), its store (``storage/``: one
interface above SQLite and PostgreSQL) and its HTTP API (``http/``)."""
