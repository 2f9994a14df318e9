"""dprag.audit"""

if __name__ != "dprag.audit":  # one folder, one module: never loaded twice under two names
    raise ImportError(
        f"the folder audit/ is the package dprag.audit: import dprag.audit, not {__name__} "
        "(pip install -e . from the repository root)"
    )
