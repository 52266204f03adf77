"""Fixtures for the standard tools: a host sandbox over `tmp_path` and a way to call a tool."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import pytest

from flue_nb.runtime.sandbox.local import LocalSandbox
from flue_nb.runtime.tools import standard_tools
from flue_nb.runtime.tools.tool import Tool, ToolContext, ToolOutput, execute_tool

T = TypeVar("T")


def _run(coro: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coro)


async def _acall(tool: Tool, raw: Any) -> ToolOutput:
    return await execute_tool(tool, raw, ToolContext(call_id="c1"))


def _call(tool: Tool, raw: Any) -> ToolOutput:
    return asyncio.run(_acall(tool, raw))


@pytest.fixture
def run() -> Callable[[Coroutine[Any, Any, T]], T]:
    """Run a coroutine to completion (pytest-asyncio is not installed)."""
    return _run


@pytest.fixture
def acall() -> Callable[[Tool, Any], Awaitable[ToolOutput]]:
    """Call a tool the way the loop does: validate, run, turn failures into error results."""
    return _acall


@pytest.fixture
def call() -> Callable[[Tool, Any], ToolOutput]:
    """`acall` on a fresh event loop."""
    return _call


def path_without_rg() -> str:
    """The host PATH minus every directory holding an `rg`, so a sandbox must fall back to grep."""
    dirs = [d for d in os.environ.get("PATH", os.defpath).split(os.pathsep) if d]
    return os.pathsep.join(d for d in dirs if not os.access(os.path.join(d, "rg"), os.X_OK))


@pytest.fixture
def no_rg_sandbox(tmp_path: Path) -> LocalSandbox:
    """A host sandbox over `tmp_path` that cannot find `rg`, so `grep` falls back to `grep -E`."""
    return LocalSandbox(tmp_path, env={"PATH": path_without_rg()}, scripts_on_path=False)


@pytest.fixture
def sandbox(tmp_path: Path) -> LocalSandbox:
    """A host sandbox whose working directory is `tmp_path`."""
    return LocalSandbox(tmp_path)


@pytest.fixture
def tools(sandbox: LocalSandbox) -> dict[str, Tool]:
    """The six standard tools on `sandbox`, by name."""
    return {t.name: t for t in standard_tools(sandbox)}
