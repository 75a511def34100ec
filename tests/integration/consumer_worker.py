"""A consumer group member in its own process, for failover tests.

    python consumer_worker.py BOOTSTRAP TOPIC GROUP OUTFILE [DELAY_S]

Writes one JSON line per event to OUTFILE (flushed at once): {"assigned": [...]} on
each assignment and {"v": "<hex value>"} per record. Commits are automatic.
"""

from __future__ import annotations

import json
import sys
import time

from memq import Consumer


def main() -> None:
    bootstrap, topic, group, outfile = sys.argv[1:5]
    delay = float(sys.argv[5]) if len(sys.argv) > 5 else 0.0
    with open(outfile, "a", buffering=1) as out:
        c = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "auto.offset.reset": "earliest",
                "session.timeout.ms": 6000,
                "heartbeat.interval.ms": 1000,
                "auto.commit.interval.ms": 200,
                "prefetch.objects": 1,
            }
        )
        c.subscribe(
            topic, on_assign=lambda parts: out.write(json.dumps({"assigned": parts}) + "\n")
        )
        while True:
            for m in c.consume(50, 0.5):
                out.write(json.dumps({"v": m.value.hex()}) + "\n")
                if delay:
                    time.sleep(delay)  # a slow application, so the test can kill it mid-stream


if __name__ == "__main__":
    main()
