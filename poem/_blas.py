"""One BLAS thread for the library's thin, blocked products (``threadpoolctl``).

The CRM pass and the estimator sums multiply thin matrices block by block (K×d by d×b) or
take dot products of vectors; OpenBLAS's threads gain nothing there and cost several-fold when
the cores are shared. scikit-learn limits BLAS the same way in k-means.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from functools import cache

from threadpoolctl import ThreadpoolController

__all__ = ["single_blas_thread"]


@cache
def _controller() -> ThreadpoolController:
    return ThreadpoolController()  # inspects the loaded libraries once (a few ms)


def single_blas_thread() -> AbstractContextManager:
    """Context in which BLAS libraries use one thread (restored on exit; ~15 µs)."""
    return _controller().limit(limits=1, user_api="blas")
