"""Every fenced code block of README.md runs against a live broker, in order, as a reader would run it from the
clone's root (issue: a newcomer's first hour): ``sh`` blocks with bash, ``python`` blocks with this
interpreter (the clone's .venv), ``java`` blocks compiled with javac against .cache/jars and run. The only change
made to a block is the port: the test broker's instead of 9092. A block that cannot run here is marked in the
README with ``<!-- example: no-run (reason) -->`` right above it; a marker without a reason fails."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BLOCK = re.compile(r"(?:<!-- example: (?P<marker>[^\n]*?) -->\n)?```(?P<lang>[a-z]+)\n(?P<body>.*?)```", re.S)


def readme_blocks() -> list[tuple[str, str, str | None]]:
    text = (ROOT / "README.md").read_text()
    return [(m["lang"], m["body"], m["marker"]) for m in BLOCK.finditer(text)]


def test_readme_has_runnable_examples_and_every_skip_says_why():
    blocks = readme_blocks()
    langs = {lang for lang, _, marker in blocks if marker is None}
    assert {"sh", "python", "java"} <= langs, langs
    for lang, body, marker in blocks:
        if marker is not None:
            assert re.fullmatch(r"no-run \(.{10,}\)", marker), f"a no-run marker must give its reason: {marker!r}"


def test_readme_examples_run(kbroker_factory, tmp_path, java_driver):
    broker = kbroker_factory(overrides={"num.partitions": "1"})
    port = broker.port
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
    ran = []
    for i, (lang, body, marker) in enumerate(readme_blocks()):
        if marker is not None:
            continue
        code = body.replace("localhost:9092", f"localhost:{port}")
        if lang == "sh":
            res = subprocess.run(["bash", "-euo", "pipefail", "-c", code], cwd=ROOT, env=env, capture_output=True,
                                 text=True, timeout=120)
        elif lang == "python":
            script = tmp_path / f"block{i}.py"
            script.write_text(code)
            res = subprocess.run([sys.executable, str(script)], cwd=ROOT, env=env, capture_output=True, text=True,
                                 timeout=120)
        elif lang == "java":
            cls = re.search(r"public class (\w+)", code)
            assert cls, "a Java example must be a complete program (public class ...)"
            src = tmp_path / f"java{i}" / f"{cls[1]}.java"
            src.parent.mkdir()
            src.write_text(code)
            jars = str(ROOT / ".cache" / "jars" / "*")
            res = subprocess.run(["javac", "-cp", jars, "-d", str(src.parent), str(src)], capture_output=True,
                                 text=True, timeout=300)
            assert res.returncode == 0, f"README Java example does not compile:\n{res.stderr}"
            res = subprocess.run(["java", "-cp", f"{jars}:{src.parent}", cls[1]], capture_output=True, text=True,
                                 timeout=120)
        else:
            raise AssertionError(f"README block in an unknown language {lang!r}: mark it no-run or add a runner")
        assert res.returncode == 0, f"README {lang} block {i} failed:\n{code}\n--- stdout\n{res.stdout}\n" \
                                    f"--- stderr\n{res.stderr}"
        ran.append((lang, res.stdout))
    outputs = "\n".join(out for _, out in ran)
    assert "k=k1 v=hello" in outputs                # kcat read back what it produced
    assert "b'user-1' b'{\"total\": 12}'" in outputs  # the Python consumer got the Python producer's record
    assert re.search(r"^\d+@\d+$", outputs, re.M)   # the Java producer's partition@offset
    assert len(ran) >= 4
    assert shutil.which("kcat"), "kcat is on PATH (dev.sh installs it)"
