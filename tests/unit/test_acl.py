"""ACL matching and edits (pure)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from memq.acl import AclEntry, AclTable, add_entry, remove_entry
from memq.errors import AuthorizationError, InvalidRequestError


def e(principal: str, topic: str, *ops: str) -> AclEntry:
    return AclEntry(principal=principal, topic=topic, ops=ops)  # type: ignore[arg-type]


def test_exact_prefix_and_wildcards() -> None:
    t = AclTable(
        [e("app", "orders", "produce"), e("bi", "logs.*", "consume"), e("*", "public", "consume"),
         e("ops", "*", "admin")],
        superusers=["root"],
    )  # fmt: skip
    assert t.allowed("app", "produce", "orders")
    assert t.allowed("app", "consume", "orders")  # producers may read the topic's metadata
    assert not t.allowed("app", "admin", "orders")
    assert not t.allowed("app", "produce", "orders2")
    assert t.allowed("bi", "consume", "logs.web") and not t.allowed("bi", "produce", "logs.web")
    assert not t.allowed("bi", "consume", "logs") and not t.allowed("bi", "consume", "*")
    assert t.allowed("anyone", "consume", "public") and not t.allowed(None, "consume", "public")
    assert t.allowed("ops", "admin", "*") and t.allowed("ops", "admin", "x")
    assert not t.allowed("ops", "produce", "x")
    assert t.allowed("root", "admin", "*") and t.allowed("root", "produce", "anything")
    assert not AclTable().allowed("app", "consume", "orders")  # nothing by default


def test_check_names_the_grant_to_ask_for() -> None:
    with pytest.raises(
        AuthorizationError, match="memq acl add --principal app --topic t --op admin"
    ):
        AclTable().check("app", "admin", "t")
    with pytest.raises(AuthorizationError, match="--topic '\\*' --op admin"):  # (a glob unquoted)
        AclTable().check("app", "admin", "*")


def test_add_merges_and_remove_drops_emptied_entries() -> None:
    entries = add_entry([], e("app", "t", "produce"))
    entries = add_entry(entries, e("app", "t", "consume"))
    assert entries == [e("app", "t", "produce", "consume")]
    entries = add_entry(entries, e("bi", "t", "consume"))
    entries = remove_entry(entries, e("app", "t", "produce", "consume"))
    assert entries == [e("bi", "t", "consume")]
    # a grant that does not exist (a typo) is an error, not a quiet no-op
    for gone in (e("ib", "t", "consume"), e("bi", "x", "consume"), e("bi", "t", "produce")):
        with pytest.raises(InvalidRequestError, match="nothing removed"):
            remove_entry(entries, gone)


@pytest.mark.parametrize(
    "bad",
    [{"principal": "", "topic": "t", "ops": ["produce"]},
     {"principal": "a", "topic": "t/x", "ops": ["produce"]},
     {"principal": "a", "topic": "t", "ops": []},
     {"principal": "a", "topic": "t", "ops": ["write"]}],
)  # fmt: skip
def test_invalid_entries_are_rejected(bad: dict) -> None:
    with pytest.raises(ValidationError):
        AclEntry.model_validate(bad)
