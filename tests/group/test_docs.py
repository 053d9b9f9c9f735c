"""docs/groups.md shows the classic group's state table as the code has it."""

import os
import re

from tidelog.group.classic import mermaid

DOCS = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "groups.md")


def test_the_classic_group_diagram_is_the_table():
    with open(DOCS, encoding="utf-8") as f:
        diagrams = re.findall(r"```mermaid\n(.*?)\n```", f.read(), re.S)
    assert mermaid() in diagrams, \
        "regenerate it: python -c 'from tidelog.group.classic import mermaid; print(mermaid())'"
