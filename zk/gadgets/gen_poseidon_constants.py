"""Development tool: regenerate ``poseidon_constants.py`` from the circomlibjs npm package.

Not imported by dprag. Run from the repository root with Node and circomlibjs installed, e.g.::

    npm install --prefix "$DIR" circomlibjs@0.1.7      # DIR=$(mktemp -d)
    python zk/gadgets/gen_poseidon_constants.py "$DIR/node_modules/circomlibjs"

It reads circomlibjs's ``src/poseidon_constants.js`` (round constants C and MDS matrices M for t = 2..17, generated
by the Poseidon authors' Grain-LFSR reference script) through Node and writes them as hexadecimal strings.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

_DUMP = """
import c from "%s";
const h = (x) => BigInt(x).toString(16);
process.stdout.write(JSON.stringify({C: c.C.map(r => r.map(h)), M: c.M.map(m => m.map(r => r.map(h)))}));
"""


def main(pkg: str) -> None:
    src = pathlib.Path(pkg).resolve() / "src" / "poseidon_constants.js"
    version = json.loads((pathlib.Path(pkg) / "package.json").read_text())["version"]
    out = subprocess.run(
        ["node", "--input-type=module", "-e", _DUMP % src.as_uri()], check=True, capture_output=True, text=True
    ).stdout
    data = json.loads(out)
    target = pathlib.Path(__file__).with_name("poseidon_constants.py")
    lines = [
        '"""Poseidon round constants and MDS matrices of circomlib (generated data, do not edit).',
        "",
        f"Source: npm package circomlibjs {version}, file src/poseidon_constants.js (the constants circomlib's",
        "poseidon.circom uses; produced by the Poseidon reference script generate_parameters_grain.sage, field = BN254",
        "scalar field, alpha = 5, 8 full rounds). Regenerate with zk/gadgets/gen_poseidon_constants.py.",
        "C[t - 2] is the flat list of round constants for width t; M[t - 2] the t x t MDS matrix; hexadecimal strings.",
        '"""',
        "",
        "# fmt: off",
        "C = [",
    ]
    for row in data["C"]:
        lines.append("    " + json.dumps(" ".join(row)) + ",")
    lines.append("]")
    lines.append("M = [")
    for m in data["M"]:
        lines.append("    " + json.dumps(";".join(" ".join(r) for r in m)) + ",")
    lines.append("]")
    target.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main(sys.argv[1])
