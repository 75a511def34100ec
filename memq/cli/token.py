"""``memq token create``: sign an authentication token for brokers with auth enabled."""

from __future__ import annotations

import os
from pathlib import Path

import typer

from memq.cli.options import non_empty
from memq.errors import ConfigError
from memq.security import make_token

__all__ = ["app"]

app = typer.Typer(help="Authentication tokens (HMAC-signed, with an expiry).", no_args_is_help=True)

SECRET_ENV = "MEMQ_AUTH_TOKEN_SECRET"
#: The shortest secret accepted: HMAC-SHA256 keys shorter than this are guessable.
MIN_SECRET_BYTES = 16


@app.command("create")
def create(
    principal: str = typer.Option(
        ..., "--principal", "-p", callback=non_empty, help="Who the token names."
    ),
    ttl: float = typer.Option(
        3600.0,
        "--ttl",
        min=1,
        max=10 * 365 * 86400,
        help="Seconds until it expires (at most ten years).",
    ),
    secret_file: Path | None = typer.Option(
        None, "--secret-file", help=f"File with the brokers' auth secret (else ${SECRET_ENV})."
    ),
) -> None:
    """Print a token for PRINCIPAL signed with the brokers' secret (auth.token_secret),
    for clients' auth.token setting or an HTTP Authorization: Bearer header. The secret
    is read from a file or the environment, never from the command line."""
    if secret_file is not None:
        try:
            secret = secret_file.read_bytes().strip()
        except OSError as e:
            raise ConfigError(f"--secret-file {secret_file}: {e.strerror or e}") from None
    else:
        env = os.environ.get(SECRET_ENV, "")
        if not env:
            raise ConfigError(f"no secret: pass --secret-file or set {SECRET_ENV}")
        secret = env.encode()
    if len(secret) < MIN_SECRET_BYTES:
        where = f"--secret-file {secret_file}" if secret_file is not None else f"${SECRET_ENV}"
        raise typer.BadParameter(
            f"the secret in {where} has {len(secret)} bytes: use at least {MIN_SECRET_BYTES} "
            "(e.g. `openssl rand -hex 32`)"
        )
    typer.echo(make_token(secret, principal, ttl))
