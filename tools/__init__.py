"""
The benchmark, the soak test, the crash matrix, and the daemon launcher they
share with the tests.  Run from the repository root; not part of the wheel.
"""
