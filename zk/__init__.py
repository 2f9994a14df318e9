"""dprag.zk"""

if __name__ != "dprag.zk":  # one folder, one module: never loaded twice under two names
    raise ImportError(
        f"the folder zk/ is the package dprag.zk: import dprag.zk, not {__name__} "
        "(pip install -e . from the repository root)"
    )
