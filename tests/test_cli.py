"""CLI error paths that need no model: clear messages, exit code 2, no traceback."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from sqlweave.cli import app

runner = CliRunner()


def test_ask_with_missing_database_is_a_clear_error(tmp_path: Path) -> None:
    result = runner.invoke(app, ["ask", "How many?", "--db", str(tmp_path / "nope.sqlite")])
    assert result.exit_code == 2
    assert "SQLite database not found" in result.output
    assert "Traceback" not in result.output


def test_inspect_corrupted_artifact_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "compiled.json"
    bad.write_text('{"format": "sqlweave-program", "format_ver')
    result = runner.invoke(app, ["inspect", str(bad)])
    assert result.exit_code == 2
    assert "is not a sqlweave program file" in result.output


def test_unknown_program_is_a_clear_error(tmp_path: Path) -> None:
    db = Path(__file__).resolve().parents[1] / "sqlweave" / "demo" / "spider" / "database" / "pets_1" / "pets_1.sqlite"
    result = runner.invoke(app, ["ask", "How many pets?", "--db", str(db), "--program", "nope"])
    assert result.exit_code == 2
    assert "unknown program 'nope'" in result.output
