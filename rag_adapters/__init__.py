"""dprag.rag_adapters"""
