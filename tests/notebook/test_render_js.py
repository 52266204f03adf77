"""The chat's front-end renderer: markdown, cards and sanitising, run in node and in Chromium."""

from __future__ import annotations

import functools
import http.server
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
STATIC = ROOT / "flue_nb" / "notebook" / "views" / "chat"
HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(ROOT / "tests" / "browser"))
from _lab import chromium_prerequisite  # noqa: E402


def _need(program: str) -> str:
    found = shutil.which(program)
    if found is None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"`{program}` is needed for the renderer's tests and CI must have it")
        pytest.skip(f"`{program}` is not installed here")
    return found


def test_the_renderer_draws_tables_nested_lists_code_links_math_and_code_arguments() -> None:
    node = _need("node")
    done = subprocess.run(
        [node, str(HERE / "render_test.mjs"), str(STATIC)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_a_view_keeps_a_message_until_the_kernel_takes_it_and_hands_it_back_when_the_kernel_is_gone() -> None:
    node = _need("node")
    done = subprocess.run([node, str(HERE / "link_test.mjs"), str(STATIC)], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr


def test_hostile_html_in_the_models_text_is_sanitised_in_a_real_browser() -> None:
    chromium = chromium_prerequisite()  # the browser tests' headless shell, installed when missing
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(ROOT))
    handler.log_message = lambda *a: None  # type: ignore[attr-defined, method-assign]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/tests/notebook/render_test.html"
        args = [
            chromium,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--virtual-time-budget=10000",
            "--dump-dom",
            url,
        ]
        dom = subprocess.run(args, capture_output=True, text=True, timeout=120).stdout
    finally:
        server.shutdown()
        server.server_close()
    assert '<pre id="out">PASS</pre>' in dom, dom[-2000:]
