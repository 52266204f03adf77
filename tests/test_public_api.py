"""The public surface is part of the spec: pin it, and keep imports light and one-way."""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

import pytest

import flue_nb

EXPECTED = [
    "AgentDef",
    "AgentEnd",
    "AgentError",
    "BudgetExceededError",
    "AgentStart",
    "CompactionConfig",
    "CompactionEnd",
    "CompactionStart",
    "ConfigError",
    "ContextOverflowError",
    "DelegationDepthExceededError",
    "ErrorInfo",
    "Event",
    "FlueError",
    "HookError",
    "Idle",
    "LimitExceeded",
    "Log",
    "McpConnectionError",
    "MessageEnd",
    "MessageStart",
    "ModelNotConfiguredError",
    "ModelRefusedError",
    "NoSandboxError",
    "PolicyDeniedError",
    "ProviderError",
    "ProviderHTTPError",
    "Receipt",
    "RunError",
    "SandboxError",
    "SandboxTimeoutError",
    "Session",
    "SessionBusyError",
    "Signal",
    "StoreError",
    "SubmissionAbortedError",
    "SubmissionQueued",
    "SubmissionRecovery",
    "SubmissionRetryExhaustedError",
    "SubmissionRunning",
    "SubmissionSettled",
    "SubmissionTimeoutError",
    "TaskEnd",
    "TaskStart",
    "TextDelta",
    "ThinkingDelta",
    "Tool",
    "ToolCallInfo",
    "ToolContext",
    "ToolEnd",
    "ToolInputValidationError",
    "ToolNameConflictError",
    "ToolOutput",
    "ToolRetry",
    "ToolStart",
    "TurnEnd",
    "TurnLimitExceededError",
    "TurnStart",
    "agent",
    "chat",
    "define_subagent",
    "define_tool",
    "init",
    "instrument",
    "kernel",
    "load_ipython_extension",
    "local",
    "serve",
    "tool",
    "unload_ipython_extension",
    "use_agent_finish",
    "use_agent_start",
    "use_instruction",
    "use_mcp",
    "use_model",
    "use_persistent_state",
    "use_response_finish",
    "use_response_start",
    "use_sandbox",
    "use_skill",
    "use_subagent",
    "use_tool",
]


def test_public_names_are_pinned_and_sorted():
    assert flue_nb.__all__ == sorted(EXPECTED)


def test_every_public_name_resolves():
    for name in flue_nb.__all__:
        assert getattr(flue_nb, name) is not None


def test_offline_models_are_public():
    from flue_nb import models

    assert {"ScriptedModel", "FunctionModel", "reply", "tool_call", "fail"} <= set(models.__all__)


def _modules_after(code: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", code + "\nimport sys; print('\\n'.join(sys.modules))"],
        capture_output=True,
        text=True,
        check=True,
    )
    return set(out.stdout.split())


def test_importing_flue_nb_is_light():
    mods = _modules_after("import flue_nb")
    assert (
        not {
            "anthropic",
            "openai",
            "tiktoken",
            "anywidget",
            "ipywidgets",
            "IPython",
            "pydantic",
            "mcp",
            "opentelemetry",
        }
        & mods
    )


def test_the_runtime_never_imports_ipython_or_the_sdk_or_widgets():
    code = (
        "import flue_nb as flue\n"
        "from flue_nb.models import ScriptedModel\n"
        "@flue.agent\n"
        "def a():\n"
        "    flue.use_model(ScriptedModel(['hi']))\n"
        "    flue.use_sandbox(flue.local('.'))\n"
        "print(flue.init(a, db=':memory:').prompt('hello'))\n"
    )
    mods = _modules_after(code)
    assert not {"IPython", "ipykernel", "anthropic", "openai", "anywidget", "ipywidgets", "mcp", "opentelemetry"} & mods
    assert "flue_nb.notebook" not in mods


MODELS = [
    "AnthropicModel",
    "CassetteDriftError",
    "Fail",
    "FunctionModel",
    "Model",
    "ModelInfo",
    "ModelRequest",
    "OpenAIModel",
    "OpenAIResponsesModel",
    "RecordingModel",
    "Reply",
    "ReplayModel",
    "ScriptedModel",
    "fail",
    "reply",
    "tool_call",
]
EVENTS = [
    "AgentEnd",
    "AgentStart",
    "CompactionEnd",
    "CompactionStart",
    "ErrorInfo",
    "Event",
    "EventBus",
    "EventType",
    "Idle",
    "Log",
    "MessageEnd",
    "MessageStart",
    "Signal",
    "SubmissionQueued",
    "SubmissionRecovery",
    "SubmissionRunning",
    "SubmissionSettled",
    "TaskEnd",
    "TaskStart",
    "TextDelta",
    "ThinkingDelta",
    "ToolCallInfo",
    "ToolEnd",
    "ToolStart",
    "ToolUpdate",
    "TurnEnd",
    "TurnStart",
]


def test_offline_model_names_are_pinned_and_resolve():
    from flue_nb import models

    assert sorted(models.__all__) == sorted(MODELS)
    for name in MODELS:
        assert getattr(models, name) is not None


def test_event_names_are_pinned_and_every_contract_event_type_has_exactly_one_class():
    from typing import get_args

    from flue_nb.runtime import events

    assert sorted(events.__all__) == sorted(EVENTS)
    classes = get_args(events.Event)
    types = [c.__dataclass_fields__["type"].default for c in classes]
    assert sorted(types) == sorted(get_args(events.EventType))  # one class per type of contract 15.2
    for cls in classes:
        assert cls.__dataclass_params__.frozen, cls
        assert cls.__name__ in events.__doc__, f"{cls.__name__} is missing from the module docstring"


def test_the_notebook_layer_uses_only_the_runtimes_public_modules():
    import pathlib
    import re

    root = pathlib.Path(flue_nb.__file__).parent
    offenders = []
    for path in [*root.joinpath("notebook").rglob("*.py"), root / "cli.py"]:
        for n, line in enumerate(path.read_text().splitlines(), 1):
            m = re.search(r"(?:from|import) (flue_nb\.runtime[\w.]*)", line)
            if m and (".core" in m.group(1) or re.search(r"\._\w", m.group(1))):
                offenders.append(f"{path.relative_to(root)}:{n}: {m.group(1)}")
    assert not offenders, "the notebook layer reaches into runtime internals:\n" + "\n".join(offenders)


def test_provider_and_event_names_users_need_are_public():
    from flue_nb import TextDelta, ThinkingDelta, ToolEnd
    from flue_nb.models import AnthropicModel
    from flue_nb.runtime import events
    from flue_nb.runtime.providers import anthropic

    assert AnthropicModel is anthropic.AnthropicModel
    assert (TextDelta, ThinkingDelta, ToolEnd) == (events.TextDelta, events.ThinkingDelta, events.ToolEnd)


# Each runtime layer imports only the layers below it: sandbox < tools < agent < core.
_LAYERS = ["sandbox", "tools", "agent", "core"]


def test_no_runtime_layer_imports_a_layer_above_it():
    import pathlib
    import re

    root = pathlib.Path(flue_nb.__file__).parent / "runtime"
    offenders = []
    for i, layer in enumerate(_LAYERS):
        above = "|".join([*_LAYERS[i + 1 :], "session"])
        for path in root.joinpath(layer).rglob("*.py"):
            for n, line in enumerate(path.read_text().splitlines(), 1):
                if re.search(rf"(?:from|import) flue_nb\.runtime\.(?:{above})\b", line):
                    offenders.append(f"{path.relative_to(root)}:{n}: {line.strip()}")
    assert not offenders, "imports running up the layers:\n" + "\n".join(offenders)


# The structure's rules, read from the code (ast, function-level imports included): each rule is a
# function of a package root, so the tests below also run it on a small tree with a planted fault.

# The notebook's floors: which subpackage may import which. Anything not in this table (a pair
# the other way round, or a new subpackage) is an import running up, or one to place here first.
NOTEBOOK_MAY_IMPORT = {
    "magics": {"serve", "verify", "views", "kernel", "document", "celllog"},
    "verify": {"document", "celllog"},
    "serve": {"views", "kernel", "document", "celllog"},
    "views": {"kernel", "document", "celllog"},
    "kernel": {"verify", "document", "celllog"},
    "document": set(),
    "celllog": set(),
}


def _module_name(root: pathlib.Path, path: pathlib.Path) -> str:
    parts = list(path.with_suffix("").relative_to(root.parent).parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(root: pathlib.Path) -> list[tuple[str, str, str]]:
    """(where, importing module, imported dotted name) for every import of `root`'s own package."""
    found = []
    for path in sorted(root.rglob("*.py")):
        module = _module_name(root, path)
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*up, *([base] if base else [])])
                targets = [f"{base}.{a.name}" for a in node.names if a.name != "*"]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                continue
            where = f"{path.relative_to(root.parent)}:{node.lineno}"
            found += [(where, module, t) for t in targets if t.split(".")[0] == root.name]
    return found


def _subpackage(dotted: str) -> str:
    """The unit a private name is private to: `flue_nb.notebook.X` / `flue_nb.runtime.X`, else the module."""
    parts = dotted.split(".")
    return ".".join(parts[:3] if parts[1:2] in (["notebook"], ["runtime"]) else parts[:2])


def private_imports(root: pathlib.Path) -> list[str]:
    """Imports of a private module or name (`_x`) from outside the subpackage that owns it."""
    offenders = []
    for where, module, target in _imports(root):
        parts = target.split(".")
        private = [i for i, p in enumerate(parts) if p.startswith("_") and not p.startswith("__")]
        if not private:
            continue
        owner = _subpackage(".".join(parts[: private[0] + 1]))
        if owner.startswith("_") or "._" in "." + owner:
            owner = ".".join(parts[: private[0]])  # a private module of a package: its package owns it
        if module != owner and not module.startswith(owner + "."):
            offenders.append(f"{where}: {module} imports {target}")
    return offenders


def upward_imports(root: pathlib.Path) -> list[str]:
    """Imports between notebook subpackages that NOTEBOOK_MAY_IMPORT does not allow."""
    offenders = []
    prefix = f"{root.name}.notebook."
    for where, module, target in _imports(root):
        if not (module.startswith(prefix) and target.startswith(prefix)):
            continue
        src, dst = module[len(prefix) :].split(".")[0], target[len(prefix) :].split(".")[0]
        if src != dst and dst not in NOTEBOOK_MAY_IMPORT.get(src, set()):
            offenders.append(f"{where}: {src} -> {dst} ({target})")
    return offenders


def packages_without_all(root: pathlib.Path) -> list[str]:
    """Packages whose `__init__` names no public API (`__all__`), or names what it does not hold."""
    offenders = []
    for init in sorted(root.rglob("__init__.py")):
        tree = ast.parse(init.read_text(encoding="utf-8"))
        bound = {
            n.id
            for node in ast.walk(tree)
            if isinstance(node, (ast.Assign, ast.AnnAssign))
            for n in ast.walk(node)
            if isinstance(n, ast.Name)
        }
        bound |= {
            node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
        }
        bound |= {
            (a.asname or a.name).split(".")[0]
            for node in ast.walk(tree)
            if isinstance(node, (ast.Import, ast.ImportFrom))
            for a in node.names
        }
        given = [
            node.value
            for node in tree.body
            if isinstance(node, (ast.Assign, ast.AnnAssign))
            and node.value is not None
            and any(
                isinstance(t, ast.Name) and t.id == "__all__"
                for t in (node.targets if isinstance(node, ast.Assign) else [node.target])
            )
        ]
        where = init.relative_to(root.parent)
        if not given:
            offenders.append(f"{where}: no __all__")
            continue
        try:
            names = ast.literal_eval(given[0])
        except ValueError:  # computed (flue_nb's lazy exports): pinned by the tests above instead
            continue
        for name in names:
            here = init.parent / name
            if name not in bound and not here.with_suffix(".py").exists() and not (here / "__init__.py").exists():
                offenders.append(f"{where}: __all__ names {name!r}, which it neither defines nor holds")
    return offenders


ROOT = pathlib.Path(flue_nb.__file__).parent


def test_every_package_names_its_public_api_in_its_init():
    offenders = packages_without_all(ROOT)
    assert not offenders, "packages without a public API in __init__:\n" + "\n".join(offenders)


def test_no_module_imports_a_private_module_or_name_of_another_subpackage():
    offenders = private_imports(ROOT)
    assert not offenders, "private names taken from another subpackage:\n" + "\n".join(offenders)


def test_no_notebook_import_runs_up_its_floors():
    offenders = upward_imports(ROOT)
    assert not offenders, "notebook imports NOTEBOOK_MAY_IMPORT does not allow:\n" + "\n".join(offenders)


def test_every_notebook_subpackage_has_a_floor():
    held = {p.parent.name for p in ROOT.joinpath("notebook").glob("*/__init__.py")}
    assert held == set(NOTEBOOK_MAY_IMPORT)


_TREE = {
    "__init__.py": "__all__ = ['notebook', 'runtime']\n",
    "runtime/__init__.py": "__all__ = ['session']\n",
    "runtime/session.py": "def _store_for(): ...\n",
    "notebook/__init__.py": "__all__ = ['magics', 'views', 'kernel']\n",
    "notebook/magics/__init__.py": "__all__ = ['flue']\n",
    "notebook/magics/flue.py": "from flue_nb.notebook.views import fold\n",
    "notebook/views/__init__.py": "__all__ = ['fold']\n",
    "notebook/views/fold.py": "from flue_nb.notebook.kernel.sandbox import kernel\nfrom flue_nb.notebook.views._calls import line\n",
    "notebook/views/_calls.py": "def line(): ...\n",
    "notebook/kernel/__init__.py": "__all__ = ['sandbox']\n",
    "notebook/kernel/sandbox.py": "def kernel(): ...\n",
}
_PLANTED = {
    "a private module of another subpackage": (
        private_imports,
        {"notebook/magics/flue.py": "from flue_nb.notebook.views._calls import line\n"},
        "flue_nb.notebook.magics.flue imports flue_nb.notebook.views._calls.line",
    ),
    "a private name of another subpackage, deferred": (
        private_imports,
        {"notebook/magics/flue.py": "def f():\n    from flue_nb.runtime.session import _store_for\n"},
        "flue_nb.notebook.magics.flue imports flue_nb.runtime.session._store_for",
    ),
    "a private module, relative import": (
        private_imports,
        {"notebook/kernel/sandbox.py": "from ..views import _calls\n"},
        "flue_nb.notebook.kernel.sandbox imports flue_nb.notebook.views._calls",
    ),
    "an import running up": (
        upward_imports,
        {"notebook/kernel/sandbox.py": "from flue_nb.notebook.views.fold import x\n"},
        "kernel -> views",
    ),
    "an import running up, deferred": (
        upward_imports,
        {"notebook/views/fold.py": "def f():\n    import flue_nb.notebook.magics.flue\n"},
        "views -> magics",
    ),
    "a subpackage without a floor": (
        upward_imports,
        {"notebook/extra/__init__.py": "__all__ = []\nfrom flue_nb.notebook.kernel import sandbox\n"},
        "extra -> kernel",
    ),
    "a subpackage without __all__": (
        packages_without_all,
        {"notebook/views/__init__.py": "from flue_nb.notebook.views.fold import x\n"},
        "views/__init__.py: no __all__",
    ),
    "an __all__ naming what is not there": (
        packages_without_all,
        {"notebook/kernel/__init__.py": "__all__ = ['sandbox', 'ghost']\n"},
        "names 'ghost'",
    ),
}


def _tree(tmp_path: pathlib.Path, changes: dict[str, str]) -> pathlib.Path:
    for name, text in {**_TREE, **changes}.items():
        path = tmp_path / "flue_nb" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path / "flue_nb"


@pytest.mark.parametrize("rule", [private_imports, upward_imports, packages_without_all])
def test_the_structure_rules_pass_a_clean_tree(tmp_path, rule):
    assert rule(_tree(tmp_path, {})) == []


@pytest.mark.parametrize("case", list(_PLANTED))
def test_each_structure_rule_catches_a_planted_fault(tmp_path, case):
    rule, changes, said = _PLANTED[case]
    found = rule(_tree(tmp_path, changes))
    assert len(found) == 1 and said in found[0], found
