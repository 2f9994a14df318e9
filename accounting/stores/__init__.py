"""Budget stores for the individual Rényi filter (``accounting.filters``).

- ``MemoryBudgetStore`` — numpy array in process memory (fast, not durable);
- ``SqliteBudgetStore`` — SQLite in WAL mode: durable before a charge returns, safe across processes.

Both implement ``BudgetStore`` (``base.py``): load spend rows, apply a batch of conditional charges atomically.
"""

from .base import MAX_LIMIT_UNITS, BudgetStore, BudgetStoreError
from .memory import MemoryBudgetStore
from .sqlite import SqliteBudgetStore

__all__ = ["BudgetStore", "BudgetStoreError", "MAX_LIMIT_UNITS", "MemoryBudgetStore", "SqliteBudgetStore"]
