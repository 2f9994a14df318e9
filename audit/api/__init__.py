"""The provider's HTTP API (``dprag serve``, spec/api.md): the FastAPI app (``app``, needs the serve extra), the
wire formats and request authentication (``wire``), the account's and auditor's HTTP client (``client``, stdlib only)
and the toy window (``toy``)."""
