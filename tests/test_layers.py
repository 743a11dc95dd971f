"""The direction of imports, read from the code itself, and what the built wheel installs.

Layers, lowest first; a module may import its own layer and lower ones only:

    vocabulary → infra → text, embeddings → index, runtime → retrieval → store, context (online)
    → operations, evaluation, demo, tuning (offline) → face → surfaces

Besides: the online side (store, context) never imports the offline side (operations, evaluation, demo,
tuning), and neither does the online server (the HTTP and MCP surfaces); those two do not import each other
(shared encoding and input types sit below both); nothing in the library imports the Dagster code location.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "memory_pipelines"

LAYERS: dict[str, int] = {
    "vocabulary": 0,
    "infra": 1,
    "text": 2,
    "embeddings": 2,
    "index": 3,
    "runtime": 3,
    "retrieval": 4,
    "store": 5,
    "context": 5,
    "operations": 6,
    "evaluation": 6,
    "demo": 6,
    "tuning": 6,
    "face": 7,
    "surfaces": 8,
}
ONLINE, OFFLINE = {"store", "context"}, {"operations", "evaluation", "demo", "tuning"}
SERVERS = ("memory_pipelines.surfaces.http", "memory_pipelines.surfaces.mcp")
CODE_LOCATION = {"assets", "memory_pipelines_dagster"}


def _module_name(path: Path, root: Path = ROOT) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, root: Path = ROOT) -> set[str]:
    """Every module `path` imports (absolute names), top-level or inside functions."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    module = _module_name(path, root)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.add(target)
            found.update(f"{target}.{alias.name}" for alias in node.names)  # `from . import x`
    return found


def _area(name: str) -> str | None:
    """The layer key of a project module name (memory_pipelines.<area>...), else None."""
    parts = name.split(".")
    if parts[0] != "memory_pipelines" or len(parts) < 2:
        return None
    return parts[1] if parts[1] in LAYERS else None


def _edges(root: Path = ROOT) -> list[tuple[str, str]]:
    """(importer, imported) for every import of the package under `root` (the checkout's, or a copy)."""
    edges = []
    for path in sorted((root / PACKAGE.name).rglob("*.py")):
        source = _module_name(path, root)
        edges.extend((source, target) for target in sorted(_imports(path, root)))
    return edges


def test_every_library_module_belongs_to_a_layer():
    stray = [p.name for p in PACKAGE.iterdir() if p.suffix == ".py" and p.stem not in LAYERS and p.stem != "__init__"]
    stray += [p.name for p in PACKAGE.iterdir() if p.is_dir() and p.name not in {*LAYERS, "__pycache__", "sql"}]
    assert stray == [], f"modules outside the layer map: {stray}"


def test_imports_run_one_way():
    wrong = []
    for source, target in _edges():
        a, b = _area(source), _area(target)
        if a is None or b is None:
            continue
        if LAYERS[b] > LAYERS[a] or (a in ONLINE and b in OFFLINE):
            wrong.append(f"{source} → {target}")
    assert wrong == [], "imports against the layering:\n" + "\n".join(wrong)


def _server_imports_offline(edges: list[tuple[str, str]]) -> list[str]:
    return [f"{s} → {t}" for s, t in edges if s.startswith(SERVERS) and _area(t) in OFFLINE]


def test_the_online_server_does_not_import_the_offline_side():
    assert _server_imports_offline(_edges()) == []


def test_http_and_mcp_surfaces_do_not_import_each_other():
    wrong = []
    for source, target in _edges():
        for one, other in (("http", "mcp"), ("mcp", "http")):
            if source.startswith(f"memory_pipelines.surfaces.{one}") and target.startswith(
                f"memory_pipelines.surfaces.{other}"
            ):
                wrong.append(f"{source} → {target}")
    assert wrong == []


MAX_MODULE_LINES = 500


def test_no_library_module_is_a_hub():
    """A module past this many lines holds more than one thing: split it along its seams."""
    long = {str(p.relative_to(ROOT)): n for p in PACKAGE.rglob("*.py")
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES}
    assert not long, long


def test_the_library_never_imports_the_code_location():
    wrong = [f"{s} → {t}" for s, t in _edges() if t.split(".")[0] in CODE_LOCATION]
    assert wrong == []


def test_the_checker_sees_a_wrong_way_import(tmp_path):
    """The checks above would catch a violation: a store module importing tuning, an HTTP route importing the
    operations, are reported. On a copy of the package: the suite's other workers read the checkout meanwhile."""
    copy = tmp_path / PACKAGE.name
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    (copy / "store" / "_layer_probe.py").write_text("from ..tuning import fit\nfrom assets import definitions\n",
                                                     encoding="utf-8")
    (copy / "surfaces" / "http" / "_layer_probe.py").write_text(
        "def f():\n    from ...operations.status import collect_status\n", encoding="utf-8")
    edges = _edges(tmp_path)
    assert ("memory_pipelines.store._layer_probe", "memory_pipelines.tuning.fit") in edges
    assert ("memory_pipelines.store._layer_probe", "assets") in edges
    assert _server_imports_offline(edges) == [
        "memory_pipelines.surfaces.http._layer_probe → memory_pipelines.operations.status",
        "memory_pipelines.surfaces.http._layer_probe → memory_pipelines.operations.status.collect_status",
    ]


@pytest.mark.slow
def test_the_wheel_has_no_top_level_assets(tmp_path):
    """Built for real: the code location is installed as `memory_pipelines_dagster`, never `assets`."""
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path),
         str(ROOT)],
        capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    (wheel,) = tmp_path.glob("memory_pipelines-*.whl")
    tops = {name.split("/")[0] for name in zipfile.ZipFile(wheel).namelist()}
    assert "assets" not in tops
    assert {"memory_pipelines", "memory_pipelines_dagster"} <= tops
    names = zipfile.ZipFile(wheel).namelist()
    assert "memory_pipelines_dagster/definitions.py" in names
    assert any(n.startswith("memory_pipelines/sql/") for n in names)
    assert "memory_pipelines/demo/data/demo.json" in names  # read with importlib.resources by the demo loader
    assert not any(n.startswith("scripts/") or "build_demo" in n for n in names)
