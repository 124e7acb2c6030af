"""The NumPy pieces every forward pass is built from (ops, attention by row chunks) and the policy they run under (BLAS threads, the heap)."""
