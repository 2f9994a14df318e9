"""dprag.lab: the applications built on the four library floors.

The demo (``dprag demo``), the experiments (``dprag experiment ...``), the membership-inference attacks of
papers 003 and 001, the collusion-leakage harness of paper 002 and the coalition estimator's calibration.
The top floor: it imports every floor below it (accounting, zk, audit, rag_adapters) and none imports it.
"""

if __name__ != "dprag.lab":  # one folder, one module: never loaded twice under two names
    raise ImportError(
        f"the folder lab/ is the package dprag.lab: import dprag.lab, not {__name__} "
        "(pip install -e . from the repository root)"
    )
