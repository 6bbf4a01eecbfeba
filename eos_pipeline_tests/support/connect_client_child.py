"""A connected Spark Connect client that waits, then asks its server for work: for timing how
long the client takes to fail once the server is gone.

Usage: ``python -m eos_pipeline_tests.support.connect_client_child idle '<json job>'`` with
``{"remote": "sc://...", "ready": path, "go": path}``. It connects with the product's
``connect`` (which bounds the client's retries, ``EOS_SPARK_CONNECT_RETRY_SECONDS``), runs one
query, creates ``ready``, waits for ``go`` to exist, then runs a query and prints one result
line: how long that query took and the error, as the product's ``connect_error`` names it.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

from eos_pipeline_tests.faults.child import RESULT_PREFIX


def main(job: dict[str, Any]) -> dict[str, Any]:
    from eos_pipeline.adapters.spark_remote import connect, connect_error

    spark = connect(job["remote"])
    assert spark.range(3).count() == 3
    Path(job["ready"]).touch()
    go = Path(job["go"])
    while not go.exists():
        time.sleep(0.02)
    began = time.monotonic()
    try:
        count = spark.range(10).count()
    except Exception as exc:
        clear = connect_error(spark, exc) or exc
        return {
            "ok": False,
            "seconds": time.monotonic() - began,
            "error": type(clear).__name__,
            "message": str(clear)[:2000],
        }
    return {"ok": True, "seconds": time.monotonic() - began, "count": int(count)}


if __name__ == "__main__":
    print(RESULT_PREFIX + json.dumps(main(json.loads(sys.argv[2]))), flush=True)
