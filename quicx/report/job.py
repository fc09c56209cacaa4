"""
C{quicx report} as a script for C{spark-submit}.  Run it as:

    JOB=$(python -c 'import quicx.report.job as j; print(j.__file__)')
    spark-submit --master URL "$JOB" EVENTS... --out DIR

Its directory (a script's goes first on C{sys.path}) holds no module
named like one of the standard library's, so PySpark's imports are unharmed.
"""

from quicx.report.pipeline import main

if __name__ == "__main__":
    raise SystemExit(main())
