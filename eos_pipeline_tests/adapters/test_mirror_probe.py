"""A sequence of failover reads asks a dead cluster once, briefly, and remembers the answer."""

from __future__ import annotations

import time

from eos_pipeline.adapters.failover import MirrorReaders
from eos_pipeline.adapters.kafka import KafkaSettings


def test_a_cluster_that_does_not_answer_is_probed_once_and_named() -> None:
    dead = KafkaSettings("127.0.0.1:1")  # nobody listens there
    with MirrorReaders(probe_timeout=0.5) as readers:
        why = readers.unreachable(dead)
        assert why is not None and "Kafka at 127.0.0.1:1 did not answer within 0.5 s" in why
        began = time.monotonic()
        assert readers.unreachable(dead) == why  # remembered: no second wait
        assert time.monotonic() - began < 0.1
