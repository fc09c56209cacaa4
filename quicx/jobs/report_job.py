"""
C{quicx report} as a script for C{spark-submit}:

    JOB=$(python -c 'import quicx.jobs.report_job as j; print(j.__file__)')
    spark-submit --master URL "$JOB" EVENTS... --out DIR

It lives apart from the package's modules: a script's own directory goes
first on C{sys.path}, and there C{quicx/queue.py} would hide the standard
library's C{queue} from PySpark.
"""

from quicx.report import main

if __name__ == "__main__":
    raise SystemExit(main())
