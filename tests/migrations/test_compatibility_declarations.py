"""Every migration of both services declares its compatibility
(decisionflow_server.storage.schema_compatibility), and the
declaration holds: an expand migration uses no operation that drops, renames or tightens (read from its
source, outside ``downgrade``); the oldest compatible revision is the migration itself or an ancestor (a
strict ancestor for an expand, the first migration aside) and never older than its predecessor's. The
planted cases show each rule catching what it is for."""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from decisionflow_server.storage import migrating
from decisionflow_server.storage.schema_compatibility import Compatibility, Contract, Expand
from effect_receiver.main import SCHEMA as RECEIVER_SCHEMA
from orchestrator.main import SCHEMA as ORCHESTRATOR_SCHEMA

# Operations that remove something an older release reads or writes, or change its meaning.
DROPPING = frozenset({"drop_table", "drop_column", "drop_index", "drop_constraint", "rename_table"})
# Operations that tighten an existing table: an older release's writes may then fail.
TIGHTENING = frozenset(
    {"create_unique_constraint", "create_check_constraint", "create_foreign_key", "create_primary_key"}
)
CONTRACT_SQL = re.compile(r"\bDROP\b|\bRENAME\b|\bSET\s+NOT\s+NULL\b|\bALTER\s+(COLUMN\s+\S+\s+)?TYPE\b", re.I)
SQL_CALLS = frozenset({"execute", "exec_driver_sql", "text"})


@dataclass(frozen=True)
class Migration:
    """One migration as the checks read it: its place in the chain, its declaration and its source."""

    service: str
    revision: str
    ancestors: tuple[str, ...]
    """Its strict ancestors, nearest first."""
    compatibility: Compatibility | None
    previous_oldest: str | None
    """The oldest compatible revision its predecessor declares (None for the first migration)."""
    source: str

    @property
    def name(self) -> str:
        return f"{self.service}-{self.revision}"


def migrations(schema: migrating.Schema) -> list[Migration]:
    """Every migration of schema, oldest first."""
    scripts = schema.scripts
    chain = list(reversed(list(scripts.walk_revisions())))
    found = []
    for index, script in enumerate(chain):
        ancestors = tuple(s.revision for s in reversed(chain[:index]))
        previous = getattr(chain[index - 1].module, "compatibility", None) if index else None
        found.append(
            Migration(
                schema.service,
                script.revision,
                ancestors,
                getattr(script.module, "compatibility", None),
                previous.oldest if isinstance(previous, Expand | Contract) else None,
                Path(script.path).read_text(encoding="utf-8"),
            )
        )
    return found


ALL = migrations(ORCHESTRATOR_SCHEMA) + migrations(RECEIVER_SCHEMA)


def _constant(node: ast.expr | None) -> object:
    return node.value if isinstance(node, ast.Constant) else None


def _keyword(call: ast.Call, name: str) -> ast.expr | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def _table_argument(call: ast.Call) -> object:
    for name in ("table_name", "source_table", "table"):
        if (value := _keyword(call, name)) is not None:
            return _constant(value)
    return _constant(call.args[1]) if len(call.args) > 1 else None


def _tightens(call: ast.Call, operation: str) -> bool:
    return operation in TIGHTENING or (operation == "create_index" and _constant(_keyword(call, "unique")) is True)


def contract_operations(source: str) -> list[str]:
    """Return the operations in a migration's source, outside ``downgrade``, that only a contract may use."""
    tree = ast.parse(source)
    upgrade_side = [node for node in tree.body if not (isinstance(node, ast.FunctionDef) and node.name == "downgrade")]
    calls = [node for top in upgrade_side for node in ast.walk(top) if isinstance(node, ast.Call)]
    batches = {
        item.optional_vars.id
        for top in upgrade_side
        for node in ast.walk(top)
        if isinstance(node, ast.With)
        for item in node.items
        if isinstance(item.optional_vars, ast.Name)
        and isinstance(item.context_expr, ast.Call)
        and isinstance(item.context_expr.func, ast.Attribute)
        and item.context_expr.func.attr == "batch_alter_table"
    }
    created = {
        _constant(c.args[0])
        for c in calls
        if isinstance(c.func, ast.Attribute) and c.func.attr == "create_table" and c.args
    }
    found: list[str] = []
    statements: set[int] = set()
    for call in calls:
        if not isinstance(call.func, ast.Attribute):
            continue
        operation, target = call.func.attr, call.func.value
        if operation in SQL_CALLS:
            for node in (n for arg in call.args for n in ast.walk(arg) if isinstance(n, ast.Constant)):
                if isinstance(node.value, str) and CONTRACT_SQL.search(node.value) and id(node) not in statements:
                    statements.add(id(node))  # execute(text("...")) is one statement
                    found.append(f"{operation}({node.value!r})")
            continue
        if not (isinstance(target, ast.Name) and (target.id == "op" or target.id in batches)):
            continue
        in_batch = target.id in batches
        if operation in DROPPING:
            found.append(operation)
        elif operation == "alter_column":
            for keyword in ("new_column_name", "type_"):
                if _keyword(call, keyword) is not None:
                    found.append(f"alter_column {keyword}")
            if _constant(_keyword(call, "nullable")) is False:
                found.append("alter_column nullable=False")
        elif operation == "add_column":
            columns = [a for a in call.args if isinstance(a, ast.Call)]
            for column in columns:
                required = (
                    _constant(_keyword(column, "nullable")) is False
                    or _constant(_keyword(column, "primary_key")) is True
                )
                if required and _keyword(column, "server_default") is None:
                    found.append("add_column NOT NULL without a server default")
        elif _tightens(call, operation) and (in_batch or _table_argument(call) not in created):
            found.append(f"{operation} on an existing table")
    return found


def violations(migration: Migration) -> list[str]:
    """Return how migration breaks the compatibility rules (empty: it keeps them)."""
    declared = migration.compatibility
    if not isinstance(declared, Expand | Contract):
        return ["declares no compatibility (Expand or Contract)"]
    problems = []
    lineage = (migration.revision, *migration.ancestors)
    if declared.oldest not in lineage:
        problems.append(f"oldest compatible {declared.oldest} is neither this migration nor an ancestor")
    if isinstance(declared, Expand):
        if declared.oldest == migration.revision and migration.ancestors:
            problems.append("an expand migration keeps older releases running: its oldest must be an ancestor")
        problems += [f"expand migration uses {operation}" for operation in contract_operations(migration.source)]
    if migration.previous_oldest is not None and declared.oldest in lineage:
        # The ancestors of the predecessor's oldest, excluding itself: the record would go back.
        older = lineage[lineage.index(migration.previous_oldest) + 1 :] if migration.previous_oldest in lineage else ()
        if declared.oldest in older:
            problems.append(
                f"oldest compatible {declared.oldest} is older than its predecessor's {migration.previous_oldest}"
            )
    return problems


@pytest.mark.parametrize("migration", ALL, ids=[m.name for m in ALL])
def test_every_migration_declares_compatibility_and_keeps_it(migration: Migration) -> None:
    assert violations(migration) == []


def test_both_services_have_migrations_the_record_reads() -> None:
    # The new heads create the record; without them the checks above would pass on nothing new.
    assert {m.name for m in ALL} >= {"orchestrator-0005", "effect_receiver-0002"}
    # Every migration only adds but orchestrator 0006: a release before it cannot read the operation
    # state `expired` that expire-reviews stores, so it may not run on the result.
    contracts = {m.name: m.compatibility for m in ALL if not isinstance(m.compatibility, Expand)}
    assert contracts == {"orchestrator-0006": Contract(oldest="0006")}


EXPAND = next(m for m in ALL if m.name == "orchestrator-0005")
PLANTED_OPERATIONS = {
    "drop_column": '    with op.batch_alter_table("operations") as batch:\n        batch.drop_column("attempts")\n',
    "drop_table": '    op.drop_table("cases")\n',
    "drop_index": '    op.drop_index("ix_proposals_case_id", table_name="proposals")\n',
    "rename_table": '    op.rename_table("cases", "case_heads")\n',
    "alter_column new_column_name": '    op.alter_column("cases", "updated_at", new_column_name="changed_at")\n',
    "alter_column nullable=False": '    op.alter_column("operations", "payload", nullable=False)\n',
    "add_column NOT NULL": '    op.add_column("cases", sa.Column("owner", sa.String(64), nullable=False))\n',
    "unique index on an existing table": '    op.create_index("ix_u", "cases", ["case_id"], unique=True)\n',
    "execute DROP": '    op.execute("ALTER TABLE cases DROP COLUMN updated_at")\n',
    "execute RENAME": '    op.get_bind().execute(sa.text("ALTER TABLE cases RENAME updated_at TO changed_at"))\n',
}


@pytest.mark.parametrize("planted", sorted(PLANTED_OPERATIONS))
def test_a_contract_operation_planted_in_an_expand_migration_is_caught(planted: str) -> None:
    marker = '    """Apply this revision."""\n'
    assert EXPAND.source.count(marker) == 1
    source = EXPAND.source.replace(marker, marker + PLANTED_OPERATIONS[planted])

    found = violations(replace(EXPAND, source=source))

    assert len(found) == 1 and found[0].startswith("expand migration uses"), found
    assert violations(replace(EXPAND, source=source, compatibility=Contract(oldest="0004"))) == []


def test_a_contract_operation_in_downgrade_and_an_added_nullable_column_are_expand() -> None:
    source = EXPAND.source.replace(
        '    """Apply this revision."""\n',
        '    """Apply this revision."""\n    op.add_column("cases", sa.Column("owner", sa.String(64), nullable=True))\n'
        '    op.create_index("ix_cases_owner", "cases", ["owner"])\n',
    )

    assert "op.drop_table" in source
    assert violations(replace(EXPAND, source=source)) == []


@pytest.mark.parametrize(
    ("compatibility", "complaint"),
    [
        (None, "declares no compatibility"),
        (Expand(oldest="0007"), "neither this migration nor an ancestor"),
        (Expand(oldest="0005"), "its oldest must be an ancestor"),
        (Contract(oldest="0002"), "older than its predecessor's 0003"),
    ],
    ids=["missing", "not-an-ancestor", "expand-raising-to-itself", "going-back"],
)
def test_a_wrong_declaration_is_caught(compatibility: Compatibility | None, complaint: str) -> None:
    found = violations(replace(EXPAND, compatibility=compatibility))

    assert any(complaint in problem for problem in found), found
