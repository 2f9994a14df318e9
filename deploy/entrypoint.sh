#!/bin/sh
# dprag's container entrypoint (deploy/Dockerfile): one replica of `dprag serve`, configured from the environment.
#   DPRAG_DIR        the window's directory (default /var/lib/dprag/window); empty + DPRAG_STORE: materialised
#   DPRAG_STORE      postgresql://USER@HOST:PORT/DB?schema=... (no password here)
#   PGPASSWORD_FILE  a file holding the database password (a compose/systemd secret); exported as PGPASSWORD
#   DPRAG_GENERATOR  a dprag.generators entry point (required unless DPRAG_TOY=1)
#   DPRAG_EMBEDDER   a dprag.embedders entry point (default: the committed one)
#   DPRAG_SIGNER     file:PATH or a pkcs11: URI when the provider key is held outside the directory and store
#   DPRAG_TOY=1      serve the toy window (made on first start): a smoke test of the deployment
#   DPRAG_HOST, DPRAG_PORT (default 0.0.0.0, 8080)
set -eu
if [ -n "${PGPASSWORD_FILE:-}" ]; then
    PGPASSWORD=$(cat "$PGPASSWORD_FILE")
    export PGPASSWORD
fi
dir=${DPRAG_DIR:-/var/lib/dprag/window}
set -- serve --dir "$dir" --host "${DPRAG_HOST:-0.0.0.0}" --port "${DPRAG_PORT:-8080}"
if [ -n "${DPRAG_STORE:-}" ]; then set -- "$@" --store "$DPRAG_STORE"; fi
if [ -n "${DPRAG_SIGNER:-}" ]; then set -- "$@" --signer "$DPRAG_SIGNER"; fi
if [ "${DPRAG_TOY:-0}" = 1 ]; then
    set -- "$@" --toy
else
    : "${DPRAG_GENERATOR:?set DPRAG_GENERATOR to a dprag.generators entry point (or DPRAG_TOY=1)}"
    set -- "$@" --generator "$DPRAG_GENERATOR"
    if [ -n "${DPRAG_EMBEDDER:-}" ]; then set -- "$@" --embedder "$DPRAG_EMBEDDER"; fi
fi
exec "${DPRAG:-dprag}" "$@"
