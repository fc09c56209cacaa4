"""Scripts for C{spark-submit}, in a directory of their own (see report_job)."""
