"""What a wheel carries and how it installs: configs and shipped policies inside the package (a bare config name
resolves from any directory), true dependency ranges with the benchmark-only packages in an extra, ``--version``,
the license, and the CI script (the README's test command verbatim, then ruff, the layers contract and mypy)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import tomllib

import adaptive_ir
from adaptive_ir.cli import main

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    pytest.importorskip("setuptools")
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out),
                    str(ROOT)], check=True, capture_output=True, timeout=300)
    (path,) = out.glob("adaptive_ir-*.whl")
    return path


def test_the_wheel_carries_configs_policies_and_license(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    configs = {Path(n).name for n in names if n.startswith("adaptive_ir/configs/")}
    assert configs == {p.name for p in (ROOT / "adaptive_ir" / "configs").glob("*.yaml")} and "quickstart.yaml" in configs
    policies = {n.split("/")[2] for n in names if n.startswith("adaptive_ir/policies/") and n.count("/") == 3}
    assert policies == {"general", "general-joint"}  # what a user picks; the replicas stay in the repository
    for policy in policies:
        for f in ("policy.safetensors", "policy.json", "README.md"):
            assert f"adaptive_ir/policies/{policy}/{f}" in names
    assert "adaptive_ir/policies/README.md" in names  # which one to pick
    assert any(n.endswith(".dist-info/licenses/LICENSE") or n.endswith(".dist-info/LICENSE") for n in names)
    meta = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    runtime = [line for line in meta.splitlines() if line.startswith("Requires-Dist:") and "extra ==" not in line]
    assert any("torch" in r and ">=2.4.1" in r for r in runtime)
    assert not any(re.search(r"rank-bm25|matplotlib|pytest|ruff", r) for r in runtime)
    assert f"Version: {adaptive_ir.__version__}" in meta


def test_an_installed_wheel_finds_its_configs_and_policies_from_any_directory(wheel, tmp_path):
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "-q", "--target", str(site), str(wheel)],
                   check=True, capture_output=True, timeout=300)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    code = ("import adaptive_ir, pathlib; from adaptive_ir.config import load_config; "
            "from adaptive_ir.artifacts.checkpoint import init_policy_path; "
            "c = load_config('wikicar', {'training.init_from': 'general-joint'}); "
            "print(pathlib.Path(adaptive_ir.__file__).parent); "
            "print(load_config('quickstart').source); print(init_policy_path(c))")
    env = {**os.environ, "PYTHONPATH": str(site)}
    out = subprocess.run([sys.executable, "-c", code], cwd=elsewhere, env=env, capture_output=True, text=True,
                         check=True, timeout=120).stdout.split("\n")
    package = Path(out[0])
    assert package == site / "adaptive_ir"
    assert Path(out[1]) == package / "configs" / "quickstart.yaml"
    assert Path(out[2]) == package / "policies" / "general-joint"


def test_top_level_configs_is_the_package_folder_not_a_copy():
    link = ROOT / "configs"
    assert link.is_symlink() and link.resolve() == (ROOT / "adaptive_ir" / "configs").resolve()
    assert (link / "msa_optimized_gpu.yaml").is_file()


def test_version_and_license(capsys):
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0 and capsys.readouterr().out.strip() == f"adaptive-ir {adaptive_ir.__version__}"
    assert PYPROJECT["project"]["license"] == {"text": "MIT"}
    assert (ROOT / "LICENSE").read_text().startswith("MIT License")


def test_dependency_ranges_and_extras():
    deps = PYPROJECT["project"]["dependencies"]
    assert "torch>=2.4.1,<3" in deps  # fused Adam on the CPU (2.4), torch.amp.GradScaler(device) (2.3)
    extras = PYPROJECT["project"]["optional-dependencies"]
    bench = {re.split(r"[<>=]", d)[0] for d in extras["bench"]}
    assert bench == {"rank-bm25", "matplotlib"} and not bench & {re.split(r"[<>=]", d)[0] for d in deps}
    assert "adaptive-ir[bench,examples,lucene,static]" in extras["test"] and any(d.startswith("ruff") for d in
                                                                                  extras["test"])
    # model2vec (embeddings.type static) stays optional, as the sentence model's alternatives do
    assert [re.split(r"[<>=\[]", d)[0] for d in extras["static"]] == ["model2vec", "skeletoken"]
    assert "model2vec" not in {re.split(r"[<>=\[]", d)[0] for d in deps}
    # the env front ends' dependencies stay optional: Kaggle's torch is never upgraded for them
    assert not {re.split(r"[<>=]", d)[0] for d in extras["envs"]} & {re.split(r"[<>=]", d)[0] for d in deps}
    assert "adaptive-ir[envs]" in extras["examples"]


def test_ci_runs_the_readme_test_command_verbatim_then_the_checks():
    readme = (ROOT / "README.md").read_text()
    command = re.search(r"^(bash scripts/setup\.sh test && python -m pytest .*?)\s+#", readme, re.M)[1].strip()
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    checks = ["python -m ruff check .", "lint-imports", "python -m mypy"]
    assert command in ci and all(ci.index(command) < ci.index(c) for c in checks)
    extras = {re.split(r"[<>=]", d)[0] for d in PYPROJECT["project"]["optional-dependencies"]["test"]}
    assert {"ruff", "import-linter", "mypy"} <= extras


def test_jax_stays_off_the_gpu_when_bm25s_calls_it_on_import(tmp_path):
    # bm25s runs jax.lax.top_k when imported if JAX is installed; on a GPU that call would take 75 % of its memory
    # for JAX (seen on an H100: torch then ran out). A stand-in jax records the platform JAX would start on.
    fake = tmp_path / "site" / "jax"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "lax.py").write_text(
        "import os, pathlib\n"
        "def top_k(x, k):\n"
        f"    pathlib.Path({str(tmp_path / 'platform')!r}).write_text(os.environ.get('JAX_PLATFORMS', 'unset'))\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(fake.parent), str(ROOT)])}
    env.pop("JAX_PLATFORMS", None)
    subprocess.run([sys.executable, "-c", "import adaptive_ir.retrieval.analyzer, bm25s"], check=True, env=env, timeout=120)
    assert (tmp_path / "platform").read_text() == "cpu"
    subprocess.run([sys.executable, "-c", "import adaptive_ir.retrieval.analyzer"], check=True, timeout=120,
                   env={**env, "JAX_PLATFORMS": "cuda"})
    assert (tmp_path / "platform").read_text() == "cuda"  # the user's own setting wins
