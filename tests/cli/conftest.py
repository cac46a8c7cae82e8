"""Helpers for the offline CLI tests: run a tool's ``main`` in-process and capture what it prints."""

from __future__ import annotations

from typing import Any, Callable

import pytest


@pytest.fixture
def run(capsys: pytest.CaptureFixture[str]) -> Callable[..., tuple[int, str, str]]:
    """``run(main, *argv)`` -> (exit status, stdout, stderr); argparse's SystemExit becomes the status."""

    def _run(main: Callable[[list[str]], int], *argv: Any) -> tuple[int, str, str]:
        try:
            status = main([str(a) for a in argv])
        except SystemExit as exc:
            status = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        out, err = capsys.readouterr()
        return status, out, err

    return _run
