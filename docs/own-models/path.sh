#!/bin/sh
# A new provider's path, end to end (docs/own-models.md): run from an empty directory, with dprag installed
# (extras serve) and this folder at $ACME (the example plugin). Each step is one command of the doc.
set -eu
: "${ACME:?set ACME to docs/own-models/acme-dprag}"
PORT=${PORT:-8090}
step() { printf '%s  %s\n' "$(date +%s.%N | cut -c1-14)" "$*" >&2; }
step "1 install the plugin";        pip install -q --no-deps -e "$ACME"
step "2 create the window";         python "$ACME/make_window.py" acme-window > origin.txt
step "3 auditor key";               dprag account new auditor --account auditor --window acme-1 > /dev/null
step "4 serve";                     dprag serve --dir acme-window --generator acme-keywords --port "$PORT" \
                                        --auditor-key auditor/account.vkey 2> serve.log &
SERVER=$!
trap 'kill $SERVER 2>/dev/null' EXIT
step "5 account new (pinned)";      dprag account new alice --account alice --window acme-1 --embedder acme-trigram \
                                        --provider-key acme-window/pins/provider.vkey --origin "$(cat origin.txt)" > /dev/null
step "6 provider account add";      dprag provider account add --dir acme-window --generator acme-keywords alice \
                                        --tenant clinic --key "$(cat alice/account.vkey)"
until curl -sf "http://127.0.0.1:$PORT/healthz" > /dev/null; do sleep 0.2; done
step "7 ask";                       dprag account ask alice "which drug do asthma patients receive" --url "http://127.0.0.1:$PORT"
step "8 ask again";                 dprag account ask alice "which drug do gout patients receive" --url "http://127.0.0.1:$PORT"
step "9 audit fetch";               dprag audit fetch --url "http://127.0.0.1:$PORT" --key auditor/account.key --out fetched
step "10 export receipts";          dprag account export-receipts alice receipts.jsonl
step "11 audit verify";             dprag audit verify fetched --key acme-window/pins/provider.vkey \
                                        --origin "$(cat origin.txt)" --receipts receipts.jsonl --html verdict.html
step "done"
