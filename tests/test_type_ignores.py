"""House rule: every ``type: ignore`` in the product and its tools names its code and says why."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_IGNORE = re.compile(r"#\s*type:\s*ignore(?P<codes>\[[^\]]*\])?(?P<rest>.*)$")


def test_every_type_ignore_names_its_code_and_says_why() -> None:
    unexplained = []
    for package in ("service", "workers", "devtools", "migrations"):
        for path in sorted((ROOT / package).rglob("*.py")):
            for number, line in enumerate(path.read_text().splitlines(), 1):
                match = _IGNORE.search(line)
                if match and (not match["codes"] or not re.match(r"\s+#\s*\S", match["rest"])):
                    unexplained.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not unexplained, "type: ignore without [code] and a trailing '# why':\n" + "\n".join(unexplained)
