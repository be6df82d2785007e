"""A compiled model saved as one file runs in a new process without the tuner (issue #65)."""

import json
import os
import subprocess
import sys
import zipfile

import numpy as np
import pytest

import probsched as ps
from probsched.runtime import artifact

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

#: What a process that only runs a model must not import.
BLOCKED = ("jax", "jaxlib", "optax", "probsched.database", "probsched.cost_model", "probsched.space",
           "probsched.search", "probsched.tuning", "probsched.measure", "probsched.graph", "sqlite3")

RUNNER = r"""
import importlib.abc, json, sys
BLOCKED = {blocked!r}
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if any(name == b or name.startswith(b + ".") for b in BLOCKED):
            raise ImportError(f"{{name}} may not be imported where a model only runs")
sys.meta_path.insert(0, Block())
import numpy as np, probsched as ps
from probsched.codegen.compile import counting_compiles
from probsched.codegen.launch import launcher_sources
with counting_compiles() as compiled:
    model = ps.load(sys.argv[1])
    out = model(*[np.load(p) for p in sys.argv[3:]])
flat = list(out.values()) if isinstance(out, dict) else list(out) if isinstance(out, (tuple, list)) else [out]
np.savez(sys.argv[2], *flat)
print(json.dumps({{"imported": sorted(m for m in sys.modules if m.split(".")[0] in ("jax", "probsched")),
                  "compiled": compiled, "launchers": sorted(set(launcher_sources().values()))}}))
"""


@pytest.fixture(scope="module")
def tiny_models():
    out = {}
    for name in ("resnet_tiny", "bert_tiny"):
        fn, args = ps.models.get(name)
        out[name] = (fn, args, ps.compile(fn, *args, candidates=4, progress=None))
    return out


def run_without_tuner(path, inputs, tmp_path):
    files = []
    for i, x in enumerate(inputs):
        files.append(str(tmp_path / f"in{i}.npy"))
        np.save(files[-1], x)
    out = tmp_path / "out.npz"
    # without the program cache, all the code must come from the file
    env = dict(os.environ, PYTHONPATH=ROOT, PROBSCHED_PROGRAM_CACHE="0")
    done = subprocess.run([sys.executable, "-c", RUNNER.format(blocked=BLOCKED), str(path), str(out), *files],
                          capture_output=True, text=True, env=env, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    loaded = np.load(out)
    return [loaded[k] for k in sorted(loaded.files, key=lambda k: int(k.split("_")[1]))], json.loads(done.stdout.splitlines()[-1])


@pytest.mark.parametrize("name", ["resnet_tiny", "bert_tiny"])
def test_a_saved_model_runs_in_a_process_without_jax_or_the_tuner(tiny_models, name, tmp_path):
    fn, args, model = tiny_models[name]
    path = tmp_path / f"{name}.psm"
    model.save(str(path))
    x = np.random.default_rng(7).standard_normal(args[0].shape).astype(np.float32)
    outs, ran = run_without_tuner(path, [x], tmp_path)
    expected = model(x)
    np.testing.assert_array_equal(outs[0], expected)  # the same kernels: the same bits
    assert not [m for m in ran["imported"] if m.split(".")[0] == "jax" or m.startswith(BLOCKED[3:])]
    # nothing compiled: kernels, parallel launchers and the spin pool's loop all from the file
    assert not ran["compiled"], ran["compiled"]
    assert ran["launchers"] == ["model file"]


def test_the_loaded_model_keeps_names_nesting_and_summary(tmp_path):
    import jax

    w = np.random.default_rng(0).standard_normal((8, 4)).astype(np.float32)
    fn = lambda x: {"y": x @ w, "z": (x * 2.0, jax.nn.relu(x))}  # noqa: E731
    x = np.arange(16, dtype=np.float32).reshape(2, 8) - 3
    model = ps.compile(fn, x, candidates=2, progress=None)
    model.save(str(tmp_path / "m.psm"))
    again = ps.load(str(tmp_path / "m.psm"))
    out = again(x)
    assert sorted(out) == ["y", "z"] and isinstance(out["z"], tuple)
    np.testing.assert_array_equal(out["y"], model(x)["y"])
    assert again.summary().splitlines()[0] == model.summary().splitlines()[0]
    assert again.interface.types[again.interface.inputs[0]].shape == (2, 8)


def _saved(tmp_path) -> str:
    A = ps.placeholder((4,), name="x0")
    B = ps.compute((4,), lambda i: A[i] + 1.0, name="y")
    spec = ps.runtime.TensorSpec((4,), "float32")
    iface = ps.runtime.ModelInterface("inc", (0,), (1,), {0: spec, 1: spec}, {})
    model = ps.CompiledModel(iface, [ps.runtime.KernelStep("inc", ps.build(ps.create_func([A, B])), (0,), (1,))])
    path = str(tmp_path / "inc.psm")
    model.save(path)
    return path


def test_kernels_loaded_from_the_program_cache_are_saved_with_their_code(tmp_path):
    from probsched.codegen.build import clear_cache

    _saved(tmp_path)  # its kernel is now on disk, compiled or loaded
    clear_cache()
    path = _saved(tmp_path)  # this time loaded: numba keeps no object code of a loaded function
    assert "kernels/0/code.bin" in zipfile.ZipFile(path).namelist()
    assert ps.load(path)(np.zeros(4, np.float32)).tolist() == [1.0] * 4


def test_files_that_are_not_models_are_one_clear_error(tmp_path):
    path = _saved(tmp_path)
    text = tmp_path / "notes.txt"
    text.write_text("hello")
    with pytest.raises(ps.ModelFileError, match="not a probsched model file"):
        ps.load(str(text))
    data = open(path, "rb").read()
    cut = tmp_path / "cut.psm"
    cut.write_bytes(data[: len(data) * 2 // 3])
    with pytest.raises(ps.ModelFileError, match="truncated or damaged"):
        ps.load(str(cut))
    other = tmp_path / "other.zip"
    with zipfile.ZipFile(other, "w") as zf:
        zf.writestr("hello.txt", "hi")
    with pytest.raises(ps.ModelFileError, match="not a probsched model"):
        ps.load(str(other))
    with pytest.raises(ps.ModelFileError, match="cannot read it"):
        ps.load(str(tmp_path / "missing.psm"))


def test_a_newer_format_asks_for_a_newer_probsched(tmp_path):
    path = _saved(tmp_path)
    newer = tmp_path / "newer.psm"
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(newer, "w") as dst:
        for item in src.infolist():
            data = src.read(item.filename)
            if item.filename == artifact.MANIFEST:
                manifest = json.loads(data)
                manifest["version"] = artifact.VERSION + 1
                data = json.dumps(manifest).encode()
            dst.writestr(item, data)
    with pytest.raises(ps.ModelFileError, match=f"format version {artifact.VERSION + 1}.*upgrade probsched"):
        ps.load(str(newer))


def test_code_for_a_cpu_feature_this_machine_lacks_is_compiled_again(tmp_path, caplog, monkeypatch):
    path = _saved(tmp_path)
    host = artifact.host_codegen()
    monkeypatch.setattr(artifact, "host_codegen", lambda: {**host, "features": host["features"].replace("+sse2", "-sse2")})
    with caplog.at_level("WARNING"):
        model = ps.load(path)
    assert "sse2" in caplog.text and "compiling the kernels again" in caplog.text
    assert model(np.zeros(4, np.float32)).tolist() == [1.0] * 4


def test_compile_and_run_commands_round_trip(tmp_path, capsys):
    from probsched.cli import main

    # a small network of a user's file: the commands are under test here, the networks' code
    # in the tests above (a tiny model's compile is 20 s cold)
    (tmp_path / "net.py").write_text(
        "import numpy as np, jax\n"
        "W = np.linspace(-1, 1, 16 * 8, dtype=np.float32).reshape(16, 8)\n"
        "def model():\n"
        "    return (lambda x: jax.nn.gelu(x @ W) @ W.T), (np.linspace(0, 1, 4 * 16, dtype=np.float32).reshape(4, 16),)\n"
    )
    out = tmp_path / "m.psm"
    assert main(["compile", f"{tmp_path / 'net.py'}:model", "-o", str(out), "--quiet"]) == 0
    assert f"wrote {out}" in capsys.readouterr().out
    x_in = np.linspace(0, 1, 4 * 16, dtype=np.float32).reshape(4, 16)
    x = tmp_path / "x.npy"
    np.save(x, x_in)
    y = tmp_path / "y.npy"
    assert main(["run", str(out), "--input", str(x), "--output", str(y), "--bench", "--seconds", "0.2", "--profile"]) == 0
    printed = capsys.readouterr()
    assert "| model |" in printed.out and "median ms" in printed.out
    # --profile: one row per task of the network (its tasks' names), then their sum, 100%
    profiled = [row for row in printed.out.splitlines() if row.startswith("| ") and row.endswith("% |")]
    assert len(profiled) >= 2 and profiled[-1].startswith("| sum of the calls |") and profiled[-1].endswith("| 100.0% |")
    assert all("fused" in row for row in profiled[:-1]), profiled
    import jax

    w = np.linspace(-1, 1, 16 * 8, dtype=np.float32).reshape(16, 8)
    np.testing.assert_allclose(np.load(y), np.asarray(jax.nn.gelu(x_in @ w) @ w.T), rtol=1e-4, atol=1e-4)
    assert main(["run", str(tmp_path / "x.npy")]) == 2  # an .npy is not a model: one line, exit 2
    assert "not a probsched model file" in capsys.readouterr().err
    assert main(["run", str(out), "--input", str(x), "--profile", "--top", "0"]) == 2
    assert "--top must be at least 1, got 0" in capsys.readouterr().err


def test_a_loaded_models_micro_kernel_modules_compile_only_if_called(tmp_path, monkeypatch):
    """A saved model's code has its micro-kernels linked in: their modules are imported
    without compiling (a machine with an empty cache saves those compiles), and still work."""
    from probsched import cache

    monkeypatch.setenv("PROBSCHED_CACHE_DIR", str(tmp_path))
    source = "\n".join([
        "import numba",
        "SIGNATURE = numba.float32(numba.float32)",
        cache.EAGER_DECORATOR + "cache=False)",
        "def kernel(x):",
        "    return x * 2.0",
    ])
    lazy = cache.import_source("probsched_kernel_test_lazy_0", source, lazy=True)
    eager = cache.import_source("probsched_kernel_test_eager_0", source)
    try:
        assert lazy.kernel.signatures == [] and len(eager.kernel.signatures) == 1
        assert lazy.kernel(np.float32(3.0)) == 6.0 and len(lazy.kernel.signatures) == 1
        assert open(tmp_path / "kernels" / "probsched_kernel_test_lazy_0.py").read() == source  # kept as given
    finally:
        import sys

        sys.modules.pop("probsched_kernel_test_lazy_0", None)
        sys.modules.pop("probsched_kernel_test_eager_0", None)
