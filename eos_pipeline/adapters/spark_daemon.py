"""Spark's Python worker daemon, started with the decoder already imported.

Spark runs each Python task (the decoder's ``mapInArrow``) in a worker forked from one daemon
per executor, or per session on a Connect server. PySpark's own daemon (``pyspark.daemon``)
imports nothing of ours, so every fresh worker imported pyarrow, numpy and the core's decoder
itself before its first batch: about 1 s per worker on the Connect server's log (the
``ArrowPythonRunner`` init times), paid again by each worker of each Hudi run. Imported here
once, before the daemon forks, every worker starts with them.

Spark starts it as ``python -m eos_pipeline.adapters.spark_daemon`` when
``spark.python.daemon.module`` names it (:data:`eos_pipeline.adapters.spark.PYTHON_WORKER_CONF`).
"""

import pyspark.daemon

import eos_pipeline.adapters.spark  # noqa: F401  (the decoder's modules, imported before forking)

if __name__ == "__main__":
    pyspark.daemon.manager()
