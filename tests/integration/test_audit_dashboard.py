"""The audit dashboard in a real browser: Debian's headless chromium driven by Playwright.

An in-process auditor reads a fresh audit topic; records go through the session's broker
with auditing on, a group consumes them, and the page must show produced == consumed,
the charts, and then, after one S3 object is deleted before the group reads it, exactly
that object's records as missing with the object key in the drill-down.
"""

from __future__ import annotations

import itertools
import re
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from memq import Consumer, Producer
from memq.audit.config import AuditorConfig
from memq.devstack import StackState
from memq.devstack.procs import wait_for
from memq.producer.futures import RecordFuture
from memq.run.auditor import AuditorThread

CHROMIUM = Path("/usr/bin/chromium")
LAUNCH_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"]
GRACE_S = 3.0
#: Colour of status "missing" in app.css (--missing-bg: #cf222e).
RED = "rgb(207, 34, 46)"
GREEN = "rgb(26, 127, 55)"
CHARTS = ("chart-throughput", "chart-missing", "chart-latency")
WAIT_MS = 30_000
GROUP_CONF = {
    "auto.offset.reset": "earliest",
    "session.timeout.ms": 6000,
    "heartbeat.interval.ms": 1000,
    "corrupt.object.policy": "skip",
}


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    if not CHROMIUM.exists():
        pytest.fail(
            f"{CHROMIUM} is missing: the audit dashboard test drives Debian's chromium; "
            "run `make install` (as root it installs the chromium package) or "
            "`apt-get install -y chromium`",
            pytrace=False,
        )
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.fail("playwright is not installed: run `make install`", pytrace=False)
    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=LAUNCH_ARGS)
        try:
            yield b
        finally:
            b.close()


@pytest.fixture
def auditor(
    memq_stack: StackState, unique_name: Callable[[str], str], tmp_path: Path
) -> Iterator[AuditorThread]:
    cfg = AuditorConfig(
        kafka={"bootstrap_servers": memq_stack.kafka_bootstrap},
        audit_topic=unique_name("audit"),
        db_path=tmp_path / "audit.db",
        http_port=0,
        grace_period_s=GRACE_S,
    )
    a = AuditorThread(cfg)
    a.start()
    try:
        yield a
    finally:
        a.stop()


class PageWatch:
    """A page plus what it logged: uncaught errors and console errors fail the test."""

    def __init__(self, page: Any, shots: Path) -> None:
        self.page = page
        self.shots = shots
        self.errors: list[str] = []
        page.on("pageerror", lambda e: self.errors.append(f"page error: {e}"))
        page.on(
            "console",
            lambda m: (
                self.errors.append(f"console {m.type}: {m.text}") if m.type == "error" else None
            ),
        )

    def fail_with_context(self, err: Exception, name: str, step: str = "") -> AssertionError:
        """``err`` with the step, the page's status line and table, and a screenshot."""
        shot: str = str(self.shots / f"{name}.png")
        try:
            self.page.screenshot(path=shot, full_page=True)
        except Exception as e:  # the page may be gone; the original error matters more
            shot = f"(no screenshot: {e})"
        try:
            status = self.page.get_by_test_id("status-line").inner_text(timeout=2000)
            table = self.page.get_by_test_id("topic-table").inner_text(timeout=2000)
        except Exception as e:
            status, table = f"(unreadable: {e})", ""
        lines = [f"failed at: {step}"] if step else []
        lines += [
            str(err),
            f"--- dashboard status line: {status}",
            f"--- topic table:\n{table}",
            f"--- page errors: {self.errors}",
            f"--- screenshot: {shot}",
        ]
        return AssertionError("\n".join(lines))


def produce_burst(p: Producer, topic: str, start: int, n: int) -> list[RecordFuture]:
    futures = [p.produce(topic, b"dash-%06d-" % i + bytes(i % 64)) for i in range(start, start + n)]
    for f in futures:  # acks=all: each record is in S3 and notified once this returns
        f.result(60)
    return futures


def drain(c: Consumer, n: int, timeout: float = 40.0) -> int:
    got = 0
    deadline = time.monotonic() + timeout
    while got < n and time.monotonic() < deadline:
        got += len(c.consume(1000, 1.0))
    assert got == n, f"consumed {got} records, expected {n}"
    return got


def row_locator(page: Any, topic: str, group: str) -> Any:
    return page.locator(f'tr[data-testid="topic-row"][data-topic="{topic}"][data-group="{group}"]')


def expect_cell(row: Any, col: str, value: object, what: str) -> None:
    from playwright.sync_api import expect

    expect(row.locator(f'td[data-col="{col}"]'), what).to_have_attribute(
        "data-value", str(value), timeout=WAIT_MS
    )


def test_dashboard_shows_the_flow_then_a_deleted_object_as_missing(
    memq_stack: StackState,
    auditor: AuditorThread,
    browser: Any,
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    from playwright.sync_api import expect

    address = memq_stack.extra["brokers"][0]["endpoint"]
    audit_topic = auditor.config.audit_topic
    topic, group = unique_name("dash"), "dash-group"
    producer = Producer(
        {
            "bootstrap.servers": address,
            "acks": "all",
            "linger.ms": 5,
            "batch.size": 16 * 1024,
            "audit.enable": True,
            "audit.topic": audit_topic,
        }
    )
    consumer = Consumer(
        {
            "bootstrap.servers": address,
            "group.id": group,
            "audit.enable": True,
            "audit.topic": audit_topic,
            **GROUP_CONF,
        }
    )
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    watch = PageWatch(context.new_page(), tmp_path)
    page = watch.page
    step = "setup"
    try:
        # --- 3000 records in three acked bursts (several blocks and objects) ------------
        step = "produce and consume 3000 records"
        first = [f for i in range(3) for f in produce_burst(producer, topic, i * 1000, 1000)]
        assert len({f.result(0).key for f in first}) >= 3
        consumer.subscribe(topic)
        drain(consumer, 3000)

        step = "dashboard shows produced == consumed == 3000, missing 0, status ok"
        page.goto(f"{auditor.url}/?refresh=1")
        row = row_locator(page, topic, group)
        expect(row, "the topic/group row never appeared").to_have_count(1, timeout=WAIT_MS)
        expect_cell(row, "produced", 3000, "produced records")
        expect_cell(row, "consumed", 3000, "consumed records")
        expect_cell(row, "missing", 0, "missing records")
        expect_cell(row, "expired", 0, "expired records")
        expect_cell(row, "mismatches", 0, "mismatches")
        expect_cell(row, "status", "ok", "status")
        status_cell = row.locator('td[data-col="status"]')
        expect(status_cell).to_have_css("background-color", GREEN)
        expect(page.get_by_test_id("status-line")).to_have_attribute("data-state", "ok")
        expect(page.get_by_test_id("ingest-status")).to_contain_text("ingested")
        expect(page.get_by_test_id("last-updated")).not_to_have_text("never")

        step = "clicking the row selects it and renders the charts"
        row.click()
        expect(row).to_have_attribute("aria-selected", "true")
        expect(page.get_by_test_id("detail-topic")).to_have_text(topic)
        expect(page.get_by_test_id("detail-group")).to_have_text(group)
        page.wait_for_function(
            """([topic, group]) => {
                const ts = window.__memqLast && window.__memqLast.timeseries;
                if (!ts || ts.topic !== topic || !ts.groups[group]) return false;
                const sum = a => a.reduce((x, y) => x + (y || 0), 0);
                return sum(ts.produced) === 3000 && sum(ts.groups[group].consumed) === 3000;
            }""",
            arg=[topic, group],
            timeout=WAIT_MS,
        )
        sizes = {}
        for chart in CHARTS:
            canvas = page.get_by_test_id(chart).locator("canvas")
            expect(canvas, f"{chart} has no uPlot canvas").to_have_count(1)
            box = canvas.bounding_box()
            assert box is not None and box["width"] > 100 and box["height"] > 50, (chart, box)
            sizes[chart] = box["width"]
        assert page.evaluate("window.__memqLast.error") is None
        expect(
            page.get_by_test_id("missing-table").locator("[data-testid=missing-empty]")
        ).to_have_count(1)

        step = "refreshes update the charts in place (no leaked uPlot instances)"
        seen = page.evaluate("window.__memqLast.refreshes")
        page.wait_for_function(f"window.__memqLast.refreshes >= {seen + 2}", timeout=WAIT_MS)
        assert page.evaluate("document.querySelectorAll('.uplot').length") == 3
        assert page.evaluate("window.__memqChartCount()") == 3

        step = "charts follow the page width"
        page.set_viewport_size({"width": 700, "height": 1000})  # three columns -> one
        page.wait_for_function(
            """([ids, before]) => ids.every((id, i) => {
                const box = document.querySelector(`[data-testid="${id}"]`);
                const w = box.querySelector("canvas").getBoundingClientRect().width;
                return Math.abs(w - before[i]) > 50 && Math.abs(w - box.clientWidth) <= 2;
            })""",
            arg=[list(CHARTS), [sizes[c] for c in CHARTS]],
            timeout=10_000,
        )

        # --- lose one object: delete it before the group reads it -------------------------
        step = "produce 1500 more records and delete one of their objects"
        second = produce_burst(producer, topic, 3000, 1000) + produce_burst(
            producer, topic, 4000, 500
        )
        keys = sorted({f.result(0).key for f in second[:1000]})
        deleted = keys[0]
        assert deleted is not None
        lost = [f.result(0) for f in first + second if f.result(0).key == deleted]
        memq_stack.s3_client().delete_object(Bucket=memq_stack.bucket, Key=deleted)
        drain(consumer, len(second) - len(lost))  # policy skip: the deleted object is skipped

        step = f"dashboard reports the {len(lost)} records of {deleted} missing"
        expect_cell(row, "produced", 4500, "produced records after the loss")
        expect_cell(row, "consumed", 4500 - len(lost), "consumed records after the loss")
        expect_cell(row, "missing", len(lost), "missing records (those of the deleted object)")
        expect_cell(row, "status", "missing", "status after the loss")
        expect(status_cell, "status 'missing' is not red").to_have_css("background-color", RED)
        missing_rows = page.get_by_test_id("missing-row")
        expect(missing_rows.first).to_be_visible(timeout=WAIT_MS)
        page.wait_for_function(
            f"""() => [...document.querySelectorAll('[data-testid=missing-row]')]
                .reduce((n, r) => n + Number(r.dataset.records), 0) === {len(lost)}""",
            timeout=WAIT_MS,
        )
        shown = missing_rows.evaluate_all(
            "rows => rows.map(r => [r.dataset.objectKey, r.dataset.producerId, r.dataset.sequence])"
        )
        assert {k for k, _, _ in shown} == {deleted}, shown
        # u64 producer ids survive JSON parsing in the page exactly (no float rounding).
        assert {p for _, p, _ in shown} == {str(m.producer_id) for m in lost}, shown
        assert {int(s) for _, _, s in shown} == {m.sequence for m in lost}, shown
        key_cells = page.get_by_test_id("missing-table").locator('td[data-col="object_key"]')
        expect(key_cells.first).to_have_text(deleted)
        page.wait_for_function(
            f"""([group]) => {{
                const g = window.__memqLast.timeseries.groups[group];
                return g && g.missing.reduce((x, y) => x + y, 0) === {len(lost)};
            }}""",
            arg=[group],
            timeout=WAIT_MS,
        )
        expect(page.get_by_test_id("status-line")).to_contain_text("missing")
        assert watch.errors == [], watch.errors
    except Exception as e:
        raise watch.fail_with_context(e, "dashboard-failure", step) from e
    finally:
        context.close()
        consumer.close()
        producer.close()


def test_dashboard_is_offline_and_shows_api_errors(
    auditor: AuditorThread, browser: Any, tmp_path: Path
) -> None:
    """Every request stays on the auditor's own host:port; a dead API is shown, not hidden."""
    from playwright.sync_api import expect

    own = urlsplit(auditor.url).netloc
    requests: list[str] = []
    outside: list[str] = []
    context = browser.new_context()

    def route(r: Any) -> None:
        url = r.request.url
        requests.append(url)
        if url.startswith("data:"):
            r.continue_()
        elif urlsplit(url).netloc != own:
            outside.append(url)
            r.abort()
        else:
            r.continue_()

    context.route("**/*", route)
    watch = PageWatch(context.new_page(), tmp_path)
    page = watch.page
    try:
        # A selected topic with no data still draws the three charts (every asset used).
        page.goto(f"{auditor.url}/?refresh=1#since=15m&topic=nothing-here&group=g")
        for chart in CHARTS:
            expect(page.get_by_test_id(chart).locator("canvas")).to_have_count(1, timeout=WAIT_MS)
        expect(page.get_by_test_id("status-line")).to_have_attribute("data-state", "ok")
        expect(page.get_by_test_id("topic-table").get_by_test_id("topic-empty")).to_have_count(1)
        assert page.evaluate("typeof uPlot") == "function"
        paths = {urlsplit(u).path for u in requests}
        for asset in ("/", "/static/app.js", "/static/app.css", "/static/vendor/uPlot.iife.min.js"):
            assert asset in paths, (asset, sorted(paths))
        assert {"/api/summary", "/api/timeseries", "/api/missing"} <= paths, sorted(paths)
        assert outside == [], f"the page requested other hosts than {own}: {outside}"

        # The API goes away: the status line says so.
        page.route("**/api/**", lambda r: r.abort())
        page.get_by_test_id("refresh-now").click()
        line = page.get_by_test_id("status-line")
        expect(line).to_have_attribute("data-state", "error", timeout=WAIT_MS)
        expect(line).to_contain_text("cannot reach the auditor API")
        assert outside == [], outside
    except Exception as e:
        raise watch.fail_with_context(e, "offline-failure") from e
    finally:
        context.close()


def test_dashboard_renders_api_strings_as_text(
    auditor: AuditorThread, browser: Any, tmp_path: Path
) -> None:
    """Group names are arbitrary strings: markup in them must show up as text."""
    from playwright.sync_api import expect

    evil_topic = "t<img src=x onerror=window.__pwned=1>"
    evil_group = '<b id="bold">g</b>"\'&'
    summary = {
        "now_ms": int(time.time() * 1000),
        "since_ms": 0,
        "grace_period_s": GRACE_S,
        "topics": [
            {
                "topic": evil_topic,
                "produced_blocks": 1,
                "produced_records": 5,
                "last_produced_ms": None,
                "status": "missing",
                "groups": [
                    {
                        "group": evil_group,
                        "consumed_blocks": 0,
                        "consumed_records": 0,
                        "missing_blocks": 1,
                        "missing_records": 5,
                        "pending_blocks": 0,
                        "pending_records": 0,
                        "expired_blocks": 2,
                        "expired_records": 700,
                        "duplicate_blocks": 0,
                        "duplicate_records": 0,
                        "dropped_duplicate_blocks": 3,
                        "dropped_duplicate_records": 2400,
                        "mismatches": 0,
                        "unaudited_blocks": 0,
                        "unaudited_records": 0,
                        "latency_p50_ms": None,
                        "latency_p99_ms": None,
                        "status": "missing",
                    }
                ],
            }
        ],
        "ingest": {"produced_records": 1, "consumed_records": 0, "error": "<i>boom</i>"},
    }
    missing = {
        "blocks": [
            {
                "producer_id": 18446744073709551557,  # u64 near the top: not a safe JS number
                "epoch": 0,
                "sequence": 9007199254740993,
                "records": 5,
                "acked_ms": 0,
                "object_key": "k<script>window.__pwned=2</script>",
                "bucket": "b",
            }
        ]
    }
    part = {"partition": 0, "committed": 7, "start": 0, "end": 9, "lag_objects": 2,
            "lag_records": 5000, "lag_seconds": 95.0, "records_estimated": True}  # fmt: skip
    lag = {
        "enabled": True, "interval_s": 30, "measured_ms": int(time.time() * 1000),
        "error": "NotificationError: <b id=\"lagbold\">down</b>", "hint": "<i>check</i>",
        "groups": [{"group": evil_group, "topic": evil_topic, "state": "<i>x</i>",
                    "lag_objects": 2, "lag_records": 5000, "lag_seconds": 95.0,
                    "records_estimated": True, "committed": 7, "end": 9,
                    "partitions": [part]}],
    }  # fmt: skip
    context = browser.new_context()
    context.route("**/api/summary*", lambda r: r.fulfill(json=summary))
    context.route("**/api/missing*", lambda r: r.fulfill(json=missing))
    context.route("**/api/lag*", lambda r: r.fulfill(json=lag))
    watch = PageWatch(context.new_page(), tmp_path)
    page = watch.page
    try:
        page.goto(f"{auditor.url}/?refresh=60")
        row = page.get_by_test_id("topic-row")
        expect(row).to_have_count(1, timeout=WAIT_MS)
        expect(row).to_have_attribute("data-topic", evil_topic)
        expect(row.locator('td[data-col="topic"]')).to_have_text(evil_topic)
        expect(row.locator('td[data-col="group"]')).to_have_text(evil_group)
        expect_cell(row, "expired", 700, "expired records")
        dropped = row.locator('td[data-col="dropped"]')  # consumer dedup at work
        expect(dropped).to_have_text("2,400")
        expect(dropped).to_have_attribute("data-blocks", "3")
        expect(dropped).to_have_attribute("title", re.compile(r"^3 copies of blocks"))
        assert row.locator("td").count() == page.locator("#topics thead th").count()
        expect(page.get_by_test_id("ingest-status")).to_contain_text("<i>boom</i>")
        mrow = page.get_by_test_id("missing-row")
        expect(mrow).to_have_count(1, timeout=WAIT_MS)
        expect(mrow.locator('td[data-col="object_key"]')).to_have_text(
            missing["blocks"][0]["object_key"]
        )
        expect(mrow.locator('td[data-col="producer_id"]')).to_have_text("18446744073709551557")
        expect(mrow.locator('td[data-col="sequence"]')).to_have_text("9007199254740993")
        assert (
            page.evaluate(
                "document.querySelectorAll('main img, main b#bold, main script, header i').length"
            )
            == 0
        )
        assert page.evaluate("window.__pwned") is None
        # The lag table: strings as text, an estimate marked, the error above the last rows.
        lrow = page.get_by_test_id("lag-row")
        expect(lrow).to_have_count(1, timeout=WAIT_MS)
        expect(lrow.locator('td[data-col="group"]')).to_have_text(evil_group)
        expect(lrow.locator('td[data-col="state"]')).to_have_text("<i>x</i>")
        expect(lrow.locator('td[data-col="lag_records"]')).to_have_text("\u2248 5,000")
        expect(lrow.locator('td[data-col="lag_seconds"]')).to_have_text("1.6 min")
        expect(lrow.locator('td[data-col="committed"]')).to_have_attribute(
            "title", "partition 0: committed 7, end 9"
        )
        status = page.get_by_test_id("lag-status")
        expect(status).to_have_attribute("data-state", "error")
        expect(status).to_contain_text('<b id="lagbold">down</b> \u2014 <i>check</i>')
        assert page.evaluate("document.querySelectorAll('#lagbold, main i').length") == 0
    except Exception as e:
        raise watch.fail_with_context(e, "escape-failure") from e
    finally:
        context.close()


def test_unaudited_blocks_have_a_column_and_a_warn_row_says_why(
    memq_stack: StackState,
    auditor: AuditorThread,
    browser: Any,
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    """(issue 43) Records consumed with no produced audit record (their producer runs
    without audit.enable) are counted in an Unaudited column, and the ``warn`` row shows
    that reason."""
    from playwright.sync_api import expect

    address = memq_stack.extra["brokers"][0]["endpoint"]
    topic, group = unique_name("unaud"), "unaud-group"
    with Producer({"bootstrap.servers": address, "linger.ms": 5, "batch.size": 16 * 1024,
                   "audit.enable": False}) as p:  # fmt: skip
        futs = produce_burst(p, topic, 0, 700)
    blocks = len({(f.result(0).producer_id, f.result(0).sequence) for f in futs})
    assert blocks >= 2
    with Consumer({"bootstrap.servers": address, "group.id": group, "audit.enable": True,
                   "audit.topic": auditor.config.audit_topic, **GROUP_CONF}) as c:  # fmt: skip
        c.subscribe(topic)
        drain(c, 700)
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    watch = PageWatch(context.new_page(), tmp_path)
    page = watch.page
    try:
        page.goto(f"{auditor.url}/?refresh=1")
        row = row_locator(page, topic, group)
        expect(row).to_have_count(1, timeout=WAIT_MS)
        expect_cell(row, "unaudited", 700, "unaudited records")
        expect(row.locator('td[data-col="unaudited"]')).to_have_attribute(
            "data-blocks", str(blocks)
        )
        expect(row.locator('td[data-col="unaudited"]')).to_have_text("700")
        expect_cell(row, "status", "warn", "status")
        reason = (
            f"700 records in {blocks} blocks consumed with no produced record (unaudited: "
            "their producer or broker does not report, or its records were dropped)"
        )
        expect(row.get_by_test_id("status-reason")).to_have_text(reason)
        expect(row.locator('td[data-col="status"]')).to_have_attribute("title", reason)
        assert row.locator("td").count() == page.locator("#topics thead th").count() == 14
        expect(page.locator("#topics thead th").nth(10)).to_have_text("Unaudited")
        assert watch.errors == [], watch.errors
    except Exception as e:
        raise watch.fail_with_context(e, "unaudited-failure") from e
    finally:
        context.close()


def test_a_deleted_topic_leaves_the_dashboard(
    memq_stack: StackState,
    browser: Any,
    unique_name: Callable[[str], str],
    tmp_path: Path,
) -> None:
    """(issue 43) ``memq topic delete --purge``: the topic's row goes (the auditor learns
    the cluster's topics with its lag measurements), the others stay; asked for by name
    it is still answered."""
    import json
    import subprocess
    import sys
    import urllib.request

    from playwright.sync_api import expect

    address = memq_stack.extra["brokers"][0]["endpoint"]
    cfg = AuditorConfig(
        kafka={"bootstrap_servers": memq_stack.kafka_bootstrap},  # type: ignore[arg-type]
        audit_topic=unique_name("audit"),
        db_path=tmp_path / "audit.db",
        http_port=0,
        grace_period_s=GRACE_S,
        metrics_interval_s=1,
        lag={"bootstrap_servers": address, "interval_s": 1},  # type: ignore[arg-type]
    )
    gone, stays, group = unique_name("gone"), unique_name("stays"), "del-group"
    conf = {"bootstrap.servers": address, "audit.enable": True, "audit.topic": cfg.audit_topic}
    aud = AuditorThread(cfg)
    aud.start()
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    watch = PageWatch(context.new_page(), tmp_path)
    page = watch.page
    try:
        with Producer({**conf, "linger.ms": 5}) as p:
            for t in (gone, stays):
                produce_burst(p, t, 0, 100)
        with Consumer({**conf, "group.id": group, **GROUP_CONF}) as c:
            c.subscribe([gone, stays])
            drain(c, 200)
            c.commit()  # (a group with committed offsets: the lag measurement lists it)
        page.goto(f"{aud.url}/?refresh=1")
        for t in (gone, stays):
            expect(row_locator(page, t, group)).to_have_count(1, timeout=WAIT_MS)
            expect_cell(row_locator(page, t, group), "consumed", 100, f"{t} consumed")
        # A lag measurement (which lists the cluster's topics) saw both topics.
        wait_for(
            lambda: True if {gone, stays} <= {g["topic"] for g in json.loads(
                urllib.request.urlopen(f"{aud.url}/api/lag", timeout=10).read())["groups"]
                if g["group"] == group} else None,
            timeout=30, what="the lag measurement lists both topics",
        )  # fmt: skip
        assert f'memq_audit_produced_records{{topic="{gone}"}}' in metrics_text(aud.url)

        out = subprocess.run(
            [sys.executable, "-m", "memq.cli.main", "topic", "delete", gone, "--yes", "--purge",
             "-b", address],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
        assert out.returncode == 0, out.stdout + out.stderr

        expect(row_locator(page, gone, group), "the deleted topic stays listed").to_have_count(
            0, timeout=WAIT_MS
        )
        expect(row_locator(page, stays, group)).to_have_count(1)
        expect_cell(row_locator(page, stays, group), "status", "ok", "the other topic")
        with urllib.request.urlopen(f"{aud.url}/api/summary?since=1h", timeout=10) as r:
            listed = {t["topic"] for t in json.loads(r.read())["topics"]}
        assert gone not in listed and stays in listed
        with urllib.request.urlopen(
            f"{aud.url}/api/summary?since=1h&topic={gone}", timeout=10
        ) as r:
            (by_name,) = json.loads(r.read())["topics"]
        assert (by_name["topic"], by_name["produced_records"]) == (gone, 100)
        wait_for(
            lambda: True if f'topic="{gone}"' not in metrics_text(aud.url) else None,
            timeout=30, what="the deleted topic's gauges removed",
        )  # fmt: skip
        assert watch.errors == [], watch.errors
    except Exception as e:
        raise watch.fail_with_context(e, "deleted-topic-failure") from e
    finally:
        context.close()
        aud.stop()


def metrics_text(url: str) -> str:
    import urllib.request

    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as r:
        return r.read().decode()


WINDOW_MS = {"15m": 15 * 60_000, "1h": 3_600_000, "6h": 6 * 3_600_000, "24h": 24 * 3_600_000}


def test_time_axis_labels_never_overlap(
    auditor: AuditorThread, browser: Any, tmp_path: Path
) -> None:
    """(issue 43) At every window and at chart widths from a phone's to a wide screen's,
    no two tick labels of a chart's time axis overlap, measured as drawn (uPlot's tick
    values and positions, the axis font), with room to spare: the gap between two labels
    is at least half the wider one's width, so they stay apart in a system font half as
    wide again as this browser's (``system-ui`` differs by platform; uPlot's own labels,
    "6:10am" every 50 px, came within 4 px of each other here)."""
    import json
    from urllib.parse import parse_qs

    now = int(time.time() * 1000)
    topic, group = "axis-topic", "axis-group"
    g = {k: 0 for k in ("consumed_blocks", "consumed_records", "missing_blocks",
                        "missing_records", "pending_blocks", "pending_records", "expired_blocks",
                        "expired_records", "duplicate_blocks", "duplicate_records",
                        "dropped_duplicate_blocks", "dropped_duplicate_records", "mismatches",
                        "unaudited_blocks", "unaudited_records")}  # fmt: skip
    summary = {
        "now_ms": now, "since_ms": now - 3_600_000, "grace_period_s": GRACE_S,
        "topics": [{"topic": topic, "produced_blocks": 1, "produced_records": 10,
                    "last_produced_ms": now, "status": "ok",
                    "groups": [{**g, "group": group, "latency_p50_ms": 5,
                                "latency_p99_ms": 9, "status": "ok", "reason": None}]}],
        "ingest": {"produced_records": 1, "consumed_records": 1, "error": None},
    }  # fmt: skip

    def timeseries(route: Any) -> None:
        since = parse_qs(urlsplit(route.request.url).query)["since"][0]
        first = now - WINDOW_MS[since]
        minutes = list(range(first - first % 60_000, now + 1, 60_000))
        n = len(minutes)
        series = [i % 7 for i in range(n)]
        doc = {"topic": topic, "minutes": minutes, "produced": series, "groups": {group: {
            "consumed": series, "missing": [0] * n, "pending": [0] * n,
            "latency_p50_ms": series, "latency_p99_ms": series}}}  # fmt: skip
        route.fulfill(body=json.dumps(doc), content_type="application/json")

    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    context.route("**/api/summary*", lambda r: r.fulfill(json=summary))
    context.route("**/api/timeseries*", timeseries)
    context.route("**/api/missing*", lambda r: r.fulfill(json={"blocks": []}))
    context.route("**/api/anomalies*", lambda r: r.fulfill(json={"blocks": []}))
    watch = PageWatch(context.new_page(), tmp_path)
    page = watch.page
    overlaps: list[str] = []
    checked = 0
    try:
        page.goto(f"{auditor.url}/?refresh=3600#since=15m&topic={topic}&group={group}")
        for width in (420, 560, 700, 860, 1000, 1200, 1400, 1700):
            page.set_viewport_size({"width": width, "height": 1000})
            for since, span in WINDOW_MS.items():
                page.select_option("#window", since)
                for chart in CHARTS:
                    # Drawn for this window and width: the scale spans the data, the
                    # plot fills its box.
                    page.wait_for_function(
                        """([id, span]) => {
                            const a = window.__memqXLabels(id);
                            const box = document.getElementById(id);
                            return a && a.labels.length > 1 && a.scale[0] === a.data[0]
                                && a.scale[1] === a.data[1]
                                && Math.abs((a.data[1] - a.data[0]) * 1000 - span) <= 60000
                                && Math.abs(a.width - box.clientWidth) <= 2;
                        }""",
                        arg=[chart, span],
                        timeout=WAIT_MS,
                    )
                    axis = page.evaluate("(id) => window.__memqXLabels(id)", chart)
                    labels = sorted(axis["labels"], key=lambda lab: lab["left"])
                    checked += 1
                    for a, b in itertools.pairwise(labels):
                        wider = max(a["right"] - a["left"], b["right"] - b["left"])
                        if b["left"] - a["right"] < wider / 2:
                            overlaps.append(
                                f"{chart} at {width}px, {since}: {a['text']!r} "
                                f"[{a['left']:.0f}, {a['right']:.0f}] and {b['text']!r} "
                                f"[{b['left']:.0f}, {b['right']:.0f}]"
                            )
        assert checked == 8 * 4 * 3
        assert overlaps == [], "\n".join(overlaps[:20])
        assert watch.errors == [], watch.errors
    except Exception as e:
        raise watch.fail_with_context(e, "axis-failure") from e
    finally:
        context.close()
