"""A consumer group member in its own process, for failover and churn tests.

    python consumer_worker.py BOOTSTRAP TOPIC GROUP OUTFILE [--protocol classic|consumer]
        [--session-ms N] [--delay S]

Writes JSON lines to OUTFILE, each written whole before the next consumer call, so
what a commit covers is always in the file, and a record handed out is in it unless
the process died before writing it (then, to the test, it was never handed out):

* ``{"assignment": [partition, ...]}``: the whole assignment, whenever it changed;
* ``{"got": [[partition, offset, block, record, "<value hex>"], ...]}``: one
  ``consume()`` call's records, with their positions;
* ``{"committed": true}``: a synchronous ``commit()`` succeeded: every record above is
  committed (it commits every COMMIT_EVERY seconds; auto-commit commits only on a
  revocation and in ``close()``, so a killed member's uncommitted records are exactly
  those after its last such line, or fewer);
* ``{"closed": true}``: SIGTERM was handled by ``close()`` (a graceful leave: what was
  handed out is committed, the group is left).
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import time
from typing import Any

from memq import Consumer
from memq.errors import MemqError

COMMIT_EVERY = 1.0


def main() -> None:
    ap = argparse.ArgumentParser()
    for name in ("bootstrap", "topic", "group", "outfile"):
        ap.add_argument(name)
    ap.add_argument("--protocol", default="classic", choices=["classic", "consumer"])
    ap.add_argument("--session-ms", type=int, help="session.timeout.ms (classic only)")
    ap.add_argument("--delay", type=float, default=0.0, help="seconds per record handed out")
    args = ap.parse_args()
    # The consumer's log (assignments, revocations, commit failures) on stderr.
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    conf: dict[str, Any] = {
        "bootstrap.servers": args.bootstrap,
        "group.id": args.group,
        "group.protocol": args.protocol,
        "auto.offset.reset": "earliest",
        # Automatic commits on revocation and close() only: the periodic ones are this
        # worker's own, synchronous and logged.
        "auto.commit.interval.ms": 3_600_000,
        "prefetch.objects": 2,
    }
    if args.session_ms is not None:
        conf["session.timeout.ms"] = args.session_ms
        conf["heartbeat.interval.ms"] = max(100, args.session_ms // 4)
    stop = False

    def leave(_sig: int, _frame: Any) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, leave)
    with open(args.outfile, "a", buffering=1) as out:
        c = Consumer(conf)
        c.subscribe(args.topic)
        owned: list[int] = []
        last_commit, uncommitted = time.monotonic(), False
        while not stop:
            got = c.consume(200, 0.2)
            if got:
                rows = [[m.partition, m.offset, m.block, m.record, m.value.hex()] for m in got]
                out.write(json.dumps({"got": rows}) + "\n")
                uncommitted = True
            if uncommitted and time.monotonic() - last_commit >= COMMIT_EVERY:
                last_commit = time.monotonic()
                try:
                    c.commit()
                except MemqError:  # (a rebalance under way): the next one covers it
                    pass
                else:
                    out.write(json.dumps({"committed": True}) + "\n")
                    uncommitted = False
            now = sorted(p for _, p in c.assignment())
            if now != owned:
                owned = now
                out.write(json.dumps({"assignment": owned}) + "\n")
            if args.delay and got:
                time.sleep(args.delay * len(got))  # a slow application: killed mid-stream
        c.close()
        out.write(json.dumps({"closed": True}) + "\n")


if __name__ == "__main__":
    main()
