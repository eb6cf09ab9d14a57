"""scripts/stream_mix.py on a machine without a GPU: bad sizes are refused by name, and
without CUDA it says so and measures nothing (exit 2) rather than timing the CPU."""

import importlib.util
import pathlib

import pytest
import torch

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "scripts" / "stream_mix.py"


@pytest.fixture(scope="module")
def stream_mix():
    spec = importlib.util.spec_from_file_location("stream_mix", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("args", [["--elements", "0"], ["--reps", "-1"]])
def test_sizes_must_be_positive(stream_mix, capsys, args):
    with pytest.raises(SystemExit) as e:
        stream_mix.main(args)
    assert e.value.code == 2
    assert "--elements and --reps must be positive" in capsys.readouterr().err


def test_without_cuda_nothing_is_measured(stream_mix, capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # the no-GPU path on any machine
    out = tmp_path / "mix.json"
    assert stream_mix.main(["--elements", "16", "--json", str(out)]) == 2
    assert "no CUDA device" in capsys.readouterr().err
    assert not out.exists()
