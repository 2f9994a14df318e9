"""Circuits built from the gadgets. They know nothing of RAG: matrices, vectors, commitments."""
