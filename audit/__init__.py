"""dprag.audit"""
