"""``memq retention ...``: enforce topics' retention, write S3 lifecycle rules; and what
``memq topic delete`` (with or without ``--purge``) removes or leaves behind."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape

from memq.cli.options import BOOTSTRAP, JSON, STATE_DIR, http_url, key_value_pairs, topic_name

__all__ = ["app", "delete_topic", "kafka_view"]

app = typer.Typer(
    help="Retention: delete expired and orphaned objects, write S3 lifecycle rules.",
    no_args_is_help=True,
)
err = Console(stderr=True, soft_wrap=True, highlight=False)


def _admin(bootstrap: str | None, state_dir: Path | None) -> Any:
    from memq.client.admin import AdminClient

    if state_dir is not None:
        os.environ["MEMQ_STATE_DIR"] = str(state_dir)
    return AdminClient(bootstrap)


def _storage_overrides(admin: Any) -> dict[str, Any]:
    """The local stack's storage settings (endpoint, throwaway credentials) when the
    brokers are its own; nothing otherwise."""
    from memq.client.bootstrap import resolve_client
    from memq.config import SecureClientConfig

    _, endpoints = resolve_client(SecureClientConfig(), list(admin.bootstrap))
    return dict(endpoints.storage)


def _mb(n: int) -> str:
    return f"{n:,} bytes" if n < 10_000 else f"{n / 1e6:,.2f} MB"


@app.command("run")
def run(
    topics: list[str] = typer.Option(
        [],
        "--topic",
        "-t",
        callback=lambda v: [topic_name(t) for t in v],
        help="Topic to apply retention to (repeatable; default: every topic).",
    ),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="List what would be deleted; delete nothing."
    ),
    orphan_grace_ms: int = typer.Option(
        3_600_000,
        "--orphan-grace-ms",
        min=0,
        help="Objects younger than this are never orphans (their notification may be in flight).",
    ),
    orphan_window_ms: int = typer.Option(
        86_400_000,
        "--orphan-window-ms",
        min=1,
        help="Check objects up to this old for orphans (older ones go with their partition).",
    ),
    orphans: bool = typer.Option(
        True, "--orphans/--no-orphans", help="Remove objects no notification points at."
    ),
    kafka_options: list[str] = typer.Option(
        [],
        "--kafka-option",
        help="librdkafka setting KEY=VALUE for reading notification topics (repeatable), "
        "e.g. sasl.password=...",
    ),
    bootstrap: str | None = BOOTSTRAP,
    state_dir: Path | None = STATE_DIR,
    as_json: bool = JSON,
) -> None:
    """Apply each topic's retention (retention.ms, retention.bytes, from the brokers) to
    its objects under every key prefix, and remove orphans: objects older than the grace
    that no notification points at. Prints what it deleted; exits 1 on any error."""  # fmt: skip
    from memq.retention_job import RetentionOptions, load_targets, run_retention

    admin = _admin(bootstrap, state_dir)
    targets, errors = load_targets(admin, topics or None)
    options = RetentionOptions(
        dry_run=dry_run,
        orphans=orphans,
        orphan_grace_ms=orphan_grace_ms,
        orphan_window_ms=orphan_window_ms,
        kafka=key_value_pairs(kafka_options, "--kafka-option"),
        storage_overrides=_storage_overrides(admin),
    )
    reports = [run_retention(t, options) for t in targets]
    failed = bool(errors) or any(r.errors for r in reports)
    if as_json:
        doc = {
            "dry_run": dry_run,
            "topics": [r.as_dict() for r in reports],
            "errors": errors,
            "ok": not failed,
        }
        typer.echo(json.dumps(doc, indent=2))
    else:
        _print_reports(reports, errors, dry_run)
    if failed:
        raise typer.Exit(1)


def _print_reports(reports: list[Any], errors: dict[str, str], dry_run: bool) -> None:
    verb = "would delete" if dry_run else "deleted"
    for r in reports:
        ms = "forever" if r.retention_ms is None else f"{r.retention_ms} ms"
        size = "-" if r.retention_bytes is None else f"{r.retention_bytes} bytes"
        typer.echo(
            f"topic {r.topic} ({r.location}, retention.ms {ms}, retention.bytes {size}): "
            f"{verb} {r.objects_deleted} objects ({_mb(r.bytes_deleted)}) in "
            f"{len(r.partitions)} partitions and {r.orphans_deleted} orphans "
            f"({_mb(r.orphan_bytes)}); kept {r.objects_kept} objects ({_mb(r.bytes_kept)})"
        )
        for p in r.partitions:
            typer.echo(
                f"  {verb} {p['partition']}: {p['objects']} objects, {_mb(p['bytes'])} "
                f"({p['reason']})"
            )
        for o in r.orphans:
            typer.echo(f"  {verb} orphan {o['key']} ({_mb(o['bytes'])})")
        for w in r.warnings:
            typer.echo(f"  warning: {w}")
        for e in r.errors:
            err.print(f"  [bold red]error:[/bold red] {r.topic}: {escape(str(e))}")
    for name, e in errors.items():
        err.print(f"[bold red]error:[/bold red] {name}: {escape(str(e))}")
    if not reports and not errors:
        typer.echo("no topics")


@app.command("apply-lifecycle")
def apply_lifecycle(
    bucket: str = typer.Option(..., "--bucket", help="The bucket whose lifecycle rules to write."),
    days: list[int] = typer.Option(
        [],
        "--days",
        min=1,
        help="Also write a rule for this retention class, in days (repeatable).",
    ),
    prune: bool = typer.Option(
        False,
        "--prune",
        help="Drop MemQ rules of classes no topic uses now (objects tagged with them then "
        "never expire by lifecycle).",
    ),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the rules; change nothing."),
    endpoint_url: str | None = typer.Option(
        None,
        envvar="MEMQ_S3_ENDPOINT",
        help="S3 endpoint (default: the topics' storage).",
        callback=http_url,
    ),
    region: str | None = typer.Option(None, help="S3 region (default: the topics' storage)."),
    bootstrap: str | None = BOOTSTRAP,
    state_dir: Path | None = STATE_DIR,
    as_json: bool = JSON,
) -> None:
    """Write one S3 lifecycle rule per retention class of the topics stored in --bucket:
    objects tagged memq-retention-days=N expire after N days. Rules MemQ does not own
    (other IDs) are kept; the written rules are read back."""  # fmt: skip
    from memq.errors import ConfigError, StorageError
    from memq.retention import LIFECYCLE_RULE_PREFIX, TAG_KEY, lifecycle_rules
    from memq.retention_job import load_targets
    from memq.storage_handlers.s3 import S3Handler

    admin = _admin(bootstrap, state_dir)
    targets, _errors = load_targets(admin)
    mine = [
        t for t in targets if t.storage.get("type") == "s3" and t.storage.get("bucket") == bucket
    ]
    classes: dict[int, list[str]] = {}
    for t in mine:
        tags = (((t.settings or {}).get("storage") or {}).get("s3") or {}).get("object_tags") or {}
        if TAG_KEY in tags:
            classes.setdefault(int(tags[TAG_KEY]), []).append(t.name)
    for d in days:
        classes.setdefault(d, [])
    public: dict[str, Any] = dict(mine[0].storage) if mine else {"type": "s3"}
    public["bucket"] = bucket
    overrides = {
        **_storage_overrides(admin),
        **{k: v for k, v in (("endpoint_url", endpoint_url), ("region", region)) if v},
    }
    s3 = S3Handler.bucket(public, overrides)
    existing = s3.lifecycle_rules()
    if not prune:  # objects already tagged with an older class keep expiring
        for r in existing:
            rid = str(r.get("ID", ""))
            if rid.startswith(LIFECYCLE_RULE_PREFIX) and rid.endswith("d"):
                classes.setdefault(int(r["Expiration"]["Days"]), [])
    if not classes:
        raise ConfigError(
            f"no retention class for bucket {bucket}: no topic stores tagged objects there "
            "(storage.s3.tag_retention, retention.ms set); pass --days N"
        )
    rules = lifecycle_rules(existing, classes)
    if not dry_run:
        s3.put_lifecycle_rules(rules)
        back = {r.get("ID") for r in s3.lifecycle_rules()}
        missing = [r["ID"] for r in rules if r["ID"] not in back]
        if missing:
            raise StorageError(f"s3://{bucket} lifecycle does not show rules {missing} after PUT")
    if as_json:
        doc = {"bucket": bucket, "dry_run": dry_run, "rules": rules,
               "classes": {str(d): sorted(ts) for d, ts in sorted(classes.items())}}  # fmt: skip
        typer.echo(json.dumps(doc, indent=2))
        return
    verb = "would write" if dry_run else "wrote"
    for d, names in sorted(classes.items()):
        who = ", ".join(sorted(names)) or "no topic now"
        typer.echo(
            f"{verb} rule {LIFECYCLE_RULE_PREFIX}{d}d: tag {TAG_KEY}={d}, expire after {d} days ({who})"
        )
    kept = len(rules) - len(classes)
    if kept:
        typer.echo(f"kept {kept} other rules of s3://{bucket}")


# --- used by `memq topic delete` and `memq topic describe` --------------------------------


def delete_topic(admin: Any, name: str, *, purge: bool) -> None:
    """Delete a topic; with ``purge`` also its objects and notification topic, else say
    exactly what is left behind. Exits 1 when a purge leaves anything."""
    from memq.client.bootstrap import fetch_metadata
    from memq.errors import UnknownTopicError
    from memq.retention_job import deleted_target, load_targets, purge_topic, wait_until_unknown

    targets, errors = load_targets(admin, [name], need_settings=False)
    if targets:
        (t,) = targets
        admin.delete_topic(name)
    else:  # deleted before without --purge: its recorded config says where its data is
        left = admin.delete_topic(name) if purge else None
        if left is None:
            raise UnknownTopicError(errors.get(name, f"unknown topic {name!r}"))
        meta = fetch_metadata(admin.bootstrap, [], timeout=admin.timeout, security=admin.security)
        t = deleted_target(name, meta.cluster, left)
    if not purge:
        err.print(
            f"topic {name} deleted. Left behind (remove them with `memq topic delete {name} "
            "--purge`; until then the name cannot be used again, as a new topic would read "
            "them back):"
        )
        for p in t.prefixes_text():
            err.print(f"  objects under {p}")
        if t.notification_topic:
            err.print(f"  notification topic {t.notification_topic} on Kafka {t.kafka_bootstrap}")
        return
    wait_until_unknown(admin, name)
    report = purge_topic(t, storage_overrides=_storage_overrides(admin))
    failed = any(str(t.notification_topic) in what for what in report.left)
    gone = (
        "deleted"
        if report.notification_deleted
        else "not deleted (see below)"
        if failed
        else "did not exist"
    )
    err.print(
        f"topic {name} deleted and purged: {report.objects_deleted} objects "
        f"({_mb(report.bytes_deleted)}) under {', '.join(t.prefixes_text())}; notification "
        f"topic {t.notification_topic} {gone}"
    )
    if report.left:
        err.print("[bold red]left behind:[/bold red]")
        for what in report.left:
            err.print(f"  {what}")
        err.print(f"run `memq topic delete {name} --purge` again once that is fixed")
        raise typer.Exit(1)
    admin.forget_topic(name)  # nothing left: the name may be used again


def kafka_view(notification: dict[str, Any]) -> dict[str, Any]:
    """The notification topic as Kafka reports it (partitions, retention.ms), or why not."""
    from memq.errors import MemqError
    from memq.storage_handlers.kafka_topics import describe_topic

    bootstrap, topic = notification.get("bootstrap_servers"), notification.get("topic")
    if not bootstrap or not topic:
        return {"error": "the brokers name no notification topic"}
    try:
        return describe_topic(str(bootstrap), str(topic), timeout=5.0).as_dict()
    except MemqError as e:
        return {"topic": topic, "bootstrap": bootstrap, "error": str(e)}
