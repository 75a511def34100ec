"""The ``memq`` command line."""

from __future__ import annotations

import inspect
import logging
import sys
from typing import Any

import typer
from rich.console import Console
from rich.markup import escape

from memq import __version__
from memq.cli import acl as acl_cmd
from memq.cli import admin as admin_cmd
from memq.cli import audit as audit_cmd
from memq.cli import backfill as backfill_cmd
from memq.cli import bench as bench_cmd
from memq.cli import broker as broker_cmd
from memq.cli import consume as consume_cmd
from memq.cli import cost as cost_cmd
from memq.cli import demo as demo_cmd
from memq.cli import dev as dev_cmd
from memq.cli import group as group_cmd
from memq.cli import produce as produce_cmd
from memq.cli import retention as retention_cmd
from memq.cli import token as token_cmd
from memq.errors import MemqError

__all__ = ["app", "main"]

err = Console(stderr=True, soft_wrap=True)

app = typer.Typer(
    name="memq",
    help="MemQ-py: object-store micro-batching pub/sub (brokers batch into S3, pointers in Kafka).",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
app.add_typer(dev_cmd.app, name="dev")
app.add_typer(admin_cmd.topic_app, name="topic")
app.add_typer(admin_cmd.cluster_app, name="cluster")
app.add_typer(group_cmd.app, name="group")
app.add_typer(audit_cmd.app, name="audit")
app.add_typer(token_cmd.app, name="token")
app.add_typer(acl_cmd.app, name="acl")
app.add_typer(retention_cmd.app, name="retention")
app.command("demo")(demo_cmd.demo)
app.command("broker")(broker_cmd.broker)
app.command("produce")(produce_cmd.produce)
app.command("consume")(consume_cmd.consume)
app.command("cat")(consume_cmd.cat)
app.command("peek")(consume_cmd.peek)
app.command("backfill")(backfill_cmd.backfill)
app.command("cost")(cost_cmd.cost)
app.command("bench")(bench_cmd.bench)


def _one_paragraph_summaries(group: typer.Typer) -> None:
    """Command lists in ``--help`` show each command's first docstring paragraph as one
    paragraph (Typer keeps its source line breaks there: "...consume with a" / "consumer
    group..."); a command's own ``--help`` is unchanged."""
    for info in group.registered_commands:
        if info.short_help is None and info.help is None and info.callback is not None:
            first = (inspect.getdoc(info.callback) or "").split("\n\n")[0]
            info.short_help = " ".join(first.split())
    for sub in group.registered_groups:
        if sub.typer_instance is not None:
            _one_paragraph_summaries(sub.typer_instance)


_one_paragraph_summaries(app)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"memq {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    log_level: str = typer.Option(
        "WARNING", "--log-level", envvar="MEMQ_LOG_LEVEL", help="DEBUG, INFO, WARNING or ERROR."
    ),
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print the version and exit."
    ),
) -> None:
    logging.basicConfig(
        level=log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )


# The option parser's exception classes (typer vendors click in recent versions).
_USAGE_ERROR: type[Exception] = next(
    c for c in typer.BadParameter.__mro__ if c.__name__ == "UsageError"
)
_CLICK_ERROR: type[Exception] = next(
    c for c in typer.BadParameter.__mro__ if c.__name__ == "ClickException"
)


def main() -> None:
    """Run the CLI: a bad option value is a one-line usage error (exit 2), a failure one
    line saying what failed (exit 1)."""
    try:
        rc = app(standalone_mode=False)
    except _CLICK_ERROR as e:
        ctx: Any = getattr(e, "ctx", None)
        failure: Any = e
        if isinstance(e, _USAGE_ERROR) and type(e).__name__ != "NoArgsIsHelpError":
            where = ctx.command_path if ctx is not None else "memq"
            err.print(
                f"[bold red]usage error:[/bold red] {escape(failure.format_message())} "
                f"(see `{where} --help`)",
                highlight=False,
            )
        else:  # a group without its command shows its help
            failure.show()
        sys.exit(failure.exit_code)
    except typer.Abort:
        err.print("aborted")
        sys.exit(1)
    except MemqError as e:
        err.print(f"[bold red]error:[/bold red] {escape(str(e))}", highlight=False)
        sys.exit(1)
    except KeyboardInterrupt:
        err.print("interrupted")
        sys.exit(130)
    sys.exit(rc if isinstance(rc, int) else 0)


if __name__ == "__main__":
    main()
