"""Same prompts (issue 14): every seed program, in every ablation configuration, sends exactly the
messages recorded in ``tests/fixtures/prompts/``.

The runs are those of ``tests/record_prompts.py`` (bundled questions and demo pool, a scripted
DummyLM, offline retrieval), replayed here and compared byte for byte with the stored file. A
difference that is intended is recorded again with ``python tests/record_prompts.py --only NAME``
and named, with its reason, in the commit message.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from record_prompts import (
    configurations,
    demo_environment,
    describe_difference,
    dumps,
    fixture_path,
    record,
)

CONFIGS = configurations()


@pytest.fixture(scope="module", autouse=True)
def _demo_pool() -> Iterator[None]:
    # Module-scoped: the default retrievers over the demo pool are built once for all configs.
    with demo_environment():
        yield


def test_every_program_and_ablation_has_a_fixture() -> None:
    stored = {p.stem for p in fixture_path("x", "y").parent.glob("*.json")}
    expected = {f"{program}__{config}" for program, config, _ in CONFIGS}
    assert expected == stored, (
        f"missing: {sorted(expected - stored)}; stale: {sorted(stored - expected)} "
        "(run python tests/record_prompts.py)"
    )


@pytest.mark.parametrize(
    ("program", "config", "switches"), CONFIGS, ids=[f"{p}__{c}" for p, c, _ in CONFIGS]
)
def test_same_prompts(program: str, config: str, switches: dict) -> None:
    path = fixture_path(program, config)
    if not path.is_file():
        pytest.fail(f"no fixture {path.name}: run python tests/record_prompts.py --only {program}")
    stored = path.read_text(encoding="utf-8")
    now = record(program, config, switches)
    if dumps(now) != stored:
        difference = describe_difference(json.loads(stored), now)
        pytest.fail(difference or "same calls, different serialisation", pytrace=False)
