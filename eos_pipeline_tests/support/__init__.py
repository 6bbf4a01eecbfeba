"""Test and benchmark code that the product does not ship.

* :mod:`.faults`: the fault suite's hooks (``EOS_FAULT_STEP``, kill watchers, step names);
* :mod:`.spark_faults`: the Spark task-failure hook of the Hudi fault tests;
* :mod:`.fault_definitions`: a Dagster code location, the product's definitions with those hooks;
* :mod:`.memory_keeper`: a dict-backed keeper store for unit tests, and closing the shared
  ZooKeeper stores;
* :mod:`.clickhouse`: ReplicatedMergeTree DDL and the JSONEachRow insert path, tested only;
* :mod:`.kafka`, :mod:`.decisions`: product readings only tests ask for (an unanswered
  request's error, start offsets of many topics; a decision's keeper write, replica names);
* :mod:`.hoodie_streamer`: Apache Hudi's own HoodieStreamer, the peer of the hand-over test and
  the Hudi benchmark.
"""
