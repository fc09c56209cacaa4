"""
The PySpark report over the daemon's event files.

The PySpark report: L{pipeline} reads event files and writes the Parquet
tables and report.html; L{job} runs it under C{spark-submit}.
"""
