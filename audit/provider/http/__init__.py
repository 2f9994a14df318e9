"""dprag.audit.provider.http: the provider's HTTP API (``dprag serve``, spec/api.md): the FastAPI app (``app``,
needs the serve extra) and its OpenAPI schemas (``schemas``). The wire formats are ``audit.protocol.wire``."""
