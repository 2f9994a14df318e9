#!/bin/sh
# dprag's container entrypoint (deploy/Dockerfile): one replica of `dprag serve`, configured from the environment.
#   DPRAG_DIR        the window's directory (default /var/lib/dprag/window); empty + DPRAG_STORE: materialised
#   DPRAG_STORE      postgresql://USER@HOST:PORT/DB?schema=... (no password here)
#   DPRAG_DATABASE_PASSWORD_FILE  a file holding the database password (a compose/systemd secret): dprag serve
#                    reads it itself, so the password is never in the environment nor on a command line; a file that
#                    cannot be read, or is empty, stops the start here (exit 2, naming the variable)
#   PGPASSWORD_FILE  the same, under the name of earlier releases (used when DPRAG_DATABASE_PASSWORD_FILE is unset)
#   DPRAG_GENERATOR  a dprag.generators entry point (required unless DPRAG_TOY=1)
#   DPRAG_EMBEDDER   a dprag.embedders entry point (default: the committed one)
#   DPRAG_SIGNER     file:PATH or a pkcs11: URI when the provider key is held outside the directory and store
#   DPRAG_TOY=1      serve the toy window (made on first start): a smoke test of the deployment
#   DPRAG_HOST, DPRAG_PORT (default 0.0.0.0, 8080)
set -eu
if [ -z "${DPRAG_DATABASE_PASSWORD_FILE:-}" ] && [ -n "${PGPASSWORD_FILE:-}" ]; then
    DPRAG_DATABASE_PASSWORD_FILE=$PGPASSWORD_FILE
fi
if [ -n "${DPRAG_DATABASE_PASSWORD_FILE:-}" ]; then
    if [ ! -f "$DPRAG_DATABASE_PASSWORD_FILE" ] || [ ! -r "$DPRAG_DATABASE_PASSWORD_FILE" ] \
        || [ ! -s "$DPRAG_DATABASE_PASSWORD_FILE" ]; then
        echo "dprag-entrypoint: DPRAG_DATABASE_PASSWORD_FILE: $DPRAG_DATABASE_PASSWORD_FILE is not a readable, non-empty file" >&2
        exit 2
    fi
    export DPRAG_DATABASE_PASSWORD_FILE
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
