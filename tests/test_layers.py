"""Layering rules: the sans-I/O and storage layers never import asyncio, and lower layers never import
higher ones (protocol <- storage <- controller/coordinator <- server <- cli/testing)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "kbroker"
ORDER = {"protocol": 0, "storage": 1, "security": 1, "controller": 2, "coordinator": 2, "server": 3, "cli": 4, "testing": 4}


def imports_of(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


@pytest.mark.parametrize("layer", ["protocol", "storage", "security", "controller"])
def test_no_asyncio(layer):
    offenders = [str(p.relative_to(PKG)) for p in (PKG / layer).rglob("*.py")
                 if any(n == "asyncio" or n.startswith("asyncio.") for n in imports_of(p))]
    assert offenders == []


@pytest.mark.parametrize("layer", sorted(ORDER))
def test_layers_import_downwards_only(layer):
    bad = []
    for p in (PKG / layer).rglob("*.py"):
        for name in imports_of(p):
            parts = name.split(".")
            if parts[0] == "kbroker" and len(parts) > 1 and parts[1] in ORDER:
                if ORDER[parts[1]] > ORDER[layer]:
                    bad.append(f"{p.relative_to(PKG)} imports {name}")
    assert bad == []
