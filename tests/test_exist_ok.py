"""``exist_ok=True`` on the define verbs: a script that defines its queues runs twice (the README's
snippets among them), and a queue defined otherwise is still refused, never silently kept."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from edgeq import QueueManager
from edgeq.errors import QueueExists

README = Path(__file__).resolve().parents[1] / "README.md"


def readme_tour() -> str:
    """The README's first Python snippet (the 30-second tour), as written."""
    text = README.read_text(encoding="utf-8")
    tour = text[text.index("## 30-second tour"):]
    match = re.search(r"```python\n(.*?)```", tour, re.DOTALL)
    assert match is not None, "the README has no Python snippet in its tour"
    return match.group(1)


def test_the_readme_tour_runs_twice(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    code = compile(readme_tour(), str(README), "exec")
    for _ in range(2):
        exec(code, {})  # the README's own snippet, run as a reader would
    with QueueManager(tmp_path / "device.db") as qm:
        assert qm.queue_names() == ["DLQ", "ORDERS", "TELEMETRY"]


def test_each_define_verb_takes_the_same_definition_again(tmp_path: Path) -> None:
    with QueueManager(tmp_path / "d.db", name="DEV1") as qm:
        for _ in range(2):
            qm.define_queue("DLQ", exist_ok=True)
            qm.define_queue("Q", expiry_ms=60_000, rules=[("dead-letter", {"queue": "DLQ"})], exist_ok=True)
            qm.define_remote_queue("OUT", target_qmgr="HOME", exist_ok=True)
            qm.define_home_server_queue("INBOX", server="HOME", exist_ok=True)
        assert qm.queue_attributes("Q").expiry_ms == 60_000


@pytest.mark.parametrize(("again", "needle"), [
    (lambda qm: qm.define_queue("Q", expiry_ms=30_000, exist_ok=True), "expiry_ms 60000, not 30000"),
    (lambda qm: qm.define_queue("Q", expiry_ms=60_000, exist_ok=True), "rules ['counters'], not []"),
    (lambda qm: qm.define_remote_queue("Q", target_qmgr="HOME", expiry_ms=60_000, rules=["counters"],
                                       exist_ok=True), "kind 'local', not 'remote'"),
    (lambda qm: qm.define_queue("Q", expiry_ms=60_000, rules=["counters"]), "exist_ok=True"),
])
def test_a_queue_defined_otherwise_is_still_refused(tmp_path: Path, again: object, needle: str) -> None:
    with QueueManager(tmp_path / "d.db", name="DEV1") as qm:
        qm.define_queue("Q", expiry_ms=60_000, rules=["counters"])
        with pytest.raises(QueueExists) as refused:
            again(qm)  # type: ignore[operator]
        assert needle in str(refused.value)
        assert qm.queue_attributes("Q").expiry_ms == 60_000
